from __future__ import annotations

import pytest

from compiler.ops.kernels.schedule import check_schedule, choose, variants
from compiler.tir.compute import KernelContext


def test_a_record_value_the_kernel_allows_replaces_the_rule() -> None:
    ctx = KernelContext(schedule={"tile_rows": 4})

    assert choose(ctx, "tile_rows", 6, range(1, 7)) == 4
    assert ctx.decisions["tile_rows"] == 4
    assert ctx.decisions["tile_rows:allowed"] == [1, 6]


def test_a_record_value_the_kernel_cannot_take_leaves_the_rule() -> None:
    # More tile rows than the registers hold (a record from an AVX-512 machine on an AVX2 one).
    ctx = KernelContext(schedule={"tile_rows": 14, "order": "columns"})

    assert choose(ctx, "tile_rows", 6, range(1, 7)) == 6
    assert choose(ctx, "order", "rows", ("rows", "panels")) == "rows"


def test_without_a_record_the_rule_is_chosen_and_noted() -> None:
    ctx = KernelContext()

    assert choose(ctx, "band_rows", 7, range(1, 29)) == 7
    assert ctx.decisions == {"band_rows": 7, "band_rows:allowed": [1, 28]}


def test_variants_change_one_knob_each_within_what_the_kernel_allows() -> None:
    decisions = {"tile_rows": 6, "tile_rows:allowed": [1, 6], "order": "rows", "order:allowed": ["rows", "panels"],
                 "band_rows": 4, "band_rows:allowed": [1, 28]}

    found = variants(decisions, limit=10)

    assert found == [{"tile_rows": 5}, {"order": "panels"}, {"band_rows": 28}, {"band_rows": 8}, {"band_rows": 2},
                     {"tile_rows": 4}]


def test_variants_skip_values_outside_the_allowed_range_and_repeats() -> None:
    decisions = {"tile_rows": 1, "tile_rows:allowed": [1, 1], "band_rows": 28, "band_rows:allowed": [1, 28]}

    assert variants(decisions) == [{"band_rows": 14}]


@pytest.mark.parametrize(("schedule", "message"), [
    ({"unroll": 2}, "unknown schedule knob 'unroll'"),
    ({"tile_rows": 0}, "tile_rows must be a positive integer, got 0"),
    ({"band_rows": True}, "band_rows must be a positive integer, got True"),
    ({"order": "columns"}, "order must be one of rows, panels, got 'columns'"),
    ([1, 2], "a schedule is a JSON object"),
])
def test_a_bad_schedule_is_refused_with_where_it_is(schedule: object, message: str) -> None:
    with pytest.raises(ValueError, match=r"^records\[2\]\.schedule: ") as raised:
        check_schedule(schedule, "records[2].schedule")
    assert message in str(raised.value)


def test_a_good_schedule_is_kept_as_given() -> None:
    assert check_schedule({"tile_rows": 5, "order": "panels"}, "x") == {"tile_rows": 5, "order": "panels"}
