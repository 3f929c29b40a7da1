from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from service.arrays import encode_npz
from service.jobs.worker import TIMES_KEY, RunFailed, _copy_checked, _read_regular, run_compile_job, run_model_job
from service.jobs.normalize import checked_options, codegen_specs, normal_form
from service.jobs.sandbox import bwrap
from service.store.module_store import JobLimits, ModuleStore
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


def test_a_job_without_user_c_compiles_and_runs_in_a_forked_child_when_the_sandbox_is_off(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid = stored(store, limits=JobLimits(compile_seconds=60.0, memory_bytes=4 << 30, max_attempts=2, sandbox="off"))

    run_compile_job(str(store.root), mid)
    x = np.full((2, 3), -1.0, "float32")
    archive = run_model_job(str(store.root), mid, encode_npz({"x": x, "y": x}), sandbox="off")

    assert store.status(mid)["state"] == "succeeded"
    with np.load(io.BytesIO(archive)) as outputs:
        np.testing.assert_array_equal(outputs["out0"], np.zeros((2, 3), "float32"))


def with_user_c(store: ModuleStore, limits: JobLimits) -> str:
    document = {"name": "acme", "mode": "relay_to_tir", "calling_convention": "dltensor",
                "patterns": [{"name": "relu", "pattern": "nn.relu(*)", "symbol": "relu"}],
                "library": {"sources": ["acme.c"]}}
    options = checked_options("acme, c", "small", {}, codegen_specs([{"document": document, "sources": {
        "acme.c": '#include "relaycc_dlpack.h"\nint relu(DLTensor* a, DLTensor* b) { return 0; }\n'}}]))
    mid, _ = store.create(normal_form(SMALL_RELAY, options, {}), {}, limits, "ip:test")
    return mid


def test_a_job_with_user_c_fails_rather_than_run_without_the_sandbox(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid = with_user_c(store, JobLimits(compile_seconds=60.0, memory_bytes=4 << 30, max_attempts=2, sandbox="off"))

    run_compile_job(str(store.root), mid)

    status = store.status(mid)
    assert status["state"] == "failed"
    assert status["error"]["type"].endswith("/sandbox-unavailable")
    assert "RELAYCC_SANDBOX=off" in status["error"]["detail"]


def test_a_job_with_user_c_fails_where_the_machine_has_no_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap, "probe", lambda uid=bwrap.DEFAULT_UID: bwrap.Availability(False, "bwrap is missing"))
    store = ModuleStore(tmp_path)
    mid = with_user_c(store, LIMITS)

    run_compile_job(str(store.root), mid)

    assert store.status(mid)["error"]["detail"] == "the module cannot be built: no sandbox on this machine: bwrap is missing"


def test_the_sandbox_required_but_missing_fails_every_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap, "probe", lambda uid=bwrap.DEFAULT_UID: bwrap.Availability(False, "bwrap is missing"))
    store = ModuleStore(tmp_path)
    mid = stored(store, limits=JobLimits(compile_seconds=60.0, memory_bytes=4 << 30, max_attempts=2, sandbox="required"))

    run_compile_job(str(store.root), mid)

    assert store.status(mid)["error"]["type"].endswith("/sandbox-unavailable")


def test_only_regular_files_and_directories_leave_a_jobs_scratch_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "src").mkdir(parents=True)
    (out / "src" / "a.c").write_text("int a;")
    dest = tmp_path / "dest"
    dest.mkdir()
    _copy_checked(out, dest)
    assert (dest / "src" / "a.c").read_text() == "int a;"

    (out / "leak").symlink_to("/etc/hostname")
    with pytest.raises(OSError):
        _copy_checked(out, tmp_path / "dest")


def test_a_file_larger_than_allowed_is_not_read(tmp_path: Path) -> None:
    big = tmp_path / "result.npz"
    big.write_bytes(b"x" * 100)

    with pytest.raises(ValueError, match="larger than the job may leave"):
        _read_regular(big, 99)
    assert _read_regular(big, 100) == b"x" * 100


def test_a_run_result_that_is_not_a_models_outputs_is_refused() -> None:
    from service.jobs.worker import _check_run_result

    _check_run_result({"out0": np.zeros(2), "out1": np.zeros(3), TIMES_KEY: np.zeros(4)})
    for forged in (
        {"out0": np.zeros(2)},  # no latencies
        {"out1": np.zeros(2), TIMES_KEY: np.zeros(4)},  # a gap in the outputs
        {"out1": np.zeros(2), "out0": np.zeros(2), TIMES_KEY: np.zeros(4)},  # out of order
        {"output": np.zeros(2), TIMES_KEY: np.zeros(4)},  # the header's field name, not the result's
        {"output0": np.zeros(2), "output1": np.zeros(2), TIMES_KEY: np.zeros(4)},
        {"out0": np.zeros(2), "extra": np.zeros(1), TIMES_KEY: np.zeros(4)},
        {"out0": np.zeros(2), TIMES_KEY: np.zeros((2, 2))},
    ):
        with pytest.raises(ValueError):
            _check_run_result(forged)


def test_a_job_that_starts_while_the_store_is_full_waits_for_space_and_then_builds(tmp_path: Path) -> None:
    import threading
    import time

    from tests.service.support import fill, tmpfs

    with tmpfs(tmp_path / "store", "8m") as root:
        store = ModuleStore(root)
        mid = stored(store)
        filler = fill(store.modules)
        job = threading.Thread(target=run_compile_job, args=(str(root), mid))
        job.start()
        time.sleep(1.0)
        waiting = store.status(mid)
        filler.unlink()
        job.join(timeout=120)
        status = store.status(mid)

    assert waiting is not None and waiting["state"] == "queued"
    assert status is not None and status["state"] == "succeeded", status["error"]


@pytest.mark.parametrize("sandbox", ["off", "required"])
def test_the_store_hears_the_passes_then_the_c_files_counted_whichever_way_the_job_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str
) -> None:
    if sandbox == "required" and not bwrap.probe().ok:
        pytest.skip(f"no sandbox here: {bwrap.probe()}")
    # Every progress write is also appended to a file: the forked child writes its own, the
    # sandboxed job's messages are written by the worker.
    heard = tmp_path / "heard.jsonl"
    original = ModuleStore.set_progress

    def recording(self: ModuleStore, mid: str, stage: str, **details: object) -> None:
        with open(heard, "a") as log:
            log.write(json.dumps({"stage": stage, **details}) + "\n")
        original(self, mid, stage, **details)

    monkeypatch.setattr(ModuleStore, "set_progress", recording)
    store = ModuleStore(tmp_path / "store")
    mid = stored(store, limits=JobLimits(compile_seconds=60.0, memory_bytes=4 << 30, max_attempts=2, sandbox=sandbox))

    run_compile_job(str(store.root), mid)

    assert store.status(mid)["state"] == "succeeded"
    seen = [json.loads(line) for line in heard.read_text().splitlines()]
    counted = [(p["stage"], p["done"], p["total"]) for p in seen if "total" in p]
    passes = [c for c in counted if c[0] == "compiling"]
    files = [c for c in counted if c[0] == "building C"]
    assert passes[0][1] == 0 and passes[-1][1] == passes[-1][2] and passes[-1][2] >= 10
    assert [c[1] for c in files] == list(range(files[0][2] + 1))
    assert counted == passes + files and seen[-1] == {"stage": "storing artifacts"}
