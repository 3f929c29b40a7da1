from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.diagnostics import InputError
from compiler.runtime.threads import (
    SPIN_COUNT,
    available_cores,
    check_threads,
    openmp_threads,
    prepare_openmp,
    set_threads,
)


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


def _environment_after_loading_libgomp(environ: dict[str, str]) -> dict[str, str]:
    """The spin settings a fresh process has once `prepare_openmp` ran and libgomp loaded."""
    code = (
        "import ctypes, json, os\n"
        "from compiler.runtime.threads import prepare_openmp\n"
        "prepare_openmp()\n"
        "ctypes.CDLL('libgomp.so.1')\n"
        "print(json.dumps({k: os.environ.get(k) for k in ('GOMP_SPINCOUNT', 'OMP_WAIT_POLICY')}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", code], env={**env, **environ}, capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[3])
    return json.loads(out.stdout)


def test_prepare_openmp_gives_libgomp_a_short_spin_before_it_loads() -> None:
    assert _environment_after_loading_libgomp({}) == {"GOMP_SPINCOUNT": SPIN_COUNT, "OMP_WAIT_POLICY": None}


@pytest.mark.parametrize("setting", [{"GOMP_SPINCOUNT": "300000"}, {"OMP_WAIT_POLICY": "active"}])
def test_prepare_openmp_keeps_a_spin_setting_the_user_chose(setting: dict[str, str]) -> None:
    seen = _environment_after_loading_libgomp(setting)
    assert {k: v for k, v in seen.items() if v is not None} == setting


def test_prepare_openmp_changes_nothing_once_libgomp_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    ctypes.CDLL("libgomp.so.1")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    prepare_openmp()
    assert "GOMP_SPINCOUNT" not in os.environ
