"""Loops of the 2-D pools: windowed max/avg (nn.max_pool2d, nn.avg_pool2d) and global ones.

Window semantics are those of compiler/ops/pool.py: positions outside the input are skipped
(max pooling starts from the dtype's lowest value, so an empty window yields it); an average
divides by the input positions the window covers, or with `count_include_pad` by the positions
inside the padded extent, never by less than 1. Integer averages accumulate in int64 and
truncate toward zero. Each output row is one iteration of a flat (parallel) loop; the bounds
checks sit at the kernel-row and kernel-column levels, not around every element. Layouts may
split N or C into blocks (NCHW8c): loops run over the merged NCHW coordinates and each access
splits them again (`c // 8`, `c % 8`).
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.ops.kernels.common import buffer_dims
from compiler.ops.kernels.conv_direct import layout_index
from compiler.ops.layout import Layout, parse_layout, transform_shape
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext
from compiler.tir.dtypes import is_float
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, LetStmt, Stmt, Store, seq

# Output elements below which a pool runs on one core.
PARALLEL_MIN_WORK = 1 << 15
# Outputs of a row whose windows lie inside the input, taken a chunk at a time by the vectorized
# max pool: its accumulators live on the stack.
ROW_CHUNK = 64


def merged_dims(buffer: te.Buffer, layout: Layout) -> tuple[int, ...]:
    """A buffer's dims in the canonical order of `layout`'s primal axes sorted N, C, then the
    pooled axes as given (NCHW8c (1, 2, 5, 5, 8) -> NCHW (1, 16, 5, 5))."""
    canonical = parse_layout(canonical_letters(layout), "pool")
    dims = transform_shape(buffer_dims(buffer), layout, canonical, "pool")
    return tuple(int(d) for d in dims)  # type: ignore[arg-type]  # static buffers have int dims


def plain_dims(buffer: te.Buffer, layout: Layout) -> tuple[int | te.PrimExpr, ...]:
    """`merged_dims` of a layout that splits no axis, whose dims may be the kernel's `?`
    parameters (a pool over an image of run-time size)."""
    letters = canonical_letters(layout)
    return tuple(buffer.shape[layout.primal.index(letter)] for letter in letters)


def canonical_letters(layout: Layout) -> str:
    """N, C, then the spatial axes in the order D, H, W."""
    return "NC" + "".join(letter for letter in "DHW" if letter in layout.primal)


def at(layout: Layout, coords: tuple[te.PrimExpr, ...]) -> tuple[te.PrimExpr, ...]:
    """The buffer index of the element at canonical coordinates `coords`."""
    return layout_index(layout, dict(zip(canonical_letters(layout), coords)))


@dataclass(frozen=True)
class PoolWindow:
    """Layouts; the window; the padding (top, left, bottom, right)."""

    in_layout: Layout
    out_layout: Layout
    pool_size: tuple[int, int]
    strides: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int, int, int]


def accumulator_dtype(dtype: str, kind: str) -> str:
    """float16 maxima are taken in float32, which holds every float16 value: the same result,
    and gcc vectorizes float32 comparisons where a `_Float16` one is a scalar call without
    AVX512-FP16 (ResNet-50's float16 max pool: 23 ms so, 0.4 ms in float32)."""
    if kind == "max" and dtype == "float16":
        return "float32"
    if kind == "max" or is_float(dtype):
        return dtype
    return "uint64" if dtype.startswith("uint") or dtype == "bool" else "int64"


def average_expr(total: te.PrimExpr, count: te.PrimExpr, dtype: str) -> te.PrimExpr:
    """total / count (at least 1) in `dtype`, truncating toward zero for integers."""
    count = te.maximum(count, 1)
    if is_float(dtype):
        return te.cast(dtype, total / te.cast(total.dtype, count))
    return te.cast(dtype, te.binary("tdiv", total, te.cast(total.dtype, count)))


def _kind_of_loop(ctx: KernelContext, iterations: int | te.PrimExpr, work: int | te.PrimExpr) -> ForKind:
    if not isinstance(work, int) or not isinstance(iterations, int):
        return ForKind.PARALLEL if ctx.parallel else ForKind.SERIAL  # sizes known only at run time
    return ForKind.PARALLEL if ctx.parallel and iterations > 1 and work >= PARALLEL_MIN_WORK else ForKind.SERIAL


def pool2d_loops(
    ctx: KernelContext,
    data: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    window: PoolWindow,
    kind: str,
    lowest: float | int,
    count_include_pad: bool = False,
) -> Stmt:
    """`kind` is "max" (windows start from `lowest`) or "avg". Dims may be `?` (`plain_dims`)."""
    dynamic = not (data.is_static and out.is_static)
    n, c, h, w = plain_dims(data, window.in_layout) if dynamic else merged_dims(data, window.in_layout)
    _, _, oh, ow = plain_dims(out, window.out_layout) if dynamic else merged_dims(out, window.out_layout)
    (kh, kw), (sh, sw), (dh, dw) = window.pool_size, window.strides, window.dilation
    top, left, bottom, right = window.padding
    acc_dtype = accumulator_dtype(data.dtype, kind)

    t = ctx.var("row")
    img, ch, y = ctx.var("n"), ctx.var("c"), ctx.var("y")
    x = ctx.var("x")
    acc = te.Buffer(ctx.fresh("acc"), (1,), acc_dtype, scope="local")
    zero = te.const(0)
    init_value = te.const(lowest if kind == "max" else 0, acc_dtype)

    iy, ix = ctx.var("iy"), ctx.var("ix")
    ky, kx = ctx.var("ky"), ctx.var("kx")
    value = te.cast(acc_dtype, data[at(window.in_layout, (img, ch, iy, ix))])
    combined = te.maximum(acc[zero], value) if kind == "max" else acc[zero] + value
    inner = For(kx, zero, te.const(kw), LetStmt(ix, x * sw - left + kx * dw, IfThenElse(
        te.logical_and(ix >= 0, ix < w), Store(acc, (zero,), combined))))
    reduce = For(ky, zero, te.const(kh), LetStmt(iy, y * sh - top + ky * dh, IfThenElse(
        te.logical_and(iy >= 0, iy < h), inner)))

    result: te.PrimExpr = acc[zero]
    body: Stmt = seq(Store(acc, (zero,), init_value), reduce)
    interior = _interior((w, ow), (kw, sw, dw), left)  # type: ignore[arg-type]  # ints or `?` parameters
    if kind == "max" and (dynamic or interior[1] > interior[0]):  # type: ignore[operator]  # static: ints
        edge = Allocate(acc, seq(body, _store(out, window, epilogue, img, ch, y, x, result)))
        row = _max_row(ctx, data, out, epilogue, window, (img, ch, y, x), (h, ow), interior, init_value, edge)
        rows = n * c * oh
        loop_kind = _kind_of_loop(ctx, rows, rows * ow * kh * kw)
        return For(t, zero, te.as_expr(rows), LetStmt(img, t // (c * oh), LetStmt(ch, (t // oh) % c, LetStmt(
            y, t % oh, row))), loop_kind)
    if kind == "avg":
        lo_h, hi_h, lo_w, hi_w = (-top, h + bottom, -left, w + right) if count_include_pad else (0, h, 0, w)
        count = te.Buffer(ctx.fresh("count"), (2,), "int32", scope="local")
        cy, cx = ctx.var("ky"), ctx.var("kx")
        ry, rx = y * sh - top + cy * dh, x * sw - left + cx * dw
        counting = seq(
            Store(count, (zero,), zero),
            Store(count, (te.const(1),), zero),
            For(cy, zero, te.const(kh), Store(count, (zero,), count[zero] + te.cast(
                "int32", te.logical_and(ry >= lo_h, ry < hi_h)))),
            For(cx, zero, te.const(kw), Store(count, (te.const(1),), count[te.const(1)] + te.cast(
                "int32", te.logical_and(rx >= lo_w, rx < hi_w)))),
        )
        average = average_expr(result, count[zero] * count[te.const(1)], out.dtype)
        body = Allocate(count, seq(counting, body, _store(out, window, epilogue, img, ch, y, x, average)))
    else:
        body = seq(body, _store(out, window, epilogue, img, ch, y, x, result))
    row = For(x, zero, te.as_expr(ow), Allocate(acc, body))
    rows = n * c * oh
    loop_kind = _kind_of_loop(ctx, rows, rows * ow * kh * kw)
    return For(t, zero, te.as_expr(rows), LetStmt(img, t // (c * oh), LetStmt(ch, (t // oh) % c, LetStmt(
        y, t % oh, row))), loop_kind)


def _interior(widths: tuple[int, int] | tuple[object, object], kernel: tuple[int, int, int],
              left: int) -> tuple[int, int] | tuple[te.PrimExpr, te.PrimExpr]:
    """The outputs [lo, hi) of a row whose every window column lies inside the input; for a
    row of `?` width, expressions of it (hi never below lo, so no output is stored twice)."""
    (w, ow), (kw, sw, dw) = widths, kernel
    lo = -(-left // sw)
    if isinstance(w, int) and isinstance(ow, int):
        hi = (w - 1 + left - (kw - 1) * dw) // sw + 1
        return min(max(lo, 0), ow), min(max(hi, 0), ow)
    lo_e = te.minimum(te.const(max(lo, 0), "int64"), te.as_expr(ow))
    hi_e = (te.as_expr(w) + (left - 1 - (kw - 1) * dw)) // sw + 1
    return lo_e, te.maximum(te.minimum(te.maximum(hi_e, 0), te.as_expr(ow)), lo_e)


def _max_row(
    ctx: KernelContext,
    data: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    window: PoolWindow,
    coords: tuple[te.Var, te.Var, te.Var, te.Var],
    sizes: tuple[int, int],
    interior: tuple[int, int],
    lowest: te.PrimExpr,
    edge: Stmt,
) -> Stmt:
    """One output row of a max pool: `edge` (the checked scalar window at `coords`' x) for the
    outputs whose windows reach past the left or right border, and the others a chunk at a
    time, kernel column by kernel column along the row, which the C compiler vectorizes (one
    scalar window per output ran ResNet-50's pool at ~0.3 G elements/s). Kernel rows are still
    checked: a row outside the input adds nothing. Same combination, same order, as the scalar
    window, so NaNs win as there."""
    img, ch, y, x = coords
    h, ow = sizes
    lo, hi = interior
    (kh, kw), (sh, sw), (dh, dw) = window.pool_size, window.strides, window.dilation
    top, left = window.padding[0], window.padding[1]
    zero = te.const(0)
    static = isinstance(lo, int) and isinstance(hi, int) and isinstance(ow, int)
    edges: list[Stmt] = []
    for start, stop in ((0, lo), (hi, ow)):
        if not static or stop > start:  # type: ignore[operator]  # static: ints
            edges.append(For(x, te.as_expr(start), te.as_expr(stop - start), edge))  # type: ignore[operator]
    interior_width = hi - lo  # type: ignore[operator]  # ints or PrimExprs
    chunk = min(ROW_CHUNK, interior_width) if static else ROW_CHUNK  # type: ignore[type-var]
    chunks = -(-interior_width // chunk) if static else (interior_width + (chunk - 1)) // chunk
    acc = te.Buffer(ctx.fresh("acc"), (chunk,), lowest.dtype, scope="local")
    c, x0 = ctx.var("chunk"), ctx.var("x0")
    width = te.const(chunk) if static and interior_width % chunk == 0 else te.minimum(chunk, hi - x0)
    iy, ky, kx = ctx.var("iy"), ctx.var("ky"), ctx.var("kx")
    j, zj, sj = ctx.var("j"), ctx.var("j"), ctx.var("j")
    value = te.cast(lowest.dtype, data[at(window.in_layout, (img, ch, iy, (x0 + j) * sw - left + kx * dw))])
    update = For(j, zero, width, Store(acc, (j,), te.maximum(acc[j], value)), ForKind.VECTORIZED)
    reduce = For(ky, zero, te.const(kh), LetStmt(iy, y * sh - top + ky * dh, IfThenElse(
        te.logical_and(iy >= 0, iy < h), For(kx, zero, te.const(kw), update))))
    body = seq(
        For(zj, zero, width, Store(acc, (zj,), lowest), ForKind.VECTORIZED),
        reduce,
        For(sj, zero, width, _store(out, window, epilogue, img, ch, y, x0 + sj, acc[sj]), ForKind.VECTORIZED),
    )
    inner = For(c, zero, te.as_expr(chunks), LetStmt(x0, c * chunk + lo, Allocate(acc, body)))
    return seq(*edges, inner)


def _store(
    out: te.Buffer, window: PoolWindow, epilogue: Epilogue, img: te.PrimExpr, ch: te.PrimExpr,
    y: te.PrimExpr, x: te.PrimExpr, value: te.PrimExpr,
) -> Stmt:
    idx = at(window.out_layout, (img, ch, y, x))
    return Store(out, idx, te.cast(out.dtype, epilogue(te.cast(out.dtype, value), idx)))


def global_pool2d_loops(
    ctx: KernelContext,
    data: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    in_layout: Layout,
    out_layout: Layout,
    kind: str,
    lowest: float | int,
) -> Stmt:
    """Max or average over all of H and W for every (n, c). Dims may be `?` (`plain_dims`)."""
    n, c, h, w = merged_dims(data, in_layout) if data.is_static else plain_dims(data, in_layout)
    acc_dtype = accumulator_dtype(data.dtype, kind)
    zero = te.const(0)
    t = ctx.var("plane")
    img, ch = ctx.var("n"), ctx.var("c")
    iy, ix = ctx.var("iy"), ctx.var("ix")
    acc = te.Buffer(ctx.fresh("acc"), (1,), acc_dtype, scope="local")
    value = te.cast(acc_dtype, data[at(in_layout, (img, ch, iy, ix))])
    combined = te.maximum(acc[zero], value) if kind == "max" else acc[zero] + value
    reduce = For(iy, zero, te.as_expr(h), For(ix, zero, te.as_expr(w), Store(acc, (zero,), combined)))
    result: te.PrimExpr = acc[zero] if kind == "max" else average_expr(acc[zero], te.as_expr(h * w), out.dtype)
    idx = at(out_layout, (img, ch, zero, zero))
    store = Store(out, idx, te.cast(out.dtype, epilogue(te.cast(out.dtype, result), idx)))
    init = Store(acc, (zero,), te.const(lowest if kind == "max" else 0, acc_dtype))
    body = Allocate(acc, seq(init, reduce, store))
    planes = n * c
    kind_of_loop = _kind_of_loop(ctx, planes, planes * h * w)
    return For(t, zero, te.as_expr(planes), LetStmt(img, t // c, LetStmt(ch, t % c, body)), kind_of_loop)
