"""An independent check of the AOT executor's static memory plan.

It shares nothing with the planner (compiler/backend/memory_planner.py): it replays the calls
of @main in order over a byte-level picture of the workspace pool, recording which buffer
last wrote each byte, and reports

* a buffer read before any call wrote it;
* a buffer read after another buffer (or a kernel's scratch workspace) overwrote some of its
  bytes — two live buffers overlap, or a slot was reused while still to be read;
* a call whose inputs, outputs and scratch workspace overlap each other;
* a buffer outside the pool, or at an offset that breaks the pool's alignment.

A reshape that does not run names its input's buffer as its result, so reading the alias is
reading the root: the root must still be intact then, which is how aliases keep it alive.
"""

from __future__ import annotations

import numpy as np

from compiler.backend.aot_executor import AOTResult

ALIGNMENT = 16


def plan_problems(aot: AOTResult) -> list[str]:
    """What is wrong with `aot`'s memory plan; empty when nothing is."""
    rows = {str(row["name"]): (int(row["offset"]), int(row["bytes"])) for row in aot.memory.buffers}
    problems: list[str] = []
    for name, (offset, size) in rows.items():
        if offset < 0 or offset + size > aot.workspace_bytes:
            problems.append(f"{name} [{offset}, {offset + size}) lies outside the {aot.workspace_bytes}-byte pool")
        if offset % ALIGNMENT:
            problems.append(f"{name} at offset {offset} is not {ALIGNMENT}-byte aligned")
    ids = {name: k + 1 for k, name in enumerate(rows)}
    owner = np.zeros(max(aot.workspace_bytes, 1), dtype=np.int32)
    written: set[str] = set()

    def span(name: str) -> slice:
        offset, size = rows[name]
        return slice(offset, offset + size)

    for step, call in enumerate(aot.calls):
        if not call.emitted:
            continue
        where = f"step {step} ({call.callee})"
        reads = list(dict.fromkeys(a for a in call.args if a in rows))
        writes = list(dict.fromkeys(o for o in call.outputs if o in rows))
        scratch = [call.workspace] if call.workspace in rows else []
        for name in reads:
            if name not in written:
                problems.append(f"{where} reads {name} before any call wrote it")
            elif np.any(owner[span(name)] != ids[name]):
                others = sorted({_name_of(ids, int(i)) for i in owner[span(name)] if i != ids[name]})
                problems.append(f"{where} reads {name}, whose bytes {', '.join(others)} overwrote")
        touched = reads + writes + scratch
        for i, a in enumerate(touched):
            for b in touched[i + 1:]:
                if a != b and _overlap(rows[a], rows[b]):
                    problems.append(f"{where}: {a} and {b} overlap within one call")
        for name in scratch + writes:
            owner[span(name)] = ids[name]
        written.update(writes)
    return problems


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[1] > 0 and b[1] > 0 and a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _name_of(ids: dict[str, int], ident: int) -> str:
    return next((name for name, i in ids.items() if i == ident), "nothing")
