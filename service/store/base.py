"""What every module store has in common: the records, the errors, the status rules.

A store keeps, per module id (the sha256 of the normalized request), the request, its params, a
status record and, once built, the artifacts with a manifest of their sizes and sha256 digests.
Two implementations share the interface `ModuleStoreBase`: a directory (service/store/directory.py,
the default) and an S3 bucket (service/store/s3.py). Everything that decides how a status changes
(attempts, requeue, recovery, failures) lives here and is written against one primitive,
`update(mid, change)`: an atomic read-modify-write of the status, which the directory store makes
with a per-module `flock` and the object store with a conditional put on the object's ETag.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import socket
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from service.problems import Problem, make_problem

STATES = ("queued", "running", "succeeded", "failed")
IN_FLIGHT = frozenset({"queued", "running"})
_MODULE_ID = re.compile(r"[0-9a-f]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
QUARANTINE = "quarantine"
# Labels of quarantined directories: `<id>-entry-...` (a whole module), `<id>-artifacts-...`.
ENTRY_LABEL = "entry"
ARTIFACTS_LABEL = "artifacts"

log = logging.getLogger("relaycc.store")
# Where the service's code is installed (the directory holding `compiler/` and `service/`).
_CODE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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


class StoreError(Exception):
    """A store failure a client is answered with: `problem` says what happened, never where on
    the server (no path)."""

    def __init__(self, problem: Problem):
        super().__init__(problem.get("detail"))
        self.problem = problem


class StoreUnavailable(StoreError):
    """The store cannot be written: read-only, full, or refused to the service."""


class ArtifactCorrupt(StoreError):
    """An artifact does not match the sha256 recorded when the module was built."""


class CorruptEntry(Exception):
    """A module's status is not a valid record (for the log; clients never see it)."""


class ModuleBusy(Exception):
    """The module has a job queued or running, so it cannot be deleted now."""

    def __init__(self, state: str):
        super().__init__(state)
        self.state = state


class StoreLocked(Exception):
    """Another service holds the store (`StoreLock`); the message is for the operator."""


# Write errors that are the store's condition, not a bug: what a client is told about each.
_UNAVAILABLE = {
    errno.EROFS: "read-only",
    errno.ENOSPC: "full (no space left on its device)",
    errno.EDQUOT: "full (its disk quota is used up)",
    errno.EACCES: "not writable by the service",
    errno.EPERM: "not writable by the service",
}


def unavailable_reason(err: OSError) -> str | None:
    """Why the store cannot be written, for an error of a write; None for any other error."""
    return _UNAVAILABLE.get(err.errno) if err.errno is not None else None


@contextmanager
def writing(what: str) -> Iterator[None]:
    """Turn a write that failed because the store is read-only or full into StoreUnavailable."""
    try:
        yield
    except OSError as err:
        reason = unavailable_reason(err)
        if reason is None:
            raise
        raise StoreUnavailable(make_problem(
            "store-unavailable",
            f"the module store is {reason}, so {what} is not possible now; try again once an "
            "operator has made it writable",
        )) from None

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_NUMBER = (int, float)
_OPTIONAL_NUMBER = (int, float, type(None))
# Members every status has (create() writes them) and the types they may have; `bool` is never
# accepted where a number is meant.
_OPTIONAL_TEXT = (str, type(None))
_REQUIRED: dict[str, tuple[type, ...]] = {
    "id": (str,), "state": (str,), "module_name": _OPTIONAL_TEXT, "target": _OPTIONAL_TEXT,
    "compiler_version": _OPTIONAL_TEXT, "attempts": (int,), "limits": (dict,), "created_at": _NUMBER,
    "artifacts": (list,),
}
_OPTIONAL: dict[str, tuple[type, ...]] = {
    "client": (str,), "queued_at": _OPTIONAL_NUMBER, "started_at": _OPTIONAL_NUMBER,
    "finished_at": _OPTIONAL_NUMBER, "worker": (dict, type(None)), "progress": (dict, type(None)),
    "timings": (dict,), "error": (dict, type(None)), "retryable": (bool,), "rebuild": (bool,),
}


def checked_status(data: object, mid: str) -> Status:
    """`data` as a status record of module `mid`, or CorruptEntry saying what is wrong with it."""

    def wrong(why: str) -> CorruptEntry:
        return CorruptEntry(f"status of module {mid}: {why}")

    if not isinstance(data, dict):
        raise wrong("not a JSON object")
    for fields, required in ((_REQUIRED, True), (_OPTIONAL, False)):
        for key, kinds in fields.items():
            if key not in data:
                if required:
                    raise wrong(f"no member {key!r}")
                continue
            value = data[key]
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise wrong(f"member {key!r} is a {type(value).__name__}")
    if data["id"] != mid:
        raise wrong("its id names another module")
    if data["state"] not in STATES:
        raise wrong(f"unknown state {str(data['state'])[:40]!r}")
    if data["attempts"] < 0:
        raise wrong("a negative attempt count")
    try:
        JobLimits.from_json(data["limits"])
    except (KeyError, TypeError, ValueError, OverflowError):
        raise wrong("limits that are not job limits") from None
    for entry in data["artifacts"]:
        _check_artifact_entry(entry, wrong)
    error = data.get("error")
    if isinstance(error, dict) and not (
        all(isinstance(error.get(k), str) for k in ("type", "title", "detail"))
        and isinstance(error.get("status"), int)
    ):
        raise wrong("an error that is not a problem")
    progress = data.get("progress")
    if isinstance(progress, dict) and not isinstance(progress.get("stage"), str):
        raise wrong("progress without a stage")
    timings = data.get("timings")
    if isinstance(timings, dict) and not all(
        isinstance(v, _NUMBER) and not isinstance(v, bool) for v in timings.values()
    ):
        raise wrong("timings that are not numbers")
    return data


def _check_artifact_entry(entry: object, wrong: Callable[[str], CorruptEntry]) -> None:
    if not isinstance(entry, dict):
        raise wrong("an artifact entry that is not an object")
    name = entry.get("name")
    if not isinstance(name, str) or not _safe_name(name):
        raise wrong("an artifact name that is not a relative path inside the artifacts")
    size = entry.get("bytes")
    if "bytes" in entry and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise wrong(f"artifact {name!r} has no valid size")
    digest = entry.get("sha256")
    if "sha256" in entry and not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
        raise wrong(f"artifact {name!r} has no valid sha256")
    if "content_type" in entry and not isinstance(entry["content_type"], str):
        raise wrong(f"artifact {name!r} has no valid content type")
    entry.setdefault("content_type", content_type(name))


def _safe_name(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and "\\" not in name and "\0" not in name and all(
        part not in ("", ".", "..") for part in parts
    )


def parse_status(data: bytes, mid: str) -> Status:
    """The checked status record in the bytes `data`; CorruptEntry when it is not one."""
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise CorruptEntry(f"status of module {mid}: not UTF-8") from None
    except (ValueError, RecursionError):
        raise CorruptEntry(f"status of module {mid}: not JSON") from None
    return checked_status(value, mid)


def parse_request(data: bytes) -> dict[str, object]:
    """A stored normalized request; ValueError (UnicodeDecodeError is one) when it is not one."""
    request = json.loads(data.decode("utf-8"))
    if not isinstance(request, dict) or not isinstance(request.get("relay"), str):
        raise ValueError("not a request object")
    return request


def new_status(mid: str, normalized: Mapping[str, object], limits: JobLimits, client: str) -> Status:
    """The status record of a job just created: queued, no attempt yet."""
    now = _now()
    return {
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
        "rebuild": False,
        "artifacts": [],
    }


_OUTPUT_REF = re.compile(r"[0-9a-f]{32}")


def new_output_ref() -> str:
    return uuid.uuid4().hex


def check_output_ref(ref: str) -> str:
    """A reference the store made (never a path a caller chose); KeyError otherwise."""
    if not isinstance(ref, str) or _OUTPUT_REF.fullmatch(ref) is None:
        raise KeyError(f"no run output {ref!r}")
    return ref


def json_bytes(value: object) -> bytes:
    """How the store writes JSON: sorted, indented, one final newline."""
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")


def corrupt_problem(mid: str, name: str, what: str) -> tuple[str, Problem]:
    """The log line and the problem of an artifact of `mid` that failed its check."""
    detail = f"module {mid}: its artifact {name!r} {what}"
    return detail, make_problem(
        "artifact-corrupt",
        f"{detail}. Its artifacts were set aside; send the same POST /compile again to build "
        "the module anew",
        module_id=mid,
    )


def mark_for_rebuild(status: Status, problem: Problem) -> None:
    """A built module whose artifacts were set aside: failed, and rebuilt by the next identical
    compile request."""
    _finish(status, "failed", error=problem)
    status.update(retryable=True, rebuild=True, artifacts=[])


def is_json(data: bytes) -> bool:
    """A JSON artifact that matches its digest but does not parse (recorded so by a module
    stored before digests, or by a broken build) is not served as JSON."""
    try:
        json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    return True


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _age_key(status: Status) -> tuple[float, str]:
    created = status["created_at"]
    return (float(created) if isinstance(created, (int, float)) else 0.0, str(status["id"]))


def _runs_elsewhere(running: Mapping[str, object], worker: Mapping[str, object]) -> bool:
    """True when another live process on this host holds the job (a duplicate delivery)."""
    pid = running.get("pid")
    if running.get("host") != worker.get("host") or not isinstance(pid, int):
        return False
    return pid != worker.get("pid") and _pid_alive(pid)


def _finish(status: Status, state: str, error: Problem | None = None) -> None:
    status.update(state=state, finished_at=_now(), error=error, progress=None)


class ModuleStoreBase(ABC):
    """The store interface the API and the workers use, with the status rules both stores share.

    `location` is what a worker is handed to open the same store (service/store/__init__.py
    `open_store`): a directory path or an `s3://bucket/prefix` URL."""

    @property
    @abstractmethod
    def location(self) -> str:
        """How another process names this store (RELAYCC_STORE)."""

    # --- what each store implements -------------------------------------------------------

    @abstractmethod
    def ensure(self) -> None:
        """Create the store if it does not exist (StoreUnavailable when it cannot be written)."""

    @abstractmethod
    def create(
        self, normalized: Mapping[str, object], params: Mapping[str, np.ndarray], limits: JobLimits, client: str,
    ) -> tuple[str, bool]:
        """Store a new queued job for `normalized` unless it exists: (module id, created).
        Of two identical requests at once exactly one creates the job."""

    @abstractmethod
    def status(self, mid: str) -> Status | None:
        """The status of module `mid`; None when it is unknown. A status that is not a valid
        record is quarantined with its module, which is then unknown."""

    @abstractmethod
    def request(self, mid: str) -> dict[str, object]:
        """The stored normalized request; KeyError for an unknown module, and for one whose
        request is not a valid record (it is then quarantined)."""

    @abstractmethod
    def params(self, mid: str) -> dict[str, np.ndarray]:
        """The arrays bound at compile time ({} when there are none)."""

    @abstractmethod
    def update(self, mid: str, change: Callable[[Status], bool]) -> Status:
        """Apply `change` to the status atomically; it returns whether it changed anything (and
        only then is the status written). KeyError for an unknown module."""

    @abstractmethod
    def manifest(self, mid: str) -> list[dict[str, object]] | None:
        """The artifact entries of a built module, each with its sha256; None when the module is
        unknown or not built."""

    @abstractmethod
    def artifact(self, mid: str, name: str) -> tuple[Path, dict[str, object]] | None:
        """A local, verified file of artifact `name` and its manifest entry; only names in the
        module's own manifest resolve. None for another name or a module not built;
        ArtifactCorrupt when the file is not what was stored."""

    @abstractmethod
    def verified_artifacts_dir(self, mid: str) -> Path | None:
        """A local directory holding every artifact of a built module, each checked against
        the manifest: what a run loads. None when the module is unknown or not built;
        ArtifactCorrupt (a StoreError, with the problem) when a file fails."""

    @abstractmethod
    def ids(self) -> Iterator[str]:
        """The ids of the stored modules."""

    @abstractmethod
    def delete(self, mid: str, allowed: Callable[[Status], None] = lambda status: None) -> Status:
        """Remove module `mid` and everything stored for it; its last status. ModuleBusy while a
        job is in flight; `allowed` sees the status and raises to refuse."""

    @abstractmethod
    def new_work_dir(self, mid: str) -> Path:
        """An empty local directory where a worker builds the module's OUTDIR."""

    @abstractmethod
    def succeed(self, mid: str, work: Path, timings: Mapping[str, object]) -> Status:
        """Store the finished OUTDIR `work` as the artifacts and record success with the
        manifest (size and sha256 of every file), unless the job is no longer running."""

    @abstractmethod
    def check_entries(self) -> list[str]:
        """At start-up: quarantine the entries that are not valid modules; their ids."""

    @abstractmethod
    def quarantined(self) -> dict[str, int]:
        """How many modules and artifact sets the quarantine holds, by label."""

    @abstractmethod
    def put_run_output(self, archive: bytes) -> str:
        """Keep the outputs of a run (an .npz archive) until the API takes them; their
        reference (what a Celery task returns instead of the tensors)."""

    @abstractmethod
    def take_run_output(self, ref: str) -> bytes:
        """The outputs stored under `ref`, removed from the store; KeyError when there are none."""

    @abstractmethod
    def writable_problem(self) -> str | None:
        """Why the store cannot be written now (never naming a path), or None: readiness."""

    @abstractmethod
    def _corrupt(self, mid: str, name: str, what: str) -> ArtifactCorrupt:
        """Quarantine the artifacts of `mid` (one of them, `name`, failed its check) and mark the
        module for a rebuild; the error to raise."""

    @abstractmethod
    def _path_rules(self) -> list[tuple[re.Pattern[str], str]]:
        """Where this store's own paths show in a message, and what replaces each, in order."""

    def _remove_leftovers(self) -> None:
        """After a restart: remove what interrupted writes left behind (none by default)."""

    def _remove_module_leftovers(self, mid: str) -> None:
        """After a restart: remove what interrupted builds of `mid` left (none by default)."""

    # --- shared ---------------------------------------------------------------------------

    def without_paths(self, problem: Problem) -> Problem:
        """`problem` with the paths of this store (and of the service's own code) taken out of
        its text: a C compiler's message names `<store>/modules/<id>/work-.../src/x.c`, which
        becomes `src/x.c`, the artifact's name; what else names the store says `<store>`."""
        rules = [*self._path_rules(), (re.compile(re.escape(_CODE_ROOT) + "/"), "")]

        def clean(value: object) -> object:
            if isinstance(value, str):
                for pattern, replacement in rules:
                    value = pattern.sub(replacement, value)
                return value
            if isinstance(value, list):
                return [clean(item) for item in value]
            if isinstance(value, dict):
                return {key: clean(item) for key, item in value.items()}
            return value

        cleaned = clean(problem)
        assert isinstance(cleaned, dict)
        return cleaned

    def recover(self, limits: JobLimits | None = None) -> list[str]:
        """After a restart: jobs left queued or running are queued again (their worker is gone)
        or failed when out of attempts; leftovers of interrupted writes are removed. Requeued
        jobs take `limits`, the restarted service's, when given. Returns the ids to submit
        again."""
        self._remove_leftovers()
        requeue = []
        for mid in list(self.ids()):
            try:
                self._remove_module_leftovers(mid)
                if self._requeue_interrupted(mid, limits):
                    requeue.append(mid)
            except (StoreUnavailable, KeyError) as err:
                # Read-only store: the job stays as it is until the service starts on a
                # writable one; a corrupt entry has been quarantined.
                log.error("module %s not recovered: %s", mid, err)
        return requeue

    def metadata(self, mid: str) -> dict[str, object] | None:
        """The verified metadata report of a built module; None when it is not built."""
        found = self.artifact(mid, "metadata.json")
        if found is None:
            return None
        report = json.loads(found[0].read_bytes())
        if not isinstance(report, dict):
            raise self._corrupt(mid, "metadata.json", "is not a JSON object")
        return report


    def statuses(self) -> Iterator[Status]:
        for mid in self.ids():
            try:
                status = self.status(mid)
            except OSError:
                continue
            if status is not None:
                yield status


    def newest_first(
        self, *, state: str | None = None, client: str | None = None,
        before: tuple[float, str] | None = None, limit: int = 20,
    ) -> tuple[list[Status], bool]:
        """Up to `limit` statuses, newest first (by creation time, then id), of the modules in
        `state` submitted by `client` (None: any), created before the (created_at, id) key
        `before`; and whether more follow. Reads every status: the cost grows with the store."""
        chosen = [
            status for status in self.statuses()
            if (state is None or status["state"] == state) and (client is None or status.get("client") == client)
        ]
        chosen.sort(key=_age_key, reverse=True)
        if before is not None:
            chosen = [status for status in chosen if _age_key(status) < before]
        return chosen[:limit], len(chosen) > limit


    def begin_attempt(self, mid: str, worker: dict[str, object]) -> Status | None:
        """Mark the job running for `worker` and count the attempt; None when there is nothing
        to do: the job is finished, is running in a live process on this host, or has used up
        its attempts (it is then failed)."""
        started = False

        def change(status: Status) -> bool:
            nonlocal started
            started = False  # the change may be tried again on a newer status (object store)
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
            _finish(status, "failed", error=self.without_paths(problem))
            status["retryable"] = retryable
            return True

        return self.update(mid, change)


    def requeue(self, mid: str, limits: JobLimits | None = None) -> bool:
        """Put a job that failed for a reason that may pass (its worker died) back in the queue,
        with `limits` when given, unless it has used up its attempts. A module marked for a
        rebuild (its artifacts failed their integrity check) is queued with fresh attempts.
        True when the caller must submit it again."""

        # Nothing to do for most modules: decided without the lock (which a read-only store
        # may refuse), then again under it.
        current = self.status(mid)
        if current is None or current["state"] != "failed" or not current.get("retryable"):
            return False

        # Only the call that moves the job from failed to queued may resubmit it: a job that is
        # already queued must not be submitted twice (two workers would run it at once).
        requeued = False

        def change(status: Status) -> bool:
            nonlocal requeued
            requeued = False  # the change may be tried again on a newer status (object store)
            old = JobLimits.from_json(status["limits"])
            if status["state"] != "failed" or not status.get("retryable"):
                return False
            rebuild = bool(status.get("rebuild"))
            if not rebuild and int(str(status["attempts"])) >= old.max_attempts:
                return False
            status.update(state="queued", queued_at=_now(), finished_at=None, error=None,
                          retryable=False, rebuild=False, progress=None, worker=None,
                          limits=(limits or old).to_json())
            if rebuild:
                status["attempts"] = 0
            requeued = True
            return True

        self.update(mid, change)
        return requeued


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

