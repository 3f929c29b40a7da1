"""Building generated C into a shared library with the system C compiler.

The compiler is `$CC` (split like a shell word list, so `ccache gcc` works) or `cc`. Flags are
`DEFAULT_CFLAGS` unless the caller gives its own; `-fPIC -shared` are always added since the
result must be a shared library, `-fwrapv` since integer overflow must wrap, `-fopenmp` when a
source has an OpenMP parallel loop, and the math library is linked. The library is written
under a temporary name and renamed into place, so a concurrent reader never loads a
half-written file.

Several sources are compiled to objects in parallel, a compiler process per core, and then
linked; an object found in the compile cache (compile_cache.py) is not compiled again. The
host glue (`glue_sources`: the AOT executor, calls and copies, no loops worth optimizing) is
compiled at `GLUE_OPT_LEVEL` under the default flags; flags a caller gives apply to every file.
A large constant pool arrives as raw bytes (`Blob`) and becomes an object without the C
compiler reading it as text: a stub C file declares the symbol, zero-filled, in a section of its
own, and `objcopy --update-section` puts the bytes in (`$OBJCOPY`, or `objcopy`; the pool's C
file is compiled instead where that does not work).

A failing compiler raises `BuildError` carrying the first error lines of its output.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from compiler.diagnostics import CompileError
from compiler.runtime.compile_cache import CompileCache, object_key

# -fno-math-errno: nothing reads errno after a math call, and with it kept a sqrtf inside an
# `omp parallel for` stays a call per element (layer_norm's normalize step: 200 us instead of
# 3.5 us); the results are the same, IEEE's, either way.
DEFAULT_CFLAGS: tuple[str, ...] = ("-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared", "-fopenmp-simd",
                                   "-fno-math-errno")
WARNING_FLAGS: tuple[str, ...] = ("-Wall", "-Wextra")
_REQUIRED_FOR_SHARED = ("-fPIC", "-shared")
# Integer arithmetic wraps in the generated C as it does in TVM's LLVM code and in the numpy
# references: without it, an int32 sum that overflows is undefined and -O3 may assume it never does.
_REQUIRED_SEMANTICS = ("-fwrapv",)
_OPENMP_MARK = "#pragma omp parallel"
_MAX_ERROR_LINES = 12
_TIMEOUT_S = 600
# The executor's C is calls, memcpys and pointer arithmetic, nothing -O3 vectorizes: -O1
# builds it in about 60% of -O3's compiler time (MobileNet v2's 58 KB: 0.16 s of CPU against
# 0.26 s).
GLUE_OPT_LEVEL = "-O1"
_BLOB_SECTION = ".rodata.relaycc_blob"


class BuildError(CompileError):
    """The C compiler rejected generated or user-supplied C (or could not be run)."""

    kind = "build_error"
    title = "C compiler failed"

    def __init__(self, message: str, output: str = "", command: Sequence[str] = ()):
        super().__init__(message)
        self.output = output
        self.command = list(command)


def c_compiler() -> list[str]:
    """The compiler command: `$CC` split into words, or `cc`."""
    words = shlex.split(os.environ.get("CC", "").strip())
    return words or ["cc"]


def needs_openmp(texts: Sequence[str]) -> bool:
    return any(_OPENMP_MARK in t for t in texts)


def _error_summary(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    chosen = (errors or lines)[:_MAX_ERROR_LINES]
    return "\n".join(chosen) if chosen else "(no compiler output)"


def _run(command: list[str]) -> str:
    """Runs the compiler; returns its combined output or raises BuildError."""
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except FileNotFoundError:
        raise BuildError(f"C compiler {command[0]!r} not found (set CC to a C compiler)", "", command) from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"C compiler did not finish within {_TIMEOUT_S} s", "", command) from None
    output = proc.stderr + proc.stdout
    if proc.returncode != 0:
        raise BuildError(f"C compiler failed (exit {proc.returncode}):\n{_error_summary(output)}", output, command)
    return output


def compiler_command(
    c_sources: Sequence[Path],
    out_path: Path,
    *,
    cflags: Sequence[str] | None = None,
    include_dirs: Sequence[Path | str] = (),
    libraries: Sequence[str] = (),
    library_dirs: Sequence[Path | str] = (),
    openmp: bool = False,
) -> list[str]:
    """The full compiler command line that builds `c_sources` into `out_path`."""
    flags = list(DEFAULT_CFLAGS if cflags is None else cflags)
    flags += [f for f in (*_REQUIRED_FOR_SHARED, *_REQUIRED_SEMANTICS) if f not in flags]
    if openmp and "-fopenmp" not in flags:
        flags.append("-fopenmp")
    command = [*c_compiler(), *flags]
    command += [f"-I{d}" for d in include_dirs]
    command += [str(s) for s in c_sources]
    command += ["-o", str(out_path)]
    command += [f"-L{d}" for d in library_dirs]
    command += [f"-l{lib}" for lib in libraries]
    command.append("-lm")
    return command


@dataclass(frozen=True)
class Blob:
    """Raw bytes to link as the hidden, read-only array `symbol` (`size` bytes, `alignment`-
    aligned), with `source`, a C file defining the same array, to compile where the bytes
    cannot be put into an object directly."""

    data: Path
    symbol: str
    size: int
    alignment: int
    source: Path


def build_shared_library(
    c_sources: Sequence[Path],
    out_path: Path,
    *,
    cflags: Sequence[str] | None = None,
    include_dirs: Sequence[Path | str] = (),
    libraries: Sequence[str] = (),
    library_dirs: Sequence[Path | str] = (),
    glue_sources: Sequence[Path] = (),
    blobs: Sequence[Blob] = (),
    cache: CompileCache | None = None,
    jobs: int | None = None,
    on_compile: Callable[[Path, bool], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Compiles and links `glue_sources`, `c_sources` and `blobs` into the shared library
    `out_path`; returns `out_path`. `jobs` compiler processes run at once (default: one per
    core); `on_compile(source, cached)` hears of each object as it is ready, and
    `progress(done, total)` of the count of objects ready (0 first, once per object after; calls
    never overlap and `done` only grows)."""
    if not c_sources and not glue_sources:
        raise BuildError("no C sources to build")
    counter = _Counter(len(c_sources) + len(glue_sources) + len(blobs), progress)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.{uuid.uuid4().hex}.tmp")
    try:
        if len(c_sources) == 1 and not glue_sources and not blobs and cache is None:
            # One file and nothing to reuse: one compiler process compiles and links.
            texts = [Path(s).read_text() for s in c_sources]
            _run(compiler_command(
                c_sources, tmp, cflags=cflags, include_dirs=include_dirs, libraries=libraries,
                library_dirs=library_dirs, openmp=needs_openmp(texts)))
            counter.advance()
        else:
            with tempfile.TemporaryDirectory(prefix="relaycc-objects-") as work:
                units = [_Unit(Path(s), _object_flags(cflags, glue=True)) for s in glue_sources]
                units += [_Unit(Path(s), _object_flags(cflags, glue=False)) for s in c_sources]
                objects, openmp = _compile_all(units, Path(work), include_dirs, cache, jobs, on_compile, counter)
                for blob in blobs:
                    objects.append(_blob_object(blob, Path(work), cflags, include_dirs))
                    counter.advance()
                _run(_link_command(objects, tmp, cflags, libraries, library_dirs, openmp))
        os.replace(tmp, out_path)
    finally:
        tmp.unlink(missing_ok=True)
    return out_path


class _Counter:
    """Objects ready out of `total`, told to `progress`. The compiler processes finish on
    several threads: counting and telling happen under one lock, so a listener that writes
    each count somewhere never writes an older count after a newer one."""

    def __init__(self, total: int, progress: Callable[[int, int], None] | None):
        self.total = total
        self.done = 0
        self.progress = progress
        self.lock = threading.Lock()
        self._tell()

    def advance(self) -> None:
        with self.lock:
            self.done += 1
            self._tell()

    def _tell(self) -> None:
        if self.progress is not None:
            self.progress(self.done, self.total)


@dataclass(frozen=True)
class _Unit:
    source: Path
    flags: tuple[str, ...]


def _object_flags(cflags: Sequence[str] | None, *, glue: bool) -> tuple[str, ...]:
    """The flags compiling one file to an object: the caller's, or the defaults (with
    GLUE_OPT_LEVEL for glue), without -shared, with what every object needs."""
    if cflags is None:
        flags = [GLUE_OPT_LEVEL if glue and f.startswith("-O") else f for f in DEFAULT_CFLAGS]
    else:
        flags = list(cflags)
    flags = [f for f in flags if f != "-shared"]
    flags += [f for f in ("-fPIC", *_REQUIRED_SEMANTICS) if f not in flags]
    return tuple(flags)


def _compile_all(
    units: Sequence[_Unit],
    work: Path,
    include_dirs: Sequence[Path | str],
    cache: CompileCache | None,
    jobs: int | None,
    on_compile: Callable[[Path, bool], None] | None,
    counter: _Counter,
) -> tuple[list[Path], bool]:
    """Objects for `units` (in their order) and whether any needs OpenMP. The first failing
    file, in the given order, is the error raised."""
    compiler = c_compiler()
    includes = [Path(d) for d in include_dirs]

    stored: list[Path] = []

    def one(index: int, unit: _Unit) -> tuple[Path, bool]:
        text = unit.source.read_bytes()
        openmp = _OPENMP_MARK.encode() in text
        flags = (*unit.flags, "-fopenmp") if openmp and "-fopenmp" not in unit.flags else unit.flags
        obj = work / f"{index}_{unit.source.stem}.o"
        key = object_key(compiler, flags, unit.source, text, includes) if cache is not None else None
        cached = cache.load(key) if cache is not None and key is not None else None
        if cached is not None:
            obj.write_bytes(cached)
        else:
            _run([*compiler, *flags, *[f"-I{d}" for d in include_dirs], "-c", str(unit.source), "-o", str(obj)])
            if cache is not None and key is not None:
                cache.store(key, obj.read_bytes())
                stored.append(obj)
        if on_compile is not None:
            on_compile(unit.source, cached is not None)
        counter.advance()
        return obj, openmp

    workers = max(1, min(len(units), jobs or _cores()))
    if workers == 1:
        results = [one(i, u) for i, u in enumerate(units)]
    else:
        with ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(one, i, u) for i, u in enumerate(units)]
            # Every file has its turn before an error is raised, and the error raised is that
            # of the first failing file, whatever order the processes finished in.
            errors = [f.exception() for f in futures]
            first = next((e for e in errors if e is not None), None)
            if first is not None:
                raise first
            results = [f.result() for f in futures]
    if cache is not None and stored:
        cache.trim()
    return [obj for obj, _ in results], any(openmp for _, openmp in results)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _link_command(
    objects: Sequence[Path],
    out_path: Path,
    cflags: Sequence[str] | None,
    libraries: Sequence[str],
    library_dirs: Sequence[Path | str],
    openmp: bool,
) -> list[str]:
    flags = list(DEFAULT_CFLAGS if cflags is None else cflags)
    flags += [f for f in (*_REQUIRED_FOR_SHARED,) if f not in flags]
    if openmp and "-fopenmp" not in flags:
        flags.append("-fopenmp")
    command = [*c_compiler(), *flags, *[str(o) for o in objects], "-o", str(out_path)]
    command += [f"-L{d}" for d in library_dirs]
    command += [f"-l{lib}" for lib in libraries]
    command.append("-lm")
    return command


def _blob_object(blob: Blob, work: Path, cflags: Sequence[str] | None, include_dirs: Sequence[Path | str]) -> Path:
    """The object defining `blob.symbol`: a stub of zeros whose section gets the bytes, or,
    where that fails, the object of `blob.source`."""
    flags = [*_object_flags(cflags, glue=True), "-O0"]
    stub = work / f"{blob.symbol}_stub.c"
    stub.write_text(
        "#include <stdint.h>\n"
        f'__attribute__((visibility("hidden"), aligned({blob.alignment}), section("{_BLOB_SECTION}")))\n'
        f"const uint8_t {blob.symbol}[{blob.size}] = {{0}};\n"
    )
    zeros, obj = work / f"{blob.symbol}_stub.o", work / f"{blob.symbol}.o"
    objcopy = shlex.split(os.environ.get("OBJCOPY", "").strip()) or ["objcopy"]
    if blob.data.stat().st_size == blob.size and shutil.which(objcopy[0]) is not None:
        try:
            _run([*c_compiler(), *flags, "-c", str(stub), "-o", str(zeros)])
            _run([*objcopy, f"--update-section={_BLOB_SECTION}={blob.data}", str(zeros), str(obj)])
            return obj
        except BuildError:
            pass
    _run([*c_compiler(), *flags, *[f"-I{d}" for d in include_dirs], "-c", str(blob.source), "-o", str(obj)])
    return obj


def compile_check(source: str, extra_flags: Sequence[str] = ()) -> list[str]:
    """Compiles `source` to an object file with `-Wall -Wextra` and the default flags; returns
    the warning lines. Errors (including warnings under `-Werror`) raise BuildError."""
    flags = [f for f in DEFAULT_CFLAGS if f != "-shared"]
    if needs_openmp([source]):
        flags.append("-fopenmp")
    with tempfile.TemporaryDirectory(prefix="relaycc-check-") as tmp:
        src = Path(tmp) / "check.c"
        src.write_text(source)
        obj = Path(tmp) / "check.o"
        command = [*c_compiler(), *flags, *WARNING_FLAGS, *extra_flags, "-c", str(src), "-o", str(obj)]
        output = _run(command)
    return [ln for ln in output.splitlines() if "warning:" in ln]
