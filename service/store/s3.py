"""The object store: modules kept in an S3 bucket (RELAYCC_STORE=s3://bucket/prefix), for services
whose workers run on several machines.

    <prefix>/modules/<id>/request.json      as in the directory store
                          params.npz
                          status.json       replaced only by conditional puts (below)
                          artifacts/<sha256>/<name>   the OUTDIR, uploaded before the status
                                            says succeeded; addressed by content, so two
                                            attempts of one job never overwrite each other
    <prefix>/quarantine/<label>-<UTC time>-<random>/...   entries and artifacts set aside
    <prefix>/outputs/<ref>.npz             outputs of runs done by Celery workers, until taken
    <prefix>/service.lock                   the lease one embedded-queue service holds (s3_lease.py)

What differs from the directory store, and why:

* Creation: `status.json` is written last, with `If-None-Match: *` (put mode "create"); of two
  identical requests exactly one creates it, the other finds the module. An entry whose creator
  died before its status was written has no status and is simply unknown: an identical request
  writes it again (there is no rename of a whole directory on S3, so no temporary directory
  either).
* Status changes are a read-modify-write with `If-Match` on the ETag read (put mode "update"),
  tried again on a newer status when another writer came first. No lock is held anywhere, so a
  worker that dies holds nothing up.
* Artifacts are uploaded, then the status records the manifest (size and sha256 of every file).
  Serving and running need local files: each artifact is downloaded into the cache directory
  (`cache`), its sha256 checked against the manifest, then served or loaded; a cached copy is
  checked again each time (hashed once per process while it stays unchanged). A download that
  does not match means the object itself is corrupt: the module's artifacts are quarantined and
  the module is marked for a rebuild, as on disk. A cached copy that does not match is only
  downloaded again (the bucket, not the cache, is what was stored).
* Deletion removes `status.json` first (the module is unknown from then on), then the rest.
  S3 has no conditional delete that our client can send, so a requeue racing a delete may see
  the module vanish under it (it then fails with KeyError, as for any deleted module).
* Errors of the object store (unreachable, credentials refused) are StoreUnavailable, like a
  read-only or full disk.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, NotFoundError, PreconditionError
from obstore.store import S3Store

from service import metrics
from service.arrays import NO_LIMIT, decode_npz, encode_npz
from service.problems import make_problem
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
    StoreUnavailable,
    _finish,
    _now,
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
    sha256_hex,
    worker_identity,
)
from service.store.integrity import manifest_of, matches

# A status change that keeps losing to other writers gives up after this many tries (each
# loss means someone else's change went in, so this is never reached by a healthy store).
UPDATE_TRIES = 64
_DOWNLOAD_CHUNK = 8 << 20
_TMP_PREFIX = ".tmp-"


@contextmanager
def _reaching(what: str) -> Iterator[None]:
    """Turn an object-store failure (unreachable, refused) into StoreUnavailable; a missing
    object (FileNotFoundError) and a lost conditional put pass through."""
    try:
        yield
    except (FileNotFoundError, NotFoundError, AlreadyExistsError, PreconditionError):
        raise
    except BaseError as err:
        raise StoreUnavailable(make_problem(
            "store-unavailable",
            f"the module store cannot be reached or refused the service ({type(err).__name__}), so "
            f"{what} is not possible now; try again later",
        )) from None


def parse_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of `s3://bucket/prefix`; ValueError naming what is wrong."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"an object store is named s3://bucket/prefix, not {url!r}")
    return parts.netloc, parts.path.strip("/")


# The variables the store's client reads (as the AWS tools do); docker-compose sets them all.
S3_ENVIRONMENT = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")


def client_for(bucket: str, prefix: str) -> S3Store:
    """An S3 client configured like the AWS tools: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_REGION (and AWS_SESSION_TOKEN) from the environment."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3")
    options = {"allow_http": True} if endpoint and endpoint.startswith("http://") else {}
    config: dict[str, str] = {}
    if endpoint:
        config["endpoint"] = endpoint
        # MinIO and moto serve buckets under the path, not as host names.
        config["virtual_hosted_style_request"] = "false"
    return S3Store(bucket, prefix=prefix or None, config=config, client_options=options)  # type: ignore[arg-type]


def _artifact_key(mid: str, entry: Mapping[str, object]) -> str:
    return f"modules/{mid}/artifacts/{entry['sha256']}/{entry['name']}"


def default_cache(url: str) -> Path:
    """Where a process keeps its copies of the artifacts of store `url` unless told otherwise."""
    return Path(tempfile.gettempdir()) / "relaycc-store-cache" / sha256_hex(url.encode())[:16]


class S3ModuleStore(ModuleStoreBase):
    def __init__(self, client: S3Store, url: str, cache: Path):
        self.client = client
        self.url = url
        self.cache = cache

    @staticmethod
    def from_url(url: str, *, cache: Path | None = None) -> S3ModuleStore:
        bucket, prefix = parse_url(url)
        return S3ModuleStore(client_for(bucket, prefix), url, cache or default_cache(url))

    @property
    def location(self) -> str:
        return self.url

    # --- objects ---------------------------------------------------------------------------

    def _get(self, key: str) -> tuple[bytes, str | None]:
        """The bytes and ETag of object `key`; FileNotFoundError when there is none."""
        with _reaching("reading the store"):
            try:
                result = obstore.get(self.client, key)
            except NotFoundError:
                raise FileNotFoundError(key) from None
            return bytes(result.bytes()), result.meta.get("e_tag")

    def _put(self, key: str, data: bytes | Path, mode: object = "overwrite") -> None:
        with _reaching("storing the change"):
            obstore.put(self.client, key, data, mode=mode)  # type: ignore[arg-type]

    def _keys(self, prefix: str) -> list[str]:
        with _reaching("listing the store"):
            return [meta["path"] for chunk in obstore.list(self.client, prefix + "/") for meta in chunk]

    def _delete(self, keys: list[str]) -> None:
        if keys:
            with _reaching("deleting from the store"):
                obstore.delete(self.client, keys)

    def ensure(self) -> None:
        with _reaching("opening the store"):
            obstore.list_with_delimiter(self.client, "modules/")

    # --- creation --------------------------------------------------------------------------

    def create(
        self, normalized: Mapping[str, object], params: Mapping[str, np.ndarray], limits: JobLimits, client: str,
    ) -> tuple[str, bool]:
        mid = module_id(normalized)
        if self.status(mid) is not None:
            return mid, False
        base = f"modules/{mid}"
        # Identical requests write identical bytes here; only the status below decides.
        self._put(f"{base}/request.json", json_bytes(normalized))
        if params:
            self._put(f"{base}/params.npz", encode_npz(params))
        try:
            self._put(f"{base}/status.json", json_bytes(new_status(mid, normalized, limits, client)), mode="create")
        except AlreadyExistsError:
            return mid, False  # the twin request's status went in first: its job is the one
        metrics.job_moved(None, "queued")
        return mid, True

    # --- reading ---------------------------------------------------------------------------

    def _read_status(self, mid: str) -> tuple[Status, str | None]:
        """The checked status and its ETag; FileNotFoundError, CorruptEntry."""
        data, etag = self._get(f"modules/{mid}/status.json")
        return parse_status(data, mid), etag

    def status(self, mid: str) -> Status | None:
        if not is_module_id(mid):
            return None
        try:
            return self._read_status(mid)[0]
        except FileNotFoundError:
            return None
        except CorruptEntry as err:
            self._quarantine_entry(mid, str(err))
            return None

    def request(self, mid: str) -> dict[str, object]:
        if self.status(mid) is None:
            raise KeyError(f"no module {mid}")
        try:
            return parse_request(self._get(f"modules/{mid}/request.json")[0])
        except FileNotFoundError:
            raise KeyError(f"no module {mid}") from None
        except (ValueError, RecursionError) as err:
            self._quarantine_entry(mid, f"request of module {mid}: {type(err).__name__}")
            raise KeyError(f"no module {mid}") from None

    def params(self, mid: str) -> dict[str, np.ndarray]:
        if self.status(mid) is None:
            raise KeyError(f"no module {mid}")
        try:
            data = self._get(f"modules/{mid}/params.npz")[0]
        except FileNotFoundError:
            return {}
        # Written by the store itself after the API checked it.
        return decode_npz(data, "stored params", max_elements=NO_LIMIT)

    def manifest(self, mid: str) -> list[dict[str, object]] | None:
        status = self.status(mid)
        if status is None or status["state"] != "succeeded":
            return None
        entries = status["artifacts"]
        assert isinstance(entries, list)
        for entry in entries:
            # Every module here was built by a service that records digests.
            if "sha256" not in entry:
                raise self._corrupt(mid, str(entry["name"]), "has no recorded sha256")
        return entries

    def artifact(self, mid: str, name: str) -> tuple[Path, dict[str, object]] | None:
        entries = self.manifest(mid)
        for entry in entries or []:
            if entry["name"] == name:
                path = self._local(mid, entries or [], entry)
                if entry["content_type"] == "application/json" and not is_json(path.read_bytes()):
                    raise self._corrupt(mid, name, "is not JSON")
                return path, entry
        return None

    def verified_artifacts_dir(self, mid: str) -> Path | None:
        entries = self.manifest(mid)
        if entries is None:
            return None
        for entry in entries:
            path = self._local(mid, entries, entry)
            if entry["name"] == "metadata.json" and not is_json(path.read_bytes()):
                raise self._corrupt(mid, "metadata.json", "is not JSON")
        return self._cache_dir(mid, entries)

    def _cache_dir(self, mid: str, entries: list[dict[str, object]]) -> Path:
        # Named after the manifest too: a rebuilt module never meets the copies of the old one.
        return self.cache / mid / sha256_hex(json_bytes(entries))[:16]

    def _local(self, mid: str, entries: list[dict[str, object]], entry: Mapping[str, object]) -> Path:
        """A checked local copy of artifact `entry`: the cached one when it still matches,
        else downloaded anew and checked."""
        name, digest = str(entry["name"]), str(entry["sha256"])
        path = self._cache_dir(mid, entries) / name
        if matches(path, digest, entry.get("bytes")):
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{_TMP_PREFIX}{path.name}.{uuid.uuid4().hex}")
        try:
            try:
                with _reaching("reading the artifacts"):
                    result = obstore.get(self.client, _artifact_key(mid, entry))
                    with open(tmp, "wb") as stream:
                        for chunk in result.stream(min_chunk_size=_DOWNLOAD_CHUNK):
                            stream.write(chunk)
            except (FileNotFoundError, NotFoundError):
                raise self._corrupt(mid, name, "is missing") from None
            if not matches(tmp, digest, entry.get("bytes")):
                raise self._corrupt(mid, name, "does not match the sha256 recorded when it was built")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        if not matches(path, digest, entry.get("bytes")):  # replaced under us: not what we checked
            raise self._corrupt(mid, name, "does not match the sha256 recorded when it was built")
        return path

    def _corrupt(self, mid: str, name: str, what: str) -> ArtifactCorrupt:
        detail, problem = corrupt_problem(mid, name, what)
        log.error("%s; its artifacts are quarantined and the module is marked for a rebuild", detail)

        def change(status: Status) -> bool:
            if status["state"] != "succeeded":
                return False  # another reader got here first
            mark_for_rebuild(status, problem)
            return True

        try:
            status = self.update(mid, change)
            # The status no longer names the artifacts; moving them aside may now take its time.
            if status.get("rebuild"):
                self._quarantine(f"modules/{mid}/artifacts", f"{mid}-{ARTIFACTS_LABEL}", detail)
        except (StoreUnavailable, KeyError) as err:
            log.error("module %s: could not quarantine its artifacts: %s", mid, err)
        return ArtifactCorrupt(problem)

    def ids(self) -> Iterator[str]:
        with _reaching("listing the store"):
            found = obstore.list_with_delimiter(self.client, "modules/")
        for prefix in found["common_prefixes"]:
            name = prefix.rstrip("/").rsplit("/", 1)[-1]
            if is_module_id(name):
                yield name

    # --- deletion --------------------------------------------------------------------------

    def delete(self, mid: str, allowed: Callable[[Status], None] = lambda status: None) -> Status:
        status = self.status(mid)
        if status is None:
            raise KeyError(f"no module {mid}")
        if status["state"] in IN_FLIGHT:
            raise ModuleBusy(str(status["state"]))
        allowed(status)
        self._delete([f"modules/{mid}/status.json"])
        metrics.job_moved(str(status["state"]), None)
        self._delete(self._keys(f"modules/{mid}"))
        return status

    # --- quarantine ------------------------------------------------------------------------

    def check_entries(self) -> list[str]:
        quarantined = []
        for mid in list(self.ids()):
            try:
                self._read_status(mid)
                continue
            except FileNotFoundError:
                continue  # being created, or its creator died: unknown, written again on demand
            except CorruptEntry as err:
                why = str(err)
            if self._quarantine_entry(mid, why):
                quarantined.append(mid)
        return quarantined

    def _quarantine_entry(self, mid: str, why: str) -> bool:
        try:
            return self._quarantine(f"modules/{mid}", f"{mid}-{ENTRY_LABEL}", why)
        except StoreUnavailable:
            log.error("module %s is corrupt (%s) but the store is not writable: left in place", mid, why)
            return False

    def _quarantine(self, source: str, label: str, why: str) -> bool:
        """Copy the objects under `source` to quarantine/<label>-<UTC time>-<random>/, then delete
        them (S3 has no rename); False when there was nothing left to move."""
        keys = self._keys(source)
        if not keys:
            return False
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = f"{QUARANTINE}/{label}-{stamp}-{uuid.uuid4().hex[:8]}"
        with _reaching("setting a corrupt entry aside"):
            for key in keys:
                obstore.copy(self.client, key, f"{target}/{key[len(source) + 1:]}")
            note = {"reason": why, "quarantined_at": _now(), "by": worker_identity()}
            self._put(f"{target}/QUARANTINE.json", json_bytes(note))
        # The status goes first, so that the entry is unknown before its other objects vanish.
        self._delete(sorted(keys, key=lambda key: not key.endswith("/status.json")))
        log.warning("quarantined %s: %s", label, why)
        return True

    def quarantined(self) -> dict[str, int]:
        counts = {ENTRY_LABEL: 0, ARTIFACTS_LABEL: 0}
        try:
            with _reaching("listing the store"):
                found = obstore.list_with_delimiter(self.client, f"{QUARANTINE}/")
        except StoreUnavailable:
            return counts
        for prefix in found["common_prefixes"]:
            name = prefix.rstrip("/").rsplit("/", 1)[-1]
            label = name[65:].split("-", 1)[0] if is_module_id(name[:64]) else ""
            if label in counts:
                counts[label] += 1
        return counts

    # --- updates ---------------------------------------------------------------------------

    def update(self, mid: str, change: Callable[[Status], bool]) -> Status:
        """Read the status with its ETag, apply `change`, put it back only if the object still
        has that ETag (If-Match); when another writer came first, start again from theirs."""
        if not is_module_id(mid):
            raise KeyError(f"no module {mid}")
        for attempt in range(UPDATE_TRIES):
            try:
                status, etag = self._read_status(mid)
            except FileNotFoundError:
                raise KeyError(f"no module {mid}") from None
            except CorruptEntry as err:
                self._quarantine_entry(mid, str(err))
                raise KeyError(f"no module {mid}") from None
            before = status["state"]
            if not change(status):
                return status
            try:
                mode = {"e_tag": etag} if etag else "overwrite"
                self._put(f"modules/{mid}/status.json", json_bytes(status), mode=mode)
                metrics.job_moved(str(before), str(status["state"]))
                return status
            except PreconditionError:
                time.sleep(min(0.2, 0.005 * (attempt + 1)))
            except (FileNotFoundError, NotFoundError):
                raise KeyError(f"no module {mid}") from None
        raise StoreUnavailable(make_problem(
            "store-unavailable",
            f"the status of module {mid} changed {UPDATE_TRIES} times while this change was made; "
            "try again",
        ))

    def new_work_dir(self, mid: str) -> Path:
        if self.status(mid) is None:
            raise KeyError(f"no module {mid}")
        root = self.cache / "work"
        root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="work-", dir=root))

    def succeed(self, mid: str, work: Path, timings: Mapping[str, object]) -> Status:
        current = self.status(mid)
        if current is None:
            raise KeyError(f"no module {mid}")
        if current["state"] != "running":
            return current
        entries = manifest_of(work)
        # Uploaded before the status names them: a reader never finds a manifest without files.
        for entry in entries:
            self._put(_artifact_key(mid, entry), work / str(entry["name"]))

        def change(status: Status) -> bool:
            if status["state"] != "running":
                return False
            status["artifacts"] = entries
            status["timings"] = dict(timings)
            _finish(status, "succeeded")
            return True

        status = self.update(mid, change)
        if status["state"] == "succeeded" and status["artifacts"] is entries:
            # Files of an older build that this one does not have are never served (only
            # manifest names resolve); removed so that the bucket holds what the status says.
            names = {_artifact_key(mid, entry) for entry in entries}
            self._delete([key for key in self._keys(f"modules/{mid}/artifacts") if key not in names])
        return status

    def _path_rules(self) -> list[tuple[re.Pattern[str], str]]:
        roots = sorted({str(self.cache), os.path.realpath(self.cache)}, key=len, reverse=True)
        cache = "|".join(re.escape(root) for root in roots)
        return [
            (re.compile(rf"(?:{cache})/(?:work/[^/\s]+|[0-9a-f]{{64}}/[0-9a-f]{{16}})/"), ""),
            (re.compile(rf"(?:{cache})(?=/|\b|$)"), "<store>"),
            (re.compile(re.escape(self.url.rstrip("/")) + r"(?=/|\b|$)"), "<store>"),
        ]

    def put_run_output(self, archive: bytes) -> str:
        ref = new_output_ref()
        self._put(f"outputs/{ref}.npz", archive)
        return ref

    def take_run_output(self, ref: str) -> bytes:
        key = f"outputs/{check_output_ref(ref)}.npz"
        try:
            data = self._get(key)[0]
        except FileNotFoundError:
            raise KeyError(f"no run output {ref}") from None
        self._delete([key])
        return data

    def writable_problem(self) -> str | None:
        key = f"modules/.ready-{uuid.uuid4().hex}"
        try:
            self._put(key, b"relaycc readiness probe\n")
            self._delete([key])
        except StoreUnavailable:
            return "the module store cannot be reached or refuses writes"
        return None
