"""Building generated C into a shared library with the system C compiler.

The compiler is `$CC` (split like a shell word list, so `ccache gcc` works) or `cc`. Flags are
`DEFAULT_CFLAGS` unless the caller gives its own; `-fPIC -shared` are always added since the
result must be a shared library, `-fwrapv` since integer overflow must wrap, `-fopenmp` when a source has an OpenMP parallel loop, and the
math library is linked. The library is written under a temporary name and renamed into place,
so a concurrent reader never loads a half-written file.

A failing compiler raises `BuildError` carrying the first error lines of its output.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from compiler.diagnostics import CompileError

DEFAULT_CFLAGS: tuple[str, ...] = ("-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared", "-fopenmp-simd")
WARNING_FLAGS: tuple[str, ...] = ("-Wall", "-Wextra")
_REQUIRED_FOR_SHARED = ("-fPIC", "-shared")
# Integer arithmetic wraps in the generated C as it does in TVM's LLVM code and in the numpy
# references: without it, an int32 sum that overflows is undefined and -O3 may assume it never does.
_REQUIRED_SEMANTICS = ("-fwrapv",)
_OPENMP_MARK = "#pragma omp parallel"
_MAX_ERROR_LINES = 12
_TIMEOUT_S = 600


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


def build_shared_library(
    c_sources: Sequence[Path],
    out_path: Path,
    *,
    cflags: Sequence[str] | None = None,
    include_dirs: Sequence[Path | str] = (),
    libraries: Sequence[str] = (),
    library_dirs: Sequence[Path | str] = (),
) -> Path:
    """Compiles and links `c_sources` into the shared library `out_path`; returns `out_path`."""
    if not c_sources:
        raise BuildError("no C sources to build")
    texts = [Path(s).read_text() for s in c_sources]
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.{uuid.uuid4().hex}.tmp")
    command = compiler_command(
        c_sources, tmp, cflags=cflags, include_dirs=include_dirs, libraries=libraries,
        library_dirs=library_dirs, openmp=needs_openmp(texts))
    try:
        _run(command)
        os.replace(tmp, out_path)
    finally:
        tmp.unlink(missing_ok=True)
    return out_path


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
