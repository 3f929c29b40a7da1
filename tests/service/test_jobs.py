from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pytest

from service.arrays import encode_npz
from service.jobs import TIMES_KEY, RunFailed, run_compile_job, run_model_job
from service.normalize import checked_options, normal_form
from service.store import JobLimits, ModuleStore
from tests.service.support import SMALL_RELAY

LIMITS = JobLimits(compile_seconds=60.0, memory_bytes=4 << 30, max_attempts=2)


def stored(store: ModuleStore, relay: str = SMALL_RELAY, limits: JobLimits = LIMITS, **config: object) -> str:
    normal = normal_form(relay, checked_options("c", "small", config), {})
    mid, _ = store.create(normal, {}, limits, "ip:test")
    return mid


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleStore, str]:
    store = ModuleStore(tmp_path_factory.mktemp("store"))
    mid = stored(store)
    run_compile_job(str(store.root), mid)
    return store, mid


def test_compile_job_publishes_the_outdir_and_records_timings(built: tuple[ModuleStore, str]) -> None:
    store, mid = built

    status = store.status(mid)

    assert status is not None and status["state"] == "succeeded", status["error"]
    names = {entry["name"] for entry in status["artifacts"]}
    assert {"metadata.json", "lowered.relay", "libsmall.so", "small.tar", "include/tvmgen_small.h"} <= names
    assert status["timings"]["compile_seconds"] > 0
    assert status["attempts"] == 1
    assert not [p for p in (store.modules / mid).iterdir() if p.name.startswith("work-")]


def test_compile_job_of_a_finished_module_does_nothing(built: tuple[ModuleStore, str]) -> None:
    store, mid = built
    before = store.status(mid)

    run_compile_job(str(store.root), mid)

    assert store.status(mid) == before


def test_compile_job_records_a_compile_error_as_a_problem(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid = stored(store, cflags=["-O2", "-Dfloat=("])  # the generated C no longer compiles

    run_compile_job(str(store.root), mid)

    status = store.status(mid)
    assert status is not None and status["state"] == "failed"
    assert status["error"]["type"] == "https://relaycc.dev/problems/build-error"
    assert status["retryable"] is False


def test_compile_job_over_its_time_limit_fails_saying_so(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid = stored(store, limits=JobLimits(compile_seconds=0.5, memory_bytes=4 << 30, max_attempts=2,
                                         start_delay_seconds=30))

    run_compile_job(str(store.root), mid)

    status = store.status(mid)
    assert status is not None and status["state"] == "failed"
    assert status["error"]["type"] == "https://relaycc.dev/problems/time-limit"
    assert "RELAYCC_COMPILE_SECONDS" in status["error"]["detail"]


def test_run_job_returns_outputs_and_latencies(built: tuple[ModuleStore, str]) -> None:
    store, mid = built
    x = np.array([[1, -2, 3], [-4, 5, -6]], dtype="float32")
    y = np.ones((2, 3), dtype="float32")

    archive = run_model_job(str(store.root), mid, encode_npz({"x": x, "y": y}), repeat=3)

    with np.load(io.BytesIO(archive)) as result:
        np.testing.assert_allclose(result["out0"], np.maximum(x + y, 0))
        assert result[TIMES_KEY].shape == (3,)


def test_run_job_reports_bad_inputs_as_an_input_problem(built: tuple[ModuleStore, str]) -> None:
    store, mid = built

    with pytest.raises(RunFailed) as raised:
        run_model_job(str(store.root), mid, encode_npz({"x": np.zeros((2, 3), "float32")}))

    assert raised.value.problem["type"] == "https://relaycc.dev/problems/input-error"
    assert "missing input 'y'" in raised.value.problem["detail"]


def test_run_job_of_an_unknown_module_fails(tmp_path: Path) -> None:
    with pytest.raises(RunFailed) as raised:
        run_model_job(str(tmp_path), "0" * 64, encode_npz({}))

    assert raised.value.problem["status"] == 404


def test_run_failed_survives_pickling_between_processes() -> None:
    error = pickle.loads(pickle.dumps(RunFailed({"type": "t", "status": 400})))

    assert error.problem == {"type": "t", "status": 400}


def test_pass_progress_records_the_last_finished_pass_while_running(tmp_path: Path) -> None:
    from service.jobs import _PassProgress

    store = ModuleStore(tmp_path)
    mid = stored(store)
    store.begin_attempt(mid, {"host": "h", "pid": 1, "job_pid": None})
    progress = _PassProgress(store, mid)

    progress.after_pass("InferType", 0.001)
    progress.after_pass("FuseOps", 0.002)

    status = store.status(mid)
    assert status is not None
    assert status["progress"] == {"stage": "compiling", "last_pass": "FuseOps", "passes_done": 2}
