"""Writing primitive functions for the kernel tests, and running their C on numpy arrays.

A test module lowers all its cases first and builds them into one shared library (one C
compiler run per module instead of one per case), then calls each function through cffi.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from compiler import ops
from compiler.backend.lower_primitive import lower_primitive
from compiler.ir.expr import Function
from compiler.parser import parse_expr
from compiler.passes.infer_type import infer_expr
from compiler.runtime.ffi import Library as BuiltLibrary, aligned_empty
from compiler.tir.analysis import workspace_bytes
from compiler.tir.compute import KernelContext
from compiler.tir.stmt import PrimFunc
from tests.compiler.backend.prim_library import WORKSPACE_ALIGNMENT, build_prim_library


def lower_text(text: str, name: str, *, parallel: bool = True) -> PrimFunc:
    """The PrimFunc of a primitive function written in Relay text."""
    func = parse_expr(text)
    assert isinstance(func, Function)
    infer_expr(func)
    return lower_primitive(func, name, KernelContext(parallel=parallel))


def relay_attr(value: object) -> str:
    """An attribute value in Relay text."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(relay_attr(v) for v in value) + "]"
    return str(value)


def op_call(op: str, num_inputs: int, attrs: Mapping[str, object]) -> str:
    """`op(%p0, ..., key=value, ...)` in Relay text."""
    args = [f"%p{i}" for i in range(num_inputs)] + [f"{k}={relay_attr(v)}" for k, v in attrs.items()]
    return f"{op}({', '.join(args)})"


def reference(op: str, inputs: Sequence[np.ndarray], attrs: Mapping[str, object]) -> np.ndarray:
    """The op's numpy reference result."""
    opdef = ops.get(op)
    result = opdef.reference(list(inputs), opdef.make_attrs(attrs))
    assert isinstance(result, np.ndarray)
    return result


def relay_type(array: np.ndarray) -> str:
    return f"Tensor[({', '.join(str(d) for d in array.shape)}{',' if array.ndim == 1 else ''}), {array.dtype}]"


def primitive(call: str, inputs: Sequence[np.ndarray], tail: str = "") -> str:
    """`fn (%p0, %p1, ...) { <call>; <tail> }` with each parameter typed after its array.

    `call` uses %p0, %p1...; `tail` (optional) consumes the call's value as %0."""
    params = ", ".join(f"%p{i}: {relay_type(a)}" for i, a in enumerate(inputs))
    body = f"%0 = {call};\n  {tail}" if tail else call
    return f"fn ({params}, Primitive=1) {{\n  {body}\n}}"


class Library:
    """PrimFuncs built together (by the backend tests' `build_prim_library`, with warnings on),
    callable with numpy arrays (inputs in parameter order)."""

    def __init__(self, funcs: Sequence[PrimFunc], directory: Path):
        self.built = build_prim_library(funcs, directory, "kernels")
        assert not self.built.broken, self.built.broken
        assert self.built.library is not None

    # Read through `built`, the one attribute, so that a Library pickles as its PrimLibrary does.
    @property
    def library(self) -> BuiltLibrary:
        assert self.built.library is not None
        return self.built.library

    @property
    def funcs(self) -> dict[str, PrimFunc]:
        return self.built.funcs

    @property
    def warnings(self) -> list[str]:
        return self.built.warnings

    def run(self, name: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        func = self.funcs[name]
        assert len(inputs) == func.num_inputs
        args: list[object] = [np.ascontiguousarray(a, dtype=b.dtype) for a, b in zip(inputs, func.inputs)]
        # Outputs start as values no kernel computes here, so an element it skips is noticed.
        outputs = [np.full(tuple(b.shape), np.nan if b.dtype.startswith("float") else 123, b.dtype)
                   for b in func.outputs]
        args.extend(outputs)
        size = workspace_bytes(func, WORKSPACE_ALIGNMENT)
        if size:
            args.append(aligned_empty(size, WORKSPACE_ALIGNMENT))
        assert self.library.call(name, *args) == 0
        return outputs
