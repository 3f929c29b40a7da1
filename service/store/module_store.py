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

    <root>/service.lock     held by every API process for its life (`StoreLock`)
    <root>/quarantine/      entries and artifacts set aside because they were corrupt
    <root>/deleted/         modules being deleted (renamed out of modules/, then removed)

Integrity: `succeed` records the size and sha256 of every artifact in the status (the artifact
manifest). An artifact is checked against it each time it is served or loaded for a run (a
verified file is remembered by its identity, so an unchanged file is hashed once per process).
A mismatch moves the module's artifacts to the quarantine and fails the module with
`artifact-corrupt`, marked for a rebuild that the next identical compile request queues.

Every status read checks the record's shape; a module whose status is not a valid record
(garbage, not UTF-8, missing or mistyped members, a directory without status) is moved to the
quarantine, at start-up or when it is read, and is then unknown: an identical request builds it
anew. Writes that fail because the store is read-only or full raise `StoreUnavailable`.
Errors raised to clients (`StoreError.problem`) never name a path on the server.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import stat as stat_module
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from service import metrics
from service.arrays import NO_LIMIT, decode_npz, encode_npz
from service.problems import Problem, make_problem

STATES = ("queued", "running", "succeeded", "failed")
IN_FLIGHT = frozenset({"queued", "running"})
_MODULE_ID = re.compile(r"[0-9a-f]{64}")
_TMP_PREFIX = ".tmp-"
_WORK_PREFIX = "work-"
_SHA256 = re.compile(r"[0-9a-f]{64}")
QUARANTINE = "quarantine"
# Modules on their way out: renamed here whole, then removed.
DELETED = "deleted"
LOCK_FILE = "service.lock"
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


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}.{uuid.uuid4().hex}")
    try:
        with writing("storing the change"):
            with open(tmp, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(tmp, path)
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only store has no temporary file to remove


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


# Artifacts verified in this process, by file identity: (path, device, inode, size, mtime_ns,
# ctime_ns) → the sha256 they matched. Any write changes the size, the mtime or (even when
# both are put back) the ctime, which no unprivileged process can set, so a changed file is
# hashed again; an unchanged one is not, which matters for a large library downloaded often.
_VERIFIED: OrderedDict[tuple[object, ...], str] = OrderedDict()
_VERIFIED_LOCK = threading.Lock()
_VERIFIED_MAX = 4096


def _identity(path: Path, st: os.stat_result) -> tuple[object, ...]:
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _sha256_of(stream_fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(stream_fd, 1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def _matches(path: Path, expected: str, expected_bytes: object) -> bool:
    """Whether the regular file at `path` (not a symbolic link) has the sha256 `expected`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False  # missing, a symbolic link, unreadable: not the artifact that was stored
    try:
        before = os.fstat(fd)
        if not stat_module.S_ISREG(before.st_mode):
            return False
        if isinstance(expected_bytes, int) and before.st_size != expected_bytes:
            return False
        key = _identity(path, before)
        with _VERIFIED_LOCK:
            if _VERIFIED.get(key) == expected:
                _VERIFIED.move_to_end(key)
                return True
        digest = _sha256_of(fd)
        # A file written while it was hashed is not the one that was hashed.
        if digest != expected or _identity(path, os.fstat(fd)) != key:
            return False
        with _VERIFIED_LOCK:
            _VERIFIED[key] = expected
            while len(_VERIFIED) > _VERIFIED_MAX:
                _VERIFIED.popitem(last=False)
        return True
    finally:
        os.close(fd)


def _digest_file(path: Path) -> tuple[str, int] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        return (_sha256_of(fd), st.st_size) if stat_module.S_ISREG(st.st_mode) else None
    finally:
        os.close(fd)


class ModuleStore:
    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.modules = self.root / "modules"
        self.quarantine = self.root / QUARANTINE

    def ensure(self) -> None:
        with writing("creating the store"):
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
        with writing("storing a new module"):
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
                    "rebuild": False,
                    "artifacts": [],
                },
            )
            for _ in range(2):
                try:
                    os.rename(tmp, final)
                    metrics.job_moved(None, "queued")
                    return mid, True
                except OSError as err:
                    if unavailable_reason(err) is not None:
                        with writing("storing a new module"):
                            raise
                    # Someone else's rename won (their job is the one that runs), or a module
                    # directory without a status is in the way: set it aside, then try again.
                    if (final / "status.json").is_file() or not final.exists():
                        return mid, False
                    self._quarantine(final, f"{mid}-{ENTRY_LABEL}", "a module directory without a status")
            return mid, False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # --- reading ---------------------------------------------------------------------------

    def status(self, mid: str) -> Status | None:
        """The status of module `mid`; None when it is unknown. A status that is not a valid
        record is quarantined with its module, which is then unknown."""
        path = self.module_dir(mid)
        if path is None:
            return None
        try:
            return _read_status(path, mid)
        except FileNotFoundError:
            return None  # quarantined or never finished appearing
        except CorruptEntry as err:
            self._quarantine_entry(mid, str(err))
            return None

    def request(self, mid: str) -> dict[str, object]:
        """The stored normalized request; KeyError for an unknown module, and for one whose
        request is not a valid record (it is then quarantined)."""
        path = self._dir(mid)
        try:
            request = json.loads((path / "request.json").read_bytes().decode("utf-8"))
            if not isinstance(request, dict) or not isinstance(request.get("relay"), str):
                raise ValueError("not a request object")
        except FileNotFoundError:
            raise KeyError(f"no module {mid}") from None
        except (OSError, ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
            self._quarantine_entry(mid, f"request of module {mid}: {type(err).__name__}")
            raise KeyError(f"no module {mid}") from None
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
        """The verified file and manifest entry of artifact `name`; only names in the module's
        own manifest resolve, so a client never chooses a path. None for another name or a
        module that is not built; ArtifactCorrupt when the file is not what was stored."""
        status = self.status(mid)
        if status is None or status["state"] != "succeeded":
            return None
        entries = self._digested(mid, status)
        for entry in entries:
            if entry["name"] == name:
                path = self._verified(mid, entry)
                if entry["content_type"] == "application/json":
                    _check_json(path, lambda: self._corrupt(mid, name, "is not JSON"))
                return path, entry
        return None

    def manifest(self, mid: str) -> list[dict[str, object]] | None:
        """The artifact entries of a built module, each with its sha256; None when the module is
        unknown or not built."""
        status = self.status(mid)
        if status is None or status["state"] != "succeeded":
            return None
        return self._digested(mid, status)

    def verified_artifacts_dir(self, mid: str) -> Path | None:
        """The artifacts directory of a built module after checking every file in it against the
        manifest: what a run loads. None when the module is unknown or not built (the caller
        says so); ArtifactCorrupt (a StoreError, with the problem) when a file fails."""
        status = self.status(mid)
        if status is None or status["state"] != "succeeded":
            return None
        for entry in self._digested(mid, status):
            path = self._verified(mid, entry)
            if entry["name"] == "metadata.json":
                _check_json(path, lambda: self._corrupt(mid, "metadata.json", "is not JSON"))
        return self.modules / mid / "artifacts"

    def metadata(self, mid: str) -> dict[str, object] | None:
        """The verified metadata report of a built module; None when it is not built."""
        found = self.artifact(mid, "metadata.json")
        if found is None:
            return None
        report = json.loads(found[0].read_bytes())
        if not isinstance(report, dict):
            raise self._corrupt(mid, "metadata.json", "is not a JSON object")
        return report

    def _verified(self, mid: str, entry: Mapping[str, object]) -> Path:
        name = str(entry["name"])
        root = self.modules / mid / "artifacts"
        path = root / name
        # The module directory, its artifacts directory or a directory inside replaced by a
        # symbolic link leads out of the store.
        real_root = os.path.realpath(root)
        inside = real_root == os.path.join(os.path.realpath(self.modules), mid, "artifacts") and (
            os.path.realpath(path).startswith(real_root + os.sep)
        )
        if not inside or not _matches(path, str(entry["sha256"]), entry.get("bytes")):
            raise self._corrupt(mid, name, "does not match the sha256 recorded when it was built")
        return path

    def _digested(self, mid: str, status: Status) -> list[dict[str, object]]:
        """The manifest with a sha256 in every entry.

        A module stored before digests were recorded has entries without one. Its artifacts
        are hashed when first seen and the digests recorded (trust on first use) instead of
        rebuilding it: a rebuild runs today's compiler under an id that names the compiler
        version of the request, so it could put other bytes under the same content address,
        and the files were written by the service itself, in a store only it writes. From then
        on they are checked like any other module's."""
        entries = status["artifacts"]
        assert isinstance(entries, list)
        if all("sha256" in entry for entry in entries):
            return entries
        root = self.modules / mid / "artifacts"
        digests: dict[str, tuple[str, int]] = {}
        for entry in entries:
            if "sha256" not in entry:
                found = _digest_file(root / entry["name"])
                if found is None:
                    raise self._corrupt(mid, entry["name"], "is missing")
                digests[entry["name"]] = found

        def record(current: Status) -> bool:
            changed = False
            for item in current["artifacts"] if isinstance(current["artifacts"], list) else []:
                if "sha256" not in item and item.get("name") in digests:
                    item["sha256"], item["bytes"] = digests[item["name"]]
                    changed = True
            return changed

        try:
            self.update(mid, record)
        except (StoreUnavailable, KeyError) as err:
            log.warning("module %s: the digests of its artifacts were not recorded: %s", mid, err)
        for entry in entries:
            if entry["name"] in digests:
                entry["sha256"], entry["bytes"] = digests[entry["name"]]
        return entries

    def _corrupt(self, mid: str, name: str, what: str) -> ArtifactCorrupt:
        """Quarantine the artifacts of `mid` (one of them, `name`, failed its check) and mark the
        module for a rebuild; the error to raise."""
        detail = f"module {mid}: its artifact {name!r} {what}"
        log.error("%s; its artifacts are quarantined and the module is marked for a rebuild", detail)
        problem = make_problem(
            "artifact-corrupt",
            f"{detail}. Its artifacts were set aside; send the same POST /compile again to build "
            "the module anew",
            module_id=mid,
        )

        def change(status: Status) -> bool:
            if status["state"] != "succeeded":
                return False  # another reader got here first
            artifacts = self.modules / mid / "artifacts"
            if os.path.lexists(artifacts):
                self._quarantine(artifacts, f"{mid}-{ARTIFACTS_LABEL}", detail)
            _finish(status, "failed", error=problem)
            status.update(retryable=True, rebuild=True, artifacts=[])
            return True

        try:
            self.update(mid, change)
        except (StoreUnavailable, KeyError) as err:
            log.error("module %s: could not quarantine its artifacts: %s", mid, err)
        return ArtifactCorrupt(problem)

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
            except OSError:
                continue
            if status is not None:
                yield status

    # --- deletion --------------------------------------------------------------------------

    def delete(self, mid: str, allowed: Callable[[Status], None] = lambda status: None) -> Status:
        """Remove module `mid` and everything stored for it; returns its last status. `allowed`
        sees the status under the module's lock and raises to refuse (the caller's owner check).

        A job queued or running is ModuleBusy: its worker is writing into the module, and a
        queued job's worker would find nothing. Otherwise the module directory is renamed out
        of `modules/` while the lock is held (the module is unknown from that instant, and an
        identical compile request creates it anew), then removed. A run already started keeps
        the library it has loaded; one about to load it finds no module."""
        with self._locked(mid) as path:
            status = self._read_locked(mid, path)
            if status["state"] in IN_FLIGHT:
                raise ModuleBusy(str(status["state"]))
            allowed(status)
            gone = self.root / DELETED / f"{mid}-{uuid.uuid4().hex}"
            with writing("deleting the module"):
                gone.parent.mkdir(parents=True, exist_ok=True)
                os.rename(path, gone)
            metrics.job_moved(str(status["state"]), None)
        shutil.rmtree(gone, ignore_errors=True)
        return status

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

    # --- quarantine ------------------------------------------------------------------------

    def check_entries(self) -> list[str]:
        """At start-up: quarantine every module entry that is not a valid module (a status that
        is not a valid record or cannot be read, a directory without status, a file where a
        directory should be). Returns the ids set aside; each is logged."""
        if not self.modules.is_dir():
            return []
        quarantined = []
        for entry in os.scandir(self.modules):
            if not is_module_id(entry.name):
                continue
            mid = entry.name
            if not entry.is_dir(follow_symlinks=False):
                why = "not a directory"
            elif not os.path.lexists(os.path.join(entry.path, "status.json")):
                why = "a module directory without a status"
            else:
                try:
                    _read_status(Path(entry.path), mid)
                    continue
                except FileNotFoundError:
                    continue
                except CorruptEntry as err:
                    why = str(err)
            if self._quarantine_entry(mid, why):
                quarantined.append(mid)
        return quarantined

    def _quarantine_entry(self, mid: str, why: str) -> bool:
        try:
            return self._quarantine(self.modules / mid, f"{mid}-{ENTRY_LABEL}", why) is not None
        except StoreUnavailable:
            log.error("module %s is corrupt (%s) but the store is not writable: left in place", mid, why)
            return False

    def _quarantine(self, source: Path, label: str, why: str) -> Path | None:
        """Move `source` aside to quarantine/<label>-<UTC time>-<random>; None when someone else
        moved it first."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = self.quarantine / f"{label}-{stamp}-{uuid.uuid4().hex[:8]}"
        with writing("setting a corrupt entry aside"):
            self.quarantine.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(source, target)
            except FileNotFoundError:
                return None
            if target.is_dir() and not target.is_symlink():
                note = {"reason": why, "quarantined_at": _now(), "by": worker_identity()}
                try:
                    _write_json(target / "QUARANTINE.json", note)
                except (OSError, StoreError):
                    pass
        log.warning("quarantined %s: %s", label, why)
        return target

    def quarantined(self) -> dict[str, int]:
        """How many modules and artifact directories the quarantine holds, by label."""
        counts = {ENTRY_LABEL: 0, ARTIFACTS_LABEL: 0}
        try:
            names = os.listdir(self.quarantine)
        except OSError:
            return counts
        for name in names:
            label = name[65:].split("-", 1)[0] if is_module_id(name[:64]) else ""
            if label in counts:
                counts[label] += 1
        return counts

    # --- updates ---------------------------------------------------------------------------

    @contextmanager
    def _locked(self, mid: str) -> Iterator[Path]:
        path = self._dir(mid)
        try:
            fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            if unavailable_reason(err) is None:
                raise
            # A read-only store still takes the lock (to read consistently); writes then fail.
            try:
                fd = os.open(path / ".lock", os.O_RDONLY)
            except FileNotFoundError:
                with writing("changing the module"):
                    raise err from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield path
        finally:
            os.close(fd)

    def _read_locked(self, mid: str, path: Path) -> Status:
        try:
            return _read_status(path, mid)
        except FileNotFoundError:  # deleted while this waited for the lock
            raise KeyError(f"no module {mid}") from None
        except CorruptEntry as err:
            self._quarantine_entry(mid, str(err))
            raise KeyError(f"no module {mid}") from None

    def update(self, mid: str, change: Callable[[Status], bool]) -> Status:
        """Apply `change` to the status under the module's lock; it returns whether it changed
        anything (and only then is the status written)."""
        with self._locked(mid) as path:
            status = self._read_locked(mid, path)
            before = status["state"]
            if change(status):
                _write_json(path / "status.json", status)
                metrics.job_moved(str(before), str(status["state"]))
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
        with writing("building the module"):
            work.mkdir()
        return work

    def succeed(self, mid: str, work: Path, timings: Mapping[str, object]) -> Status:
        """Move the finished OUTDIR `work` into place and record success with its file list."""
        with self._locked(mid) as path:
            status = self._read_locked(mid, path)
            if status["state"] != "running":
                return status
            final = path / "artifacts"
            with writing("storing the artifacts"):
                if final.exists():
                    # Left by an attempt that died between the rename and the status write.
                    stale = path / f"{_WORK_PREFIX}stale-{uuid.uuid4().hex}"
                    os.rename(final, stale)
                    shutil.rmtree(stale, ignore_errors=True)
                _fsync_tree(work)
                os.rename(work, final)
            # The digests recorded here are what every later serve and run is checked against.
            status["artifacts"] = _manifest(final)
            status["timings"] = dict(timings)
            _finish(status, "succeeded")
            _write_json(path / "status.json", status)
            metrics.job_moved("running", "succeeded")
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
            _finish(status, "failed", error=self.without_paths(problem))
            status["retryable"] = retryable
            return True

        return self.update(mid, change)

    def without_paths(self, problem: Problem) -> Problem:
        """`problem` with the paths of this store (and of the service's own code) taken out of
        its text: a C compiler's message names `<store>/modules/<id>/work-.../src/x.c`, which
        becomes `src/x.c`, the artifact's name; what else names the store says `<store>`."""
        roots = sorted({str(self.root), os.path.realpath(self.root)}, key=len, reverse=True)
        store = "|".join(re.escape(root) for root in roots)
        inside = re.compile(rf"(?:{store})/modules/[0-9a-f]{{64}}/(?:(?:work-|\.tmp-)[^/\s]*|artifacts)/")
        anywhere = re.compile(rf"(?:{store})(?=/|\b|$)")
        code = re.compile(re.escape(_CODE_ROOT) + "/")

        def clean(value: object) -> object:
            if isinstance(value, str):
                return code.sub("", anywhere.sub("<store>", inside.sub("", value)))
            if isinstance(value, list):
                return [clean(item) for item in value]
            if isinstance(value, dict):
                return {key: clean(item) for key, item in value.items()}
            return value

        cleaned = clean(problem)
        assert isinstance(cleaned, dict)
        return cleaned

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
        # Deletions cut short by a stop: the modules were already gone, only their files remain.
        shutil.rmtree(self.root / DELETED, ignore_errors=True)
        requeue = []
        for mid in self.ids():
            path = self.module_dir(mid)
            if path is None:
                continue
            try:
                for entry in os.scandir(path):
                    if entry.name.startswith((_WORK_PREFIX, _TMP_PREFIX)):
                        _remove(Path(entry.path))
                if self._requeue_interrupted(mid, limits):
                    requeue.append(mid)
            except (StoreUnavailable, KeyError) as err:
                # Read-only store: the job stays as it is until the service starts on a
                # writable one; a corrupt entry has been quarantined.
                log.error("module %s not recovered: %s", mid, err)
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


def _read_status(path: Path, mid: str) -> Status:
    """The checked status in module directory `path`; FileNotFoundError when it has none,
    CorruptEntry when it is not a valid record or cannot be read."""
    try:
        data = (path / "status.json").read_bytes()
    except FileNotFoundError:
        raise
    except OSError as err:
        raise CorruptEntry(f"status of module {mid}: unreadable ({os.strerror(err.errno or 0)})") from None
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise CorruptEntry(f"status of module {mid}: not UTF-8") from None
    except (ValueError, RecursionError):
        raise CorruptEntry(f"status of module {mid}: not JSON") from None
    return checked_status(value, mid)


def _check_json(path: Path, corrupt: Callable[[], ArtifactCorrupt]) -> None:
    """A JSON artifact that matches its digest but does not parse (recorded so by a module
    stored before digests, or by a broken build) is not served as JSON."""
    try:
        json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, RecursionError):
        raise corrupt() from None


def _fsync_tree(root: Path) -> None:
    """Flush the artifacts to disk before they become visible under their final name."""
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


class StoreLock:
    """One service per store: a `flock` on `<root>/service.lock`, held for the life of the app.

    An API process with the embedded queue owns the jobs of the store: at start-up it queues
    again every job left queued or running (`recover`), which is right only if no other live
    process runs them. It therefore takes the lock exclusively, before recovery touches
    anything, and a second such process fails to start, naming the store and the holder.

    With Celery several API processes share one store with the Celery workers, and none of them
    recovers jobs (the broker redelivers them), so they take the lock shared: any number of
    them may run together, but not alongside an embedded-queue service, whose recovery would
    requeue jobs that Celery workers are running (and whose workers would race theirs). The
    workers themselves take no lock: they only run jobs handed to them, under the per-module
    lock of every status change.

    The lock file records the last holder (pid, host, queue) for the error message; `flock`
    is released by the kernel when the holder dies, so a crash never leaves the store locked.
    """

    RECORD_BYTES = 160

    def __init__(self, path: Path, fd: int, exclusive: bool):
        self.path = path
        self._fd: int | None = fd
        self.exclusive = exclusive

    @staticmethod
    def acquire(root: Path | str, *, exclusive: bool, queue: str, record: bool = True) -> StoreLock:
        """The lock, or StoreLocked naming the store and the holder. With `record=False` the
        holder's record is left as it is (a check that releases the lock at once)."""
        root = Path(root)
        path = root / LOCK_FILE
        # The lock is held on a read-only descriptor (flock does not need write access), so an
        # operator can still remount the store read-only under a running service; the record
        # is written through a second descriptor, closed at once.
        try:
            writer: int | None = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError as err:
            if unavailable_reason(err) is None or not path.exists():
                raise StoreLocked(f"cannot lock the module store {root}: {err.strerror}") from None
            writer = None  # a read-only store: lock it all the same, keep the old record
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _lock_holder(fd)
                os.close(fd)
                wanted = "the embedded queue" if exclusive else "the Celery queue"
                raise StoreLocked(
                    f"the module store {root} is in use by another relaycc service ({holder}); a "
                    f"service with {wanted} cannot share it. Stop that service or give this one "
                    "another store (RELAYCC_STORE)."
                ) from None
            text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "queue": queue})
            if record and writer is not None:
                try:
                    # One write at offset 0 of a fixed-size record: holders sharing the lock may
                    # write at once without interleaving.
                    data = text.encode().ljust(StoreLock.RECORD_BYTES)[: StoreLock.RECORD_BYTES - 1] + b"\n"
                    os.pwrite(writer, data, 0)
                except OSError:
                    pass  # a full store keeps the previous record
        finally:
            if writer is not None:
                os.close(writer)
        return StoreLock(path, fd, exclusive)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def _lock_holder(fd: int) -> str:
    try:
        record = json.loads(os.pread(fd, StoreLock.RECORD_BYTES, 0).decode("utf-8"))
        pid, host, queue = int(record["pid"]), str(record["host"]), str(record["queue"])
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"
    if host == socket.gethostname() and not _pid_alive(pid):
        # The recorded holder is gone: the lock is held (shared) by processes that did not
        # write the record last.
        return "processes with the Celery queue"
    return f"pid {pid} on {host}, {queue} queue"
