from bench.workspace import largest_scratch_bytes, two_largest_live_bytes, workspace_figures


def buffer(name: str, size: int, first: int, last: int) -> dict[str, object]:
    return {"name": name, "offset": 0, "bytes": size, "first_use": first, "last_use": last}


PLAN = {
    "workspace_bytes": 900,
    "buffers": [
        buffer("sid_0", 100, 0, 1),
        buffer("sid_1", 300, 1, 3),  # live with sid_0 at step 1 and with sid_2 and sid_3 at 2..3
        buffer("sid_2", 200, 2, 3),
        buffer("sid_3", 250, 3, 4),
        buffer("workspace_0", 5000, 0, 0),
    ],
}


def test_bound_is_the_largest_pair_of_intermediates_live_at_one_step():
    # step 3: sid_1, sid_2 and sid_3 are live; the two largest are 300 + 250.
    assert two_largest_live_bytes(PLAN) == 550


def test_kernel_scratch_is_not_an_intermediate_but_is_reported():
    assert largest_scratch_bytes(PLAN) == 5000
    assert workspace_figures(PLAN) == {"workspace_bytes": 900, "two_largest_live_bytes": 550,
                                       "largest_scratch_bytes": 5000}


def test_a_plan_without_intermediates_has_a_zero_bound():
    assert two_largest_live_bytes({"workspace_bytes": 0, "buffers": []}) == 0


def test_a_buffer_written_over_in_place_counts_each_value_it_held():
    # One buffer holds a shortcut (steps 0-2) and, from step 2 on, the sum written over it: at
    # step 2 both are live, as they would be in two buffers.
    shared = {**buffer("sid_0", 400, 0, 5), "in_place_at": [2]}
    plan = {"workspace_bytes": 500, "buffers": [shared, buffer("sid_1", 100, 1, 2)]}
    assert two_largest_live_bytes(plan) == 800
