"""conv2d on NCHW data with a weight packed at compile time: pixels as the rows of the register
tile, `b` output channels (one or two vectors) as its columns.

The weight is OHWI[b]o, (O/b, KH, KW, I, b), or OIHW[b]o, (O/b, I, KH, KW, b): either is the
panel layout the register-blocked product reads (compiler/ops/kernels/gemm.py:
`[panel][k][column]`, k = (ky, kx, i) or (i, ky, kx)), so the kernel reads it in place: one tile
step broadcasts one input value per pixel row and loads the block's weight vectors.
AlterOpLayout packs a constant weight as OHWI[b]o (compiler/passes/alter_op_layout.py), so
nothing is packed per call. With the input channels innermost, a step's inputs sit a channel
plane apart and gcc emits a plain broadcast-FMA loop; with the taps innermost (OIHW[b]o) it
carries inputs from one tap to the next in registers and spills the tile (measured 2x slower
on 3x3 layers, gcc 12, AVX2).

Pixels are numbered on the grid of the padded input's width, as in conv2d_by_channels.py: output
(y, x) is row `p = y * WP + x`, and tap (ky, kx) of every row is the grid element
`p + ky * dh * WP + kx * dw` of its channel plane. The MR rows of a tile are then MR consecutive
elements of one plane, read at constant offsets from one address, where conv2d.py's pixel rows
each carry their own (y, x) and cross output rows. Rows with `x >= OW` are computed and never
stored ((WP - OW) / WP of the work: 3% on a 56-wide 3x3 layer). Strides and dilation read
through the grid's phase planes; the input is copied into the grid when padding or a stride
needs it, and read in place otherwise (a 1x1 stride-1 layer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from compiler.ops.kernels.conv2d_by_channels import Grid, copy_to_grid, phases_of
from compiler.ops.kernels.gemm import GemmSpec, Panels, RowReader, gemm, index_var
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, LetStmt, Stmt, Store, seq

INDEX = "int64"
FLOATS = ("float32",)


def _i(value: int) -> te.PrimExpr:
    return te.const(value, INDEX)


def applies(dtype: str, groups: int, block: int, lanes: int) -> bool:
    """Whether this kernel computes a conv2d whose weight is blocked by `block` output channels:
    float32, one group, and a block of one or two vectors (the tile's width)."""
    return dtype in FLOATS and groups == 1 and block in (lanes, 2 * lanes)


def conv2d_packed_loops(
    ctx: KernelContext,
    data: te.Buffer,
    weight: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    window: tuple[tuple[int, int], tuple[int, int], tuple[int, int]],
    taps_outer: bool,
) -> Stmt:
    """`data` NCHW, `weight` (O/b, I, KH, KW, b), or (O/b, KH, KW, I, b) when `taps_outer`,
    `out` NCHW; `window`: strides, dilation and the (top, left) padding (bottom and right follow
    from the shapes)."""
    n, c, h, w = (int(d) for d in data.shape)  # type: ignore[arg-type]  # static shapes
    if taps_outer:
        outer, kh, kw, _, nr = (int(d) for d in weight.shape)  # type: ignore[arg-type]  # static shapes
    else:
        outer, _, kh, kw, nr = (int(d) for d in weight.shape)  # type: ignore[arg-type]  # static shapes
    _, o, oh, ow = (int(d) for d in out.shape)  # type: ignore[arg-type]  # static shapes
    if n * o * oh * ow == 0:
        return seq()
    (sh, sw), (dh, dw), (top, left) = window
    phases = (phases_of(sh, dh, kh), phases_of(sw, dw, kw))
    grid = Grid((sh, sw), (dh, dw), phases, oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw)
    rows = oh * grid.wp
    last_read = rows - 1 + grid.max_shift((kh, kw))
    dtype = out.dtype
    direct = top == left == 0 and (grid.hp, grid.wp) == (h, w) and (sh, sw) == (1, 1) and last_read < grid.plane
    geometry = (n, c, kh, kw, oh, ow, grid.wp, outer * nr)

    def store(img: te.PrimExpr, oc: te.PrimExpr, y: te.PrimExpr, x: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        idx = (img, oc, y, x)
        return Store(out, idx, te.cast(dtype, epilogue(value, idx)))

    def packed(nb: te.PrimExpr, ks: Sequence[te.PrimExpr], j: te.PrimExpr) -> te.PrimExpr:
        return te.cast(dtype, weight[nb, ks[0], ks[1], ks[2], j])  # ks in the weight's order

    if direct:
        def read_data(img: te.PrimExpr, ci: te.PrimExpr, shift: te.PrimExpr, p: te.PrimExpr) -> te.PrimExpr:
            # Flat in the (image, channel) plane: rows past the last one are the next row's start.
            return te.cast(dtype, data[img, ci, _i(0), p + shift])

        return _product(ctx, geometry, grid, nr, read_data, packed, store, dtype, taps_outer)
    total = phases[0] * phases[1] * n * c * grid.plane
    buffer = te.Buffer(ctx.fresh("grid"), (total + max(0, last_read + 1 - grid.plane),), dtype)

    def read_grid(img: te.PrimExpr, ci: te.PrimExpr, shift: te.PrimExpr, p: te.PrimExpr) -> te.PrimExpr:
        return buffer[(img * c + ci) * grid.plane + p + shift]

    def src(img: te.PrimExpr, ci: te.PrimExpr, y: te.PrimExpr, x: te.PrimExpr) -> te.PrimExpr:
        return data[img, ci, y, x]

    fill = copy_to_grid(ctx, buffer, src, (n, c, h, w), grid, (top, left), total, dtype)
    return Allocate(buffer, seq(fill, _product(ctx, geometry, grid, nr, read_grid, packed, store, dtype, taps_outer)))


def _product(
    ctx: KernelContext,
    dims: tuple[int, int, int, int, int, int, int, int],
    grid: Grid,
    nr: int,
    read: Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], te.PrimExpr],
    packed: Callable[[te.PrimExpr, Sequence[te.PrimExpr], te.PrimExpr], te.PrimExpr],
    store: Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], Stmt],
    dtype: str,
    taps_outer: bool,
) -> Stmt:
    n, c, kh, kw, oh, ow, wp, o = dims

    def a_row(img: te.PrimExpr, p: te.PrimExpr) -> RowReader:
        if taps_outer:
            return RowReader((), lambda ks: read(img, ks[2], grid.offset(ks[0], ks[1], n * c), p))
        return RowReader((), lambda ks: read(img, ks[0], grid.offset(ks[1], ks[2], n * c), p))

    def b_panel(img: te.PrimExpr, nb: te.PrimExpr, ks: Sequence[te.PrimExpr], j: te.PrimExpr) -> te.PrimExpr:
        return packed(nb, ks, j)

    def store_row(img: te.PrimExpr, p: te.PrimExpr, oc0: te.PrimExpr, width: int,
                  value: Callable[[te.PrimExpr], te.PrimExpr]) -> Stmt:
        # A grid row past the output's width is padding: computed, never stored.
        y, x, j = index_var(ctx, "y"), index_var(ctx, "x"), index_var(ctx, "j")
        put = For(j, _i(0), _i(width), store(img, oc0 + j, y, x, value(j)), ForKind.VECTORIZED)
        return LetStmt(y, p // wp, LetStmt(x, p % wp, IfThenElse(x < ow, put)))

    spec = GemmSpec(
        batch=n, m=oh * wp, n=o, k=(kh, kw, c) if taps_outer else (c, kh, kw), dtype=dtype, a_row=a_row, b_load=_unused,
        store=_stores_go_through_store_row, panels=Panels(nr, b_panel), store_row=store_row,
    )
    return gemm(ctx, spec)


def _unused(bb: te.PrimExpr, ks: Sequence[te.PrimExpr], col: te.PrimExpr) -> te.PrimExpr:
    raise AssertionError("conv2d_packed reads its weight through GemmSpec.panels")


def _stores_go_through_store_row(*_: object) -> Stmt:
    raise AssertionError("conv2d_packed stores whole tile rows (GemmSpec.store_row)")
