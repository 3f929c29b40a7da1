import random

import pytest

from compiler.backend.memory_planner import BufferLifetime, align_up, peak_live_bytes, plan_memory


def _overlap(plan, a: BufferLifetime, b: BufferLifetime) -> bool:
    oa, ob = plan.offsets[a.name], plan.offsets[b.name]
    return oa < ob + b.bytes and ob < oa + a.bytes


def test_buffers_with_disjoint_lifetimes_share_memory():
    a = BufferLifetime("a", 400, 0, 1)
    b = BufferLifetime("b", 400, 2, 3)
    plan = plan_memory([a, b])
    assert plan.offsets == {"a": 0, "b": 0}
    assert plan.total_bytes == 400
    assert plan.peak_live_bytes == 400


def test_buffers_live_at_the_same_step_do_not_overlap():
    a = BufferLifetime("a", 100, 0, 2)
    b = BufferLifetime("b", 50, 2, 4)
    plan = plan_memory([a, b], alignment=16)
    assert not _overlap(plan, a, b)
    assert plan.offsets["a"] == 0
    assert plan.offsets["b"] == 112  # 100 rounded up to the alignment


def test_chain_of_three_intermediates_needs_only_the_two_largest_adjacent_ones():
    # t0 = f(x); t1 = g(t0); t2 = h(t1); out = k(t2): t0 and t2 never live together.
    t0 = BufferLifetime("t0", 256, 0, 1)
    t1 = BufferLifetime("t1", 512, 1, 2)
    t2 = BufferLifetime("t2", 128, 2, 3)
    plan = plan_memory([t0, t1, t2])
    assert plan.total_bytes == 256 + 512
    assert plan.peak_live_bytes == 256 + 512
    assert plan.offsets["t0"] == plan.offsets["t2"]
    assert not _overlap(plan, t0, t1) and not _overlap(plan, t1, t2)


def test_buffer_goes_below_a_conflicting_one_when_the_space_there_is_free():
    # `early` holds [0, 1000) only at step 0; `late` sits above it for steps 0..5. `tail`
    # conflicts with `late` alone, so it reuses [0, 500) instead of going on top of `late`
    # (where TVM's greedy_by_size would put it).
    early = BufferLifetime("early", 1000, 0, 0)
    late = BufferLifetime("late", 900, 0, 5)
    tail = BufferLifetime("tail", 500, 3, 5)
    plan = plan_memory([early, late, tail])
    assert plan.offsets == {"early": 0, "late": 1008, "tail": 0}
    assert plan.total_bytes == 1908


def test_ties_in_size_place_the_buffer_with_more_conflicts_first():
    a = BufferLifetime("a", 64, 0, 0)
    b = BufferLifetime("b", 64, 0, 2)  # conflicts with a and c
    c = BufferLifetime("c", 64, 2, 2)
    plan = plan_memory([a, b, c])
    assert plan.offsets["b"] == 0
    assert plan.offsets["a"] == plan.offsets["c"] == 64


def test_report_rows_keep_the_input_order():
    bufs = [BufferLifetime("z", 8, 0, 0), BufferLifetime("a", 16, 0, 1)]
    plan = plan_memory(bufs)
    assert [row["name"] for row in plan.buffers] == ["z", "a"]
    assert plan.buffers[0] == {"name": "z", "offset": plan.offsets["z"], "bytes": 8, "first_use": 0, "last_use": 0}


def test_empty_plan_is_empty():
    plan = plan_memory([])
    assert plan.total_bytes == 0 and plan.peak_live_bytes == 0 and plan.offsets == {} and plan.buffers == []


def test_zero_byte_buffers_take_no_room():
    plan = plan_memory([BufferLifetime("e", 0, 0, 3), BufferLifetime("f", 32, 0, 3)])
    assert plan.offsets["f"] == 0
    assert plan.total_bytes == 32


def test_peak_counts_buffers_that_end_and_start_on_adjacent_steps_separately():
    assert peak_live_bytes([BufferLifetime("a", 10, 0, 1), BufferLifetime("b", 20, 2, 3)]) == 20
    assert peak_live_bytes([BufferLifetime("a", 10, 0, 2), BufferLifetime("b", 20, 2, 3)]) == 30


@pytest.mark.parametrize("seed", range(200))
def test_random_lifetimes_give_a_valid_plan(seed):
    rng = random.Random(seed)
    steps = rng.randint(1, 25)
    alignment = rng.choice([1, 4, 16, 64])
    bufs = []
    for i in range(rng.randint(0, 40)):
        first = rng.randrange(steps)
        last = min(steps - 1, first + rng.choice([0, 1, 2, rng.randint(0, steps)]))
        bufs.append(BufferLifetime(f"b{i}", rng.choice([0, 1, 7, 16, rng.randint(1, 5000)]), first, last))
    plan = plan_memory(bufs, alignment)
    for i, a in enumerate(bufs):
        assert plan.offsets[a.name] % alignment == 0
        for b in bufs[i + 1 :]:
            if a.conflicts_with(b) and a.bytes and b.bytes:
                assert not _overlap(plan, a, b), (a, b)
    assert plan.total_bytes >= plan.peak_live_bytes
    assert plan.peak_live_bytes == max(
        (sum(b.bytes for b in bufs if b.first_use <= s <= b.last_use) for s in range(steps)), default=0
    )


def test_long_chains_are_planned_quickly():
    # 50,000 calls in a row: each intermediate lives from its producer to its consumer.
    bufs = [BufferLifetime(f"sid_{i}", 1024, i, i + 1) for i in range(50_000)]
    plan = plan_memory(bufs)
    assert plan.total_bytes == 2048


@pytest.mark.parametrize(
    "buffers, message",
    [
        ([BufferLifetime("a", 1, 0, 0), BufferLifetime("a", 1, 1, 1)], "listed twice"),
        ([BufferLifetime("a", -1, 0, 0)], "negative size"),
        ([BufferLifetime("a", 1, 3, 2)], "lifetime"),
    ],
)
def test_bad_buffers_are_rejected(buffers, message):
    with pytest.raises(ValueError, match=message):
        plan_memory(buffers)


def test_alignment_must_be_positive():
    with pytest.raises(ValueError, match="alignment"):
        plan_memory([BufferLifetime("a", 1, 0, 0)], alignment=0)


def test_align_up_rounds_to_the_next_multiple():
    assert [align_up(n, 16) for n in (0, 1, 16, 17)] == [0, 16, 16, 32]


def test_a_buffer_with_its_own_alignment_is_placed_at_a_multiple_of_it():
    small = BufferLifetime("small", 20, 0, 1)
    kernel = BufferLifetime("kernel", 8, 1, 1, alignment=64)
    plan = plan_memory([small, kernel], alignment=16)
    assert plan.offsets == {"small": 0, "kernel": 64}
    assert plan.alignment == 64  # the pool's start must be aligned for the kernel's buffer


def test_plan_alignment_is_the_given_one_without_buffer_alignments():
    assert plan_memory([BufferLifetime("a", 4, 0, 0)], alignment=16).alignment == 16
    assert plan_memory([BufferLifetime("a", 4, 0, 0, alignment=8)], alignment=16).alignment == 16


def test_non_positive_buffer_alignment_is_rejected():
    with pytest.raises(ValueError, match="buffer a has a non-positive alignment 0"):
        plan_memory([BufferLifetime("a", 4, 0, 0, alignment=0)])
