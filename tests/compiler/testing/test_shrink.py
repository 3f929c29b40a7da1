"""Shrinking: a failing generated model is reduced to a small one that fails the same way."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest

from compiler.ops import registry
from compiler.ops.elemwise import elementwise_compute
from compiler.testing.generate import GeneratedModel, GeneratorOptions, generate
from compiler.testing.shrink import shrink, size
from compiler.tir.expr import Const, intrin
from tests.differential.check import check


def _has(op: str):  # type: ignore[no-untyped-def]
    return lambda model: op in model.ops


def _first_model_with(op: str, options: GeneratorOptions) -> GeneratedModel:
    for seed in range(200):
        model = generate(seed, options)
        if op in model.ops and size(model) >= 6:
            return model
    raise AssertionError(f"no model of 6 calls or more with {op} in 200 seeds")


def test_shrinking_keeps_the_failure_and_reaches_one_call() -> None:
    model = _first_model_with("tanh", GeneratorOptions(min_ops=10, max_ops=20))
    small = shrink(model, _has("tanh"))
    assert "tanh" in small.ops
    assert size(small) == 1
    assert set(small.inputs) == {p.name_hint for p in small.module[small.module.get_global_var("main")].params}


def test_shrinking_a_model_that_does_not_fail_any_smaller_returns_it() -> None:
    model = generate(3, GeneratorOptions(min_ops=3, max_ops=3))
    assert shrink(model, lambda m: size(m) == size(model) and m.text == model.text) is model


@pytest.fixture
def wrong_tanh(monkeypatch: pytest.MonkeyPatch) -> None:
    """tanh's loop body made 1% too large, in a temporary copy of its registry entry."""
    op = registry.get("tanh")
    broken = elementwise_compute(lambda x: intrin("tanh", x) * Const(1.01, x.dtype))
    monkeypatch.setitem(registry._REGISTRY, "tanh", dataclasses.replace(op, compute=broken))


def _mismatches(model: GeneratedModel) -> bool:
    with tempfile.TemporaryDirectory() as workdir:
        return check(model, Path(workdir)).kind == "mismatched"


def test_a_subtly_wrong_loop_body_is_caught_and_shrunk_to_the_op(wrong_tanh: None) -> None:
    options = GeneratorOptions(min_ops=6, max_ops=12, opt_levels=(0,))
    model = next(m for m in (generate(s, options) for s in range(100)) if "tanh" in m.ops)
    assert _mismatches(model)
    small = shrink(model, _mismatches, max_tries=60)
    assert small.ops == ["tanh"]
