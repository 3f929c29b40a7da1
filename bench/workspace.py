"""Issue 11's bound on the static workspace: at most the sum of the two largest intermediates
that are live at the same time, read from a build's memory plan (metadata.json's `memory`).

The plan lists intermediates (`sid_*`, live from their first to their last use, in steps of the
executor's calls) and each call's kernel scratch (`workspace_*`, live during that call only).
The bound counts intermediates only, as the issue states it; the scratch is reported beside it
so that a miss says which of the two made it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _live_at(buffers: Sequence[Mapping[str, Any]], step: int) -> list[int]:
    return [b["bytes"] for b in buffers if b["first_use"] <= step <= b["last_use"]]


def two_largest_live_bytes(memory: Mapping[str, Any]) -> int:
    """The largest, over the executor's steps, sum of the two largest intermediates live at a step."""
    intermediates = [b for b in memory.get("buffers", []) if not b["name"].startswith("workspace_")]
    steps = {s for b in intermediates for s in range(b["first_use"], b["last_use"] + 1)}
    best = 0
    for step in steps:
        live = sorted(_live_at(intermediates, step), reverse=True)
        best = max(best, sum(live[:2]))
    return best


def largest_scratch_bytes(memory: Mapping[str, Any]) -> int:
    """The largest kernel scratch buffer of the plan (a padded input, a packed weight)."""
    return max((b["bytes"] for b in memory.get("buffers", []) if b["name"].startswith("workspace_")), default=0)


def workspace_figures(memory: Mapping[str, Any]) -> dict[str, int]:
    return {"workspace_bytes": memory["workspace_bytes"], "two_largest_live_bytes": two_largest_live_bytes(memory),
            "largest_scratch_bytes": largest_scratch_bytes(memory)}
