"""The choices a product kernel makes by rule that a tuning record may make instead.

Each kernel asks `choose` for a knob: the rule's value comes in, the record's (when it names the
knob and its value is allowed here) goes out, and either way the value is noted in the
context's `decisions`, where `relaycc tune` (compiler/tuning.py) finds what to vary. A record
made on another machine, or for another version of a kernel, can hold a value this kernel cannot
take (more tile rows than its registers hold, a band taller than the output): the rule's value
is kept then, so a record changes speed and never results.

The knobs:

* `tile_rows`: rows of the register tile (gemm.py). The rule takes as many as the registers hold
  (6 on AVX2 for 16-wide tiles), one fewer where that wastes less of the last tile.
* `order`: "rows" (consecutive tiles share a block of A rows, swept over the B panels) or
  "panels" (they share a B panel, swept over the rows); the rule weighs B against L2.
* `band_rows`: output rows per band of a convolution that copies its input (conv2d_packed.py);
  the rule keeps a band's copy within 128 KiB.
* `k_chunks`: chunks of the reduction's outermost axis, partial sums kept between them (gemm.py);
  the rule takes more than one only where A read in place overflows L2 beside a B panel.
* `unroll_k`: steps of the tile's innermost reduction loop written out together, 1 or 16
  (gemm.UNROLLED_STEPS), offered where that loop's extent is a multiple of 16 (and, for a
  product whose store takes the last step, the reduction has an outer axis); the rule takes 16
  for products of at most 64 rows on machines of 8-lane vectors only (unrolling costs gcc time on
  the kernel, and ran slower on AVX-512).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from compiler.tir.compute import KernelContext

KNOBS = ("tile_rows", "order", "band_rows", "k_chunks", "unroll_k")
ORDERS = ("rows", "panels")
# Knobs whose allowed values are listed whole (the others give a range as [lowest, highest]).
LISTED = ("order", "k_chunks", "unroll_k")


def check_schedule(schedule: object, where: str) -> dict[str, object]:
    """A record's schedule as a dict of known knobs with values of the right type; ValueError
    naming `where` otherwise."""
    if not isinstance(schedule, Mapping):
        raise ValueError(f"{where}: a schedule is a JSON object of {', '.join(KNOBS)}, got {type(schedule).__name__}")
    checked: dict[str, object] = {}
    for knob, value in schedule.items():
        if knob not in KNOBS:
            raise ValueError(f"{where}: unknown schedule knob {knob!r} (known: {', '.join(KNOBS)})")
        if knob == "order":
            if value not in ORDERS:
                raise ValueError(f"{where}: order must be one of {', '.join(ORDERS)}, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {knob} must be a positive integer, got {value!r}")
        checked[str(knob)] = value
    return checked


def choose(ctx: KernelContext, knob: str, rule: object, allowed: Sequence[object] | range) -> object:
    """The value of `knob` for this kernel: the record's when it is in `allowed`, else `rule`."""
    assert knob in KNOBS
    wanted = ctx.schedule.get(knob)
    value = wanted if wanted is not None and wanted in allowed else rule
    ctx.decisions[knob] = value
    ctx.decisions[f"{knob}:allowed"] = [allowed.start, allowed.stop - 1] if isinstance(allowed, range) else list(allowed)
    return value


def variants(decisions: Mapping[str, object], limit: int = 6) -> list[dict[str, object]]:
    """Schedules worth measuring against a kernel's own `decisions`, one knob changed in each,
    the likeliest first: a tile row fewer or more, the other tile order, half, twice and all the
    band rows, the next reduction chunking up and down, the other unrolling."""
    found: list[dict[str, object]] = []

    def add(knob: str, value: object) -> None:
        low_high = decisions.get(f"{knob}:allowed")
        if value == decisions.get(knob) or not isinstance(low_high, list):
            return
        if knob in LISTED:
            if value not in low_high:
                return
        elif not (isinstance(value, int) and low_high[0] <= value <= low_high[1]):
            return
        if {knob: value} not in found:
            found.append({knob: value})

    rows = decisions.get("tile_rows")
    if isinstance(rows, int):
        add("tile_rows", rows - 1)
    order = decisions.get("order")
    if order in ORDERS:
        add("order", ORDERS[1 - ORDERS.index(str(order))])
    band = decisions.get("band_rows")
    allowed = decisions.get("band_rows:allowed")
    if isinstance(band, int) and isinstance(allowed, list):
        add("band_rows", allowed[1])
        add("band_rows", min(2 * band, allowed[1]))
        add("band_rows", max(band // 2, 1))
    parts = decisions.get("k_chunks")
    divisors = decisions.get("k_chunks:allowed")
    if isinstance(parts, int) and isinstance(divisors, list) and parts in divisors:
        at = divisors.index(parts)
        for neighbour in divisors[at + 1 : at + 2] + divisors[max(at - 1, 0) : at]:
            add("k_chunks", neighbour)
    unroll = decisions.get("unroll_k")
    steps = decisions.get("unroll_k:allowed")
    if isinstance(unroll, int) and isinstance(steps, list):
        for value in steps:
            add("unroll_k", value)
    if isinstance(rows, int):
        add("tile_rows", rows + 1)
        add("tile_rows", rows - 2)
    return found[:limit]
