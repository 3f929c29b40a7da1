"""Loops of the 2-D pools on channel-blocked data, NCHW[b]c in and out (what blocked
activations between packed convolutions give them, compiler/passes/blocked_activations.py).

The general loops (pool.py) run along a row's x innermost and split the channel at every
access: on NCHW[b]c that is a gather of one float per `b` (ResNet-50's max pool took 6.4 ms
so, against 0.76 on NCHW). Here the innermost loop is the b channels of one pixel, contiguous
in memory, so every window tap is one vector operation, and the bounds checks sit at the
kernel-row and kernel-column levels. Window semantics, the accumulation order (kernel rows,
then columns) and the averages' counts are those of pool.py, so results are the same bits.
The batch and the image size may be the kernel's `?` parameters (a model of run-time image
size keeps its activations blocked too); the block is always static.
"""

from __future__ import annotations

from collections.abc import Callable

from compiler.ops.kernels.half_stages import stage_half_conversions
from compiler.ops.kernels.pool import PoolWindow, _kind_of_loop, accumulator_dtype, average_expr
from compiler.ops.layout import Layout
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, LetStmt, Stmt, Store, seq


def channel_block(in_layout: Layout, out_layout: Layout) -> int | None:
    """b when both layouts are NCHW[b]c with one b, else None."""
    axes = in_layout.axes
    if out_layout.axes != axes or len(axes) != 5 or in_layout.primal != "NCHW" or axes[4][0] != "c":
        return None
    return axes[4][1]


def _dims(buffer: te.Buffer) -> tuple[int | te.PrimExpr, ...]:
    return tuple(buffer.shape)


def _extent(d: int | te.PrimExpr) -> te.PrimExpr:
    return te.const(d) if isinstance(d, int) else d


def _index_vars(ctx: KernelContext, dims: tuple[int | te.PrimExpr, ...]) -> Callable[[str], te.Var]:
    """Loop variables of the dims' width: int64 with a run-time dim, whose int64 extents would
    otherwise be cast back to int32 in every index (and keep gcc from vectorizing)."""
    if all(isinstance(d, int) for d in dims):
        return ctx.var
    return lambda name: te.Var(ctx.fresh(name), "int64")


def blocked_pool2d_loops(
    ctx: KernelContext,
    data: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    window: PoolWindow,
    kind: str,
    lowest: float | int,
    count_include_pad: bool = False,
) -> Stmt:
    """`kind` "max" or "avg" over windows; one output row per iteration of a flat loop."""
    n, blocks, h, w, block = _dims(data)
    _, _, oh, ow, _ = _dims(out)
    b = int(block)  # type: ignore[arg-type]  # the block is static
    (kh, kw), (sh, sw), (dh, dw) = window.pool_size, window.strides, window.dilation
    top, left, bottom, right = window.padding
    acc_dtype = accumulator_dtype(data.dtype, kind)
    zero = te.const(0)
    var = _index_vars(ctx, _dims(data) + _dims(out))
    t, img, blk, y, x = var("row"), var("n"), var("cb"), var("y"), var("x")
    iy, ix, ky, kx = var("iy"), var("ix"), var("ky"), var("kx")
    j, zj, sj = var("j"), var("j"), var("j")
    acc = te.Buffer(ctx.fresh("acc"), (b,), acc_dtype, scope="local")
    value = te.cast(acc_dtype, data[img, blk, iy, ix, j])
    combined = te.maximum(acc[j], value) if kind == "max" else acc[j] + value
    # float16 data (a max pool, float32 inside): each tap's run widened whole, F16C's vector
    # conversion where the machine has it, not lane by lane.
    tap = stage_half_conversions(ctx, For(j, zero, te.const(b), Store(acc, (j,), combined), ForKind.VECTORIZED))
    columns = For(kx, zero, te.const(kw), LetStmt(ix, x * sw - left + kx * dw, IfThenElse(
        te.logical_and(ix >= 0, ix < w), tap)))
    reduce = For(ky, zero, te.const(kh), LetStmt(iy, y * sh - top + ky * dh, IfThenElse(
        te.logical_and(iy >= 0, iy < h), columns)))
    init = For(zj, zero, te.const(b), Store(acc, (zj,), te.const(lowest if kind == "max" else 0, acc_dtype)),
               ForKind.VECTORIZED)
    result: te.PrimExpr = acc[sj]
    counting: Stmt = seq()
    count: te.Buffer | None = None
    if kind == "avg":
        lo_h, hi_h, lo_w, hi_w = (-top, h + bottom, -left, w + right) if count_include_pad else (0, h, 0, w)
        count = te.Buffer(ctx.fresh("count"), (2,), "int32", scope="local")
        cy, cx = var("ky"), var("kx")
        ry, rx = y * sh - top + cy * dh, x * sw - left + cx * dw
        one = te.const(1)
        counting = seq(
            Store(count, (zero,), zero),
            Store(count, (one,), zero),
            For(cy, zero, te.const(kh), Store(count, (zero,), count[zero] + te.cast(
                "int32", te.logical_and(ry >= lo_h, ry < hi_h)))),
            For(cx, zero, te.const(kw), Store(count, (one,), count[one] + te.cast(
                "int32", te.logical_and(rx >= lo_w, rx < hi_w)))),
        )
        result = average_expr(acc[sj], count[zero] * count[one], out.dtype)
    idx = (img, blk, y, x, sj)
    store = stage_half_conversions(ctx, For(sj, zero, te.const(b), Store(
        out, idx, te.cast(out.dtype, epilogue(te.cast(out.dtype, result), idx))), ForKind.VECTORIZED))
    body: Stmt = Allocate(acc, seq(init, reduce, counting, store))
    if count is not None:
        body = Allocate(count, body)
    if kind == "max" and data.dtype == acc_dtype == out.dtype and _clamps_exactly(window, h, w, oh, ow):
        body = _clamped_max(ctx, data, out, epilogue, window, lowest, (img, blk, y, x), var)
    rows = n * blocks * oh
    kind_of_loop = _kind_of_loop(ctx, rows, rows * ow * kh * kw * b)
    return For(t, zero, _extent(rows), LetStmt(img, t // (blocks * oh), LetStmt(blk, (t // oh) % blocks, LetStmt(
        y, t % oh, For(x, zero, _extent(ow), body)))), kind_of_loop)


def _clamps_exactly(window: PoolWindow, h: object, w: object, oh: object, ow: object) -> bool:
    """Whether a max pool may read a padding tap's nearest edge pixel instead of skipping it:
    with static sizes, no dilation and every window holding an image row and column, the edge
    pixel is in the window already and comes next to the padding tap in the taps' order, and
    taking an element twice in a row leaves the maximum's bits as they were (NaN and signed
    zeros included). Without the branch per tap gcc keeps the running maximum in registers
    (ResNet-50's 3x3 stride-2 max pool: 200-240 -> 120 us on the AVX-512 machine, one thread)."""
    if not all(isinstance(d, int) for d in (h, w, oh, ow)) or window.dilation != (1, 1):
        return False
    (kh, kw), (sh, sw) = window.pool_size, window.strides
    top, left, _, _ = window.padding

    def covered(size: int, out: int, k: int, stride: int, before: int) -> bool:
        return k - 1 - before >= 0 and (out - 1) * stride - before <= size - 1

    return covered(h, oh, kh, sh, top) and covered(w, ow, kw, sw, left)  # type: ignore[arg-type]


def _clamped_max(
    ctx: KernelContext, data: te.Buffer, out: te.Buffer, epilogue: Epilogue, window: PoolWindow,
    lowest: float | int, pixel: tuple[te.Var, te.Var, te.Var, te.Var], var: Callable[[str], te.Var],
) -> Stmt:
    """One output pixel's channel block, each channel's window reduced in a scalar inside the
    vector loop, padding taps reading the nearest edge pixel (`_clamps_exactly`)."""
    img, blk, y, x = pixel
    _, _, h, w, block = _dims(data)
    (kh, kw), (sh, sw) = window.pool_size, window.strides
    top, left, _, _ = window.padding
    zero = te.const(0)
    j, iy, ix, ky, kx = var("j"), var("iy"), var("ix"), var("ky"), var("kx")
    best = te.Buffer(ctx.fresh("best"), (1,), data.dtype, scope="local")
    tap = Store(best, (zero,), te.maximum(best[zero], data[img, blk, iy, ix, j]))
    taps = For(ky, zero, te.const(kh), LetStmt(iy, te.minimum(te.maximum(y * sh - top + ky, zero), te.const(h) - 1), For(
        kx, zero, te.const(kw), LetStmt(ix, te.minimum(te.maximum(x * sw - left + kx, zero), te.const(w) - 1), tap))))
    idx = (img, blk, y, x, j)
    lane = seq(Store(best, (zero,), te.const(lowest, data.dtype)), taps,
               Store(out, idx, te.cast(out.dtype, epilogue(best[zero], idx))))
    return For(j, zero, te.const(int(block)), Allocate(best, lane), ForKind.VECTORIZED)  # type: ignore[arg-type]


def blocked_global_pool2d_loops(
    ctx: KernelContext, data: te.Buffer, out: te.Buffer, epilogue: Epilogue, kind: str, lowest: float | int,
) -> Stmt:
    """Max or average over all of H and W for every (n, channel block)."""
    n, blocks, h, w, block = _dims(data)
    b = int(block)  # type: ignore[arg-type]  # the block is static
    acc_dtype = accumulator_dtype(data.dtype, kind)
    zero = te.const(0)
    var = _index_vars(ctx, _dims(data))
    t, img, blk = var("plane"), var("n"), var("cb")
    iy, ix, j, zj, sj = var("iy"), var("ix"), var("j"), var("j"), var("j")
    acc = te.Buffer(ctx.fresh("acc"), (b,), acc_dtype, scope="local")
    value = te.cast(acc_dtype, data[img, blk, iy, ix, j])
    combined = te.maximum(acc[j], value) if kind == "max" else acc[j] + value
    reduce = For(iy, zero, _extent(h), For(ix, zero, _extent(w), For(
        j, zero, te.const(b), Store(acc, (j,), combined), ForKind.VECTORIZED)))
    init = For(zj, zero, te.const(b), Store(acc, (zj,), te.const(lowest if kind == "max" else 0, acc_dtype)),
               ForKind.VECTORIZED)
    result: te.PrimExpr = acc[sj] if kind == "max" else average_expr(acc[sj], _extent(h) * w, out.dtype)
    idx = (img, blk, zero, zero, sj)
    store = For(sj, zero, te.const(b), Store(out, idx, te.cast(out.dtype, epilogue(te.cast(out.dtype, result), idx))),
                ForKind.VECTORIZED)
    planes = n * blocks
    kind_of_loop = _kind_of_loop(ctx, planes, planes * h * w * b)
    return For(t, zero, _extent(planes), LetStmt(img, t // blocks, LetStmt(blk, t % blocks, Allocate(
        acc, seq(init, reduce, store)))), kind_of_loop)
