"""The store interface's contract, run against both stores: the directory and S3 (a real local S3
endpoint, moto's server mode). What a store does with its own files is tested beside it
(test_module_store.py); here only what the API and the workers rely on."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from service.problems import make_problem
from service.state import acquire_lock
from service.store.module_store import (
    ARTIFACTS_LABEL,
    ENTRY_LABEL,
    ArtifactCorrupt,
    DirectoryStore,
    JobLimits,
    ModuleBusy,
    ModuleStoreBase,
    StoreLocked,
    open_store,
    worker_identity,
)
from service.store.s3 import S3ModuleStore, parse_url
from service.store.s3_lease import LEASE_KEY
from tests.service.s3_endpoint import S3Endpoint

LIMITS = JobLimits(compile_seconds=10.0, memory_bytes=1 << 30, max_attempts=2)


def normal(text: str = "model") -> dict[str, object]:
    return {"relay": text, "target": "c", "module_name": "default", "compiler_version": "test"}


@pytest.fixture(params=["directory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ModuleStoreBase:
    if request.param == "directory":
        made = open_store(tmp_path / "store")
    else:
        endpoint: S3Endpoint = request.getfixturevalue("s3_endpoint")
        made = open_store(f"s3://{endpoint.new_bucket()}/relaycc", cache=tmp_path / "cache")
    made.ensure()
    return made


def put_raw(store: ModuleStoreBase, mid: str, name: str, data: bytes) -> None:
    """Change an object behind the store's back, as a failing disk or a hostile writer would."""
    if isinstance(store, DirectoryStore):
        (store.modules / mid / name).write_bytes(data)
    else:
        assert isinstance(store, S3ModuleStore)
        store._put(f"modules/{mid}/{name}", data)


def tamper_artifact(store: ModuleStoreBase, mid: str, name: str, data: bytes) -> None:
    if isinstance(store, DirectoryStore):
        put_raw(store, mid, f"artifacts/{name}", data)
        return
    entry = next(e for e in store.manifest(mid) or [] if e["name"] == name)
    put_raw(store, mid, f"artifacts/{entry['sha256']}/{name}", data)


def built(store: ModuleStoreBase, text: str = "model") -> tuple[str, dict[str, bytes]]:
    """A module taken through a whole job: created, started, built, stored."""
    mid, _ = store.create(normal(text), {}, LIMITS, "client-a")
    assert store.begin_attempt(mid, worker_identity()) is not None
    work = store.new_work_dir(mid)
    files = {
        "metadata.json": json.dumps({"format": "relaycc.metadata/1"}).encode(),
        "src/default_lib0.c": b"int f(void) { return 1; }\n",
        "libdefault.so": bytes(range(256)) * 4,
    }
    for name, data in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    assert store.succeed(mid, work, {"compile_ms": 1.5})["state"] == "succeeded"
    return mid, files


def test_create_makes_one_queued_job_per_request_and_keeps_its_inputs(store: ModuleStoreBase) -> None:
    params = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}

    mid, created = store.create(normal(), params, LIMITS, "client-a")
    again, created_again = store.create(normal(), params, LIMITS, "client-a")

    assert (created, created_again, again) == (True, False, mid)
    assert hashlib.sha256(json.dumps(normal(), sort_keys=True, separators=(",", ":")).encode()).hexdigest() == mid
    status = store.status(mid)
    assert status is not None and status["state"] == "queued" and status["client"] == "client-a"
    assert store.request(mid) == normal()
    np.testing.assert_array_equal(store.params(mid)["w"], params["w"])
    assert list(store.ids()) == [mid]


def test_identical_requests_at_once_create_exactly_one_job(store: ModuleStoreBase) -> None:
    results: list[bool] = []
    barrier = threading.Barrier(6)

    def submit() -> None:
        barrier.wait()
        results.append(store.create(normal("raced"), {}, LIMITS, "c")[1])

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == [False] * 5 + [True]


def test_concurrent_updates_lose_no_change(store: ModuleStoreBase) -> None:
    mid, _ = store.create(normal(), {}, LIMITS, "c")

    def bump(status: dict[str, object]) -> bool:
        timings = status["timings"]
        assert isinstance(timings, dict)
        timings["n"] = timings.get("n", 0) + 1
        return True

    def worker() -> None:
        for _ in range(5):
            store.update(mid, bump)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    status = store.status(mid)
    assert status is not None and status["timings"] == {"n": 20}


def test_a_finished_job_records_a_manifest_of_sha256_digests_and_serves_checked_files(store: ModuleStoreBase) -> None:
    mid, files = built(store)

    manifest = store.manifest(mid)
    assert manifest is not None
    assert {e["name"]: (e["bytes"], e["sha256"]) for e in manifest} == {
        name: (len(data), hashlib.sha256(data).hexdigest()) for name, data in files.items()
    }
    found = store.artifact(mid, "libdefault.so")
    assert found is not None and found[0].read_bytes() == files["libdefault.so"]
    assert store.artifact(mid, "../status.json") is None
    outdir = store.verified_artifacts_dir(mid)
    assert outdir is not None and (outdir / "src" / "default_lib0.c").read_bytes() == files["src/default_lib0.c"]
    assert store.metadata(mid) == {"format": "relaycc.metadata/1"}


def test_a_tampered_artifact_is_quarantined_and_the_module_rebuilt_on_request(store: ModuleStoreBase) -> None:
    mid, _ = built(store)
    tamper_artifact(store, mid, "libdefault.so", b"not the library")

    with pytest.raises(ArtifactCorrupt) as corrupt:
        store.verified_artifacts_dir(mid)

    assert corrupt.value.problem["type"].endswith("/artifact-corrupt")
    status = store.status(mid)
    assert status is not None and status["state"] == "failed" and status["rebuild"] is True
    assert store.quarantined()[ARTIFACTS_LABEL] == 1
    assert store.requeue(mid, LIMITS) is True
    status = store.status(mid)
    assert status is not None and status["state"] == "queued" and status["attempts"] == 0


def test_a_status_that_is_not_a_record_is_quarantined_and_the_module_unknown(store: ModuleStoreBase) -> None:
    mid, _ = store.create(normal(), {}, LIMITS, "c")
    put_raw(store, mid, "status.json", b"\xff not json")

    assert store.status(mid) is None
    assert store.quarantined()[ENTRY_LABEL] == 1
    assert store.create(normal(), {}, LIMITS, "c") == (mid, True)


def test_check_entries_quarantines_corrupt_statuses_at_start_up(store: ModuleStoreBase) -> None:
    good, _ = store.create(normal("good"), {}, LIMITS, "c")
    bad, _ = store.create(normal("bad"), {}, LIMITS, "c")
    put_raw(store, bad, "status.json", json.dumps({"id": bad, "state": "exploded"}).encode())

    assert store.check_entries() == [bad]
    assert list(store.ids()) == [good]


def test_delete_refuses_a_job_in_flight_and_removes_a_finished_one(store: ModuleStoreBase) -> None:
    mid, _ = store.create(normal(), {}, LIMITS, "c")
    with pytest.raises(ModuleBusy):
        store.delete(mid)
    store.fail(mid, make_problem("internal-error", "boom"))

    last = store.delete(mid)

    assert last["state"] == "failed"
    assert store.status(mid) is None and list(store.ids()) == []
    with pytest.raises(KeyError):
        store.update(mid, lambda status: True)


def test_attempts_are_counted_and_a_job_out_of_attempts_fails(store: ModuleStoreBase) -> None:
    mid, _ = store.create(normal(), {}, LIMITS, "c")
    for _ in range(LIMITS.max_attempts):
        assert store.begin_attempt(mid, {"host": "elsewhere", "pid": 1, "job_pid": None}) is not None

    assert store.begin_attempt(mid, {"host": "another", "pid": 2, "job_pid": None}) is None
    status = store.status(mid)
    assert status is not None and status["state"] == "failed"
    assert str(status["error"]["type"]).endswith("/worker-died")


def test_recover_queues_again_the_jobs_left_running(store: ModuleStoreBase) -> None:
    running, _ = store.create(normal("running"), {}, LIMITS, "c")
    store.begin_attempt(running, {"host": "gone", "pid": 1, "job_pid": None})
    finished, _ = built(store, "finished")

    assert store.recover(LIMITS) == [running]
    assert store.status(running)["state"] == "queued"  # type: ignore[index]
    assert store.status(finished)["state"] == "succeeded"  # type: ignore[index]


def test_newest_first_lists_by_creation_time_and_filters(store: ModuleStoreBase) -> None:
    ids = [store.create(normal(f"m{i}"), {}, LIMITS, "a" if i % 2 else "b")[0] for i in range(3)]

    listed, more = store.newest_first(limit=2)

    assert [s["id"] for s in listed] == ids[::-1][:2] and more is True
    assert [s["id"] for s in store.newest_first(client="a")[0]] == [ids[1]]


def test_a_failure_names_no_path_of_the_store(store: ModuleStoreBase) -> None:
    mid, _ = store.create(normal(), {}, LIMITS, "c")
    store.begin_attempt(mid, worker_identity())
    work = store.new_work_dir(mid)

    failed = store.fail(mid, make_problem("internal-error", f"C compiler failed:\n{work}/src/x.c:3:1: error"))

    assert failed["error"]["detail"] == "C compiler failed:\nsrc/x.c:3:1: error"  # type: ignore[index]


def test_run_outputs_are_kept_until_taken_once(store: ModuleStoreBase) -> None:
    ref = store.put_run_output(b"PK outputs")

    assert store.take_run_output(ref) == b"PK outputs"
    with pytest.raises(KeyError):
        store.take_run_output(ref)
    with pytest.raises(KeyError):
        store.take_run_output("../../etc/passwd")


def test_the_store_is_writable(store: ModuleStoreBase) -> None:
    assert store.writable_problem() is None


def test_one_embedded_service_per_store_but_celery_services_share(store: ModuleStoreBase) -> None:
    first = acquire_lock(store, exclusive=True, queue="embedded")
    try:
        with pytest.raises(StoreLocked):
            acquire_lock(store, exclusive=True, queue="embedded")
        with pytest.raises(StoreLocked):
            acquire_lock(store, exclusive=False, queue="celery")
    finally:
        first.release()
    shared = [acquire_lock(store, exclusive=False, queue="celery") for _ in range(2)]
    for lock in shared:
        lock.release()


# --- what only the object store does -----------------------------------------------------------


@pytest.fixture
def s3_store(s3_endpoint: S3Endpoint, tmp_path: Path) -> Iterator[S3ModuleStore]:
    made = S3ModuleStore.from_url(f"s3://{s3_endpoint.new_bucket()}/p", cache=tmp_path / "cache")
    made.ensure()
    yield made


def test_a_tampered_cached_copy_is_downloaded_again_not_quarantined(s3_store: S3ModuleStore) -> None:
    mid, files = built(s3_store)
    found = s3_store.artifact(mid, "libdefault.so")
    assert found is not None
    found[0].write_bytes(b"changed in the cache")

    again = s3_store.artifact(mid, "libdefault.so")

    assert again is not None and again[0].read_bytes() == files["libdefault.so"]
    assert s3_store.status(mid)["state"] == "succeeded"  # type: ignore[index]


def test_an_s3_url_names_a_bucket(s3_endpoint: S3Endpoint) -> None:
    assert parse_url("s3://bucket/a/b/") == ("bucket", "a/b")
    with pytest.raises(ValueError, match="s3://bucket/prefix"):
        parse_url("s3:///no-bucket")


def test_an_unreachable_bucket_is_unavailable_not_a_crash(tmp_path: Path, s3_endpoint: S3Endpoint) -> None:
    from service.store.module_store import StoreUnavailable

    with pytest.raises(StoreUnavailable):
        S3ModuleStore.from_url("s3://no-such-bucket-here/p", cache=tmp_path).ensure()


def test_the_lease_of_a_service_that_died_lapses(s3_store: S3ModuleStore) -> None:
    dead = {"pid": 1, "host": "gone", "queue": "embedded", "exclusive": True, "expires": time.time() - 1}
    s3_store._put(LEASE_KEY, json.dumps({"holders": {"dead": dead}}).encode())

    lease = acquire_lock(s3_store, exclusive=True, queue="embedded")

    record = json.loads(s3_store._get(LEASE_KEY)[0])
    assert list(record["holders"]) == [lease.token]  # type: ignore[union-attr]
    lease.release()
    assert json.loads(s3_store._get(LEASE_KEY)[0]) == {"holders": {}}
