"""How many threads a run of a compiled model uses.

Every parallel loop of a compiled model is OpenMP's: generated kernels, and the `cblas`
codegen's library, which runs OpenBLAS on one thread and splits its products across the OpenMP
threads itself (two thread pools on the same cores fought). OpenMP reads OMP_NUM_THREADS when it
is first loaded, too late for a process that runs several models: `set_threads` changes the
count for the calling thread's later runs through `omp_set_num_threads`.

How long an idle OpenMP thread spins before it sleeps is read once too, when libgomp loads, so
`prepare_openmp` sets it before the first compiled library is opened. libgomp's own default
(300,000 spins, about a millisecond) keeps each worker busy between parallel regions; when
another process wants that core, the scheduler then counts the spinning against the worker, and
every region of a run waits for it to get the core back: ResNet-50 at two threads beside one
busy process took 480 ms, three times its one-thread time, against onnxruntime's 215.
"""

from __future__ import annotations

import ctypes
import os

from compiler.diagnostics import InputError

_OPENMP = ("libgomp.so.1",)
# Spins of an idle OpenMP thread before it sleeps, unless the user chose (GOMP_SPINCOUNT or
# OMP_WAIT_POLICY): see the module's docstring.
SPIN_COUNT = "10000"
_WAIT_SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _loaded(names: tuple[str, ...]) -> list[ctypes.CDLL]:
    """The libraries of `names` already loaded in this process (never loads one)."""
    mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 1)
    found = []
    for name in names:
        try:
            found.append(ctypes.CDLL(name, mode=mode))
        except OSError:
            continue
    return found


def check_threads(threads: int) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads must be a whole number of at least 1, got {threads!r}")
    limit = 4 * available_cores()
    if threads > limit:
        raise InputError(f"threads must be at most {limit} (4 × the {available_cores()} cores this process may use), got {threads}")
    return threads


def prepare_openmp() -> None:
    """Give libgomp our spin count before it loads, unless the environment chose one. Once
    libgomp is loaded (by an earlier library, or by another package) it is too late and the
    process keeps what it has."""
    if any(name in os.environ for name in _WAIT_SETTINGS) or _loaded(_OPENMP):
        return
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT


def set_threads(threads: int) -> None:
    """Run later kernels of this thread on `threads` OpenMP threads."""
    check_threads(threads)
    for library in _loaded(_OPENMP):
        library.omp_set_num_threads(ctypes.c_int(threads))


def openmp_threads() -> int | None:
    """The OpenMP thread count a parallel region started now would get, or None without OpenMP."""
    for library in _loaded(_OPENMP):
        return int(library.omp_get_max_threads())
    return None
