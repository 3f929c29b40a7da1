"""The names the rest of the service imports from the store, and `open_store`.

The store itself is split by concern: the interface and the status rules every store shares
(service/store/base.py), artifact integrity (integrity.py), the directory store, the default
(directory.py), and the S3 object store (s3.py). `ModuleStore` stays the directory store's name
here, since that is what a path opens.
"""

from __future__ import annotations

from pathlib import Path

from service.store.base import (
    ARTIFACTS_LABEL,
    ENTRY_LABEL,
    IN_FLIGHT,
    QUARANTINE,
    STATES,
    ArtifactCorrupt,
    CorruptEntry,
    JobLimits,
    ModuleBusy,
    ModuleStoreBase,
    Status,
    StoreError,
    StoreLocked,
    StoreUnavailable,
    checked_status,
    content_type,
    is_module_id,
    module_id,
    unavailable_reason,
    worker_identity,
    writing,
)
from service.store.directory import DELETED, LOCK_FILE, DirectoryStore, StoreLock

ModuleStore = DirectoryStore

__all__ = [
    "ARTIFACTS_LABEL", "DELETED", "ENTRY_LABEL", "IN_FLIGHT", "LOCK_FILE", "QUARANTINE", "STATES",
    "ArtifactCorrupt", "CorruptEntry", "DirectoryStore", "JobLimits", "ModuleBusy", "ModuleStore",
    "ModuleStoreBase", "Status", "StoreError", "StoreLock", "StoreLocked", "StoreUnavailable",
    "checked_status", "content_type", "is_module_id", "is_object_store", "module_id", "open_store",
    "unavailable_reason", "worker_identity", "writing",
]

S3_SCHEME = "s3://"


def is_object_store(location: str | Path) -> bool:
    return isinstance(location, str) and location.startswith(S3_SCHEME)


def open_store(location: str | Path, *, cache: Path | None = None) -> ModuleStoreBase:
    """The store at `location`: an `s3://bucket/prefix` URL (credentials and endpoint from the
    usual AWS_* variables; artifacts are loaded from the local `cache`) or a directory."""
    if is_object_store(location):
        # Imported only when selected: the directory default needs no S3 client.
        from service.store.s3 import S3ModuleStore

        return S3ModuleStore.from_url(str(location), cache=cache)
    return DirectoryStore(location)
