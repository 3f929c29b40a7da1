from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from service.store import module_store as store_module
from service.store import integrity
from service.problems import make_problem
from service.store.module_store import (
    ArtifactCorrupt,
    JobLimits,
    ModuleStore,
    StoreError,
    StoreLock,
    StoreLocked,
    StoreUnavailable,
    is_module_id,
    module_id,
    worker_identity,
)
from tests.service.support import ROOT

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


# --- status records ----------------------------------------------------------------------------

def _built(store: ModuleStore, text: str = "model", files: dict[str, bytes] | None = None) -> str:
    """A module that succeeded with `files` as its artifacts."""
    mid, _ = store.create(normal(text), {}, LIMITS, "ip:x")
    store.begin_attempt(mid, worker_identity())
    work = store.new_work_dir(mid)
    for name, data in (files or {"metadata.json": b'{"format": "x"}\n', "libdefault.so": b"\x7fELF" + b"\0" * 64}).items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    store.succeed(mid, work, {})
    return mid


def _rewrite_status(store: ModuleStore, mid: str, change) -> None:  # type: ignore[no-untyped-def]
    path = store.modules / mid / "status.json"
    status = json.loads(path.read_text())
    change(status)
    path.write_text(json.dumps(status))


BAD_STATUSES = {
    "garbage": b"\x00garbage{",
    "not UTF-8": b'{"id": "\xff\xfe"}',
    "empty object": b"{}",
    "a list": b"[]",
}


@pytest.mark.parametrize("content", list(BAD_STATUSES.values()), ids=list(BAD_STATUSES))
def test_a_status_that_is_not_a_record_makes_the_module_unknown_and_quarantines_it(
    tmp_path: Path, content: bytes
) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    (store.modules / mid / "status.json").write_bytes(content)

    assert store.status(mid) is None
    assert not (store.modules / mid).exists()
    assert store.quarantined() == {"entry": 1, "artifacts": 0}
    [aside] = store.quarantine.iterdir()
    assert aside.name.startswith(f"{mid}-entry-")
    assert (aside / "status.json").read_bytes() == content
    assert "reason" in json.loads((aside / "QUARANTINE.json").read_text())


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.pop("id"),
        lambda s: s.pop("state"),
        lambda s: s.update(id="0" * 64),
        lambda s: s.update(state="exploded"),
        lambda s: s.update(attempts="1"),
        lambda s: s.update(attempts=True),
        lambda s: s.update(attempts=-1),
        lambda s: s.update(limits={"compile_seconds": 1}),
        lambda s: s.update(artifacts={"name": "x"}),
        lambda s: s.update(artifacts=[{"name": "../../etc/passwd", "bytes": 1, "sha256": "0" * 64}]),
        lambda s: s.update(artifacts=[{"name": "a", "bytes": 1, "sha256": "not hex"}]),
        lambda s: s.update(module_name=5),
        lambda s: s.update(created_at="yesterday"),
        lambda s: s.update(error={"detail": 5}),
        lambda s: s.update(timings={"total_seconds": "slow"}),
        lambda s: s.update(progress={"no": "stage"}),
    ],
    ids=["no id", "no state", "another id", "unknown state", "attempts as text", "attempts as bool",
         "negative attempts", "incomplete limits", "artifacts not a list", "artifact outside",
         "bad digest", "no module name", "created_at text", "error not a problem", "timings text",
         "progress without stage"],
)
def test_every_status_read_checks_members_and_types(tmp_path: Path, change) -> None:  # type: ignore[no-untyped-def]
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    _rewrite_status(store, mid, change)

    assert store.status(mid) is None
    assert list(store.statuses()) == []
    assert store.quarantined()["entry"] == 1


def test_an_update_of_a_corrupt_status_quarantines_it_and_answers_unknown(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    (store.modules / mid / "status.json").write_text("{}")

    with pytest.raises(KeyError):
        store.set_progress(mid, "compiling")
    assert store.quarantined()["entry"] == 1


def test_check_entries_quarantines_every_corrupt_entry_and_keeps_the_valid_ones(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    good = _built(store, "good")
    garbage, _ = store.create(normal("garbage"), {}, LIMITS, "ip:x")
    (store.modules / garbage / "status.json").write_bytes(b"\xff\xfe\x00")
    no_status = "b" * 64
    (store.modules / no_status).mkdir()
    (store.modules / no_status / "request.json").write_text("{}")
    a_file = "c" * 64
    (store.modules / a_file).write_text("not a directory")
    (store.modules / "README").write_text("not a module; left alone")

    quarantined = store.check_entries()

    assert sorted(quarantined) == sorted([garbage, no_status, a_file])
    assert sorted(p.name for p in store.modules.iterdir()) == sorted([good, "README"])
    assert store.status(good)["state"] == "succeeded"
    assert store.quarantined() == {"entry": 3, "artifacts": 0}


def test_a_directory_without_status_in_the_way_of_a_new_module_is_set_aside(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid = module_id(normal())
    (store.modules / mid).mkdir(parents=True)
    (store.modules / mid / "leftover").write_text("x")

    created_id, created = store.create(normal(), {}, LIMITS, "ip:x")

    assert (created_id, created) == (mid, True)
    assert store.status(mid)["state"] == "queued"
    assert store.quarantined()["entry"] == 1


# --- integrity ---------------------------------------------------------------------------------

def test_succeed_records_the_size_and_sha256_of_every_artifact(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    library = b"\x7fELF library bytes"
    mid = _built(store, files={"libdefault.so": library, "metadata.json": b"{}"})

    entry = next(e for e in store.status(mid)["artifacts"] if e["name"] == "libdefault.so")

    assert entry["sha256"] == hashlib.sha256(library).hexdigest()
    assert entry["bytes"] == len(library)


@pytest.mark.parametrize("name", ["libdefault.so", "metadata.json"])
def test_a_tampered_artifact_is_refused_quarantined_and_its_module_marked_for_a_rebuild(
    tmp_path: Path, name: str
) -> None:
    store = ModuleStore(tmp_path)
    mid = _built(store)
    with open(store.modules / mid / "artifacts" / name, "ab") as stream:
        stream.write(b"SECRET-TAMPERED-BYTES")

    with pytest.raises(ArtifactCorrupt) as raised:
        store.artifact(mid, name)

    problem = raised.value.problem
    assert problem["type"].endswith("/artifact-corrupt") and problem["status"] == 500
    assert mid in problem["detail"] and name in problem["detail"]
    assert str(tmp_path) not in json.dumps(problem) and "SECRET" not in json.dumps(problem)
    status = store.status(mid)
    assert (status["state"], status["retryable"], status["rebuild"]) == ("failed", True, True)
    assert status["error"]["type"].endswith("/artifact-corrupt")
    assert not (store.modules / mid / "artifacts").exists()
    assert store.quarantined() == {"entry": 0, "artifacts": 1}
    assert store.artifact(mid, name) is None


def test_a_file_rewritten_with_its_size_and_mtime_put_back_is_hashed_again(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid = _built(store)
    path = store.modules / mid / "artifacts" / "libdefault.so"
    assert store.artifact(mid, "libdefault.so") is not None  # verified, remembered
    before = path.stat()
    data = path.read_bytes()
    path.write_bytes(data[:-1] + b"X")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size

    with pytest.raises(ArtifactCorrupt):
        store.artifact(mid, "libdefault.so")


def test_an_unchanged_artifact_is_hashed_once_and_again_when_its_mtime_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ModuleStore(tmp_path)
    mid = _built(store)
    hashed: list[int] = []
    real = integrity._sha256_of
    monkeypatch.setattr(integrity, "_sha256_of", lambda fd: hashed.append(fd) or real(fd))

    for _ in range(3):
        store.artifact(mid, "libdefault.so")
    once = len(hashed)
    os.utime(store.modules / mid / "artifacts" / "libdefault.so", ns=(1, 1))
    store.artifact(mid, "libdefault.so")

    assert once == 1
    assert len(hashed) == 2


@pytest.mark.parametrize("how", ["file", "directory", "artifacts"])
def test_an_artifact_replaced_by_a_symbolic_link_is_refused(tmp_path: Path, how: str) -> None:
    store = ModuleStore(tmp_path)
    mid = _built(store, files={"metadata.json": b"{}", "src/a.c": b"int a;\n"})
    outside = tmp_path / "outside"
    (outside / "src").mkdir(parents=True)
    (outside / "src" / "a.c").write_bytes(b"int a;\n")
    artifacts = store.modules / mid / "artifacts"
    if how == "file":
        (artifacts / "src" / "a.c").unlink()
        (artifacts / "src" / "a.c").symlink_to(outside / "src" / "a.c")
    elif how == "directory":
        shutil.rmtree(artifacts / "src")
        (artifacts / "src").symlink_to(outside / "src")
    else:
        shutil.copytree(artifacts, outside / "artifacts")
        shutil.rmtree(artifacts)
        artifacts.symlink_to(outside / "artifacts")

    with pytest.raises(ArtifactCorrupt):
        store.artifact(mid, "src/a.c")


def test_a_module_stored_without_digests_is_hashed_on_first_serve_and_recorded(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid = _built(store)
    _rewrite_status(store, mid, lambda s: [e.pop("sha256") for e in s["artifacts"]])
    library = (store.modules / mid / "artifacts" / "libdefault.so").read_bytes()

    found = store.artifact(mid, "libdefault.so")

    assert found is not None and found[1]["sha256"] == hashlib.sha256(library).hexdigest()
    recorded = json.loads((store.modules / mid / "status.json").read_text())["artifacts"]
    assert all(len(entry["sha256"]) == 64 for entry in recorded)
    with open(found[0], "ab") as stream:
        stream.write(b"later")
    with pytest.raises(ArtifactCorrupt):
        store.artifact(mid, "libdefault.so")


def test_metadata_that_is_not_json_is_refused_even_when_no_digest_was_recorded(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid = _built(store)
    _rewrite_status(store, mid, lambda s: [e.pop("sha256") for e in s["artifacts"]])
    (store.modules / mid / "artifacts" / "metadata.json").write_bytes(b"<html>not json")

    with pytest.raises(ArtifactCorrupt):
        store.artifact(mid, "metadata.json")


def test_verified_artifacts_dir_checks_a_built_module_and_leaves_unknown_and_unbuilt_ones_to_the_caller(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    built = _built(store, "built")
    queued, _ = store.create(normal("queued"), {}, LIMITS, "ip:x")

    assert store.verified_artifacts_dir(built) == store.modules / built / "artifacts"
    assert store.verified_artifacts_dir("0" * 64) is None
    assert store.verified_artifacts_dir(queued) is None
    (store.modules / built / "artifacts" / "libdefault.so").write_bytes(b"\x7fELF corrupted")
    with pytest.raises(ArtifactCorrupt) as corrupt:
        store.verified_artifacts_dir(built)

    assert isinstance(corrupt.value, StoreError) and corrupt.value.problem["status"] == 500


def test_requeue_rebuilds_a_module_whose_artifacts_were_corrupt_with_fresh_attempts(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, JobLimits(compile_seconds=10.0, memory_bytes=1 << 30, max_attempts=1), "ip:x")
    store.begin_attempt(mid, worker_identity())
    work = store.new_work_dir(mid)
    (work / "metadata.json").write_text("{}")
    store.succeed(mid, work, {})
    (store.modules / mid / "artifacts" / "metadata.json").write_text('{"changed": 1}')
    with pytest.raises(ArtifactCorrupt):
        store.artifact(mid, "metadata.json")

    assert store.requeue(mid) is True
    status = store.status(mid)
    assert (status["state"], status["attempts"], status["rebuild"]) == ("queued", 0, False)
    assert store.begin_attempt(mid, worker_identity()) is not None


# --- a read-only or full store -----------------------------------------------------------------

@pytest.mark.parametrize(("code", "words"), [(errno.EROFS, "read-only"), (errno.ENOSPC, "full")])
def test_creating_in_a_store_that_cannot_be_written_raises_store_unavailable_without_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, words: str
) -> None:
    store = ModuleStore(tmp_path)
    store.ensure()

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code), str(tmp_path / "modules" / "x"))

    monkeypatch.setattr(os, "fsync", refuse)
    with pytest.raises(StoreUnavailable) as raised:
        store.create(normal(), {}, LIMITS, "ip:x")

    problem = raised.value.problem
    assert (problem["status"], problem["type"]) == (503, "https://relaycc.dev/problems/store-unavailable")
    assert words in problem["detail"] and str(tmp_path) not in problem["detail"]
    assert list(store.modules.iterdir()) == []


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC])
def test_every_store_write_raises_store_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "replace", refuse)
    monkeypatch.setattr(os, "mkdir", refuse)
    for write in (lambda: store.begin_attempt(mid, worker_identity()), lambda: store.new_work_dir(mid),
                  lambda: store.create(normal("other"), {}, LIMITS, "ip:x")):
        with pytest.raises(StoreUnavailable):
            write()


# --- one service per store ---------------------------------------------------------------------

def test_a_second_exclusive_lock_is_refused_naming_the_store_and_the_holder_pid(tmp_path: Path) -> None:
    first = StoreLock.acquire(tmp_path, exclusive=True, queue="embedded")
    try:
        with pytest.raises(StoreLocked) as refused:
            StoreLock.acquire(tmp_path, exclusive=True, queue="embedded")
        with pytest.raises(StoreLocked):
            StoreLock.acquire(tmp_path, exclusive=False, queue="celery")
    finally:
        first.release()

    assert str(tmp_path) in str(refused.value)
    assert f"pid {os.getpid()}" in str(refused.value)
    StoreLock.acquire(tmp_path, exclusive=True, queue="embedded").release()


def test_shared_locks_of_celery_api_processes_coexist_and_keep_an_embedded_service_out(tmp_path: Path) -> None:
    first = StoreLock.acquire(tmp_path, exclusive=False, queue="celery")
    second = StoreLock.acquire(tmp_path, exclusive=False, queue="celery")
    try:
        with pytest.raises(StoreLocked) as refused:
            StoreLock.acquire(tmp_path, exclusive=True, queue="embedded")
    finally:
        first.release()
        second.release()

    assert "celery" in str(refused.value)


def test_the_lock_of_a_process_that_died_is_free(tmp_path: Path) -> None:
    code = (
        "import sys, time; from service.store.module_store import StoreLock;"
        f"StoreLock.acquire({str(tmp_path)!r}, exclusive=True, queue='embedded'); print('held', flush=True);"
        "time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(StoreLocked) as refused:
            StoreLock.acquire(tmp_path, exclusive=True, queue="embedded")
        assert f"pid {holder.pid}" in str(refused.value)
    finally:
        holder.kill()
        holder.wait()

    StoreLock.acquire(tmp_path, exclusive=True, queue="embedded").release()


@pytest.mark.parametrize("content", [b"\xff\xfe", b"[1, 2]", b'{"relay": 5}', b"{"])
def test_a_request_that_is_not_a_valid_record_makes_the_module_unknown_and_quarantines_it(
    tmp_path: Path, content: bytes
) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    (store.modules / mid / "request.json").write_bytes(content)

    with pytest.raises(KeyError):
        store.request(mid)
    assert store.status(mid) is None
    assert store.quarantined()["entry"] == 1


def test_a_recorded_problem_names_no_path_of_the_store_or_of_the_service_code(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid, _ = store.create(normal(), {}, LIMITS, "ip:x")
    store.begin_attempt(mid, worker_identity())
    work = store.new_work_dir(mid)
    code = Path(store_module.__file__).resolve()
    problem = make_problem(
        "internal-error",
        f"C compiler failed:\n{work}/src/default_lib0.c:9:66: error: expected ')'\n"
        f"cannot open {tmp_path}/modules/{mid}/params.npz at {code}:12",
        errors=[{"msg": f"see {tmp_path}"}],
    )

    failed = store.fail(mid, problem)

    text = json.dumps(failed["error"])
    assert str(tmp_path) not in text and str(code.parent) not in text
    assert "\\nsrc/default_lib0.c:9:66: error" in text
    assert f"<store>/modules/{mid}/params.npz at service/store/module_store.py:12" in text
    assert failed["error"]["errors"] == [{"msg": "see <store>"}]


# --- listing and deletion ----------------------------------------------------------------------


def built(store: ModuleStore, text: str, client: str = "ip:x") -> str:
    mid, _ = store.create(normal(text), {}, LIMITS, client)
    store.begin_attempt(mid, worker_identity())
    work = store.new_work_dir(mid)
    (work / "metadata.json").write_text("{}\n")
    store.succeed(mid, work, {})
    return mid


def test_newest_first_pages_by_creation_time_then_id_and_filters(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    ids = [built(store, f"m{k}", client="key:a" if k % 2 else "key:b") for k in range(4)]
    queued, _ = store.create(normal("waiting"), {}, LIMITS, "key:a")

    first, more = store.newest_first(limit=3)
    last = first[-1]
    rest, more_after = store.newest_first(limit=3, before=(float(last["created_at"]), str(last["id"])))

    assert [s["id"] for s in first + rest] == [queued, *ids[::-1]]
    assert (more, more_after) == (True, False)
    assert [s["id"] for s in store.newest_first(state="queued")[0]] == [queued]
    assert [s["id"] for s in store.newest_first(client="key:a", state="succeeded")[0]] == [ids[3], ids[1]]


def test_delete_removes_the_whole_module_and_an_identical_request_creates_it_anew(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    mid = built(store, "gone")

    last = store.delete(mid)

    assert last["state"] == "succeeded"
    assert store.status(mid) is None and not (tmp_path / "modules" / mid).exists()
    assert list((tmp_path / "deleted").iterdir()) == []
    with pytest.raises(KeyError):
        store.delete(mid)
    assert store.create(normal("gone"), {}, LIMITS, "ip:x") == (mid, True)


def test_delete_refuses_a_job_in_flight_and_what_the_caller_refuses(tmp_path: Path) -> None:
    store = ModuleStore(tmp_path)
    queued, _ = store.create(normal("busy"), {}, LIMITS, "ip:x")
    done = built(store, "owned", client="key:a")

    def only_b(status: dict[str, object]) -> None:
        if status["client"] != "key:b":
            raise PermissionError("not yours")

    with pytest.raises(store_module.ModuleBusy) as busy:
        store.delete(queued)
    store.begin_attempt(queued, worker_identity())
    with pytest.raises(store_module.ModuleBusy):
        store.delete(queued)
    with pytest.raises(PermissionError):
        store.delete(done, only_b)

    assert busy.value.state == "queued"
    assert store.status(queued) is not None and store.status(done) is not None
