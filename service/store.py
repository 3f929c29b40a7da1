"""The module store: a content-addressed directory shared by the API and every worker.

    <root>/modules/<id>/request.json   the normalized request (what the id is the hash of)
                        params.npz     arrays bound at compile time, when there are any
                        status.json    state, attempts, timings, progress, error, artifact list
                        artifacts/     the OUTDIR of `relaycc compile`, present once succeeded

A module id is the sha256 of the normalized request, which includes the compiler version, so an
identical request always names the same module. A module directory appears in one `rename` of a
fully written temporary directory: two concurrent identical requests race on that rename and
exactly one of them creates the job. Files are replaced atomically (temporary file, then
`os.replace`) and the artifacts directory is renamed into place whole, so a reader (or a
restarted service) never sees a half-written file. Read-modify-write of a status holds an
advisory lock on the module (`fcntl.flock`), since the API and workers both update it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from service.arrays import NO_LIMIT, decode_npz, encode_npz
from service.problems import Problem, make_problem

STATES = ("queued", "running", "succeeded", "failed")
IN_FLIGHT = frozenset({"queued", "running"})
_MODULE_ID = re.compile(r"[0-9a-f]{64}")
_TMP_PREFIX = ".tmp-"
_WORK_PREFIX = "work-"

Status = dict[str, object]

_CONTENT_TYPES = {
    ".json": "application/json",
    ".relay": "text/plain; charset=utf-8",
    ".c": "text/x-c; charset=utf-8",
    ".h": "text/x-c; charset=utf-8",
    ".so": "application/octet-stream",
    ".tar": "application/x-tar",
}


def module_id(normalized: Mapping[str, object]) -> str:
    """The id of a normalized request: sha256 of its canonical JSON text."""
    text = json.dumps(normalized, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def is_module_id(text: str) -> bool:
    return _MODULE_ID.fullmatch(text) is not None


def content_type(name: str) -> str:
    return _CONTENT_TYPES.get(Path(name).suffix, "application/octet-stream")


@dataclass(frozen=True)
class JobLimits:
    """What the API decided a compile job may use; recorded with the job so that every worker,
    embedded or Celery, enforces the same limits."""

    compile_seconds: float
    memory_bytes: int
    max_attempts: int
    start_delay_seconds: float = 0.0
    # How the job is isolated (RELAYCC_SANDBOX) and the build's own rlimits in the sandbox.
    sandbox: str = "auto"
    file_bytes: int = 4 << 30
    processes: int = 256

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @staticmethod
    def from_json(data: object) -> JobLimits:
        if not isinstance(data, dict):
            raise ValueError("job limits must be an object")
        return JobLimits(
            compile_seconds=float(data["compile_seconds"]),
            memory_bytes=int(data["memory_bytes"]),
            max_attempts=int(data["max_attempts"]),
            start_delay_seconds=float(data.get("start_delay_seconds", 0.0)),
            sandbox=str(data.get("sandbox", "auto")),
            file_bytes=int(data.get("file_bytes", 4 << 30)),
            processes=int(data.get("processes", 256)),
        )


def worker_identity(job_pid: int | None = None) -> dict[str, object]:
    """Which process runs a job: the worker (host and pid) and the child doing the work."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "job_pid": job_pid}


def _now() -> float:
    return time.time()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}.{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_json(path: Path, value: object) -> None:
    _write_atomic(path, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ModuleStore:
    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.modules = self.root / "modules"

    def ensure(self) -> None:
        self.modules.mkdir(parents=True, exist_ok=True)

    def module_dir(self, mid: str) -> Path | None:
        """The directory of module `mid`, or None for an id that is malformed or unknown."""
        if not is_module_id(mid):
            return None
        path = self.modules / mid
        return path if (path / "status.json").is_file() else None

    def _dir(self, mid: str) -> Path:
        path = self.module_dir(mid)
        if path is None:
            raise KeyError(f"no module {mid}")
        return path

    # --- creation --------------------------------------------------------------------------

    def create(
        self,
        normalized: Mapping[str, object],
        params: Mapping[str, np.ndarray],
        limits: JobLimits,
        client: str,
    ) -> tuple[str, bool]:
        """Store a new queued job for `normalized` unless it exists: (module id, created)."""
        mid = module_id(normalized)
        final = self.modules / mid
        if (final / "status.json").is_file():
            return mid, False
        self.ensure()
        tmp = self.modules / f"{_TMP_PREFIX}{mid}.{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            _write_json(tmp / "request.json", normalized)
            if params:
                _write_atomic(tmp / "params.npz", encode_npz(params))
            now = _now()
            _write_json(
                tmp / "status.json",
                {
                    "id": mid,
                    "state": "queued",
                    "module_name": normalized.get("module_name"),
                    "target": normalized.get("target"),
                    "compiler_version": normalized.get("compiler_version"),
                    "attempts": 0,
                    "limits": limits.to_json(),
                    "client": client,
                    "created_at": now,
                    "queued_at": now,
                    "started_at": None,
                    "finished_at": None,
                    "worker": None,
                    "progress": None,
                    "timings": {},
                    "error": None,
                    "retryable": False,
                    "artifacts": [],
                },
            )
            try:
                os.rename(tmp, final)
            except OSError:
                # Someone else's rename won: their job is the one that runs.
                return mid, False
            return mid, True
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # --- reading ---------------------------------------------------------------------------

    def status(self, mid: str) -> Status | None:
        path = self.module_dir(mid)
        if path is None:
            return None
        status: Status = json.loads((path / "status.json").read_text(encoding="utf-8"))
        return status

    def request(self, mid: str) -> dict[str, object]:
        request: dict[str, object] = json.loads((self._dir(mid) / "request.json").read_text(encoding="utf-8"))
        return request

    def params(self, mid: str) -> dict[str, np.ndarray]:
        path = self._dir(mid) / "params.npz"
        if not path.is_file():
            return {}
        # Written by the store itself after the API checked it.
        return decode_npz(path.read_bytes(), "stored params", max_elements=NO_LIMIT)

    def artifacts_dir(self, mid: str) -> Path:
        return self._dir(mid) / "artifacts"

    def artifact(self, mid: str, name: str) -> tuple[Path, dict[str, object]] | None:
        """The file and list entry of artifact `name`; only names in the module's own list
        resolve, so a client never chooses a path."""
        status = self.status(mid)
        if status is None or status.get("state") != "succeeded":
            return None
        entries = status.get("artifacts")
        assert isinstance(entries, list)
        for entry in entries:
            if entry["name"] == name:
                return self.artifacts_dir(mid) / entry["name"], entry
        return None

    def ids(self) -> Iterator[str]:
        if not self.modules.is_dir():
            return
        for entry in os.scandir(self.modules):
            if is_module_id(entry.name):
                yield entry.name

    def statuses(self) -> Iterator[Status]:
        for mid in self.ids():
            try:
                status = self.status(mid)
            except (OSError, json.JSONDecodeError):
                continue
            if status is not None:
                yield status

    # --- updates ---------------------------------------------------------------------------

    @contextmanager
    def _locked(self, mid: str) -> Iterator[Path]:
        path = self._dir(mid)
        fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield path
        finally:
            os.close(fd)

    def update(self, mid: str, change: Callable[[Status], bool]) -> Status:
        """Apply `change` to the status under the module's lock; it returns whether it changed
        anything (and only then is the status written)."""
        with self._locked(mid) as path:
            status: Status = json.loads((path / "status.json").read_text(encoding="utf-8"))
            if change(status):
                _write_json(path / "status.json", status)
            return status

    def begin_attempt(self, mid: str, worker: dict[str, object]) -> Status | None:
        """Mark the job running for `worker` and count the attempt; None when there is nothing
        to do: the job is finished, is running in a live process on this host, or has used up
        its attempts (it is then failed)."""
        started = False

        def change(status: Status) -> bool:
            nonlocal started
            if status["state"] not in IN_FLIGHT:
                return False
            running = status.get("worker")
            if status["state"] == "running" and isinstance(running, dict) and _runs_elsewhere(running, worker):
                return False
            attempts = int(str(status["attempts"])) + 1
            limits = JobLimits.from_json(status["limits"])
            if attempts > limits.max_attempts:
                _finish(status, "failed", error=make_problem(
                    "worker-died",
                    f"gave up after {limits.max_attempts} attempts: the worker process died during each of them",
                ))
                return True
            status.update(state="running", attempts=attempts, started_at=_now(), worker=worker,
                          progress={"stage": "starting"}, error=None, retryable=False)
            started = True
            return True

        status = self.update(mid, change)
        return status if started else None

    def set_progress(self, mid: str, stage: str, **details: object) -> None:
        def change(status: Status) -> bool:
            if status["state"] != "running":
                return False
            status["progress"] = {"stage": stage, **details}
            return True

        self.update(mid, change)

    def set_job_pid(self, mid: str, job_pid: int) -> None:
        def change(status: Status) -> bool:
            worker = status.get("worker")
            if status["state"] != "running" or not isinstance(worker, dict):
                return False
            worker["job_pid"] = job_pid
            return True

        self.update(mid, change)

    def new_work_dir(self, mid: str) -> Path:
        """An empty directory next to `artifacts/` (same file system, so it can be renamed)."""
        work = self._dir(mid) / f"{_WORK_PREFIX}{uuid.uuid4().hex}"
        work.mkdir()
        return work

    def succeed(self, mid: str, work: Path, timings: Mapping[str, object]) -> Status:
        """Move the finished OUTDIR `work` into place and record success with its file list."""
        with self._locked(mid) as path:
            status: Status = json.loads((path / "status.json").read_text(encoding="utf-8"))
            if status["state"] != "running":
                return status
            final = path / "artifacts"
            if final.exists():
                # Left by an attempt that died between the rename and the status write.
                stale = path / f"{_WORK_PREFIX}stale-{uuid.uuid4().hex}"
                os.rename(final, stale)
                shutil.rmtree(stale, ignore_errors=True)
            _fsync_tree(work)
            os.rename(work, final)
            status["artifacts"] = _manifest(final)
            status["timings"] = dict(timings)
            _finish(status, "succeeded")
            _write_json(path / "status.json", status)
            return status

    def fail(self, mid: str, problem: Problem, *, retryable: bool = False, only_if_pid: int | None = None) -> Status:
        """Record a failed job. With `only_if_pid`, only a job still in flight on that worker
        process is failed (a death report about a worker that has moved on changes nothing)."""

        def change(status: Status) -> bool:
            if status["state"] not in IN_FLIGHT:
                return False
            if only_if_pid is not None:
                worker = status.get("worker")
                if status["state"] == "running" and isinstance(worker, dict) and worker.get("pid") != only_if_pid:
                    return False
            _finish(status, "failed", error=problem)
            status["retryable"] = retryable
            return True

        return self.update(mid, change)

    def requeue(self, mid: str, limits: JobLimits | None = None) -> bool:
        """Put a job that failed for a reason that may pass (its worker died) back in the queue,
        with `limits` when given, unless it has used up its attempts. True when the caller must
        submit it again."""

        # Only the call that moves the job from failed to queued may resubmit it: a job that is
        # already queued must not be submitted twice (two workers would run it at once).
        requeued = False

        def change(status: Status) -> bool:
            nonlocal requeued
            old = JobLimits.from_json(status["limits"])
            if status["state"] != "failed" or not status.get("retryable"):
                return False
            if int(str(status["attempts"])) >= old.max_attempts:
                return False
            status.update(state="queued", queued_at=_now(), finished_at=None, error=None,
                          retryable=False, progress=None, worker=None, limits=(limits or old).to_json())
            requeued = True
            return True

        self.update(mid, change)
        return requeued

    def recover(self, limits: JobLimits | None = None) -> list[str]:
        """After a restart: jobs left queued or running are queued again (their worker is gone)
        or failed when out of attempts; leftovers of interrupted writes are removed. Requeued
        jobs take `limits`, the restarted service's, when given. Returns the ids to submit
        again."""
        if not self.modules.is_dir():
            return []
        for entry in os.scandir(self.modules):
            if entry.name.startswith(_TMP_PREFIX):
                shutil.rmtree(entry.path, ignore_errors=True)
        requeue = []
        for mid in self.ids():
            path = self.module_dir(mid)
            if path is None:
                continue
            for entry in os.scandir(path):
                if entry.name.startswith((_WORK_PREFIX, _TMP_PREFIX)):
                    _remove(Path(entry.path))
            if self._requeue_interrupted(mid, limits):
                requeue.append(mid)
        return requeue

    def _requeue_interrupted(self, mid: str, new_limits: JobLimits | None) -> bool:
        def change(status: Status) -> bool:
            if status["state"] not in IN_FLIGHT:
                return False
            limits = new_limits or JobLimits.from_json(status["limits"])
            status["limits"] = limits.to_json()
            if status["state"] == "running" and int(str(status["attempts"])) >= limits.max_attempts:
                _finish(status, "failed", error=make_problem(
                    "worker-died",
                    f"gave up after {limits.max_attempts} attempts: the service stopped during each of them",
                ))
                return True
            status.update(state="queued", worker=None, progress=None)
            return True

        return self.update(mid, change)["state"] == "queued"


def _runs_elsewhere(running: Mapping[str, object], worker: Mapping[str, object]) -> bool:
    """True when another live process on this host holds the job (a duplicate delivery)."""
    pid = running.get("pid")
    if running.get("host") != worker.get("host") or not isinstance(pid, int):
        return False
    return pid != worker.get("pid") and _pid_alive(pid)


def _finish(status: Status, state: str, error: Problem | None = None) -> None:
    status.update(state=state, finished_at=_now(), error=error, progress=None)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _manifest(root: Path) -> list[dict[str, object]]:
    entries = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in name.split("/")):
            continue  # temporary files of the compiler, never artifacts
        digest = hashlib.sha256()
        with open(path, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
        entries.append({
            "name": name,
            "bytes": path.stat().st_size,
            "sha256": digest.hexdigest(),
            "content_type": content_type(name),
        })
    return entries


def _fsync_tree(root: Path) -> None:
    """Flush the artifacts to disk before they become visible under their final name."""
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
