"""Artifact integrity: the manifest written when a module is built, and the checks against it.

`manifest_of` records the size and sha256 of every file of an OUTDIR; `matches` checks a local
file against its entry before it is served or loaded. A verified file is remembered by its
identity, so an unchanged file is hashed once per process (both stores check local files: the
directory store its own, the object store the copies in its cache).
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_module
import threading
from collections import OrderedDict
from pathlib import Path

from service.store.base import content_type

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


def matches(path: Path, expected: str, expected_bytes: object) -> bool:
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


def digest_file(path: Path) -> tuple[str, int] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        return (_sha256_of(fd), st.st_size) if stat_module.S_ISREG(st.st_mode) else None
    finally:
        os.close(fd)


def manifest_of(root: Path) -> list[dict[str, object]]:
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
