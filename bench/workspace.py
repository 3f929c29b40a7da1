"""Issue 11's bound on the static workspace: at most the sum of the two largest intermediates
that are live at the same time, read from a build's memory plan (metadata.json's `memory`).

The plan lists intermediates (`sid_*`, live from their first to their last use, in steps of the
executor's calls) and each call's kernel scratch (`workspace_*`, live during that call only).
The bound counts intermediates only, as the issue states it; the scratch is reported beside it
so that a miss says which of the two made it. A buffer a result was written into in place
(`in_place_at`: the steps where the next value took it over) holds several intermediates one
after the other; the bound counts each, live from its step to the next one's, so the result and
the input it replaced both count at the step that wrote it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _live_at(buffers: Sequence[Mapping[str, Any]], step: int) -> list[int]:
    return [b["bytes"] for b in buffers if b["first_use"] <= step <= b["last_use"]]


def _values(buffer: Mapping[str, Any]) -> list[dict[str, int]]:
    """The intermediates a plan's buffer holds, each with its own lifetime."""
    bounds = [buffer["first_use"], *buffer.get("in_place_at", []), buffer["last_use"]]
    return [{"bytes": buffer["bytes"], "first_use": a, "last_use": b} for a, b in zip(bounds, bounds[1:])]


def two_largest_live_bytes(memory: Mapping[str, Any]) -> int:
    """The largest, over the executor's steps, sum of the two largest intermediates live at a step."""
    intermediates = [v for b in memory.get("buffers", []) if not b["name"].startswith("workspace_")
                     for v in _values(b)]
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
