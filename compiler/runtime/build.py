"""Building generated C into a shared library with the system C compiler.

The compiler is `$CC` (split like a shell word list, so `ccache gcc` works) or `cc`. Flags are
`DEFAULT_CFLAGS` unless the caller gives its own; `-fPIC -shared` are always added since the
result must be a shared library, `-fwrapv` since integer overflow must wrap, `-fopenmp` when a
source has an OpenMP parallel loop, and the math library is linked. The library is written
under a temporary name and renamed into place, so a concurrent reader never loads a
half-written file.

Several sources are compiled to objects in parallel, a compiler process per core, and then
linked; an object found in the compile cache (compile_cache.py) is not compiled again. A
`LibraryBuilder` starts each file as soon as its writer hands it over (the driver writes the
glue and the constant pool first, then the kernels, largest first, then the artifacts nothing
compiles while the compilers run), and a build left by an exception kills its compilers. The
host glue (`glue_sources`: the AOT executor, calls and copies, no loops worth optimizing) is
compiled at `GLUE_OPT_LEVEL` under the default flags; flags a caller gives apply to every file.
A large constant pool arrives as raw bytes (`Blob`) and becomes an object without the C
compiler reading it as text: a few lines of assembly define the symbol in a section of its own
and `.incbin` the file (the assembler copies the bytes; ResNet-50's 100 MB in 0.13 s, where a
zero-filled stub compiled and then filled by `objcopy --update-section` took 0.35 s and GPT-2-
sized's 650 MB 5.1 s against 3.4). The pool's C file is compiled instead where that fails.

A failing compiler raises `BuildError` carrying the first error lines of its output and, for a
file of several, that file's name.
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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
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
    return _checked(proc.returncode, proc.stderr + proc.stdout, command)


def _checked(returncode: int, output: str, command: list[str], source: Path | None = None) -> str:
    if returncode != 0:
        where = f" on {source.name}" if source is not None else ""
        raise BuildError(f"C compiler failed{where} (exit {returncode}):\n{_error_summary(output)}", output, command)
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
    # The dynamic executor keeps a per-thread arena under a pthread key; glibc before 2.34 has
    # those functions in libpthread.
    command += ["-lm", "-pthread"]
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
    never overlap and `done` only grows). Where the sources are written one after another,
    `LibraryBuilder` starts compiling each as it comes."""
    if not c_sources and not glue_sources:
        raise BuildError("no C sources to build")
    out_path = Path(out_path)
    if len(c_sources) == 1 and not glue_sources and not blobs and cache is None:
        # One file and nothing to reuse: one compiler process compiles and links.
        counter = _Counter(progress)
        counter.seal(1)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_name(f".{out_path.name}.{uuid.uuid4().hex}.tmp")
        try:
            texts = [Path(s).read_text() for s in c_sources]
            _run(compiler_command(
                c_sources, tmp, cflags=cflags, include_dirs=include_dirs, libraries=libraries,
                library_dirs=library_dirs, openmp=needs_openmp(texts)))
            counter.advance()
            os.replace(tmp, out_path)
        finally:
            tmp.unlink(missing_ok=True)
        return out_path
    with LibraryBuilder(out_path, cflags=cflags, include_dirs=include_dirs, cache=cache, jobs=jobs,
                        on_compile=on_compile, progress=progress) as builder:
        builder.add(glue_sources, glue=True)
        builder.add(c_sources)
        for blob in blobs:
            builder.add_blob(blob)
        return builder.link(libraries=libraries, library_dirs=library_dirs)


class LibraryBuilder:
    """A shared library whose files compile while the caller is still writing the others.

    `add` hands files to a pool of compiler processes (one per core unless `jobs` says
    otherwise) that starts on them at once; `link` waits for every object and links them in
    the order they were added (blobs last), so the library does not depend on which process
    finished first. Used as a context manager: leaving the block by an exception (the caller's or a
    compiler's) kills the compilers still running, drops the files not yet started and leaves
    neither objects nor a library behind.

    `progress(done, total)` starts once the files are all known (`seal`, or `link`): 0 first,
    then the objects already ready, then one call per object; calls never overlap."""

    def __init__(
        self,
        out_path: Path,
        *,
        cflags: Sequence[str] | None = None,
        include_dirs: Sequence[Path | str] = (),
        cache: CompileCache | None = None,
        jobs: int | None = None,
        on_compile: Callable[[Path, bool], None] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ):
        self.out_path = Path(out_path)
        self.cflags = cflags
        self.include_dirs = list(include_dirs)
        self.cache = cache
        self.on_compile = on_compile
        self._counter = _Counter(progress)
        self._compiler = c_compiler()
        self._work = Path(tempfile.mkdtemp(prefix="relaycc-objects-"))
        self._pool = ThreadPoolExecutor(max(1, jobs or _cores()), thread_name_prefix="relaycc-cc")
        self._futures: list[Future[tuple[Path | None, bool]]] = []
        self._blobs: dict[int, Blob] = {}
        self._stored = False
        self._cancelled = False
        self._running: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> LibraryBuilder:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        if error is not None:
            self.cancel()
        self.close()

    def add(self, sources: Sequence[Path], *, glue: bool = False, biggest_first: bool = True) -> None:
        """Starts compiling `sources` (glue at GLUE_OPT_LEVEL under the default flags). With
        `biggest_first`, the largest file of the call starts first: a big file started last
        would keep one core busy alone at the end."""
        flags = _object_flags(self.cflags, glue=glue)
        indexed = [(len(self._futures) + k, Path(s)) for k, s in enumerate(sources)]
        self._futures += [Future() for _ in indexed]
        order = sorted(indexed, key=lambda item: -item[1].stat().st_size) if biggest_first else indexed
        for index, source in order:
            self._start(index, lambda index=index, source=source: self._compile(index, source, flags))

    def add_blob(self, blob: Blob) -> None:
        """Starts making the object of `blob` (build.py's module docstring says how)."""
        index = len(self._futures)
        self._blobs[index] = blob
        self._futures.append(Future())
        self._start(index, lambda: (self._blob(blob), False))

    def seal(self) -> None:
        """No more files: `progress` now knows the total."""
        self._counter.seal(len(self._futures))

    def link(self, *, libraries: Sequence[str] = (), library_dirs: Sequence[Path | str] = ()) -> Path:
        """Waits for every object and links them into `out_path` (under a temporary name, then
        renamed). The error of the first failing file in the order added is the one raised, once
        every file has had its turn, whatever order the processes finished in."""
        if not self._futures:
            raise BuildError("no C sources to build")
        self.seal()
        errors = [f.exception() for f in self._futures]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        # Blobs last, as build_shared_library always linked them: the constant pool's section
        # after the kernels' read-only data.
        blobs = set(self._blobs)
        results = [f.result() for i, f in enumerate(self._futures) if i not in blobs]
        for index, blob in self._blobs.items():
            obj, _ = self._futures[index].result()
            if obj is None:
                obj = _blob_from_source(blob, self._work, self.cflags, self.include_dirs, self._track)
                self._counter.advance()
            results.append((obj, False))
        if self.cache is not None and self._stored:
            self.cache.trim()
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out_path.with_name(f".{self.out_path.name}.{uuid.uuid4().hex}.tmp")
        try:
            command = _link_command([obj for obj, _ in results], tmp, self.cflags, libraries, library_dirs,
                                    any(openmp for _, openmp in results), soname=self.out_path.name)
            self._track(command)
            os.replace(tmp, self.out_path)
        finally:
            tmp.unlink(missing_ok=True)
        return self.out_path

    def cancel(self) -> None:
        """Stops the build: files not started are dropped and running compilers are killed."""
        with self._lock:
            self._cancelled = True
            running = list(self._running)
        for proc in running:
            proc.kill()

    def close(self) -> None:
        """Waits for the pool's threads to end and removes the objects."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self._work, ignore_errors=True)

    # -- the pool's side ----------------------------------------------------------------------

    def _start(self, index: int, work: Callable[[], tuple[Path | None, bool]]) -> None:
        target = self._futures[index]

        def run() -> None:
            try:
                target.set_result(work())
            except BaseException as error:  # noqa: BLE001  # handed to whoever links
                target.set_exception(error)

        self._pool.submit(run)

    def _compile(self, index: int, source: Path, flags: tuple[str, ...]) -> tuple[Path, bool]:
        text = source.read_bytes()
        openmp = _OPENMP_MARK.encode() in text
        flags = (*flags, "-fopenmp") if openmp and "-fopenmp" not in flags else flags
        obj = self._work / f"{index}_{source.stem}.o"
        key = object_key(self._compiler, flags, source, text, self.include_dirs) if self.cache is not None else None
        cached = self.cache.load(key) if self.cache is not None and key is not None else None
        if cached is not None:
            obj.write_bytes(cached)
        else:
            includes = [f"-I{d}" for d in self.include_dirs]
            self._track([*self._compiler, *flags, *includes, "-c", str(source), "-o", str(obj)], source)
            if self.cache is not None and key is not None:
                self.cache.store(key, obj.read_bytes())
                self._stored = True
        if self.on_compile is not None:
            self.on_compile(source, cached is not None)
        self._counter.advance()
        return obj, openmp

    def _blob(self, blob: Blob) -> Path | None:
        """The blob's object, or None when it must come from its C source: the caller may still
        be writing that file, so `link` compiles it."""
        obj = _blob_by_assembler(blob, self._work, self.cflags, self._track)
        if obj is not None:
            self._counter.advance()
        return obj

    def _track(self, command: list[str], source: Path | None = None) -> str:
        """`_run`, with the process known to `cancel`; an error names `source`."""
        with self._lock:
            if self._cancelled:
                raise BuildError("build cancelled", "", command)
            try:
                proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            except FileNotFoundError:
                raise BuildError(f"C compiler {command[0]!r} not found (set CC to a C compiler)", "", command) from None
            self._running.add(proc)
        try:
            out, err = proc.communicate(timeout=_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise BuildError(f"C compiler did not finish within {_TIMEOUT_S} s", "", command) from None
        finally:
            with self._lock:
                self._running.discard(proc)
        if self._cancelled:
            raise BuildError("build cancelled", "", command)
        return _checked(proc.returncode, err + out, command, source)


class _Counter:
    """Objects ready out of `total`, told to `progress` once the total is known (`seal`). The
    compiler processes finish on several threads: counting and telling happen under one lock,
    so a listener that writes each count somewhere never writes an older count after a newer
    one."""

    def __init__(self, progress: Callable[[int, int], None] | None):
        self.total: int | None = None
        self.done = 0
        self.progress = progress
        self.lock = threading.Lock()

    def seal(self, total: int) -> None:
        with self.lock:
            if self.total is not None:
                return
            self.total = total
            for done in range(self.done + 1):
                self._tell(done)

    def advance(self) -> None:
        with self.lock:
            self.done += 1
            if self.total is not None:
                self._tell(self.done)

    def _tell(self, done: int) -> None:
        if self.progress is not None and self.total is not None:
            self.progress(done, self.total)


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


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@lru_cache(maxsize=1)
def _has_gold() -> bool:
    """Whether binutils' gold linker is installed. It writes a library holding a large constant
    pool in about half the time of the default bfd linker (ResNet-50's 100 MB pool: 0.7 s
    against 1.5 s, most of bfd's spent in the kernel writing its output); flags that choose a
    linker themselves are left alone."""
    return shutil.which("ld.gold") is not None


def _link_command(
    objects: Sequence[Path],
    out_path: Path,
    cflags: Sequence[str] | None,
    libraries: Sequence[str],
    library_dirs: Sequence[Path | str],
    openmp: bool,
    soname: str,
) -> list[str]:
    """`soname` is the library's final file name: gold writes the name it links into (our
    temporary one) as the library's base version unless given a soname, which made two builds
    of one model differ."""
    flags = list(DEFAULT_CFLAGS if cflags is None else cflags)
    flags += [f for f in (*_REQUIRED_FOR_SHARED,) if f not in flags]
    if openmp and "-fopenmp" not in flags:
        flags.append("-fopenmp")
    if not any(f.startswith("-fuse-ld=") for f in flags) and _has_gold():
        flags.append("-fuse-ld=gold")
    # Debian's compiler asks the linker for a build ID, a SHA-1 of the whole library: 0.17 s of
    # the link, which runs alone at the end of a build, for ResNet-50's 100 MB of weights. Nothing
    # reads it (no debug info is shipped to match it against); flags that ask for one get one.
    if not any("--build-id" in f for f in flags):
        flags.append("-Wl,--build-id=none")
    command = [*c_compiler(), *flags, *[str(o) for o in objects], "-o", str(out_path), f"-Wl,-soname,{soname}"]
    command += [f"-L{d}" for d in library_dirs]
    command += [f"-l{lib}" for lib in libraries]
    # The dynamic executor keeps a per-thread arena under a pthread key; glibc before 2.34 has
    # those functions in libpthread.
    command += ["-lm", "-pthread"]
    return command


def _blob_by_assembler(blob: Blob, work: Path, cflags: Sequence[str] | None,
                       run: Callable[[list[str]], str]) -> Path | None:
    """The object defining `blob.symbol` as the bytes of `blob.data` (`.incbin`), or None where
    that does not work (a compiler whose assembler fails on it, or data of another size)."""
    if blob.data.stat().st_size != blob.size:
        return None
    quoted = str(blob.data.resolve()).replace("\\", "\\\\").replace('"', '\\"')
    source, obj = work / f"{blob.symbol}.s", work / f"{blob.symbol}.o"
    source.write_text(
        f'\t.section {_BLOB_SECTION},"a"\n'
        f"\t.balign {blob.alignment}\n"
        f"\t.globl {blob.symbol}\n"
        f"\t.hidden {blob.symbol}\n"
        f"\t.type {blob.symbol}, @object\n"
        f"\t.size {blob.symbol}, {blob.size}\n"
        f"{blob.symbol}:\n"
        f'\t.incbin "{quoted}"\n'
        # No executable stack wanted (the linker warns about an object without this note).
        '\t.section .note.GNU-stack,"",@progbits\n'
    )
    try:
        run([*c_compiler(), *_object_flags(cflags, glue=True), "-c", str(source), "-o", str(obj)])
    except BuildError:
        return None
    return obj


def _blob_from_source(
    blob: Blob, work: Path, cflags: Sequence[str] | None, include_dirs: Sequence[Path | str],
    run: Callable[[list[str]], str],
) -> Path:
    """The object of `blob.source`, the blob's C definition (read as text: slow for a big one)."""
    obj = work / f"{blob.symbol}.o"
    flags = [*_object_flags(cflags, glue=True), "-O0"]
    run([*c_compiler(), *flags, *[f"-I{d}" for d in include_dirs], "-c", str(blob.source), "-o", str(obj)])
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
