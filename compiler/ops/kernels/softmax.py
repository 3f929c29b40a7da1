"""nn.softmax and nn.log_softmax along any axis: a max pass, an exp-sum pass, a normalize pass.

Every (outer, inner) position around the axis is one iteration of a flat (parallel) loop that
makes the three passes along the axis. Subtracting the maximum first keeps exp from overflowing.
exp is the costly part, so softmax computes it once, parking the values in the output until the
sum is known; only when a fused epilogue changes the output dtype is it recomputed instead.
Along a contiguous (last) axis of static length the three passes are vector loops: max and sum
into partial accumulators (compiler/tir/partial_reduce.py), exp being c_math's vectorizable one.
"""

from __future__ import annotations

from collections.abc import Callable

from compiler.ops.kernels.common import unflatten
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext
from compiler.tir.partial_reduce import accumulate, fold_partials, init_partials, partial_width
from compiler.tir.stmt import Allocate, For, ForKind, LetStmt, Stmt, Store, seq

At = Callable[[te.PrimExpr], tuple[te.PrimExpr, ...]]
# float16 keeps the in-order sum (see compiler/tir/partial_reduce.py).
_VECTOR_DTYPES = ("float32", "float64")

# Elements below which softmax runs on one core.
PARALLEL_MIN_ELEMENTS = 1 << 14


def softmax_loops(
    ctx: KernelContext, data: te.Buffer, out: te.Buffer, epilogue: Epilogue, axis: int, log: bool
) -> Stmt:
    """`axis` is normalized (0 <= axis < ndim). Dims may be `?` (int64 expressions of the
    kernel's dim parameters): the loops then run to those extents."""
    dims = data.shape
    outer_dims, length, inner_dims = dims[:axis], dims[axis], dims[axis + 1:]
    outer: int | te.PrimExpr = 1
    inner: int | te.PrimExpr = 1
    for d in outer_dims:
        outer = outer * d
    for d in inner_dims:
        inner = inner * d
    static = all(isinstance(d, int) for d in dims)
    if static and outer * inner * length == 0:
        return seq()
    zero = te.const(0)
    t = ctx.var("pos")
    row_vars = [ctx.var("i") for _ in outer_dims]
    col_vars = [ctx.var("j") for _ in inner_dims]
    lets = [*zip(row_vars, unflatten(t // inner, outer_dims)), *zip(col_vars, unflatten(t % inner, inner_dims))]

    def at(k: te.PrimExpr) -> tuple[te.PrimExpr, ...]:
        return (*row_vars, k, *col_vars)

    contiguous = isinstance(inner, int) and inner == 1 and isinstance(length, int)
    if contiguous and data.dtype in _VECTOR_DTYPES and length >= 2 * partial_width(ctx):
        body = _last_axis_passes(ctx, data, out, epilogue, at, length, log)
    else:
        body = _in_order_passes(ctx, data, out, epilogue, at, length, log)
    for var, value_ in reversed(lets):
        body = LetStmt(var, value_, body)
    count = outer * inner
    # A `?` extent is taken to be large: a small run pays OpenMP's start-up, a large one gains.
    big = not static or (count > 1 and count * length >= PARALLEL_MIN_ELEMENTS)
    kind = ForKind.PARALLEL if ctx.parallel and big else ForKind.SERIAL
    return For(t, zero, te.as_expr(count), body, kind)


def _last_axis_passes(
    ctx: KernelContext, data: te.Buffer, out: te.Buffer, epilogue: Epilogue, at: At, length: int, log: bool
) -> Stmt:
    """The three passes as vector loops: the axis is contiguous, so max and sum go to partial
    accumulators (reassociating the sum) and the normalize pass is elementwise."""
    dtype = data.dtype
    width = partial_width(ctx)
    peaks = te.Buffer(ctx.fresh("peaks"), (width,), dtype, scope="local")
    sums = te.Buffer(ctx.fresh("sums"), (width,), dtype, scope="local")
    peak = te.Var(ctx.fresh("peak"), dtype)
    zero = te.const(0)

    def add(a: te.PrimExpr, b: te.PrimExpr) -> te.PrimExpr:
        return a + b

    def shifted_exp(k: te.PrimExpr) -> te.PrimExpr:
        return te.intrin("exp", data[at(k)] - peak)

    keep_exps = not log and out.dtype == dtype
    if keep_exps:
        sum_pass = accumulate(ctx, sums, width, length, lambda k: out[at(k)], add,
                              before=lambda k: Store(out, at(k), shifted_exp(k)))
    else:
        sum_pass = accumulate(ctx, sums, width, length, shifted_exp, add)
    k = ctx.var("k")
    if log:
        norm = te.Var(ctx.fresh("log_sum"), dtype)
        value = data[at(k)] - peak - norm
        norm_value: te.PrimExpr = te.intrin("log", sums[zero])
    else:
        norm = te.Var(ctx.fresh("inv_sum"), dtype)
        value = (out[at(k)] if keep_exps else shifted_exp(k)) * norm
        norm_value = te.const(1.0, dtype) / sums[zero]
    normalize = LetStmt(norm, norm_value, For(
        k, zero, te.const(length), _store(out, epilogue, at(k), value), ForKind.VECTORIZED))
    return Allocate(peaks, Allocate(sums, seq(
        init_partials(ctx, peaks, width, te.const(float("-inf"), dtype)),
        accumulate(ctx, peaks, width, length, lambda k: data[at(k)], te.maximum),
        fold_partials(ctx, peaks, width, te.maximum),
        LetStmt(peak, peaks[zero], seq(
            init_partials(ctx, sums, width, te.const(0.0, dtype)),
            sum_pass,
            fold_partials(ctx, sums, width, add),
            normalize,
        )),
    )))


def _in_order_passes(
    ctx: KernelContext, data: te.Buffer, out: te.Buffer, epilogue: Epilogue, at: At,
    length: int | te.PrimExpr, log: bool,
) -> Stmt:
    """The passes one element at a time: for a strided axis, a `?` length or a short one."""
    dtype = data.dtype
    zero = te.const(0)
    stats = te.Buffer(ctx.fresh("stats"), (2,), dtype, scope="local")  # running max, then sum
    peak, total = stats[zero], stats[te.const(1)]
    k1, k2, k3 = ctx.var("k"), ctx.var("k"), ctx.var("k")
    shifted_exp = te.intrin("exp", data[at(k2)] - peak)
    # softmax keeps each exp in the output until the sum is known, when the output can hold it.
    keep_exps = not log and out.dtype == dtype
    if keep_exps:
        sum_pass: Stmt = seq(Store(out, at(k2), shifted_exp), Store(stats, (te.const(1),), total + out[at(k2)]))
    else:
        sum_pass = Store(stats, (te.const(1),), total + shifted_exp)
    if log:
        norm = te.Var(ctx.fresh("log_sum"), dtype)
        value = data[at(k3)] - peak - norm
        normalize = LetStmt(norm, te.intrin("log", total), For(k3, zero, te.as_expr(length), _store(
            out, epilogue, at(k3), value)))
    else:
        norm = te.Var(ctx.fresh("inv_sum"), dtype)
        value = (out[at(k3)] if keep_exps else te.intrin("exp", data[at(k3)] - peak)) * norm
        normalize = LetStmt(norm, te.const(1.0, dtype) / total, For(k3, zero, te.as_expr(length), _store(
            out, epilogue, at(k3), value)))
    return Allocate(stats, seq(
        Store(stats, (zero,), te.const(float("-inf"), dtype)),
        For(k1, zero, te.as_expr(length), Store(stats, (zero,), te.maximum(peak, data[at(k1)]))),
        Store(stats, (te.const(1),), te.const(0.0, dtype)),
        For(k2, zero, te.as_expr(length), sum_pass),
        normalize,
    ))


def _store(out: te.Buffer, epilogue: Epilogue, idx: tuple[te.PrimExpr, ...], value: te.PrimExpr) -> Stmt:
    return Store(out, idx, te.cast(out.dtype, epilogue(value, idx)))
