"""The tuning records `relaycc tune` measured on this machine, kept in the cache directory and
applied by later builds that are given no records of their own.

A record is keyed by its kernel's structural hash (compiler/tuning_records.py), so the store
holds one document for every model tuned here: a build applies the records of the kernels it
meets and ignores the rest, and two models that share a layer share its record. Records are
only worth something on the CPU they were measured on, so the document is per CPU:
`<cache root>/tuning/<16 hex of the CPU's model and flags>.json`, in the records format. A new
tuning run's records replace the stored ones of the same kernels; the others stay.

The store's bytes take part in the front key (front_cache.py) and its schedules in the
whole-build key (through `BuildOptions.schedules`), so a build made before a tuning run is not
served after it. Whoever can write here can change how fast a build runs, never what it
computes: a schedule only reorders work, and one a kernel cannot take is ignored. The service
builds without the cache, so its jobs never read it.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path

import blake3

from compiler.runtime.compile_cache import cpu_identity

FORMAT = "relaycc.tuning/1"


def store_path(cache_root: Path) -> Path:
    """This machine's records document under `cache_root`."""
    cpu = blake3.blake3(cpu_identity().encode()).hexdigest()[:16]
    return Path(cache_root) / "tuning" / f"{cpu}.json"


def stored_bytes(cache_root: Path) -> bytes:
    """The stored document as bytes (empty when nothing is stored), for keys."""
    try:
        return store_path(cache_root).read_bytes()
    except OSError:
        return b""


def stored_document(cache_root: Path) -> dict[str, object] | None:
    """The stored records document, or None when there is none or it cannot be read as one
    (a damaged store is a lost speed-up, not an error: the next tuning run rewrites it)."""
    data = stored_bytes(cache_root)
    if not data:
        return None
    try:
        document = json.loads(data)
    except ValueError:
        return None
    return document if isinstance(document, dict) and document.get("format") == FORMAT else None


def remember(cache_root: Path, document: Mapping[str, object]) -> Path:
    """Merge a tuning run's records into the store: its records replace those of the same
    kernels. Concurrent runs take turns (a lock beside the document)."""
    path = store_path(cache_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = stored_document(cache_root) or {}
        new_records = [r for r in document.get("records", []) if isinstance(r, Mapping)]  # type: ignore[union-attr]
        replaced = {r.get("key") for r in new_records}
        kept = [r for r in old.get("records", []) if isinstance(r, Mapping) and r.get("key") not in replaced]  # type: ignore[union-attr]
        # Each record keeps the thread count it was measured at; the runs' documents say it once.
        threads = document.get("threads")
        merged = {"format": FORMAT, "machine": document.get("machine", old.get("machine")),
                  "records": kept + [{**r, "threads": r.get("threads", threads)} for r in new_records]}
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_text(json.dumps(merged, indent=1) + "\n")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path
