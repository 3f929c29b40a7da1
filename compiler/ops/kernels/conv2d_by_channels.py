"""nn.conv2d as `out[o, pixel] = sum_k W[o, k] * X[k, pixel]`: output channels are the product's
rows, pixels its vector columns.

The pixel-rows form of conv2d.py broadcasts one input value per (pixel, k) step: in NCHW those
values sit a whole channel plane apart from one k step to the next, and its weights are packed
per call. Here the tile broadcasts weights instead (a weight row is contiguous in k in OIHW, and
read in place) and loads two vectors of input per k step, consecutive pixels of one input row.

Pixels are numbered on the grid of the (padded) input's width: output pixel (y, x) is column
`p = y * WP + x` with `WP` the padded width, so that tap (ky, kx) of every column is the input
element `p + ky * dh * WP + kx * dw` of its channel plane, one affine index for the whole panel
whatever the row. Columns with `x >= OW` (the padding's width) are computed and never stored:
(WP - OW) / WP of the work, 3% on a 56-wide 3x3 layer, more on 7-wide maps. Input rows are copied
into that grid when padding, a stride (1x1 kernels only, where striding is subsampling) or the
layout requires it, with slack after the last plane for the panel that runs past the end;
otherwise the kernel reads the input in place.

Taken for float convolutions with one group whose windows step by one input element (any 1x1
kernel, or strides of 1); the others keep conv2d.py's forms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from compiler.ops.kernels.gemm import GemmSpec, Panels, RowReader, gemm, index_var, vector_lanes
from compiler.tir import expr as te
from compiler.tir.compute import KernelContext
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, LetStmt, Stmt, seq
from compiler.tir.stmt import Store as StoreStmt

INDEX = "int64"
PARALLEL_MIN_COPY = 1 << 15

Load4 = Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], te.PrimExpr]
Store4 = Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], Stmt]


def _i(value: int) -> te.PrimExpr:
    return te.const(value, INDEX)


def applies(dtype: str, groups: int, kernel: tuple[int, int], strides: tuple[int, int], channels: int) -> bool:
    """Whether this form computes the convolution (else conv2d.py's pixel-rows forms do)."""
    unit_steps = strides == (1, 1) or kernel == (1, 1)
    return dtype in ("float32", "float64") and groups == 1 and unit_steps and channels > 1


def conv2d_by_channels(
    ctx: KernelContext,
    data: te.Buffer,
    in_place: bool,
    dims: tuple[int, int, int, int, int, int, int, int, int],
    window: tuple[tuple[int, int], tuple[int, int], tuple[int, int]],
    src: Load4,
    wgt: Load4,
    store: Store4,
    dtype: str,
) -> Stmt:
    """`dims`: n, c, h, w (input), o, kh, kw, oh, ow; `window`: strides, dilation, (top, left).
    `in_place`: the input is NCHW (read it directly when nothing else asks for a copy); `src`
    reads the input by canonical (n, c, y, x) coordinates for the copy."""
    n, c, h, w, o, kh, kw, oh, ow = dims
    (sh, sw), (dh, dw), (top, left) = window
    hp, wp = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    if kh == kw == 1:  # striding is subsampling: the copy takes every sh-th row and sw-th column
        hp, wp = oh, ow
    nr = 2 * vector_lanes(ctx, dtype)
    columns = oh * wp
    panels = -(-columns // nr)
    last_read = panels * nr - 1 + (kh - 1) * dh * wp + (kw - 1) * dw
    plane = hp * wp
    direct = in_place and top == left == 0 and (hp, wp) == (h, w) and (sh, sw) == (1, 1)
    if direct and last_read < plane:
        def read(img: te.PrimExpr, ci: te.PrimExpr, flat: te.PrimExpr) -> te.PrimExpr:
            return te.cast(dtype, data[img, ci, _i(0), flat])  # the flat offset in the plane
        return _product(ctx, (n, c, o, kh, kw, oh, ow, wp), (dh, dw), nr, read, wgt, store, dtype)
    slack = max(0, last_read + 1 - plane)
    grid = te.Buffer(ctx.fresh("grid"), (n * c * plane + slack,), dtype)

    def read_grid(img: te.PrimExpr, ci: te.PrimExpr, flat: te.PrimExpr) -> te.PrimExpr:
        return grid[(img * c + ci) * plane + flat]

    steps = (1, 1) if kh > 1 or kw > 1 else (sh, sw)
    fill = _copy(ctx, grid, src, (n, c, h, w, hp, wp), steps, (top, left), slack, dtype)
    body = _product(ctx, (n, c, o, kh, kw, oh, ow, wp), (dh, dw), nr, read_grid, wgt, store, dtype)
    return Allocate(grid, seq(fill, body))


def _product(
    ctx: KernelContext,
    dims: tuple[int, int, int, int, int, int, int, int],
    dilation: tuple[int, int],
    nr: int,
    read: Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr], te.PrimExpr],
    wgt: Load4,
    store: Store4,
    dtype: str,
) -> Stmt:
    n, c, o, kh, kw, oh, ow, wp = dims
    dh, dw = dilation

    def a_row(b: te.PrimExpr, oc: te.PrimExpr) -> RowReader:
        return RowReader((), lambda ks: wgt(oc, ks[0], ks[1], ks[2]))

    def b_panel(img: te.PrimExpr, nb: te.PrimExpr, ks: Sequence[te.PrimExpr], j: te.PrimExpr) -> te.PrimExpr:
        ci, ky, kx = ks
        return read(img, ci, nb * nr + j + ky * (dh * wp) + kx * dw)

    def store_row(img: te.PrimExpr, oc: te.PrimExpr, p0: te.PrimExpr, width: int,
                  value: Callable[[te.PrimExpr], te.PrimExpr]) -> Stmt:
        # The tile's columns are runs of output rows: stores of each run, skipping the pad columns.
        y0, x0 = index_var(ctx, "y0"), index_var(ctx, "x0")
        runs: list[Stmt] = []
        for r in range((wp - 1 + width - 1) // wp + 1):
            lo, hi, jj = index_var(ctx, "lo"), index_var(ctx, "hi"), index_var(ctx, "j")
            j = lo + jj
            put = store(img, oc, y0 + r, x0 + j - r * wp, value(j))
            loop = For(jj, _i(0), te.maximum(hi - lo, _i(0)), put, ForKind.VECTORIZED)
            lo_e = _i(0) if r == 0 else te.maximum(_i(r * wp) - x0, _i(0))
            run: Stmt = LetStmt(lo, lo_e, LetStmt(hi, te.minimum(_i(width), _i(r * wp + ow) - x0), loop))
            runs.append(run if r == 0 else IfThenElse(y0 + r < oh, run))
        return LetStmt(y0, p0 // wp, LetStmt(x0, p0 % wp, seq(*runs)))

    unused = lambda bb, ks, col: te.const(0, dtype)  # noqa: E731  # B is read through the panels
    spec = GemmSpec(
        batch=n, m=o, n=oh * wp, k=(c, kh, kw), dtype=dtype, a_row=a_row, b_load=unused,
        store=_stores_go_through_store_row,
        b_batches=n, panels=Panels(nr, b_panel), store_row=store_row,
    )
    return gemm(ctx, spec)


def _stores_go_through_store_row(*_: object) -> Stmt:
    raise AssertionError("conv2d_by_channels stores whole tile rows (GemmSpec.store_row)")


def _copy(
    ctx: KernelContext,
    grid: te.Buffer,
    src: Load4,
    dims: tuple[int, int, int, int, int, int],
    steps: tuple[int, int],
    origin: tuple[int, int],
    slack: int,
    dtype: str,
) -> Stmt:
    """Fills the grid: input rows at their padded places, zeros around them and in the slack.
    Ranges are split statically so no loop tests a bound per element."""
    n, c, h, w, hp, wp = dims
    sh, sw = steps
    top, left = origin
    plane = hp * wp
    # Grid row yy holds input row yy * sh - top when that is in [0, h); likewise columns.
    y_lo, y_hi = min(hp, -(-top // sh)), min(hp, -(-(h + top) // sh))
    x_lo, x_hi = min(wp, -(-left // sw)), min(wp, -(-(w + left) // sw))
    y_hi, x_hi = max(y_hi, y_lo), max(x_hi, x_lo)
    t, yy, xx = index_var(ctx, "plane"), index_var(ctx, "yy"), index_var(ctx, "xx")
    img, ci = index_var(ctx, "n"), index_var(ctx, "c")

    def at(y: te.PrimExpr, x: te.PrimExpr) -> te.PrimExpr:
        return t * plane + y * wp + x

    def zeros(y: te.PrimExpr, x_from: int, x_to: int) -> Stmt:
        if x_to <= x_from:
            return seq()
        x = index_var(ctx, "xz")
        return For(x, _i(x_from), _i(x_to - x_from), StoreStmt(grid, (at(y, x),), te.const(0, dtype)),
                   ForKind.VECTORIZED)

    inside = seq(
        zeros(yy, 0, x_lo),
        For(xx, _i(x_lo), _i(x_hi - x_lo), StoreStmt(grid, (at(yy, xx),), te.cast(
            dtype, src(img, ci, yy * sh - top, xx * sw - left))), ForKind.VECTORIZED),
        zeros(yy, x_hi, wp),
    )
    y_above, y_below = index_var(ctx, "yz"), index_var(ctx, "yz")
    rows = seq(
        For(y_above, _i(0), _i(y_lo), zeros(y_above, 0, wp)) if y_lo else seq(),
        For(yy, _i(y_lo), _i(y_hi - y_lo), inside) if y_hi > y_lo else seq(),
        For(y_below, _i(y_hi), _i(hp - y_hi), zeros(y_below, 0, wp)) if hp > y_hi else seq(),
    )
    body = LetStmt(img, t // c, LetStmt(ci, t % c, rows))
    kind = ForKind.PARALLEL if ctx.parallel and n * c * plane >= PARALLEL_MIN_COPY and n * c > 1 else ForKind.SERIAL
    copy = For(t, _i(0), _i(n * c), body, kind)
    if not slack:
        return copy
    s = index_var(ctx, "s")
    tail = For(s, _i(0), _i(slack), StoreStmt(grid, (_i(n * c * plane) + s,), te.const(0, dtype)), ForKind.VECTORIZED)
    return seq(copy, tail)

