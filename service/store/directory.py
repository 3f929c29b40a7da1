"""The directory store (the default): a content-addressed directory shared by the API and every
worker.

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
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from service import metrics
from service.arrays import NO_LIMIT, decode_npz, encode_npz
from service.store.base import (
    ARTIFACTS_LABEL,
    ENTRY_LABEL,
    IN_FLIGHT,
    QUARANTINE,
    ArtifactCorrupt,
    CorruptEntry,
    JobLimits,
    ModuleBusy,
    ModuleStoreBase,
    check_output_ref,
    new_output_ref,
    Status,
    StoreError,
    StoreLocked,
    StoreUnavailable,
    _now,
    _pid_alive,
    corrupt_problem,
    is_json,
    is_module_id,
    json_bytes,
    log,
    mark_for_rebuild,
    module_id,
    new_status,
    parse_request,
    parse_status,
    unavailable_reason,
    worker_identity,
    writing,
)
from service.store.integrity import digest_file, manifest_of, matches

_TMP_PREFIX = ".tmp-"
_WORK_PREFIX = "work-"
# Modules on their way out: renamed here whole, then removed.
DELETED = "deleted"
LOCK_FILE = "service.lock"
# Outputs of runs done by Celery workers, until the API process takes them.
OUTPUTS = "outputs"
_PROBE = b"relaycc readiness probe\n" * 171

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
    _write_atomic(path, json_bytes(value))



class DirectoryStore(ModuleStoreBase):
    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.modules = self.root / "modules"
        self.quarantine = self.root / QUARANTINE

    @property
    def location(self) -> str:
        return str(self.root)

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
            _write_json(tmp / "status.json", new_status(mid, normalized, limits, client))
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
            request = parse_request((path / "request.json").read_bytes())
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
        if not inside or not matches(path, str(entry["sha256"]), entry.get("bytes")):
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
                found = digest_file(root / entry["name"])
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
        detail, problem = corrupt_problem(mid, name, what)
        log.error("%s; its artifacts are quarantined and the module is marked for a rebuild", detail)

        def change(status: Status) -> bool:
            if status["state"] != "succeeded":
                return False  # another reader got here first
            artifacts = self.modules / mid / "artifacts"
            if os.path.lexists(artifacts):
                self._quarantine(artifacts, f"{mid}-{ARTIFACTS_LABEL}", detail)
            mark_for_rebuild(status, problem)
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
            status["artifacts"] = manifest_of(final)
            status["timings"] = dict(timings)
            status.update(state="succeeded", finished_at=_now(), error=None, progress=None)
            _write_json(path / "status.json", status)
            metrics.job_moved("running", "succeeded")
            return status

    def put_run_output(self, archive: bytes) -> str:
        ref = new_output_ref()
        with writing("storing the run's outputs"):
            (self.root / OUTPUTS).mkdir(parents=True, exist_ok=True)
        _write_atomic(self.root / OUTPUTS / f"{ref}.npz", archive)
        return ref

    def take_run_output(self, ref: str) -> bytes:
        path = self.root / OUTPUTS / f"{check_output_ref(ref)}.npz"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise KeyError(f"no run output {ref}") from None
        path.unlink(missing_ok=True)
        return data

    def writable_problem(self) -> str | None:
        """A block of data written, flushed and removed in modules/: an empty file can still be
        created on a full file system, a block of data cannot."""
        probe = self.modules / f".ready-{uuid.uuid4().hex}"
        try:
            try:
                with open(probe, "wb") as stream:
                    stream.write(_PROBE)
                    stream.flush()
                    os.fsync(stream.fileno())
            finally:
                if os.path.lexists(probe):
                    os.unlink(probe)
        except OSError as err:
            reason = unavailable_reason(err)
            if reason is not None:
                return f"the module store is {reason}"
            return f"the module store cannot be written ({errno.errorcode.get(err.errno or 0, 'error')})"
        return None

    def _path_rules(self) -> list[tuple[re.Pattern[str], str]]:
        roots = sorted({str(self.root), os.path.realpath(self.root)}, key=len, reverse=True)
        store = "|".join(re.escape(root) for root in roots)
        return [
            (re.compile(rf"(?:{store})/modules/[0-9a-f]{{64}}/(?:(?:work-|\.tmp-)[^/\s]*|artifacts)/"), ""),
            (re.compile(rf"(?:{store})(?=/|\b|$)"), "<store>"),
        ]

    def _remove_leftovers(self) -> None:
        if not self.modules.is_dir():
            return
        for entry in os.scandir(self.modules):
            if entry.name.startswith(_TMP_PREFIX):
                shutil.rmtree(entry.path, ignore_errors=True)
        # Deletions cut short by a stop: the modules were already gone, only their files remain.
        shutil.rmtree(self.root / DELETED, ignore_errors=True)

    def _remove_module_leftovers(self, mid: str) -> None:
        path = self.module_dir(mid)
        if path is None:
            return
        for entry in os.scandir(path):
            if entry.name.startswith((_WORK_PREFIX, _TMP_PREFIX)):
                _remove(Path(entry.path))


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _read_status(path: Path, mid: str) -> Status:
    """The checked status in module directory `path`; FileNotFoundError when it has none,
    CorruptEntry when it is not a valid record or cannot be read."""
    try:
        data = (path / "status.json").read_bytes()
    except FileNotFoundError:
        raise
    except OSError as err:
        raise CorruptEntry(f"status of module {mid}: unreadable ({os.strerror(err.errno or 0)})") from None
    return parse_status(data, mid)


def _check_json(path: Path, corrupt: Callable[[], ArtifactCorrupt]) -> None:
    """A JSON artifact that matches its digest but does not parse (recorded so by a module
    stored before digests, or by a broken build) is not served as JSON."""
    if not is_json(path.read_bytes()):
        raise corrupt()


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
