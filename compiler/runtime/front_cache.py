"""A key of the command line in front of the whole-build cache, so a repeated `relaycc compile`
finds its build without importing the compiler (ccache's "direct mode").

The whole-build key (build_cache.py, assembled by the driver) covers the parsed options and the
codegen documents, which take the compiler's imports to read: 0.3 s of a 0.35 s cached
`relaycc compile`. The front key is a BLAKE3 hash of what the command line gives, read as bytes:
the command, its options as written, the model's and the parameters' bytes, the config file's,
the working directory, the environment variables a build reads, the cores the process may use
(the kernels' band slots follow them), relaycc's files, Python's and numpy's identity, and the C
toolchain with the CPU. Its entry names the whole-build key it led to, and the libraries that
key found for the codegens (`-lopenblas` for `cblas`) with their size and modification time; a
lookup checks those before it trusts the entry. Command lines the front key cannot follow get
no entry: `--codegen` documents (their library sources and headers are read through the
compiler), and builds that did not find a codegen's library (one installed later would change
the whole-build key, and looking for it takes the compiler).

Entries sit beside the builds, `<cache root>/front/<2 hex>/<key>`, each a small JSON document
written to a temporary file and renamed into place. One whose build has been evicted is
removed by the build cache's `trim`.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import blake3

FORMAT = b"relaycc-front/1\n"
# What a build reads from the environment besides RELAYCC_* (runtime/build.py, the C compiler).
ENVIRONMENT = ("CC", "NM", "PATH", "LIBRARY_PATH", "LD_LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH",
               "GCC_EXEC_PREFIX", "COMPILER_PATH", "TMPDIR")


def front_key(parts: Sequence[tuple[str, bytes | str]], environ: Mapping[str, str] | None = None) -> str:
    """The front key of a command line's `parts` (labelled, in a fixed order) on this machine."""
    import compiler
    from compiler.runtime.build import c_compiler
    from compiler.runtime.build_cache import package_identity, toolchain_identity

    env = os.environ if environ is None else environ
    digest = blake3.blake3(FORMAT)

    def add(label: str, data: bytes | str) -> None:
        payload = data.encode() if isinstance(data, str) else data
        tag = label.encode()
        digest.update(len(tag).to_bytes(8, "little") + tag + len(payload).to_bytes(8, "little"))
        digest.update(payload)

    for label, data in parts:
        add(label, data)
    add("cwd", os.getcwd())
    add("environment", json.dumps(sorted((k, v) for k, v in env.items()
                                         if k.startswith("RELAYCC_") or k in ENVIRONMENT)))
    add("cores", str(len(os.sched_getaffinity(0))))
    add("python", sys.version)
    add("numpy", _package_file("numpy"))
    add("relaycc", package_identity(Path(compiler.__file__).parent))
    tools = [[env.get("NM", "").strip() or "nm"]]
    add("toolchain", toolchain_identity(c_compiler(), tools))
    return digest.hexdigest()


def _package_file(name: str) -> str:
    """Where an installed package's `__init__.py` is, with its size and time (an upgrade
    rewrites it), found without importing the package."""
    from importlib.util import find_spec

    spec = find_spec(name)
    origin = spec.origin if spec is not None else None
    if origin is None:
        return "not installed"
    info = os.stat(origin)
    return f"{origin}:{info.st_size}:{info.st_mtime_ns}"


@dataclass(frozen=True)
class FrontCache:
    root: Path  # the compile cache's root

    @property
    def front(self) -> Path:
        return self.root / "front"

    def path(self, key: str) -> Path:
        return self.front / key[:2] / key

    def lookup(self, key: str) -> str | None:
        """The whole-build key `key` led to, when its libraries are as they were; else None
        (a damaged or outdated entry is removed)."""
        path = self.path(key)
        try:
            entry = json.loads(path.read_bytes())
            build_key, libraries = entry["key"], entry["libraries"]
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            return None
        if not isinstance(build_key, str) or not all(_unchanged(item) for item in libraries):
            path.unlink(missing_ok=True)
            return None
        return build_key

    def store(self, key: str, build_key: str, libraries: Iterable[Path]) -> None:
        """Remember that `key` leads to `build_key`, whose libraries are `libraries`. A cache
        that cannot be written is no error."""
        records = []
        for library in libraries:
            try:
                info = os.stat(library)
            except OSError:
                return
            records.append([str(library), info.st_size, info.st_mtime_ns])
        path = self.path(key)
        tmp = path.with_name(f".{key}.{uuid.uuid4().hex}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp.write_text(json.dumps({"key": build_key, "libraries": records}))
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)

    def forget_missing(self, has_build: Callable[[str], bool]) -> None:
        """Remove the entries whose build is gone (`has_build(build key)` is False)."""
        try:
            shards = list(os.scandir(self.front))
        except OSError:
            return
        for shard in shards:
            try:
                names = list(os.scandir(shard.path))
            except OSError:
                continue
            for item in names:
                try:
                    build_key = json.loads(Path(item.path).read_bytes())["key"]
                    keep = isinstance(build_key, str) and has_build(build_key)
                except (OSError, ValueError, KeyError, TypeError):
                    keep = False
                if not keep:
                    Path(item.path).unlink(missing_ok=True)


def _unchanged(record: object) -> bool:
    if not (isinstance(record, list) and len(record) == 3):
        return False
    path, size, mtime_ns = record
    try:
        info = os.stat(path)
    except (OSError, TypeError):
        return False
    return info.st_size == size and info.st_mtime_ns == mtime_ns

