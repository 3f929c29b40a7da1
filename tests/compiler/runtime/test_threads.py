from __future__ import annotations

import ctypes

import pytest

from compiler.diagnostics import InputError
from compiler.runtime.threads import available_cores, check_threads, openmp_threads, set_threads


def test_set_threads_changes_the_openmp_thread_count_of_later_parallel_regions() -> None:
    ctypes.CDLL("libgomp.so.1")  # as loading a compiled model with parallel kernels does
    before = openmp_threads()

    try:
        set_threads(3)
        assert openmp_threads() == 3
    finally:
        set_threads(before or available_cores())


@pytest.mark.parametrize("threads", [0, -2, True, 2.5])
def test_a_thread_count_that_is_not_a_positive_whole_number_is_an_input_error(threads: object) -> None:
    with pytest.raises(InputError, match="threads must be a whole number"):
        check_threads(threads)  # type: ignore[arg-type]


def test_more_threads_than_four_per_core_is_an_input_error() -> None:
    with pytest.raises(InputError, match="at most"):
        check_threads(4 * available_cores() + 1)
