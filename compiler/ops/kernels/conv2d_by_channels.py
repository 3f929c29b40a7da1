"""nn.conv2d as `out[o, pixel] = sum_k W[o, k] * X[k, pixel]`: output channels are the product's
rows, pixels its vector columns.

The pixel-rows form of conv2d.py broadcasts one input value per (pixel, k) step: in NCHW those
values sit a whole channel plane apart from one k step to the next, and its weights are packed
per call. Here the tile broadcasts weights instead (a weight row is contiguous in k in OIHW, and
read in place) and loads two vectors of input per k step, consecutive pixels of one input row.

Pixels are numbered on the grid of the (padded) input's width: output pixel (y, x) is column
`p = y * WP + x` with `WP` the grid's width, so that tap (ky, kx) of every column is the grid
element `p + ky * dh * WP + kx * dw` of its channel plane, one affine index for the whole panel
whatever the row. Columns with `x >= OW` (the padding's width) are computed and never stored:
(WP - OW) / WP of the work, 3% on a 56-wide 3x3 layer, more on 7-wide maps. A stride s splits
the grid into phases (`Grid`), each holding every s-th row and column of the padded input from
one residue on, in which consecutive outputs again read consecutive elements. The input is
copied into the grid when padding, a stride or the layout requires it, with slack after the
last plane for the panel that runs past the end; otherwise the kernel reads it in place.

Taken for float convolutions with one group that are strided or have small output maps
(`applies`); the others keep conv2d.py's forms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compiler.ops.kernels.gemm import GemmSpec, Panels, RowReader, gemm, index_var, vector_lanes
from compiler.tir import expr as te
from compiler.tir.compute import KernelContext
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, LetStmt, Stmt, seq
from compiler.tir.stmt import Store as StoreStmt

INDEX = "int64"
PARALLEL_MIN_COPY = 1 << 15
SMALL_MAP = 64

Load4 = Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], te.PrimExpr]
Store4 = Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], Stmt]


def _i(value: int) -> te.PrimExpr:
    return te.const(value, INDEX)


def applies(dtype: str, groups: int, channels: int, strides: tuple[int, int], out_pixels: int) -> bool:
    """Whether this form computes the convolution (else conv2d.py's pixel-rows forms do).

    Measured on ResNet-50's layers (AVX2, one thread): this form is 15-33% faster for strided
    convolutions (the stem, the stride-2 3x3 and 1x1 layers: the pixel-rows form reads their
    input a stride apart) and for maps of at most `SMALL_MAP` pixels (7x7: 49 pixels make ragged
    6-row tiles there), and 10-40% slower for stride-1 layers on larger maps, where each B panel
    gathers 3 rows of every input channel from L2 while the pixel-rows form streams its packed
    weights."""
    if dtype not in ("float32", "float64") or groups != 1 or channels < 2:
        return False
    return strides != (1, 1) or out_pixels <= SMALL_MAP


@dataclass(frozen=True)
class Grid:
    """The input as the kernel reads it: `phases` planes of `hp` x `wp` per (image, channel).

    With stride s, tap k of output x reads padded input column `x * s + k * d`; phase
    `(k * d) % s` holds every s-th column from that residue on, so in it the tap is the column
    `x + (k * d) // s`, and consecutive outputs read consecutive elements again. Stride 1 has one
    phase, the padded input itself; a 1x1 kernel with stride s reads one phase, the subsampled
    input."""

    strides: tuple[int, int]
    dilation: tuple[int, int]
    phases: tuple[int, int]
    hp: int
    wp: int

    @property
    def plane(self) -> int:
        return self.hp * self.wp

    def offset(self, ky: te.PrimExpr, kx: te.PrimExpr, planes: int) -> te.PrimExpr:
        """Where tap (ky, kx) reads, relative to the output column's element in phase 0;
        `planes`: the (image, channel) planes of one phase."""
        (sh, sw), (dh, dw), (ph, pw) = self.strides, self.dilation, self.phases
        y, x = ky * dh, kx * dw
        shift = (y if sh == 1 else y // sh) * self.wp + (x if sw == 1 else x // sw)
        if ph == pw == 1:
            return shift
        phase = (y % sh if ph > 1 else _i(0)) * pw + (x % sw if pw > 1 else _i(0))
        return phase * (planes * self.plane) + shift

    def max_shift(self, kernel: tuple[int, int]) -> int:
        (sh, sw), (dh, dw) = self.strides, self.dilation
        return ((kernel[0] - 1) * dh // sh) * self.wp + (kernel[1] - 1) * dw // sw


def phases_of(stride: int, dilation: int, taps: int) -> int:
    """Residues some tap reaches: one when every tap lands on a multiple of the stride."""
    return 1 if taps == 1 or dilation % stride == 0 else stride


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
    phases = (phases_of(sh, dh, kh), phases_of(sw, dw, kw))
    grid = Grid((sh, sw), (dh, dw), phases, oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw)
    nr = 2 * vector_lanes(ctx, dtype)
    panels = -(-oh * grid.wp // nr)
    last_read = panels * nr - 1 + grid.max_shift((kh, kw))
    geometry = (n, c, o, kh, kw, oh, ow, grid.wp)
    direct = in_place and top == left == 0 and (grid.hp, grid.wp) == (h, w) and (sh, sw) == (1, 1)
    if direct and last_read < grid.plane:
        def read(img: te.PrimExpr, ci: te.PrimExpr, ky: te.PrimExpr, kx: te.PrimExpr, p: te.PrimExpr) -> te.PrimExpr:
            return te.cast(dtype, data[img, ci, _i(0), p + grid.offset(ky, kx, n * c)])  # flat in the plane
        return _product(ctx, geometry, nr, read, wgt, store, dtype)
    total = phases[0] * phases[1] * n * c * grid.plane
    buffer = te.Buffer(ctx.fresh("grid"), (total + max(0, last_read + 1 - grid.plane),), dtype)

    def read_grid(img: te.PrimExpr, ci: te.PrimExpr, ky: te.PrimExpr, kx: te.PrimExpr, p: te.PrimExpr) -> te.PrimExpr:
        return buffer[(img * c + ci) * grid.plane + p + grid.offset(ky, kx, n * c)]

    fill = copy_to_grid(ctx, buffer, src, (n, c, h, w), grid, (top, left), total, dtype)
    return Allocate(buffer, seq(fill, _product(ctx, geometry, nr, read_grid, wgt, store, dtype)))


def _product(
    ctx: KernelContext,
    dims: tuple[int, int, int, int, int, int, int, int],
    nr: int,
    read: Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], te.PrimExpr],
    wgt: Load4,
    store: Store4,
    dtype: str,
) -> Stmt:
    n, c, o, kh, kw, oh, ow, wp = dims

    def a_row(b: te.PrimExpr, oc: te.PrimExpr) -> RowReader:
        return RowReader((), lambda ks: wgt(oc, ks[0], ks[1], ks[2]))

    def b_panel(img: te.PrimExpr, nb: te.PrimExpr, ks: Sequence[te.PrimExpr], j: te.PrimExpr) -> te.PrimExpr:
        ci, ky, kx = ks
        return read(img, ci, ky, kx, nb * nr + j)

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


def copy_to_grid(
    ctx: KernelContext,
    buffer: te.Buffer,
    src: Load4,
    dims: tuple[int, int, int, int],
    grid: Grid,
    origin: tuple[int, int],
    total: int,
    dtype: str,
) -> Stmt:
    """Fills every phase plane: input rows at their places, zeros around them, then the slack.
    Ranges are split statically so no loop tests a bound per element."""
    n, c, h, w = dims
    (sh, sw), (ph, pw) = grid.strides, grid.phases
    top, left = origin
    hp, wp, plane = grid.hp, grid.wp, grid.plane
    t = index_var(ctx, "plane")
    img, ci = index_var(ctx, "n"), index_var(ctx, "c")
    fills: list[Stmt] = []
    for ry in range(ph):
        for rx in range(pw):
            base = (ry * pw + rx) * n * c * plane
            # Row i of the phase holds input row i * sh + ry - top when that is in [0, h).
            y_lo, y_hi = inside_range(hp, sh, ry - top, h)
            x_lo, x_hi = inside_range(wp, sw, rx - left, w)
            fills.append(_fill_phase(ctx, buffer, base, t, plane, wp, dtype, (y_lo, y_hi, hp), (x_lo, x_hi, wp),
                                     lambda i, j, ry=ry, rx=rx: src(img, ci, i * sh + ry - top, j * sw + rx - left)))
    body = LetStmt(img, t // c, LetStmt(ci, t % c, seq(*fills)))
    kind = ForKind.PARALLEL if ctx.parallel and total >= PARALLEL_MIN_COPY and n * c > 1 else ForKind.SERIAL
    copy = For(t, _i(0), _i(n * c), body, kind)
    slack = int(buffer.shape[0]) - total  # type: ignore[arg-type]  # a static size
    if not slack:
        return copy
    s = index_var(ctx, "s")
    tail = For(s, _i(0), _i(slack), StoreStmt(buffer, (_i(total) + s,), te.const(0, dtype)), ForKind.VECTORIZED)
    return seq(copy, tail)


def inside_range(extent: int, step: int, start: int, size: int) -> tuple[int, int]:
    """The range [lo, hi) of i in [0, extent) with `i * step + start` in [0, size)."""
    lo = min(extent, max(0, -(-(-start) // step)))
    hi = min(extent, max(0, -(-(size - start) // step)))
    return lo, max(lo, hi)


def _fill_phase(
    ctx: KernelContext, buffer: te.Buffer, base: int, t: te.PrimExpr, plane: int, wp: int, dtype: str,
    rows: tuple[int, int, int], cols: tuple[int, int, int], value: Callable[[te.PrimExpr, te.PrimExpr], te.PrimExpr],
) -> Stmt:
    y_lo, y_hi, hp = rows
    x_lo, x_hi, _ = cols

    def at(y: te.PrimExpr, x: te.PrimExpr) -> te.PrimExpr:
        return _i(base) + t * plane + y * wp + x

    def zeros(y: te.PrimExpr, x_from: int, x_to: int) -> Stmt:
        if x_to <= x_from:
            return seq()
        x = index_var(ctx, "xz")
        return For(x, _i(x_from), _i(x_to - x_from), StoreStmt(buffer, (at(y, x),), te.const(0, dtype)),
                   ForKind.VECTORIZED)

    def zero_rows(y_from: int, y_to: int) -> Stmt:
        if y_to <= y_from:
            return seq()
        y = index_var(ctx, "yz")
        return For(y, _i(y_from), _i(y_to - y_from), zeros(y, 0, wp))

    yy, xx = index_var(ctx, "yy"), index_var(ctx, "xx")
    inside = seq(
        zeros(yy, 0, x_lo),
        For(xx, _i(x_lo), _i(x_hi - x_lo), StoreStmt(buffer, (at(yy, xx),), te.cast(dtype, value(yy, xx))),
            ForKind.VECTORIZED),
        zeros(yy, x_hi, wp),
    )
    return seq(
        zero_rows(0, y_lo),
        For(yy, _i(y_lo), _i(y_hi - y_lo), inside) if y_hi > y_lo else seq(),
        zero_rows(y_hi, hp),
    )
