"""A cache of whole builds: the files a build wrote into OUTDIR, kept under one key.

The compile cache (compile_cache.py) saves gcc's work per C file, but a build served from it
still parses and lowers the model in Python (seconds for a ResNet-50). This cache sits above
it: the key is a BLAKE3 hash of everything that decides a build's files (the driver assembles it
with `KeyHasher`: the model's text or bytes, the bound parameters, every option, the codegens
with their libraries, relaycc's own files, the C toolchain and the CPU), and the value is the
files themselves. A hit puts them into OUTDIR without running a pass or the C compiler.

It lives beside the objects, under `<cache root>/builds/<2 hex>/<key>/`: a `manifest` (the
format line, the sha256 of its body, then the body: the files' total bytes as 8 bytes and a
JSON list of the files) and the files under
`files/`. An entry is assembled in a temporary directory and renamed into place, so a reader
sees a whole entry or none; two builds storing the same key each build their own and the
second rename loses harmlessly.

Integrity, as in the object cache, is checked on every hit, in two ways by size:
* files under `LINK_BYTES` (sources, headers, the report) are copied, and their sha256 must
  match the manifest's;
* larger files (the library, the Model Library Format archive, a large constant pool, the
  lowered text of a model with bound weights: about 1.2 GB for ResNet-50) are hard-linked, both
  into the entry when it is stored and out of it on a hit, since copying or hashing them would
  cost more than the whole budget of a cached build. Their size and modification time must
  match what the manifest recorded: any write into the shared inode (through an OUTDIR that
  holds a link) changes them. Where a link cannot be made (another file system) the file is
  copied. relaycc itself only ever replaces artifacts by renaming a new file over them, so its
  own later builds into a linked OUTDIR never touch an entry.
A damaged entry is removed and the build runs as if it had missed.

Size bound and LRU eviction as for objects (`trim`), counting the bytes only the cache holds: a
linked file still named by a build directory costs the cache nothing, so a model's entry larger
than the whole bound (a GPT-2-sized build writes 8 GB) stays while its OUTDIR does, and goes
with the next trim once that is deleted. `RELAYCC_CACHE_DIR` and `off` decide
whether there is a cache at all (CompileCache.from_environment). The same warning holds:
whoever can write the directory can put code into every library built from it, so the
service builds without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import blake3

from compiler.runtime.compile_cache import DEFAULT_MAX_BYTES

if TYPE_CHECKING:
    import numpy as np

FORMAT = b"relaycc-build/1\n"
LINK_BYTES = 1 << 20
_DIGEST_BYTES = 32
_STALE_TMP_SECONDS = 3600


class KeyHasher:
    """A BLAKE3 hash over labelled parts; each part is length-prefixed, so no two different
    sequences of parts hash alike.

    Hashing the bound parameters is most of a cached build (ResNet-50's 100 MB). BLAKE3 is a
    cryptographic hash, as the key must be (whoever finds a collision is served another
    model's library), and hashes 3 GB/s on one AVX2 core against sha256's 1.5 with the SHA
    extensions (0.4 without them, as on Skylake Xeons); it spreads a large update over the
    cores itself, without the GIL."""

    def __init__(self) -> None:
        self._digest = blake3.blake3(FORMAT, max_threads=blake3.blake3.AUTO)

    def add(self, label: str, data: bytes | str) -> None:
        payload = data.encode() if isinstance(data, str) else data
        self._head(label, len(payload))
        self._digest.update(payload)

    def _head(self, label: str, length: int) -> None:
        tag = label.encode()
        self._digest.update(len(tag).to_bytes(8, "little") + tag + length.to_bytes(8, "little"))

    def add_arrays(self, label: str, arrays: Mapping[str, np.ndarray]) -> None:
        """Names, dtypes, shapes and bytes of `arrays`, in name order."""
        import numpy as np  # not at the top: the command line's front key (front_cache.py) comes without it

        names = sorted(arrays)
        contiguous = [np.ascontiguousarray(arrays[name]) for name in names]
        header = [[name, a.dtype.str, list(a.shape)] for name, a in zip(names, contiguous)]
        self.add(label, json.dumps(header))
        self._head(f"{label} bytes", sum(a.nbytes for a in contiguous))
        for a in contiguous:
            if a.nbytes:
                self._digest.update(memoryview(a).cast("B"))

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


@lru_cache(maxsize=None)
def package_identity(root: Path) -> str:
    """What tells one copy of a package from another without reading it: every file under
    `root` (Python, C headers, codegen library sources) with its size and modification time,
    as compile_cache.compiler_identity does for gcc. Once per process: the code a process runs
    is the code it imported."""
    lines = [str(root.resolve())]
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(directory, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            lines.append(f"{os.path.relpath(path, root)}:{info.st_size}:{info.st_mtime_ns}")
    return "\n".join(lines)


@dataclass(frozen=True)
class _File:
    path: str  # relative to OUTDIR, with '/'
    size: int
    sha256: str | None  # small files
    mtime_ns: int | None  # large (linked) files


@dataclass(frozen=True)
class BuildCache:
    root: Path
    max_bytes: int = DEFAULT_MAX_BYTES

    @property
    def builds(self) -> Path:
        return self.root / "builds"

    def entry(self, key: str) -> Path:
        return self.builds / key[:2] / key

    def restore(self, key: str, outdir: Path) -> list[Path] | None:
        """Put the files kept under `key` into `outdir` (the paths written), or None when there
        is no such entry or it is damaged (then it is removed)."""
        entry = self.entry(key)
        files = self._manifest(entry)
        if files is None:
            return None
        contents: dict[str, bytes] = {}
        for item in files:
            stored = entry / "files" / item.path
            if item.sha256 is None:
                try:
                    info = os.stat(stored)
                except OSError:
                    return self._drop(entry)
                if info.st_size != item.size or info.st_mtime_ns != item.mtime_ns:
                    return self._drop(entry)
                continue
            try:
                data = stored.read_bytes()
            except OSError:
                return self._drop(entry)
            if len(data) != item.size or hashlib.sha256(data).hexdigest() != item.sha256:
                return self._drop(entry)
            contents[item.path] = data
        written = []
        token = uuid.uuid4().hex  # one per restore: each file's temporary sits beside its target
        for item in files:
            target = Path(outdir) / item.path
            if item.path not in contents and _same_file(entry / "files" / item.path, target):
                # OUTDIR holds this entry's file already (a rebuild into the same OUTDIR):
                # replacing it would only make the kernel drop and refill a large file's pages.
                written.append(target)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{token}.tmp")
            try:
                if item.path in contents:
                    tmp.write_bytes(contents[item.path])
                else:
                    _link_or_copy(entry / "files" / item.path, tmp)
                # Replaced, never written in place: the old file may be a link into an entry.
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            written.append(target)
        try:
            os.utime(entry / "manifest")  # recently used: the last to be evicted
        except OSError:
            pass
        return written

    def restore_build(self, key: str, outdir: Path, module_name: str) -> dict[str, object] | None:
        """`restore`, then as a fresh build would leave OUTDIR: no kernel file of an earlier,
        bigger build beside the restored ones, and metadata.json saying where the build came
        from (`"build_cache": {"hit": true, "key": ...}`); that report, or None on a miss."""
        restored = self.restore(key, outdir)
        if restored is None:
            return None
        src = Path(outdir) / "src"
        if any(p.parent == src for p in restored):
            remove_stale_sources(src, module_name, {p.name for p in restored if p.parent == src})
        path = Path(outdir) / "metadata.json"
        text = path.read_text()
        # Appended as text, giving what json.dumps(..., indent=2) of the whole report would: a
        # large report takes tens of milliseconds to print again.
        entry = json.dumps({"hit": True, "key": key}, indent=2).replace("\n", "\n  ")
        text = f'{text.rstrip().removesuffix("}").rstrip()},\n  "build_cache": {entry}\n}}\n'
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return json.loads(text)

    def store(self, key: str, outdir: Path, paths: Iterable[Path]) -> None:
        """Keep the files `paths` (inside `outdir`) under `key`. A cache that cannot be
        written is no error: the build has its files either way."""
        outdir = Path(outdir)
        final = self.entry(key)
        if final.exists():
            return
        tmp = final.with_name(f".{key}.{uuid.uuid4().hex}.tmp")
        try:
            records = []
            for path in dict.fromkeys(Path(p) for p in paths):
                relative = path.relative_to(outdir).as_posix()
                stored = tmp / "files" / relative
                stored.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                size = path.stat().st_size
                if size >= LINK_BYTES:
                    _link_or_copy(path, stored)
                    records.append({"path": relative, "size": size, "mtime_ns": stored.stat().st_mtime_ns})
                else:
                    data = path.read_bytes()
                    stored.write_bytes(data)
                    records.append({"path": relative, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
            total = sum(int(r["size"]) for r in records).to_bytes(8, "little")
            body = total + json.dumps({"files": records}, sort_keys=True).encode()
            (tmp / "manifest").write_bytes(FORMAT + hashlib.sha256(body).digest() + body)
            os.rename(tmp, final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            return
        self.trim()

    def trim(self) -> None:
        """Remove the least recently used entries until the builds hold at most three quarters
        of `max_bytes` (when they hold more than `max_bytes`), and stale temporary entries.
        An entry holds the bytes no build directory shares with it (`_entry_bytes`)."""
        entries: list[tuple[float, int, Path]] = []
        now = time.time()
        for shard in _subdirs(self.builds):
            for entry in _subdirs(shard):
                if entry.name.endswith(".tmp"):
                    if now - _mtime(entry) > _STALE_TMP_SECONDS:
                        shutil.rmtree(entry, ignore_errors=True)
                    continue
                entries.append((_mtime(entry / "manifest"), _entry_bytes(entry), entry))
        total = sum(size for _, size, _ in entries)
        if total <= self.max_bytes:
            return
        for _, size, entry in sorted(entries, key=lambda e: (e[0], e[2])):
            if total <= self.max_bytes * 3 // 4:
                break
            shutil.rmtree(entry, ignore_errors=True)
            total -= size
        from compiler.runtime.front_cache import FrontCache

        FrontCache(self.root).forget_missing(lambda key: self.entry(key).is_dir())

    def clear(self) -> None:
        shutil.rmtree(self.builds, ignore_errors=True)

    def _manifest(self, entry: Path) -> list[_File] | None:
        try:
            data = (entry / "manifest").read_bytes()
        except OSError:
            return None
        head = len(FORMAT) + _DIGEST_BYTES
        body = data[head:]
        if data[: len(FORMAT)] != FORMAT or hashlib.sha256(body).digest() != data[len(FORMAT) : head]:
            return self._drop(entry)
        return [_File(f["path"], f["size"], f.get("sha256"), f.get("mtime_ns")) for f in json.loads(body[8:])["files"]]

    @staticmethod
    def _drop(entry: Path) -> None:
        shutil.rmtree(entry, ignore_errors=True)
        return None


def remove_stale_sources(src: Path, name: str, keep: set[str]) -> None:
    """A module built again into the same OUTDIR may have fewer kernel files than before: the
    files of the earlier build would otherwise sit next to the new ones."""
    pattern = re.compile(rf"^{re.escape(name)}_(lib\d+|constants)\.c$")
    for path in src.glob(f"{name}_*.c"):
        if pattern.match(path.name) and path.name not in keep:
            path.unlink(missing_ok=True)


def _entry_bytes(entry: Path) -> int:
    """The bytes deleting `entry` would free: its copied files and those of its linked files
    no build directory names any more (one link left, the entry's)."""
    total = 0
    pending = [entry / "files"]
    while pending:
        try:
            items = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for item in items:
            try:
                if item.is_dir(follow_symlinks=False):
                    pending.append(Path(item.path))
                    continue
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_nlink <= 1:
                total += info.st_size
    return total


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _subdirs(path: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def toolchain_identity(compiler: Sequence[str], tools: Sequence[Sequence[str]]) -> str:
    """The C compiler and the binary tools a build runs (nm), and the CPU: the
    generated C itself depends on the machine (vector_width.py), whatever the flags say."""
    from compiler.runtime.compile_cache import compiler_identity

    parts = [compiler_identity(tuple(compiler), True)]
    parts += [compiler_identity(tuple(tool), False) for tool in tools]
    return "\n".join(parts)
