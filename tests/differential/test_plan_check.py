"""The independent memory-plan checker finds what a wrong plan does, and passes a right one."""

from __future__ import annotations

import dataclasses

from compiler.backend.aot_executor import AOTResult
from compiler.driver import lower
from compiler.parser import parse
from tests.differential.plan_check import plan_problems

# Three workspace buffers: %0 and %1 are live together at step 1, %1 and %2 at step 2.
MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 8), float32]) {
  %0 = nn.softmax(%x);
  %1 = nn.softmax(%0);
  %2 = add(%1, %0);
  %3 = nn.softmax(%2);
  nn.softmax(%3)
}
"""


def _aot() -> AOTResult:
    model = lower(parse(MODEL))
    assert model.aot is not None
    return model.aot


def _moved(aot: AOTResult, name: str, offset: int) -> AOTResult:
    rows = [dict(row, offset=offset) if row["name"] == name else row for row in aot.memory.buffers]
    return dataclasses.replace(aot, memory=dataclasses.replace(aot.memory, buffers=rows))


def test_the_planners_plan_passes() -> None:
    assert plan_problems(_aot()) == []


def test_two_live_buffers_at_one_offset_are_reported() -> None:
    aot = _aot()
    rows = {r["name"]: r for r in aot.memory.buffers}
    assert len(rows) >= 2
    first, second = sorted(rows)[:2]
    problems = plan_problems(_moved(aot, second, int(rows[first]["offset"])))
    assert any("overwrote" in p or "overlap" in p for p in problems), problems


def test_a_buffer_read_before_it_is_written_is_reported() -> None:
    aot = _aot()
    writer = next(i for i, c in enumerate(aot.calls) if any(o.startswith("sid_") for o in c.outputs))
    calls = aot.calls[:writer] + aot.calls[writer + 1:]
    problems = plan_problems(dataclasses.replace(aot, calls=calls))
    assert any("before any call wrote it" in p for p in problems), problems


def test_a_buffer_outside_the_pool_or_misaligned_is_reported() -> None:
    aot = _aot()
    name = aot.memory.buffers[0]["name"]
    assert any("outside" in p for p in plan_problems(_moved(aot, str(name), aot.workspace_bytes)))
    assert any("aligned" in p for p in plan_problems(_moved(aot, str(name), 4)))
