from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from service.problems import make_problem
from service.store import JobLimits, ModuleStore, is_module_id, module_id, worker_identity

LIMITS = JobLimits(compile_seconds=10.0, memory_bytes=1 << 30, max_attempts=2)


def normal(text: str = "model") -> dict[str, object]:
    return {"relay": text, "target": "c", "module_name": "default", "compiler_version": "0.1.0"}


def test_module_id_is_the_same_for_the_same_request_whatever_the_key_order() -> None:
    a = module_id({"relay": "x", "target": "c"})
    b = module_id({"target": "c", "relay": "x"})

    assert a == b and is_module_id(a)
    assert module_id({"relay": "y", "target": "c"}) != a


def test_create_stores_a_queued_job_with_request_and_params(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    params = {"w": np.arange(6, dtype="float32").reshape(2, 3)}

    mid, created = store.create(normal(), params, LIMITS, "ip:1.2.3.4")

    assert created
    status = store.status(mid)
    assert status is not None
    assert (status["state"], status["attempts"], status["module_name"]) == ("queued", 0, "default")
    assert store.request(mid) == normal()
    np.testing.assert_array_equal(store.params(mid)["w"], params["w"])


def test_concurrent_identical_creations_create_one_job(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    results: list[tuple[str, bool]] = []
    barrier = threading.Barrier(8)

    def create() -> None:
        barrier.wait()
        results.append(store.create(normal(), {}, LIMITS, "ip:x"))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len({mid for mid, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert [p.name for p in store.modules.iterdir()] == [results[0][0]]


def test_unknown_and_malformed_ids_have_no_status(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)

    assert store.status("0" * 64) is None
    assert store.status("../../etc") is None
    assert store.module_dir("A" * 64) is None
    assert store.module_dir("0" * 64 + "\n") is None


def test_begin_attempt_counts_attempts_and_fails_after_the_last(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    # A previous worker on another host died in each attempt.
    dead = {"host": "elsewhere", "pid": 1, "job_pid": None}

    first = store.begin_attempt(mid, dead)
    second = store.begin_attempt(mid, dead)
    third = store.begin_attempt(mid, dead)

    assert first is not None and first["attempts"] == 1 and first["state"] == "running"
    assert second is not None and second["attempts"] == 2
    assert third is None
    status = store.status(mid)
    assert status is not None and status["state"] == "failed"
    assert status["error"]["type"].endswith("/worker-died")


def test_begin_attempt_leaves_a_job_running_in_a_live_process_alone(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    live = worker_identity()
    live["pid"] = os.getppid()  # alive, on this host, not us

    assert store.begin_attempt(mid, live) is not None
    assert store.begin_attempt(mid, worker_identity()) is None


def test_succeed_publishes_artifacts_with_their_digests(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    store.begin_attempt(mid, worker_identity())
    work = store.new_work_dir(mid)
    (work / "src").mkdir()
    (work / "src" / "a.c").write_text("int x;\n")
    (work / "metadata.json").write_text("{}\n")
    (work / ".tmp.partial").write_text("half")

    status = store.succeed(mid, work, {"compile_seconds": 0.5})

    assert status["state"] == "succeeded"
    names = [entry["name"] for entry in status["artifacts"]]
    assert names == ["metadata.json", "src/a.c"]
    found = store.artifact(mid, "src/a.c")
    assert found is not None and found[0].read_text() == "int x;\n"
    assert found[1]["content_type"].startswith("text/x-c")
    assert not work.exists()


def test_artifact_lookup_accepts_only_names_from_the_list(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    store.begin_attempt(mid, worker_identity())
    work = store.new_work_dir(mid)
    (work / "metadata.json").write_text("{}\n")
    store.succeed(mid, work, {})

    for name in ("../status.json", "../request.json", "/etc/passwd", "artifacts/metadata.json"):
        assert store.artifact(mid, name) is None


def test_fail_with_a_pid_ignores_a_job_that_another_worker_runs(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    store.begin_attempt(mid, {"host": "h", "pid": 111, "job_pid": None})

    unchanged = store.fail(mid, make_problem("worker-died", "x"), only_if_pid=222)
    failed = store.fail(mid, make_problem("worker-died", "x"), retryable=True, only_if_pid=111)

    assert unchanged["state"] == "running"
    assert failed["state"] == "failed" and failed["retryable"] is True


def test_requeue_retries_a_retryable_failure_until_attempts_are_used_up(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    for expected in (True, False):
        store.begin_attempt(mid, {"host": "h", "pid": 1, "job_pid": None})
        store.fail(mid, make_problem("worker-died", "x"), retryable=True)
        assert store.requeue(mid) is expected


def test_requeue_never_retries_a_compile_error(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    store.begin_attempt(mid, worker_identity())
    store.fail(mid, make_problem("time-limit", "too slow"))

    assert store.requeue(mid) is False


def test_recover_requeues_interrupted_jobs_and_removes_leftovers(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    queued, _ = store.create(normal("a"), {}, LIMITS, "ip:x")
    running, _ = store.create(normal("b"), {}, LIMITS, "ip:x")
    exhausted, _ = store.create(normal("c"), {}, LIMITS, "ip:x")
    store.begin_attempt(running, {"host": "h", "pid": 1, "job_pid": None})
    for _ in range(2):
        store.begin_attempt(exhausted, {"host": "h", "pid": 1, "job_pid": None})
    leftover = store.new_work_dir(running)
    (store.modules / ".tmp-half-created").mkdir()

    requeued = store.recover()

    assert sorted(requeued) == sorted([queued, running])
    assert store.status(running)["state"] == "queued"
    assert store.status(exhausted)["state"] == "failed"
    assert not leftover.exists()
    assert not (store.modules / ".tmp-half-created").exists()


def test_status_files_are_valid_json_after_every_update(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    store.begin_attempt(mid, worker_identity())
    store.set_progress(mid, "compiling")
    store.set_job_pid(mid, 4242)

    status = json.loads((store.modules / mid / "status.json").read_text())

    assert status["progress"] == {"stage": "compiling"}
    assert status["worker"]["job_pid"] == 4242
    assert not [p for p in (store.modules / mid).iterdir() if p.name.startswith(".tmp-")]


def test_job_limits_round_trip_through_json() -> None:
    assert JobLimits.from_json(LIMITS.to_json()) == LIMITS
    with pytest.raises(ValueError):
        JobLimits.from_json("not an object")


def test_requeue_of_an_already_queued_job_does_not_ask_for_a_second_submission(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    store.begin_attempt(mid, {"host": "h", "pid": 1, "job_pid": None})
    store.fail(mid, make_problem("worker-died", "x"), retryable=True)

    assert store.requeue(mid) is True
    assert store.requeue(mid) is False
    assert store.status(mid)["state"] == "queued"
