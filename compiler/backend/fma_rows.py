"""A register tile's reduction step, row by row, as calls of a vector helper.

A product's tile (compiler/ops/kernels/gemm.py) accumulates each row with a vectorized loop,
`acc[c + j] += a * w[e + j]` for j below the tile's width. gcc vectorizes each such loop on its
own: a 6x16 tile's step is six loops, and a kernel whose reduction loop is unrolled 16 steps
(`unroll_k`) has 96 of them per tile, which cost gcc more time than the rest of the kernel.
Written as calls of `relaycc_fmarow_f32` (c_helpers.py), whose loops over whole vectors of the
build machine's width gcc unrolls without analysis, the same instructions come out: one
broadcast of `a`, the weight vectors loaded, one FMA per vector (GNU C contracts `d += a * w`
as it does the loop). Only float32 rows of a local accumulator qualify, read from a float32
buffer whose last index is the loop's variable, the rest of both indices free of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.tir.analysis import post_order
from compiler.tir.expr import Binary, Buffer, Const, Load, PrimExpr, Var
from compiler.tir.stmt import For, ForKind, Store

FLOAT = "float32"


@dataclass(frozen=True)
class FmaRow:
    """`acc[offset + j] += scale * weight[... , first + j]` for j in [0, width)."""

    acc: Buffer
    offset: int
    scale: PrimExpr
    weight: Load  # the weight's element at j = 0
    width: int


def _uses(expr: PrimExpr, var: Var) -> bool:
    return any(node is var for node in post_order(expr))


def _offset(index: PrimExpr, var: Var) -> int | None:
    """c where `index` is `var + c` (or `var`, or `c + var`) for a constant integer c."""
    if index is var:
        return 0
    if isinstance(index, Binary) and index.op == "+":
        for x, c in ((index.a, index.b), (index.b, index.a)):
            if x is var and isinstance(c, Const) and isinstance(c.value, int) and not isinstance(c.value, bool):
                return c.value
    return None


def fma_row(loop: For) -> FmaRow | None:
    """The row step `loop` computes, when it is one (see the module docstring)."""
    j, store = loop.var, loop.body
    if loop.kind is not ForKind.VECTORIZED or not isinstance(store, Store):
        return None
    if not (isinstance(loop.begin, Const) and loop.begin.value == 0 and isinstance(loop.extent, Const)):
        return None
    width = loop.extent.value
    acc = store.buffer
    if not isinstance(width, int) or width < 1 or acc.scope != "local" or acc.dtype != FLOAT or len(store.indices) != 1:
        return None
    offset = _offset(store.indices[0], j)
    value = store.value
    if offset is None or not (isinstance(value, Binary) and value.op == "+" and value.dtype == FLOAT):
        return None
    old, product = value.a, value.b
    if not (isinstance(old, Load) and old.buffer is acc and len(old.indices) == 1
            and _offset(old.indices[0], j) == offset):
        return None
    if not (isinstance(product, Binary) and product.op == "*"):
        return None
    for scale, weight in ((product.a, product.b), (product.b, product.a)):
        if (isinstance(weight, Load) and weight.dtype == FLOAT and weight.buffer.dtype == FLOAT
                and weight.buffer is not acc and weight.indices and weight.indices[-1] is j
                and not any(_uses(i, j) for i in weight.indices[:-1])
                and scale.dtype == FLOAT and not _uses(scale, j)):
            first = Load(weight.buffer, (*weight.indices[:-1], Const(0, j.dtype)), weight.dtype)
            return FmaRow(acc, offset, scale, first, width)
    return None
