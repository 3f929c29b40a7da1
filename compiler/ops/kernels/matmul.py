"""dense, matmul and batch_matmul as `dot_gemm` or `gemm` products.

Leading dims of a matmul's data fold into the rows of one product (the weight is shared);
batch_matmul is a batched product whose batch of 1 on either side is broadcast. When both
operands run along the reduction in memory (dense; `transpose_b` without `transpose_a`), the
lane-wise `dot_gemm` needs no packing; otherwise `gemm` reads A one element per row and k step
and repacks B, so transposed operands need no copy either.
"""

from __future__ import annotations

from collections.abc import Sequence

from compiler.ops.kernels.common import buffer_dims, unflatten
from compiler.ops.kernels.dot import DotSpec, dot_gemm
from compiler.ops.kernels.gemm import GemmSpec, RowReader, gemm, vector_lanes
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext
from compiler.tir.stmt import Stmt, Store

# Shorter reductions leave most lanes of the dot products idle; the packed gemm serves them.
DOT_MIN_VECTORS = 2


Lets = tuple[tuple[te.Var, te.PrimExpr], ...]


def _row_lets(ctx: KernelContext, index: tuple[te.PrimExpr, ...]) -> tuple[Lets, tuple[te.PrimExpr, ...]]:
    """Binds the parts of a row index that need division to variables, computed once per tile."""
    if len(index) <= 1:
        return (), index
    vars_ = tuple(ctx.var("row") for _ in index)
    return tuple(zip(vars_, index)), vars_


def _rows_contiguous(ctx: KernelContext, transpose_a: bool, transpose_b: bool, k: int, dtype: str) -> bool:
    """True when both operands run along k in memory and k fills a few vectors: then the
    lane-wise dot products of `dot_gemm` need no packing (see compiler/ops/kernels/dot.py)."""
    return not transpose_a and transpose_b and k >= DOT_MIN_VECTORS * vector_lanes(ctx, dtype)


def matmul_loops(
    ctx: KernelContext,
    data: te.Buffer,
    weight: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    transpose_a: bool,
    transpose_b: bool,
) -> Stmt:
    """`out[..., m, n] = sum_k data[..., m, k] * weight[k, n]`, each operand optionally
    transposed (dense is `transpose_b`); data may have any number of leading dims."""
    out_dims = buffer_dims(out)
    w_dims = buffer_dims(weight)
    k = w_dims[0] if not transpose_b else w_dims[1]
    rows_dims = out_dims[:-1]
    m = 1
    for d in rows_dims:
        m *= d

    def a_row(b: te.PrimExpr, row: te.PrimExpr) -> RowReader:
        lets, index = _row_lets(ctx, unflatten(row, rows_dims))

        def load(ks: Sequence[te.PrimExpr]) -> te.PrimExpr:
            if transpose_a:
                return data[(*index[:-1], ks[0], index[-1])]
            return data[(*index, ks[0])]

        return RowReader(lets, load)

    def b_load(bb: te.PrimExpr, ks: Sequence[te.PrimExpr], n: te.PrimExpr) -> te.PrimExpr:
        return weight[n, ks[0]] if transpose_b else weight[ks[0], n]

    def store(b: te.PrimExpr, row: te.PrimExpr, n: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        idx = (*unflatten(row, rows_dims), n)
        return Store(out, idx, te.cast(out.dtype, epilogue(value, idx)))

    if _rows_contiguous(ctx, transpose_a, transpose_b, k, out.dtype):
        def b_row(b: te.PrimExpr, n: te.PrimExpr) -> RowReader:
            return RowReader((), lambda ks: weight[n, ks[0]])

        return dot_gemm(ctx, DotSpec(1, m, out_dims[-1], k, out.dtype, a_row, b_row, store))
    spec = GemmSpec(batch=1, m=m, n=out_dims[-1], k=(k,), dtype=out.dtype, a_row=a_row, b_load=b_load, store=store)
    return gemm(ctx, spec)


def batch_matmul_loops(
    ctx: KernelContext,
    x: te.Buffer,
    y: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    transpose_a: bool,
    transpose_b: bool,
) -> Stmt:
    """`out[b, m, n] = sum_k x[b, m, k] * y[b, k, n]` (each optionally transposed); a batch of 1
    on either side is shared by every output batch."""
    batch, m, n = buffer_dims(out)
    x_batch, y_batch = buffer_dims(x)[0], buffer_dims(y)[0]
    y_dims = buffer_dims(y)
    k = y_dims[2] if transpose_b else y_dims[1]

    def a_row(b: te.PrimExpr, row: te.PrimExpr) -> RowReader:
        bx = b if x_batch > 1 else te.const(0)

        def load(ks: Sequence[te.PrimExpr]) -> te.PrimExpr:
            return x[bx, ks[0], row] if transpose_a else x[bx, row, ks[0]]

        return RowReader((), load)

    def b_load(bb: te.PrimExpr, ks: Sequence[te.PrimExpr], col: te.PrimExpr) -> te.PrimExpr:
        return y[bb, col, ks[0]] if transpose_b else y[bb, ks[0], col]

    def store(b: te.PrimExpr, row: te.PrimExpr, col: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        idx = (b, row, col)
        return Store(out, idx, te.cast(out.dtype, epilogue(value, idx)))

    if _rows_contiguous(ctx, transpose_a, transpose_b, k, out.dtype):
        def b_row(b: te.PrimExpr, col: te.PrimExpr) -> RowReader:
            by = b if y_batch > 1 else te.const(0)
            return RowReader((), lambda ks: y[by, col, ks[0]])

        return dot_gemm(ctx, DotSpec(batch, m, n, k, out.dtype, a_row, b_row, store))
    spec = GemmSpec(
        batch=batch, m=m, n=n, k=(k,), dtype=out.dtype, a_row=a_row, b_load=b_load, store=store,
        b_batches=y_batch, b_batch_of=lambda b: b if y_batch > 1 else te.const(0),
    )
    return gemm(ctx, spec)
