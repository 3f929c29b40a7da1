"""A cache of compiled objects shared by every build of one user.

An object is stored under the sha256 of everything that decides its bytes (`object_key`): the
compiler (its resolved executable's path, size and modification time, and the CPU when a flag
says `native`), the flags, the C text, and the text of every header it includes from the
build's include directories (found the way the preprocessor finds them). The paths of the
source and of the include directories are left out, so two modules with the same kernel share
its object. A file whose includes cannot be followed (`#include MACRO`) or that expands
`__DATE__`/`__TIME__` is not cached.

Location: `$RELAYCC_CACHE_DIR`, else `$XDG_CACHE_HOME/relaycc`, else `~/.cache/relaycc`;
`RELAYCC_CACHE_DIR=off` (or empty) turns it off. Entries are written to a temporary file and
renamed into place, so concurrent builds of the same object each leave a whole entry; an entry
carries the sha256 of its object, so one that was truncated or altered is found, removed and
rebuilt. Beyond `max_bytes` the least recently used entries go.

Whoever can write to the directory can put code into every library built from it: the service
builds without a cache (service/jobs/work.py), since its jobs must not share writable state.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

FORMAT = b"relaycc-object/1\n"
DEFAULT_MAX_BYTES = 2 << 30
_DIGEST_BYTES = 32
_OFF = ("", "off", "0", "no", "false", "none")
_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include(?:_next)?[ \t]*(?:([<"])([^>"\n]+)[>"])?', re.M)
_CLOCK_MACROS = re.compile(rb"\b__(?:DATE|TIME|TIMESTAMP)__\b")
# Temporary files older than this belong to a build that died; eviction removes them.
_STALE_TMP_SECONDS = 3600


@dataclass(frozen=True)
class CompileCache:
    root: Path
    max_bytes: int = DEFAULT_MAX_BYTES

    @staticmethod
    def from_environment(environ: Mapping[str, str] | None = None) -> CompileCache | None:
        """The cache the environment names (see the module docstring), or None when it is off."""
        env = os.environ if environ is None else environ
        configured = env.get("RELAYCC_CACHE_DIR")
        if configured is not None:
            if configured.strip().lower() in _OFF:
                return None
            return CompileCache(Path(configured).expanduser())
        base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
        return CompileCache(Path(base) / "relaycc")

    @property
    def objects(self) -> Path:
        return self.root / "objects"

    def path(self, key: str) -> Path:
        return self.objects / key[:2] / f"{key}.o"

    def load(self, key: str) -> bytes | None:
        """The object stored under `key`, or None. A damaged entry is removed."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        head = len(FORMAT) + _DIGEST_BYTES
        payload = data[head:]
        if data[: len(FORMAT)] != FORMAT or hashlib.sha256(payload).digest() != data[len(FORMAT) : head]:
            path.unlink(missing_ok=True)
            return None
        try:
            os.utime(path)  # recently used: the last to be evicted
        except OSError:
            pass
        return payload

    def store(self, key: str, payload: bytes) -> None:
        """Keep `payload` under `key`. A cache that cannot be written is no error: the build
        has its object either way."""
        path = self.path(key)
        tmp = path.with_name(f".{key}.{uuid.uuid4().hex}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(tmp, "wb") as stream:
                stream.write(FORMAT + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)

    def trim(self) -> None:
        """Remove the least recently used entries until the cache holds at most three quarters
        of `max_bytes` (when it holds more than `max_bytes`), and stale temporary files."""
        entries: list[tuple[float, int, Path]] = []
        try:
            shards = list(os.scandir(self.objects))
        except OSError:
            return
        now = time.time()
        for shard in shards:
            if not shard.is_dir(follow_symlinks=False):
                continue
            for entry in os.scandir(shard.path):
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.name.endswith(".tmp"):
                    if now - info.st_mtime > _STALE_TMP_SECONDS:
                        Path(entry.path).unlink(missing_ok=True)
                    continue
                entries.append((info.st_mtime, info.st_size, Path(entry.path)))
        total = sum(size for _, size, _ in entries)
        if total <= self.max_bytes:
            return
        for _, size, path in sorted(entries, key=lambda e: (e[0], e[2])):
            if total <= self.max_bytes * 3 // 4:
                break
            path.unlink(missing_ok=True)
            total -= size

    def clear(self) -> None:
        shutil.rmtree(self.objects, ignore_errors=True)


def object_key(
    compiler: Sequence[str], flags: Sequence[str], source: Path, text: bytes, include_dirs: Sequence[Path]
) -> str | None:
    """The cache key of compiling `source` (whose bytes are `text`) with `flags`, or None when
    the object may depend on something the key cannot see."""
    headers = included_headers(source, text, [Path(d) for d in include_dirs])
    if headers is None or _CLOCK_MACROS.search(text):
        return None
    digest = hashlib.sha256()
    for part in (FORMAT, compiler_identity(tuple(compiler), _native(flags)).encode(), "\0".join(flags).encode()):
        digest.update(len(part).to_bytes(8, "little") + part)
    if any(f.startswith("-g") and f != "-g0" for f in flags):
        # Debug information records where the source was.
        digest.update(str(source.resolve()).encode())
    digest.update(len(text).to_bytes(8, "little") + text)
    for name, content in headers:
        digest.update(len(name).to_bytes(8, "little") + name + len(content).to_bytes(8, "little") + content)
    return digest.hexdigest()


def _native(flags: Sequence[str]) -> bool:
    return any(f.endswith("=native") for f in flags)


def included_headers(
    source: Path, text: bytes, include_dirs: list[Path]
) -> list[tuple[bytes, bytes]] | None:
    """(name, text) of every header reachable from `text` through the include directories
    (and, for `"x.h"`, the including file's directory), in a fixed order. Headers found only on
    the compiler's own search path are the compiler's: its identity covers them. None when an
    include cannot be followed."""
    found: list[tuple[bytes, bytes]] = []
    seen: set[Path] = set()
    pending = [(source.parent, text)]
    while pending:
        directory, content = pending.pop(0)
        for match in _INCLUDE.finditer(content):
            kind, name = match.group(1), match.group(2)
            if kind is None:
                return None
            candidates = ([directory] if kind == b'"' else []) + include_dirs
            for base in candidates:
                path = base / os.fsdecode(name)
                if path.is_file():
                    resolved = path.resolve()
                    if resolved not in seen:
                        seen.add(resolved)
                        header = path.read_bytes()
                        found.append((kind + name, header))
                        pending.append((path.parent, header))
                    break
    return found


@lru_cache(maxsize=None)
def compiler_identity(compiler: tuple[str, ...], native: bool) -> str:
    """What tells one compiler from another without running it: each word of the command,
    resolved on PATH with its executable's size and modification time (a new gcc package
    changes them), and, for `-march=native` and the like, the CPU the code is built for."""
    parts = []
    for word in compiler:
        located = shutil.which(word)
        if located is None:
            parts.append(word)
            continue
        real = os.path.realpath(located)
        info = os.stat(real)
        parts.append(f"{word}={real}:{info.st_size}:{info.st_mtime_ns}")
    if native:
        parts.append(cpu_identity())
    return "\n".join(parts)


def cpu_identity() -> str:
    """The CPU's model and feature flags (what -march=native expands from)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        import platform

        return f"{platform.machine()} {platform.processor()}"
    wanted = ("model name", "flags", "Features", "CPU implementer", "CPU part", "isa")
    lines = []
    for line in text.splitlines():
        name = line.split(":", 1)[0].strip()
        if name in wanted and line not in lines:
            lines.append(line)
        if not line.strip() and lines:
            break  # the first processor says it for all
    return "\n".join(lines)
