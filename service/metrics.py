"""The service's Prometheus metrics, recorded where things happen, in whichever process they happen.

Every process of a service (the API processes, their embedded workers, Celery workers) writes
its numbers to its own files in one directory, prometheus_client's multiprocess mode; a scrape
adds up the files (service/api/metrics.py). A scrape therefore costs the same however many
modules the store holds: nothing here reads the store, except once at start-up to learn how
many jobs are in each state.

The directory is shared by everything that serves one store: RELAYCC_METRICS_DIR, or by default
a directory in the system's temporary directory named after the store. The first process to
attach to it while no other does (it gets the directory's lock exclusively) empties it and
counts the store's jobs; the others add to what is there. The lock is then held shared for the
life of the process, so a process that starts later never empties the files of a live one; the
last to leave removes the directory.

Until a process attaches (the CLI, a unit test of the store), recording does nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Counter, Gauge, Histogram, values

ENV = "PROMETHEUS_MULTIPROC_DIR"
_LOCK_NAME = ".lock"
JOB_STATES = ("queued", "running", "succeeded", "failed")

COMPILE_SECONDS_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
RUN_SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
QUEUE_SECONDS_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
HTTP_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)


class _Metrics:
    def __init__(self) -> None:
        # Not registered anywhere: a scrape reads the files, never these objects.
        self.jobs = Gauge(
            "relaycc_jobs", "Compile jobs in the store by state.", ["state"],
            # `sum` over every process that ever wrote, dead ones included: a job queued by
            # the API (+1 queued) and started by a worker (-1 queued, +1 running) must still
            # count once that worker has exited. `livesum` would forget the worker's half.
            multiprocess_mode="sum", registry=None,
        )
        self.queue_seconds = Histogram(
            "relaycc_queue_seconds", "Time a compile job waited in the queue before a worker started it.",
            buckets=QUEUE_SECONDS_BUCKETS, registry=None,
        )
        self.compile_seconds = Histogram(
            "relaycc_compile_seconds", "Time a worker spent building a module (succeeded jobs; queue time excluded).",
            buckets=COMPILE_SECONDS_BUCKETS, registry=None,
        )
        self.run_seconds = Histogram(
            "relaycc_run_seconds", "Time a worker spent on a model run: loading the library and every repeat.",
            buckets=RUN_SECONDS_BUCKETS, registry=None,
        )
        self.http_requests = Counter(
            "relaycc_http_requests", "HTTP requests answered, by route template, method and status.",
            ["route", "method", "status"], registry=None,
        )
        self.http_seconds = Histogram(
            "relaycc_http_request_seconds", "Time to answer an HTTP request, by route template.",
            ["route"], buckets=HTTP_SECONDS_BUCKETS, registry=None,
        )
        self.cache_hits = Counter(
            "relaycc_cache_hits", "Compile requests answered with a module that already existed.", registry=None,
        )
        self.compile_requests = Counter(
            "relaycc_compile_requests", "Compile requests admitted or refused.", registry=None,
        )
        self.runs = Counter("relaycc_runs", "Model runs requested.", registry=None)


_current: _Metrics | None = None
_directory: Path | None = None


def default_directory(store: Path | str) -> Path:
    """Where the processes serving `store` (a directory, or an s3:// URL) on this machine meet,
    unless told otherwise."""
    key = store if isinstance(store, str) and store.startswith("s3://") else str(Path(store).resolve())
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"relaycc-metrics-{digest}"


@dataclass
class Attachment:
    """A process's hold on the metrics directory; `first` when it emptied it."""

    directory: Path
    first: bool
    _fd: int | None

    def release(self) -> None:
        """Let go of the directory; the last process to leave removes it (the next to start
        would empty it anyway, and a test run must not leave one per store in /tmp)."""
        if self._fd is None:
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            shutil.rmtree(self.directory, ignore_errors=True)
        finally:
            os.close(self._fd)
            self._fd = None


def attach(directory: Path) -> Attachment:
    """Join the metrics of the processes that share `directory`, emptying it when none is alive."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        first = True
    except BlockingIOError:
        first = False
    if first:
        for entry in os.scandir(directory):
            if entry.name.endswith(".db"):
                os.unlink(entry.path)
    fcntl.flock(fd, fcntl.LOCK_SH)
    use(directory)
    return Attachment(directory, first, fd)


def use(directory: Path) -> None:
    """Record this process's metrics in `directory` (a worker of a process that attached)."""
    global _current, _directory
    os.environ[ENV] = str(directory)
    # prometheus_client picks its value class when it is first imported, from the environment
    # of that moment; a process learns its directory later (and a test process learns a new one
    # for every service it starts), so the class is set here, with files of its own.
    values.close_all_multiprocess_files()
    values.ValueClass = values.MultiProcessValue()
    _directory = directory
    _current = _Metrics()


def directory() -> Path | None:
    return _directory


def set_job_counts(counts: dict[str, int]) -> None:
    """The store's jobs by state at start-up, recorded by the process that emptied the directory."""
    if _current is not None:
        for state in JOB_STATES:
            _current.jobs.labels(state).inc(counts.get(state, 0))


def count_states(states: Iterable[str]) -> dict[str, int]:
    counts = dict.fromkeys(JOB_STATES, 0)
    for state in states:
        if state in counts:
            counts[state] += 1
    return counts


def job_moved(before: str | None, after: str | None) -> None:
    """A job changed state (None: it did not exist, or no longer does)."""
    if _current is None or before == after:
        return
    if before in JOB_STATES:
        _current.jobs.labels(before).dec()
    if after in JOB_STATES:
        _current.jobs.labels(after).inc()


def queued_for(seconds: float) -> None:
    if _current is not None:
        _current.queue_seconds.observe(max(seconds, 0.0))


def compiled_in(seconds: float) -> None:
    if _current is not None:
        _current.compile_seconds.observe(seconds)


def ran_in(seconds: float) -> None:
    if _current is not None:
        _current.run_seconds.observe(seconds)


def answered(route: str, method: str, status: int, seconds: float) -> None:
    if _current is not None:
        _current.http_requests.labels(route, method, str(status)).inc()
        _current.http_seconds.labels(route).observe(seconds)


def cache_hit() -> None:
    if _current is not None:
        _current.cache_hits.inc()


def compile_requested() -> None:
    if _current is not None:
        _current.compile_requests.inc()


def run_requested() -> None:
    if _current is not None:
        _current.runs.inc()
