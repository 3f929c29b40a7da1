"""Test helper: build many PrimFuncs into one shared library and call them with numpy arrays.

A few C files for a whole test module (building each function separately would spend minutes
in the C compiler), compiled side by side and linked into one library. The objects are kept
by the sha256 of their source in a directory the xdist workers share: a module's library that
both workers need is compiled once, each worker taking the chunks the other has not started.
The build uses the default flags plus `-Wall -Wextra` and keeps the warnings, so a test can
require there are none. When a chunk fails to build, each of its functions is checked alone,
so the error names the function that broke it and the others still run.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compiler.backend.codegen_c import emit_c_files, emit_c_module
from compiler.runtime.build import DEFAULT_CFLAGS, WARNING_FLAGS, compiler_command, needs_openmp
from compiler.runtime.ffi import Library, aligned_empty, load_library, prim_func_cdef
from compiler.tir.analysis import substitute, workspace_bytes
from compiler.tir.expr import Const, PrimExpr, Var
from compiler.tir.simplify import simplify_expr
from compiler.tir.stmt import PrimFunc

WORKSPACE_ALIGNMENT = 16


def _compile(source: str, directory: Path, stem: str, extra: Sequence[str] = ()) -> tuple[int, str]:
    """(exit status, compiler output) of building `source` as lib<stem>.so with warnings on."""
    c_file = directory / f"{stem}.c"
    c_file.write_text(source)
    command = compiler_command(
        [c_file], directory / f"lib{stem}.so", cflags=[*DEFAULT_CFLAGS, *WARNING_FLAGS, *extra],
        openmp=needs_openmp([source]),
    )
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stderr + proc.stdout


@dataclass(repr=False)
class PrimLibrary:
    """PrimFuncs built together. `broken` maps a function left out of the build to the
    compiler's complaint about it; `warnings` are the build's warning lines."""

    library: Library | None
    funcs: dict[str, PrimFunc]
    warnings: list[str]
    source: str
    broken: dict[str, str] = field(default_factory=dict)
    cdef: str = ""

    def __repr__(self) -> str:
        # Not the dataclass repr: that of a PrimFunc expands shared expressions and a failing
        # test's report (which shows its arguments) would never finish printing.
        return f"PrimLibrary({len(self.funcs)} functions, {len(self.broken)} broken, {len(self.warnings)} warnings)"

    def __getstate__(self) -> dict[str, object]:
        # Pickled by the xdist worker that built it (tests/built_once.py): the loaded library
        # is a handle of that process, so the file is loaded again where it is unpickled.
        state = dict(self.__dict__)
        state["library"] = None if self.library is None else self.library.path
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        path = state["library"]
        self.__dict__.update(state)
        self.library = None if path is None else load_library(Path(str(path)), self.cdef)

    def run(self, name: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Calls `name` on `inputs`; returns its freshly allocated outputs."""
        if name in self.broken:
            raise AssertionError(f"{name} did not compile:\n{self.broken[name]}")
        assert self.library is not None
        func = self.funcs[name]
        assert len(inputs) == len(func.inputs), f"{name} takes {len(func.inputs)} inputs, got {len(inputs)}"
        scalars = dims_of_inputs(func, inputs)
        outputs = [np.empty(tuple(evaluate_dim(d, scalars) for d in b.shape), dtype=b.dtype) for b in func.outputs]
        args: list[object] = [np.ascontiguousarray(a) for a in inputs] + outputs
        args.extend(scalars[v] for v in func.scalar_params)
        workspace = workspace_bytes(func, WORKSPACE_ALIGNMENT)
        if workspace:
            args.append(aligned_empty(workspace, WORKSPACE_ALIGNMENT))
        status = self.library.call(name, *args)
        assert status == 0, f"{name} returned {status}"
        return outputs


def dims_of_inputs(func: PrimFunc, inputs: Sequence[np.ndarray]) -> dict[Var, int]:
    """The values of `func`'s dim variables (its scalar parameters) for these inputs: each is
    the extent of the input dim it names."""
    values: dict[Var, int] = {}
    for buffer, array in zip(func.inputs, inputs):
        for dim, extent in zip(buffer.shape, np.shape(array)):
            if isinstance(dim, Var):
                values[dim] = int(extent)
    missing = [v.name for v in func.scalar_params if v not in values]
    assert not missing, f"{func.name}: no input has the dims {missing}"
    return values


def evaluate_dim(dim: int | PrimExpr, scalars: Mapping[Var, int]) -> int:
    if isinstance(dim, int):
        return dim
    value = simplify_expr(substitute(dim, {v: Const(n, v.dtype) for v, n in scalars.items()}))  # type: ignore[arg-type]
    assert isinstance(value, Const), f"dim {dim} is not closed over the scalars"
    return int(value.value)


# Bytes of C per chunk: small enough that two chunks keep two cores busy, large enough that
# the per-file start-up of the C compiler stays small.
CHUNK_BYTES = 160_000


def build_prim_library(funcs: Sequence[PrimFunc], directory: Path, stem: str = "prims") -> PrimLibrary:
    by_name = {f.name: f for f in funcs}
    objects = _object_cache(directory)
    chunks, sources = _chunks(funcs)
    # Workers that build the same library start from opposite ends of its chunk list.
    order = list(range(len(chunks)))
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0")[-1:] in "13579":
        order.reverse()
    with ThreadPoolExecutor(max_workers=max(1, min(len(chunks), os.cpu_count() or 1))) as pool:
        built = dict(zip(order, pool.map(lambda i: _build_chunk(chunks[i], sources[i], directory, objects), order)))
    broken = {name: why for _, _, failed in built.values() for name, why in failed.items()}
    warnings = [line for _, output, _ in built.values() for line in output.splitlines() if "warning:" in line]
    built_sources = [built[i][0] for i in range(len(chunks))]
    source = "\n".join(built_sources)
    linked = [_object_path(objects, chunk) for chunk in built_sources if chunk]
    if not linked:
        return PrimLibrary(None, by_name, warnings, source, broken)
    library_path = directory / f"lib{stem}.so"
    command = compiler_command(linked, library_path, cflags=[*DEFAULT_CFLAGS], openmp=needs_openmp([source]))
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"the objects of {len(funcs)} functions fail to link:\n{proc.stderr}"
    cdef = "\n".join(prim_func_cdef(f) for f in funcs if f.name not in broken)
    library = load_library(library_path, cdef)
    return PrimLibrary(library, by_name, warnings, source, broken, cdef)


def _chunks(funcs: Sequence[PrimFunc]) -> tuple[list[list[PrimFunc]], list[str]]:
    """The functions in groups of about CHUNK_BYTES of C, and each group's source. Every
    function is emitted once (emitting is a third of a large library's build)."""
    groups: list[list[int]] = [[]]

    def split(bodies: Sequence[str]) -> list[list[int]]:
        size = 0
        for index, body in enumerate(bodies):
            if groups[-1] and size + len(body) > CHUNK_BYTES:
                groups.append([])
                size = 0
            groups[-1].append(index)
            size += len(body)
        return groups

    if not funcs:
        return [], []
    sources = emit_c_files(funcs, split, workspace_alignment=WORKSPACE_ALIGNMENT)
    return [[funcs[i] for i in group] for group in groups], sources


def _object_cache(directory: Path) -> Path:
    """Where objects are kept: beside the xdist workers' own temporary directories (so both
    workers find them), else in `directory`."""
    for parent in directory.parents:
        if parent.name.startswith("popen-gw"):
            cache = parent.parent / "prim-objects"
            break
    else:
        cache = directory / "objects"
    cache.mkdir(parents=True, exist_ok=True)
    return cache


def _object_path(objects: Path, source: str) -> Path:
    return objects / f"{hashlib.sha256(source.encode()).hexdigest()}.o"


def _build_chunk(funcs: list[PrimFunc], source: str, directory: Path, objects: Path) -> tuple[str, str, dict[str, str]]:
    """(source of the chunk's object, compiler output, functions left out with why); the
    source is empty when no function of the chunk builds."""
    status, output = _object(source, objects)
    if status == 0:
        return source, output, {}
    # Find the culprits with a quick syntax check of each function on its own.
    broken: dict[str, str] = {}
    for func in funcs:
        alone = emit_c_module([func], workspace_alignment=WORKSPACE_ALIGNMENT)
        code, complaint = _compile(alone, directory, f"single-{uuid.uuid4().hex}", ["-fsyntax-only"])
        if code != 0:
            broken[func.name] = complaint
    good = [f for f in funcs if f.name not in broken]
    if not good:
        return "", "", broken or {f.name: output for f in funcs}
    source = emit_c_module(good, workspace_alignment=WORKSPACE_ALIGNMENT)
    status, output = _object(source, objects)
    assert status == 0, f"the C of {len(good)} functions fails to build only together:\n{output}"
    return source, output, broken


def _object(source: str, objects: Path) -> tuple[int, str]:
    """Compile `source` to its object in `objects` unless another process has: (exit status,
    compiler output). The object's lock is held while it is compiled."""
    target = _object_path(objects, source)
    log = target.with_suffix(".log")
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return 0, log.read_text() if log.exists() else ""
        c_file = target.with_name(f"{target.stem}.{uuid.uuid4().hex}.c")
        c_file.write_text(source)
        partial = target.with_name(f"{target.stem}.{uuid.uuid4().hex}.o")
        command = compiler_command([c_file], partial, cflags=[*DEFAULT_CFLAGS, *WARNING_FLAGS],
                                   openmp=needs_openmp([source]))
        command = [word for word in command if word not in ("-shared", "-lm")] + ["-c"]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
        output = proc.stderr + proc.stdout
        c_file.unlink()
        if proc.returncode == 0:
            log.write_text(output)
            os.replace(partial, target)
        return proc.returncode, output
