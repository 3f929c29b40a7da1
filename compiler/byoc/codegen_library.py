"""A codegen's C library: checked before anything is compiled, then built with the model.

`check_library(spec)` compiles the library sources to object files in a scratch directory and
reads their defined symbols with `nm`, so a codegen whose patterns name a symbol the library
does not define fails at once, with the codegen and the symbol in the message, instead of at
load time with an "undefined symbol" from the dynamic loader. A symbol the sources do not
define may come from a prebuilt library the codegen links (`libraries`): those are found like
the linker finds them (`library_dirs`, then the C compiler's search path) and read with
`nm -D`.

A source's symbols are remembered for the rest of the process, under the same key the compile
cache gives its object (compiler identity, flags, text, included headers): every build with the
codegen checks its library, and compiling cblas's to read four symbols took 0.6 s of CPU per build.

`write_library(spec, dest)` copies the sources next to the model's generated C
(`src/<codegen>/<file>`) and returns what the final link needs.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from compiler.byoc.codegen_config import RELAY_TO_TIR, CodegenSpec, LibrarySource
from compiler.backend.dlpack import HEADER_NAME, HEADER_TEXT
from compiler.diagnostics import InputError
from compiler.runtime.build import DEFAULT_CFLAGS, BuildError, c_compiler
from compiler.runtime.compile_cache import object_key

_TIMEOUT_S = 300
_DEFINED_TYPES = frozenset("TDBRVW")  # text, data, bss, read-only, weak objects and functions
# object_key of a library source -> the global symbols its object defines. Only sources that
# compiled are kept, so a broken one reports its error on every build.
_SYMBOLS_OF_SOURCE: dict[str, frozenset[str]] = {}


@dataclass(frozen=True)
class LibraryBuild:
    """What linking a codegen's library into the model needs."""

    sources: tuple[Path, ...]
    include_dirs: tuple[Path, ...]
    libraries: tuple[str, ...]
    library_dirs: tuple[Path, ...]


def combined(builds: Sequence[LibraryBuild]) -> LibraryBuild:
    """One link's worth of several libraries (each directory and library once, in order)."""
    return LibraryBuild(
        tuple(p for b in builds for p in b.sources),
        tuple(dict.fromkeys(d for b in builds for d in b.include_dirs)),
        tuple(dict.fromkeys(x for b in builds for x in b.libraries)),
        tuple(dict.fromkeys(d for b in builds for d in b.library_dirs)),
    )


def _compile_flags(cflags: Sequence[str] | None) -> list[str]:
    flags = [f for f in (DEFAULT_CFLAGS if cflags is None else cflags) if f != "-shared"]
    return flags if "-fPIC" in flags else [*flags, "-fPIC"]


def _nm() -> list[str]:
    return shlex.split(os.environ.get("NM", "").strip()) or ["nm"]


def _run(command: list[str], what: str) -> str:
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except FileNotFoundError:
        raise BuildError(f"{what}: {command[0]!r} not found", "", command) from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what}: {command[0]} did not finish within {_TIMEOUT_S} s", "", command) from None
    if proc.returncode != 0:
        output = proc.stderr + proc.stdout
        errors = [ln for ln in output.splitlines() if "error" in ln.lower()] or output.splitlines()
        raise BuildError(f"{what}: " + ("; ".join(errors[:3]) or f"exit {proc.returncode}"), output, command)
    return proc.stdout


def include_dirs(spec: CodegenSpec, generated_include: Path) -> tuple[Path, ...]:
    """The include path of the library sources: relaycc_dlpack.h first, then the spec's
    directories and the directories the sources came from."""
    dirs = [generated_include, *spec.library.include_dirs, *spec.library.source_dirs()]
    return tuple(dict.fromkeys(dirs))


def defined_symbols(spec: CodegenSpec, cflags: Sequence[str] | None = None) -> frozenset[str]:
    """The global symbols the library sources define (compiled in a scratch directory)."""
    if not spec.library.sources:
        return frozenset()
    with tempfile.TemporaryDirectory(prefix="relaycc-codegen-") as tmp:
        work = Path(tmp)
        include = work / "include"
        include.mkdir()
        (include / HEADER_NAME).write_text(HEADER_TEXT)
        compiler, flags, dirs = c_compiler(), _compile_flags(cflags), include_dirs(spec, include)
        searched = [Path(f[2:]) for f in flags if f.startswith("-I") and len(f) > 2]  # headers the key must see
        symbols: set[str] = set()
        for k, source in enumerate(spec.library.sources):
            src = work / f"{k}_{Path(source.name).name}"
            src.write_text(source.text)
            key = object_key(compiler, flags, src, source.text.encode(), [*dirs, *searched])
            known = _SYMBOLS_OF_SOURCE.get(key) if key is not None else None
            if known is None:
                obj = src.with_suffix(".o")
                what = f"codegen {spec.name}: library source {source.name} does not compile"
                _run([*compiler, *flags, *(f"-I{d}" for d in dirs), "-c", str(src), "-o", str(obj)], what)
                listing = _run([*_nm(), "-P", "-g", "--defined-only", str(obj)],
                               f"codegen {spec.name}: cannot list the symbols of {source.name}")
                known = frozenset(_defined(listing))
                if key is not None:
                    _SYMBOLS_OF_SOURCE[key] = known
            symbols.update(known)
    return frozenset(symbols)


def _defined(listing: str) -> Iterable[str]:
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1] in _DEFINED_TYPES:
            yield parts[0]


def check_library(
    spec: CodegenSpec, required: Iterable[str] = (), cflags: Sequence[str] | None = None
) -> frozenset[str] | None:
    """Compile the library and check it defines every pattern symbol (relay_to_tir codegens
    call them) and every symbol in `required`. Returns every symbol the model may call: those
    of the sources and of the linked libraries, or None when a linked library cannot be read
    (then anything might be defined, and the linker has the last word)."""
    needed = list(dict.fromkeys([*(spec.symbols if spec.mode == RELAY_TO_TIR else ()), *required]))
    defined = library_symbols(spec, cflags)
    if defined is not None:
        require_symbols(spec, needed, defined)
    return defined


def check_shipped_library(spec: CodegenSpec) -> None:
    """The check of a built-in codegen's library: its sources ship with the package and their
    test asserts they define every pattern symbol (tests/compiler/byoc/cblas/test_cblas_spec.py),
    so only the prebuilt libraries it links are looked for (a missing -lopenblas is still an
    error before anything is compiled). Compiling cblas's source to list its symbols took about
    0.6 s of a cold build, also when the model gave cblas nothing; its symbols are not known
    then, so calls into it are not checked against them (None, as check_library returns when a
    linked library cannot be read)."""
    linked_symbols(spec)
    return None


def library_symbols(spec: CodegenSpec, cflags: Sequence[str] | None = None) -> frozenset[str] | None:
    """The symbols of the library sources and of the libraries `spec` links; None when a linked
    library is not a file `nm` can read (e.g. a linker script)."""
    defined = defined_symbols(spec, cflags)
    if not spec.library.libraries:
        return defined
    linked = linked_symbols(spec)
    return None if linked is None else defined | linked


def require_symbols(spec: CodegenSpec, symbols: Iterable[str], defined: frozenset[str]) -> None:
    """InputError naming the codegen and the first symbol of `symbols` not in `defined`."""
    for symbol in symbols:
        if symbol in defined:
            continue
        if not spec.library.sources and not spec.library.libraries:
            raise InputError(f"codegen {spec.name}: symbol {symbol} is not defined: the codegen has no library")
        names = ", ".join([*(s.name for s in spec.library.sources), *(f"-l{lib}" for lib in spec.library.libraries)])
        raise InputError(f"codegen {spec.name}: symbol {symbol} is not defined by its library ({names})")


def linked_symbols(spec: CodegenSpec) -> frozenset[str] | None:
    """The dynamic symbols of the prebuilt libraries `spec` links; None when one of them is not
    a file `nm` can read."""
    symbols: set[str] = set()
    for lib in spec.library.libraries:
        path = find_library(lib, spec.library.library_dirs)
        if path is None:
            raise InputError(f"codegen {spec.name}: library -l{lib} not found")
        found = _prebuilt_symbols(path)
        if found is None:
            return None
        symbols.update(found)
    return frozenset(symbols)


# (path, size, mtime) of a prebuilt library -> its dynamic symbols (libopenblas has 15,000).
_SYMBOLS_OF_PREBUILT: dict[tuple[str, int, int], frozenset[str]] = {}


def _prebuilt_symbols(path: Path) -> frozenset[str] | None:
    info = path.stat()
    key = (str(path.resolve()), info.st_size, info.st_mtime_ns)
    if key not in _SYMBOLS_OF_PREBUILT:
        dynamic = ["-D"] if path.suffix != ".a" else []
        try:
            listing = _run([*_nm(), "-P", "-g", *dynamic, "--defined-only", str(path)], f"nm {path}")
        except BuildError:
            return None
        _SYMBOLS_OF_PREBUILT[key] = frozenset(_defined(listing))
    return _SYMBOLS_OF_PREBUILT[key]


def find_library(name: str, library_dirs: Sequence[Path]) -> Path | None:
    """Where the linker would find `-l<name>`: the given directories first, then the C
    compiler's own search path."""
    for directory in library_dirs:
        for suffix in (".so", ".a"):
            candidate = Path(directory) / f"lib{name}{suffix}"
            if candidate.exists():
                return candidate
    for suffix in (".so", ".a"):
        found = _on_search_path(tuple(c_compiler()), f"lib{name}{suffix}", f"cannot look up -l{name}")
        if found is not None and found.exists():
            return found
    return None


# (compiler, file name) -> where the compiler's search path has it: a gcc run per lookup, two per
# linked library per build. Only files found are kept (one installed later is still found).
_ON_SEARCH_PATH: dict[tuple[tuple[str, ...], str], Path] = {}


def _on_search_path(compiler: tuple[str, ...], file_name: str, what: str) -> Path | None:
    if (compiler, file_name) not in _ON_SEARCH_PATH:
        found = _run([*compiler, f"-print-file-name={file_name}"], what).strip()
        # The compiler echoes the bare name back when it does not find the file.
        if not (found and Path(found).is_absolute()):
            return None
        _ON_SEARCH_PATH[compiler, file_name] = Path(found)
    return _ON_SEARCH_PATH[compiler, file_name]


def write_library(spec: CodegenSpec, dest: Path, generated_include: Path) -> LibraryBuild:
    """Copy the library sources to `dest` (one file each, by base name) for the final link."""
    written: list[Path] = []
    for source in spec.library.sources:
        path = dest / _file_name(spec, source)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source.text)
        written.append(path)
    return LibraryBuild(tuple(written), include_dirs(spec, generated_include),
                        spec.library.libraries, spec.library.library_dirs)


def _file_name(spec: CodegenSpec, source: LibrarySource) -> str:
    name = Path(source.name).name
    if not name or name in (".", ".."):
        raise InputError(f"codegen {spec.name}: library source name {source.name!r} is not a file name")
    return name
