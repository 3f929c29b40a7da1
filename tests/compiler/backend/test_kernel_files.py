from __future__ import annotations

import random

from compiler.backend.kernel_files import (
    MAX_FILE_BYTES,
    SPLIT_FROM_BYTES,
    SPLIT_FROM_KERNELS,
    TARGET_FILE_BYTES,
    kernel_groups,
)


def kernels(count: int, seed: int = 0) -> list[str]:
    """Kernel-like definitions of varied sizes (a few large convolutions, many small ones)."""
    rng = random.Random(seed)
    sizes = [rng.choice([300, 800, 2_000, 6_000, 12_000]) for _ in range(count)]
    return [f"int32_t k{seed}_{i}(void) {{\n" + "x" * size + "\n}\n" for i, size in enumerate(sizes)]


def as_sets(definitions: list[str], groups: list[list[int]]) -> set[frozenset[str]]:
    return {frozenset(definitions[i] for i in g) for g in groups}


def test_every_kernel_lands_in_exactly_one_file() -> None:
    definitions = kernels(80)
    groups = kernel_groups(definitions)
    assert sorted(i for g in groups for i in g) == list(range(80))


def test_the_split_is_deterministic_and_does_not_depend_on_kernel_order() -> None:
    definitions = kernels(60)
    shuffled = definitions[::-1]
    assert as_sets(definitions, kernel_groups(definitions)) == as_sets(shuffled, kernel_groups(shuffled))
    assert kernel_groups(definitions) == kernel_groups(list(definitions))


def test_files_are_bounded_and_a_large_model_gets_several() -> None:
    definitions = kernels(120)
    total = sum(map(len, definitions))
    groups = kernel_groups(definitions)
    sizes = [sum(len(definitions[i]) for i in g) for g in groups]
    # No file beyond the bound unless it is one kernel; on average near the target.
    assert all(s <= MAX_FILE_BYTES or len(g) == 1 for s, g in zip(sizes, groups))
    assert len(groups) >= total // (2 * TARGET_FILE_BYTES)
    assert max(sizes) <= 6 * (total / len(groups))


def test_a_small_model_stays_one_file_in_its_own_order() -> None:
    few = kernels(SPLIT_FROM_KERNELS - 1)
    assert kernel_groups(few) == [list(range(len(few)))]
    small = [f"int32_t s{i}(void) {{ return {i}; }}\n" for i in range(20)]
    assert sum(map(len, small)) < SPLIT_FROM_BYTES
    assert kernel_groups(small) == [list(range(20))]
    assert kernel_groups([]) == []


def test_a_kernel_more_or_less_changes_few_files() -> None:
    definitions = kernels(100)
    before = as_sets(definitions, kernel_groups(definitions))
    extra = definitions + kernels(1, seed=99)
    after = as_sets(extra, kernel_groups(extra))
    # The new kernel changes the file it falls in and, at a boundary, its neighbour.
    assert len(after - before) <= 2
    assert len(before & after) >= len(before) - 2
