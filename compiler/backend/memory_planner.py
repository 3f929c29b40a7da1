"""Static memory planning: place buffers with known lifetimes in one pool.

Each buffer is live over an inclusive range of steps (the calls of @main in execution order).
Two buffers *conflict* when their ranges overlap; conflicting buffers must not share bytes,
all others may. The planner is greedy by size, like TVM's USMP `greedy_by_size`: buffers are
taken largest first, and each goes to the lowest aligned offset where it overlaps no already
placed conflicting buffer. Ties go to the buffer with more conflicts, then to the one used
first (a chain of equal buffers then alternates between two slots, where name order could need
three), then by name. Unlike USMP, which puts a buffer above the highest conflicting one, we
also use gaps below and between placed buffers (first fit), which never costs memory and often
saves some.

`peak_live_bytes`, the largest sum of sizes live at one step, is a lower bound for any plan;
the report shows both so a reader can see how close the plan is.

Finding a buffer's placed conflicts must not be quadratic: a model with 50,000 calls has about
as many buffers. Placed buffers are indexed in two segment trees over steps (see
`_PlacedIndex`), which give exactly the placed conflicts of a lifetime in logarithmic time
plus their number.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class BufferLifetime:
    """A buffer of `bytes` bytes live from step `first_use` to step `last_use`, inclusive.
    `alignment`, when set, is what its offset must be a multiple of instead of the plan's."""

    name: str
    bytes: int
    first_use: int
    last_use: int
    alignment: int | None = None

    def conflicts_with(self, other: BufferLifetime) -> bool:
        return self.first_use <= other.last_use and other.first_use <= self.last_use


@dataclass(frozen=True)
class MemoryPlan:
    """Where each buffer lives in the pool. `buffers` is the plan as report rows, in the order
    the buffers were given; `alignment` is what the pool's start must be aligned to for every
    buffer to get its alignment."""

    offsets: dict[str, int]
    total_bytes: int
    peak_live_bytes: int
    buffers: list[dict[str, int | str | list[int]]]
    alignment: int = 16


def align_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def plan_memory(buffers: Sequence[BufferLifetime], alignment: int = 16) -> MemoryPlan:
    """Offsets for `buffers` in one pool: conflicting buffers never overlap, every offset is a
    multiple of `alignment` (or of the buffer's own alignment, when it has one). The plan's
    `alignment` is the largest of them: the pool's start needs it."""
    _check(buffers, alignment)
    if not buffers:
        return MemoryPlan({}, 0, 0, [], alignment)
    conflicts = _conflict_counts(buffers)
    order = sorted(
        range(len(buffers)),
        key=lambda i: (-buffers[i].bytes, -conflicts[i], buffers[i].first_use, buffers[i].name),
    )
    index = _PlacedIndex(max(b.last_use for b in buffers) + 1)
    offsets: dict[str, int] = {}
    for i in order:
        buf = buffers[i]
        taken = sorted(
            (offsets[buffers[j].name], offsets[buffers[j].name] + buffers[j].bytes)
            for j in index.overlapping(buf.first_use, buf.last_use)
            if buffers[j].bytes > 0
        )
        offsets[buf.name] = _first_fit(taken, buf.bytes, buf.alignment or alignment)
        index.add(i, buf.first_use, buf.last_use)
    total = max(offsets[b.name] + b.bytes for b in buffers)
    rows: list[dict[str, int | str]] = [
        {"name": b.name, "offset": offsets[b.name], "bytes": b.bytes, "first_use": b.first_use,
         "last_use": b.last_use}
        for b in buffers
    ]
    return MemoryPlan(offsets, total, peak_live_bytes(buffers), rows, pool_alignment(buffers, alignment))


def pool_alignment(buffers: Sequence[BufferLifetime], alignment: int = 16) -> int:
    """The alignment the pool itself needs: the largest one any of its buffers asks for."""
    return max([alignment, *(b.alignment for b in buffers if b.alignment is not None)])


def peak_live_bytes(buffers: Sequence[BufferLifetime]) -> int:
    """The largest total size of buffers live at the same step."""
    events: list[tuple[int, int]] = []
    for b in buffers:
        events.append((b.first_use, b.bytes))
        events.append((b.last_use + 1, -b.bytes))
    # At equal steps the frees (negative) sort first: a buffer ending at step s-1 and one
    # starting at s are never live together.
    events.sort()
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def _check(buffers: Sequence[BufferLifetime], alignment: int) -> None:
    if alignment <= 0:
        raise ValueError(f"alignment must be positive, got {alignment}")
    seen: set[str] = set()
    for b in buffers:
        if b.name in seen:
            raise ValueError(f"buffer {b.name} is listed twice")
        seen.add(b.name)
        if b.alignment is not None and b.alignment <= 0:
            raise ValueError(f"buffer {b.name} has a non-positive alignment {b.alignment}")
        if b.bytes < 0:
            raise ValueError(f"buffer {b.name} has a negative size {b.bytes}")
        if b.first_use < 0 or b.last_use < b.first_use:
            raise ValueError(f"buffer {b.name} has an empty or negative lifetime [{b.first_use}, {b.last_use}]")


def _conflict_counts(buffers: Sequence[BufferLifetime]) -> list[int]:
    """For each buffer, how many others overlap its lifetime: all buffers minus those that end
    before it starts, minus those that start after it ends, minus itself."""
    firsts = sorted(b.first_use for b in buffers)
    lasts = sorted(b.last_use for b in buffers)
    n = len(buffers)
    return [
        n - bisect.bisect_left(lasts, b.first_use) - (n - bisect.bisect_right(firsts, b.last_use)) - 1
        for b in buffers
    ]


def _first_fit(taken: list[tuple[int, int]], size: int, alignment: int) -> int:
    """The lowest aligned offset where [offset, offset + size) misses every range in `taken`
    (sorted by start; ranges may overlap each other)."""
    offset = 0
    for start, end in taken:
        if offset + size <= start:
            break
        offset = max(offset, align_up(end, alignment))
    return offset


class _PlacedIndex:
    """Placed buffers by lifetime; `overlapping(first, last)` yields those whose lifetime
    overlaps [first, last], each exactly once.

    Two segment trees over steps: `cover` keeps each lifetime in the O(log steps) nodes that
    tile it, so the nodes on the path from a leaf to the root hold every lifetime containing
    that step; `starts` keeps each buffer in every ancestor of the leaf of its first step, so
    the nodes tiling a range hold every buffer that starts inside it.
    """

    def __init__(self, steps: int):
        self.size = 1
        while self.size < steps:
            self.size *= 2
        # Sparse: most nodes of a tree over many steps never hold anything.
        self.cover: dict[int, list[int]] = {}
        self.starts: dict[int, list[int]] = {}

    def _tiling(self, first: int, last: int) -> list[int]:
        """The nodes whose step ranges tile [first, last]."""
        nodes: list[int] = []
        lo, hi = first + self.size, last + self.size + 1
        while lo < hi:
            if lo & 1:
                nodes.append(lo)
                lo += 1
            if hi & 1:
                hi -= 1
                nodes.append(hi)
            lo //= 2
            hi //= 2
        return nodes

    def add(self, item: int, first: int, last: int) -> None:
        for node in self._tiling(first, last):
            self.cover.setdefault(node, []).append(item)
        node = first + self.size
        while node >= 1:
            self.starts.setdefault(node, []).append(item)
            node //= 2

    def overlapping(self, first: int, last: int) -> list[int]:
        # A placed lifetime overlaps [first, last] iff it contains `first` or starts in
        # (first, last]; the two cases are disjoint, so nothing is reported twice.
        found: list[int] = []
        node = first + self.size
        while node >= 1:
            found.extend(self.cover.get(node, ()))
            node //= 2
        if last > first:
            for node in self._tiling(first + 1, last):
                found.extend(self.starts.get(node, ()))
        return found
