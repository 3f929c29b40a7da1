"""Test helper: build many PrimFuncs into one shared library and call them with numpy arrays.

One C file and one compiler run for a whole test module: building each function separately
would spend minutes in the C compiler. The build uses the default flags plus `-Wall -Wextra`
and keeps the warnings, so a test can require there are none. When the combined build fails,
each function is checked alone, so the error names the function that broke it and the others
still run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compiler.backend.codegen_c import emit_c_module
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

    def __repr__(self) -> str:
        # Not the dataclass repr: that of a PrimFunc expands shared expressions and a failing
        # test's report (which shows its arguments) would never finish printing.
        return f"PrimLibrary({len(self.funcs)} functions, {len(self.broken)} broken, {len(self.warnings)} warnings)"

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


def build_prim_library(funcs: Sequence[PrimFunc], directory: Path, stem: str = "prims") -> PrimLibrary:
    by_name = {f.name: f for f in funcs}
    broken: dict[str, str] = {}
    source = emit_c_module(funcs, workspace_alignment=WORKSPACE_ALIGNMENT)
    status, output = _compile(source, directory, stem)
    if status != 0:
        # Find the culprits with a quick syntax check of each function on its own.
        for func in funcs:
            alone = emit_c_module([func], workspace_alignment=WORKSPACE_ALIGNMENT)
            code, complaint = _compile(alone, directory, "single", ["-fsyntax-only"])
            if code != 0:
                broken[func.name] = complaint
        good = [f for f in funcs if f.name not in broken]
        if not good:
            return PrimLibrary(None, by_name, [], source, broken or {f.name: output for f in funcs})
        source = emit_c_module(good, workspace_alignment=WORKSPACE_ALIGNMENT)
        status, output = _compile(source, directory, stem)
        assert status == 0, f"the C of {len(good)} functions fails to build only together:\n{output}"
    warnings = [line for line in output.splitlines() if "warning:" in line]
    cdef = "\n".join(prim_func_cdef(f) for f in funcs if f.name not in broken)
    library = load_library(directory / f"lib{stem}.so", cdef)
    return PrimLibrary(library, by_name, warnings, source, broken)
