from __future__ import annotations

import errno
import io
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from service.arrays import encode_npz
from service.jobs.worker import RunFailed
from service.jobs.normalize import checked_options, normal_form
from service.jobs.queue import EmbeddedQueue
from service.store.module_store import JobLimits, ModuleStore, Status
from tests.service.support import gone_within, small_relay


def stored(store: ModuleStore, variant: int, delay: float = 0.0) -> str:
    normal = normal_form(small_relay(variant), checked_options("c", "default", {}), {})
    limits = JobLimits(compile_seconds=60.0, memory_bytes=4 << 30, max_attempts=3, start_delay_seconds=delay)
    mid, _ = store.create(normal, {}, limits, "ip:test")
    return mid


def wait_for(store: ModuleStore, mid: str, done: Callable[[Status], bool], timeout: float = 60.0) -> Status:
    deadline = time.monotonic() + timeout
    while True:
        status = store.status(mid)
        assert status is not None
        if done(status) or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def finished(status: Status) -> bool:
    return status["state"] in ("succeeded", "failed")


@pytest.fixture
def store(tmp_path: Path) -> ModuleStore:
    store = ModuleStore(tmp_path)
    store.ensure()
    return store


@pytest.fixture
def queue(store: ModuleStore) -> Iterator[EmbeddedQueue]:
    queue = EmbeddedQueue(store.root, 1, compile_seconds=60.0, run_seconds=30.0)
    yield queue
    queue.close()


def test_a_queued_compile_job_runs_in_a_worker_process(store: ModuleStore, queue: EmbeddedQueue) -> None:
    mid = stored(store, 1)

    queue.submit_compile(mid)
    status = wait_for(store, mid, finished)

    assert status["state"] == "succeeded", status["error"]
    assert status["worker"]["pid"] != os.getpid()
    assert status["worker"]["pid"] in queue.worker_pids()


def test_a_killed_worker_fails_only_its_job_and_the_next_job_succeeds(
    store: ModuleStore, queue: EmbeddedQueue
) -> None:
    doomed, waiting = stored(store, 2, delay=60.0), stored(store, 3)
    queue.submit_compile(doomed)
    queue.submit_compile(waiting)
    running = wait_for(store, doomed, lambda s: s["state"] == "running" and s["worker"]["job_pid"] is not None)
    assert queue.depth() == 1

    os.kill(running["worker"]["pid"], signal.SIGKILL)

    failed = wait_for(store, doomed, finished)
    assert failed["state"] == "failed"
    assert failed["error"]["type"] == "https://relaycc.dev/problems/worker-died"
    assert "SIGKILL" in failed["error"]["detail"]
    assert failed["retryable"] is True
    succeeded = wait_for(store, waiting, finished)
    assert succeeded["state"] == "succeeded", succeeded["error"]
    assert succeeded["worker"]["pid"] != running["worker"]["pid"]
    # The killed worker's job process went with it.
    assert gone_within(running["worker"]["job_pid"], 5)


def test_a_run_job_answers_through_its_future(store: ModuleStore, queue: EmbeddedQueue) -> None:
    mid = stored(store, 4)
    queue.submit_compile(mid)
    assert wait_for(store, mid, finished)["state"] == "succeeded"
    x = np.full((2, 3), -1.0, "float32")
    y = np.full((2, 3), 3.0, "float32")

    archive = queue.submit_run(mid, encode_npz({"x": x, "y": y}), repeat=2, seconds=30, memory_bytes=4 << 30).result(60)

    with np.load(io.BytesIO(archive)) as result:
        np.testing.assert_allclose(result["out0"], np.full((2, 3), 2.0))


def test_a_run_goes_ahead_of_compiles_queued_before_it(store: ModuleStore, queue: EmbeddedQueue) -> None:
    built = stored(store, 5)
    queue.submit_compile(built)
    assert wait_for(store, built, finished)["state"] == "succeeded"
    busy, later = stored(store, 6, delay=1.0), stored(store, 7)
    queue.submit_compile(busy)
    wait_for(store, busy, lambda s: s["state"] == "running")
    queue.submit_compile(later)
    x = np.zeros((2, 3), "float32")

    queue.submit_run(built, encode_npz({"x": x, "y": x}), repeat=1, seconds=30, memory_bytes=4 << 30).result(60)

    # The one worker took the run as soon as the first compile let go of it: the later compile may
    # have started by the time the answer reaches us, but it cannot have finished before it.
    assert store.status(later)["state"] in ("queued", "running")
    assert wait_for(store, later, finished)["state"] == "succeeded"


def test_a_failed_run_raises_run_failed_with_the_problem(store: ModuleStore, queue: EmbeddedQueue) -> None:
    mid = stored(store, 5)
    queue.submit_compile(mid)
    assert wait_for(store, mid, finished)["state"] == "succeeded"

    future = queue.submit_run(mid, encode_npz({"x": np.zeros((3, 3), "float32")}), repeat=1, seconds=30,
                              memory_bytes=4 << 30)

    with pytest.raises(RunFailed) as raised:
        future.result(60)
    assert raised.value.problem["type"].endswith("/input-error")


def test_a_closed_queue_refuses_jobs(store: ModuleStore) -> None:
    queue = EmbeddedQueue(store.root, 1, compile_seconds=60.0, run_seconds=30.0)
    queue.close()

    assert not queue.ready()
    with pytest.raises(RuntimeError, match="closed"):
        queue.submit_compile("0" * 64)


def test_a_slot_outlives_a_worker_death_it_cannot_record_in_a_full_store(
    store: ModuleStore, queue: EmbeddedQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    doomed = stored(store, 60, delay=30.0)
    queue.submit_compile(doomed)
    running = wait_for(store, doomed, lambda s: s["state"] == "running")
    following = stored(store, 61)
    # Writes from this process (the API's) now fail as on a full disk; the workers' do not.
    real_replace = os.replace

    def full(src: object, dst: object) -> None:
        if str(dst).endswith("status.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", full)
    os.kill(int(running["worker"]["pid"]), signal.SIGKILL)
    queue.submit_compile(following)

    status = wait_for(store, following, finished)

    assert status["state"] == "succeeded", status["error"]
    assert queue.ready()
    assert store.status(doomed)["state"] == "running"  # left for recovery, not lost
