"""conv2d with a weight packed at compile time: pixels as the rows of the register tile, `b`
output channels (one or two vectors) as its columns.

Data is NCHW or channel-blocked NCHW[x]c, the result NCHW or NCHW[b]c. AlterOpLayout gives
convolutions NCHW[b]c results (compiler/passes/blocked_activations.py): a tile row, b channels of
one pixel, is then one contiguous store, and a fused residual is read likewise, where NCHW puts
each of its channels a plane apart. Blocked data read in place (a 1x1 stride-1 layer) is reduced
over (channel block, channel in block); the copied path unblocks it into its grid.

The weight is OHWI[b]o, (O/b, KH, KW, I, b), or OIHW[b]o, (O/b, I, KH, KW, b): either is the
panel layout the register-blocked product reads (compiler/ops/kernels/gemm.py:
`[panel][k][column]`, k = (ky, kx, i) or (i, ky, kx)), so the kernel reads it in place: one tile
step broadcasts one input value per pixel row and loads the block's weight vectors.
AlterOpLayout packs a constant weight as OHWI[b]o (compiler/passes/alter_op_layout.py), so
nothing is packed per call. With the input channels innermost, a step's inputs sit a channel
plane apart and gcc emits a plain broadcast-FMA loop; with the taps innermost (OIHW[b]o) it
carries inputs from one tap to the next in registers and spills the tile (measured 2x slower
on 3x3 layers, gcc 12, AVX2).

The product's rows are the output's pixels, row-major: row q is output (y, x) = (q / OW, q % OW),
read on the grid of the padded input's width as in conv2d_by_channels.py: tap (ky, kx) of the
row is the grid element `g + ky * dh * WP + kx * dw` of its channel plane, g = y * WP + x. Each
row of a tile binds its g once per tile, so a tile may cross output rows. Numbering the rows by
g instead (one address for the whole tile) also computed the WP - OW padding columns of every
row and stored nothing of them: 12% of the work on a 14-wide 3x3 layer, 22% on a 7-wide one
(ResNet-50's 3x3 layers at 14x14 and 7x7 ran 12% and 18% faster numbered by pixels). Where
the padding is under `COMPACT_MIN_PADDING` of the width and the reduction's innermost loop is
short (under `COMPACT_MIN_INNER` steps) the rows keep the grid's numbering: the 7x7 stride-2
stem (3 of 115 columns, 7 taps innermost) ran 1.2x slower numbered by pixels, its short
reduction loops then carrying six row addresses. Channel-blocked layers (16 channels innermost)
are numbered by pixels whatever their padding: a 3x3 stride-2 layer onto 28x28 computed 120
rows per band of 112 pixels on the grid and 114 by pixels (0.94x).
Strides and dilation read through the grid's phase planes; the input is copied into the grid
when padding or a stride needs it, and read in place otherwise (a 1x1 stride-1 layer).

The copy is made a band of output rows at a time: the grid rows one band reads (its rows and the
kernel's `(KH - 1) * dh / sh` rows below them, of every phase and channel of one image) go into a
scratch buffer of about `BAND_BYTES`, the band's pixels are the product's rows, then the next
band overwrites the buffer. A whole padded copy was the largest buffer of a build's workspace
(1.6 MiB on ResNet-50's first stride-2 layer, live beside the layer's input and output); a band
of `BAND_BYTES` also stays in L2 between its copy and its product. The kernel rows shared by
neighbouring bands are copied twice. All bands have one height (the last one overlaps the one
before when they do not divide the output), so the product's loop nest is emitted once: a
shorter last band with a product of its own made the kernel's C 43% larger. Threads share the
bands, each with a buffer of its own (`band_threads` of them), rather than each band's copy and
product: that forked the threads twice per band, which on a loaded 2-core machine made those
layers 3-10x slower at 2 threads.

float16 data (a float16 model computing in float32, compiler/passes/float16_compute.py) is
widened by the copy: the cast in front of the convolution joins its primitive function
(compiler/passes/fusion_input_casts.py) and its float16 tensor is this kernel's data, so the
float32 copy of the whole activation that a separate cast wrote and the convolution read again
is gone. Such data always takes the copied path, 1x1 stride-1 layers included: a band widened
into L2 beside its product costs less than a conversion at every one of the reduction's reads
(float16 ResNet-50's 1x1 stride-1 layers ran 6-9x slower reading float16 in place, one thread).
A channel-blocked pixel's run is widened whole (half_stages.py: F16C's vector conversion where
the build machine has it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from compiler.ops.kernels.conv2d_by_channels import PARALLEL_MIN_COPY, Grid, inside_range, phases_of
from compiler.ops.kernels.gemm import (
    PARALLEL_MIN_MACS, GemmSpec, Panels, RowReader, fitted_rows, gemm, index_var, peels_last_step, tile_rows,
)
from compiler.ops.kernels.half_stages import WIDEN_AT, stage_half_conversions
from compiler.ops.kernels.schedule import choose
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext
from compiler.tir.dtypes import itemsize
from compiler.tir.stmt import Allocate, Evaluate, For, ForKind, IfThenElse, LetStmt, Stmt, Store, seq

INDEX = "int64"
FLOATS = ("float32",)
HALF = "float16"  # data the kernel widens to float32 as it copies its bands
# The band's copy of the padded input is at most this large, unless a band of `MIN_BAND_PIXELS`
# needs more: a band of a 7x7 map with 512 channels streams 9 MiB of weights for 16 pixels
# (measured 25% slower split in four bands than whole). 128 KiB and 256 KiB ran ResNet-50 equally
# fast (within the noise of a loaded machine, 1 and 2 threads); the smaller keeps two threads'
# copies at 256 KiB.
BAND_BYTES = 128 << 10
MIN_BAND_PIXELS = 64
# The share of a product's rows one band of the whole output must save to be chosen (`band_rows`).
ONE_BAND_GAIN = 0.02
MAX_BAND_THREADS = 8
CLAIMS_PER_SLOT = 4  # a banded layer gives each thread at least this many items to claim
# Rows are numbered by output pixel, skipping the grid's padding columns, when those are at least
# this fraction of the grid's width (module docstring).
COMPACT_MIN_PADDING = 1 / 16
COMPACT_MIN_INNER = 16
# How a tile row element is stored: (image, first channel of the tile's block, channel in the
# block, y, x, value).
Store6 = Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], Stmt]
# How blocked data is read: (image, channel block, channel in block, tap (ky, kx), pixel).
SplitReader = Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, tuple[te.PrimExpr, te.PrimExpr], te.PrimExpr],
                       te.PrimExpr]


def _i(value: int) -> te.PrimExpr:
    return te.const(value, INDEX)


def applies(dtype: str, groups: int, block: int, lanes: int) -> bool:
    """Whether this kernel computes a conv2d whose weight is blocked by `block` output channels:
    float32, one group, and a block of one or two vectors (the tile's width)."""
    return dtype in FLOATS and groups == 1 and block in (lanes, 2 * lanes)


def widens(data_dtype: str, dtype: str) -> bool:
    """Whether data of `data_dtype` is widened to the product's `dtype` by the band copy."""
    return data_dtype == HALF and dtype in FLOATS


def conv2d_packed_loops(
    ctx: KernelContext,
    data: te.Buffer,
    weight: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    window: tuple[tuple[int, int], tuple[int, int], tuple[int, int]],
    taps_outer: bool,
    dtype: str | None = None,
) -> Stmt:
    """`data` NCHW or NCHW[x]c, `weight` (O/b, I, KH, KW, b), or (O/b, KH, KW, I, b) when
    `taps_outer`, `out` NCHW or NCHW[b]c (its block the weight's); `window`: strides, dilation
    and the (top, left) padding (bottom and right follow from the shapes). The product and the
    epilogue compute in `dtype` (the output's when not given); each stored value is cast to the
    output's. float16 `data` (`widens`) is widened into the bands."""
    n, c, h, w = _nchw(data)
    if taps_outer:
        outer, kh, kw, _, nr = (int(d) for d in weight.shape)  # type: ignore[arg-type]  # static shapes
    else:
        outer, _, kh, kw, nr = (int(d) for d in weight.shape)  # type: ignore[arg-type]  # static shapes
    _, o, oh, ow = _nchw(out)
    if len(out.shape) == 5 and int(out.shape[4]) != nr:  # type: ignore[arg-type]  # static shapes
        raise ValueError(f"conv2d_packed: the output's channel block {out.shape[4]} is not the weight's {nr}")
    if n * o * oh * ow == 0:
        return seq()
    (sh, sw), (dh, dw), (top, left) = window
    phases = (phases_of(sh, dh, kh), phases_of(sw, dw, kw))
    grid = Grid((sh, sw), (dh, dw), phases, oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw)
    rows = oh * grid.wp
    last_read = rows - 1 + grid.max_shift((kh, kw))
    dtype = dtype or out.dtype
    direct = (top == left == 0 and (grid.hp, grid.wp) == (h, w) and (sh, sw) == (1, 1) and last_read < grid.plane
              and not widens(data.dtype, dtype))
    geometry = (n, c, kh, kw, oh, ow, grid.wp, outer * nr)

    def store(img: te.PrimExpr, oc0: te.PrimExpr, j: te.PrimExpr, y: te.PrimExpr, x: te.PrimExpr,
              value: te.PrimExpr) -> Stmt:
        # oc0 starts a block of nr channels: in NCHW[nr]c a tile row is one contiguous run.
        idx = (img, oc0 // _i(nr), y, x, j) if len(out.shape) == 5 else (img, oc0 + j, y, x)
        return Store(out, idx, te.cast(out.dtype, epilogue(value, idx)))

    blocked = len(data.shape) == 5
    x_block = int(data.shape[4]) if blocked else 1  # type: ignore[arg-type]  # static shapes
    # Blocked data reduces over (channel block, channel in block) so no index divides per step;
    # the copied path then keeps the band blocked too (`_copy_band_blocked`).
    split = blocked and taps_outer

    def packed(nb: te.PrimExpr, ks: Sequence[te.PrimExpr], j: te.PrimExpr) -> te.PrimExpr:
        if split:
            return te.cast(dtype, weight[nb, ks[0], ks[1], ks[2] * _i(x_block) + ks[3], j])
        return te.cast(dtype, weight[nb, ks[0], ks[1], ks[2], j])  # ks in the weight's order

    if direct:
        def read_data(img: te.PrimExpr, ci: te.PrimExpr, shift: te.PrimExpr, p: te.PrimExpr) -> te.PrimExpr:
            # Flat in the (image, channel) plane: rows past the last one are the next row's start.
            if blocked:
                return te.cast(dtype, data[img, ci // _i(x_block), _i(0), p + shift, ci % _i(x_block)])
            return te.cast(dtype, data[img, ci, _i(0), p + shift])

        def read_split(img: te.PrimExpr, cb: te.PrimExpr, ci: te.PrimExpr, tap: tuple[te.PrimExpr, te.PrimExpr],
                       p: te.PrimExpr) -> te.PrimExpr:
            return te.cast(dtype, data[img, cb, _i(0), p + grid.offset(tap[0], tap[1], 1), ci])

        return _product(ctx, geometry, grid, nr, read_data, packed, store, dtype, taps_outer, (n, None, _i(0), oh),
                        read_split if split else None, x_block, a_bytes=data.num_elements * itemsize(data.dtype),
                        chunk_slot=(_i(0), 1))
    return _banded(ctx, data, geometry, grid, nr, packed, store, dtype, (top, left, h), taps_outer,
                   x_block if split else 0)


def _nchw(buffer: te.Buffer) -> tuple[int, int, int, int]:
    """(N, C, H, W) of an NCHW or NCHW[x]c buffer."""
    dims = [int(d) for d in buffer.shape]  # type: ignore[arg-type]  # static shapes
    if len(dims) == 5:
        return dims[0], dims[1] * dims[4], dims[2], dims[3]
    n, c, h, w = dims
    return n, c, h, w


def band_threads() -> int:
    """Bands computed at once: the build machine's cores (at most `MAX_BAND_THREADS`, as each has
    a copy of its own in the static scratch). A run with fewer threads takes several slots per
    thread; one with more leaves the extra threads idle in these layers."""
    return max(1, min(MAX_BAND_THREADS, len(os.sched_getaffinity(0))))


def numbering_width(ow: int, wp: int, inner: int) -> int:
    """Product rows per output row: `ow` when rows are numbered by output pixel, `wp` when by
    grid element (see the module docstring); `inner` is the reduction's innermost extent."""
    return ow if wp - ow >= wp * COMPACT_MIN_PADDING or inner >= COMPACT_MIN_INNER else wp


def band_rows(grid: Grid, channels: int, kh: int, oh: int, itemsize: int, slots: int = 1,
              tile: tuple[int, int] = (1, 0)) -> int:
    """Output rows per band. Every band has this many rows: a last band that would be shorter
    starts early instead, overlapping the one before (those rows are computed twice, stored
    once), so the kernel holds one product loop. Chosen to compute the fewest rows in all, then
    the fewest on the busiest of `slots` threads, then to keep the band's copy within
    `BAND_BYTES`, then the fewest bands. A band has from half the rows whose copy fits the budget
    (smaller bands copy more rows twice and stream the weight more often) to as many as fit a
    quarter more (128 KiB and 256 KiB ran ResNet-50 equally fast), and at least
    `MIN_BAND_PIXELS` pixels (every band streams the whole weight) whatever its copy takes, then
    up to twice that many.

    The whole output is one band instead when its copy fits twice the budget and its product,
    in whole register tiles, computes `ONE_BAND_GAIN` fewer rows: `tile` is (the tile's rows,
    product rows per output row: the output's width when rows are numbered by pixel, 0 for the
    grid's). ResNet-50's 3x3 layers on 14x14 computed 2 x 102 rows in two bands of 98 pixels and
    compute 198 in one (0.98x at one thread, 0.95x at two)."""
    (sh, _), (dh, _), (ph, pw) = grid.strides, grid.dilation, grid.phases
    halo = (kh - 1) * dh // sh
    row_bytes = ph * pw * channels * grid.wp * itemsize
    least = min(oh, -(-MIN_BAND_PIXELS // grid.wp))
    fit = BAND_BYTES // row_bytes - halo
    within = min(oh, max(least, fit))
    most = min(oh, max(within, (BAND_BYTES + BAND_BYTES // 4) // row_bytes - halo))
    if least > fit:
        most = min(oh, 2 * least)  # the budget is overruled anyway: up to twice the fewest pixels

    def cost(rows: int) -> tuple[int, int, bool, int]:
        bands = -(-oh // rows)
        return bands * rows, -(-bands // slots) * rows, rows > within, bands

    rows = min(range(max(least, within // 2), most + 1), key=cost)
    mr, width = tile
    if rows == oh or mr <= 1 or (oh + halo) * row_bytes > 2 * BAND_BYTES:
        return rows

    def computed(rows: int) -> int:
        m = rows * (width or grid.wp)
        r = fitted_rows(mr, m)
        return -(-oh // rows) * -(-m // r) * r

    return oh if computed(oh) <= computed(rows) * (1 - ONE_BAND_GAIN) else rows


def channel_groups(o: int, nr: int, units: int, slots: int) -> int:
    """Groups of output channels each band is split into, so the threads share at least
    `CLAIMS_PER_SLOT` items each: with a band or two per thread, a thread the host delays kept
    the others waiting (ResNet-50's 14x14 layers: two bands, two threads). The fewest groups
    that give that many, each a whole number of `nr`-wide panels; 1 when the bands suffice or
    there is one slot."""
    if slots <= 1 or units >= CLAIMS_PER_SLOT * slots or o % nr:
        return 1
    panels = o // nr
    divisors = [d for d in range(2, panels + 1) if panels % d == 0]
    return next((d for d in divisors if units * d >= CLAIMS_PER_SLOT * slots), panels)


def _panels_from(packed: Callable[[te.PrimExpr, Sequence[te.PrimExpr], te.PrimExpr], te.PrimExpr],
                 first: te.PrimExpr) -> Callable[[te.PrimExpr, Sequence[te.PrimExpr], te.PrimExpr], te.PrimExpr]:
    return lambda nb, ks, j: packed(nb + first, ks, j)


def _channels_from(store: Store6, first: te.PrimExpr) -> Store6:
    return lambda img, oc0, j, y, x, value: store(img, oc0 + first, j, y, x, value)


def _banded(
    ctx: KernelContext,
    data: te.Buffer,
    dims: tuple[int, int, int, int, int, int, int, int],
    grid: Grid,
    nr: int,
    packed: Callable[[te.PrimExpr, Sequence[te.PrimExpr], te.PrimExpr], te.PrimExpr],
    store: Store6,
    dtype: str,
    edges: tuple[int, int, int],
    taps_outer: bool,
    block: int = 0,
) -> Stmt:
    """The copied path: each (image, band of `rows` output rows) copies the band's grid rows into
    its slot's scratch, then computes the band's product. The slots run in one parallel loop, so a
    layer forks the threads once (a fork per band and step costs milliseconds on a loaded
    machine), and take the bands one at a time as they finish the last (a CLAIMED loop): on a
    shared host one thread is often delayed, and with a fixed share each the others waited for
    it (ResNet-50 at two threads ran no faster than at one while another process took half of
    one core; onnxruntime's pool hands out work as it goes). With fewer bands than threads there is one slot
    and the product's tiles are parallel. All bands have `rows` rows, so the product's loop nest
    is emitted once: when they do not divide the output, the last band ends at the last row and
    recomputes rows of the one before, storing only its own (each output is stored once). With
    `block`, the data is NCHW[block]c and so is the band: a pixel's channels of a block are
    contiguous in both, so the copy moves whole runs, and the product reduces over (block,
    channel in block)."""
    n, c, kh, kw, oh, ow, wp, o = dims
    macs = n * o * oh * wp * c * kh * kw
    threads = band_threads() if ctx.parallel and macs >= PARALLEL_MIN_MACS else 1
    inner = block if block else c if taps_outer else kw  # the reduction's innermost extent (`_product`)
    mr = ctx.schedule.get("tile_rows")
    most = tile_rows(ctx, dtype, nr)
    tile = (mr if isinstance(mr, int) and 1 <= mr <= most else most, numbering_width(ow, grid.wp, inner))
    rows = band_rows(grid, c, kh, oh, itemsize(dtype), threads if n < threads else 1, tile)
    rows = int(choose(ctx, "band_rows", rows, range(1, oh + 1)))  # type: ignore[call-overload]
    (sh, _), (dh, _) = grid.strides, grid.dilation
    band = Grid(grid.strides, grid.dilation, grid.phases, rows + (kh - 1) * dh // sh, wp)
    size = grid.phases[0] * grid.phases[1] * c * band.plane
    # The last row's taps run past its plane by up to (KW - 1) * dw / sw elements, read only for
    # pixels past the output's width: a zeroed tail keeps those reads inside the buffer.
    slack = max(0, rows * wp + band.max_shift((kh, kw)) - band.plane) * max(block, 1)
    bands = -(-oh // rows)
    units = n * bands
    # Fewer bands than threads: one copy, and the threads share each band's product instead.
    slots = threads if units >= threads else 1
    groups = channel_groups(o, nr, units, slots)
    items = units * groups
    shared_copy = slots == 1 < threads and size >= PARALLEL_MIN_COPY  # the threads copy a lone band too
    buffer = te.Buffer(ctx.fresh("grid"), (slots * (size + slack),), dtype)
    slot, item = index_var(ctx, "slot"), index_var(ctx, "item")
    img, b, g = index_var(ctx, "img"), index_var(ctx, "band"), index_var(ctx, "group")
    at = slot * (size + slack)
    if groups > 1:
        dims = (n, c, kh, kw, oh, ow, wp, o // groups)
        packed = _panels_from(packed, g * (o // nr // groups))
        store = _channels_from(store, g * (o // groups))

    # The pixel's part of an index comes last: a tile row's pixel is bound once per tile, and
    # with it last gcc steps one address through the reduction and adds each row's part to it,
    # rather than stepping one address per row (the C of `_product`).
    def read_band(img: te.PrimExpr, ci: te.PrimExpr, shift: te.PrimExpr, p: te.PrimExpr) -> te.PrimExpr:
        return buffer[at + ci * band.plane + shift + p]

    def read_blocked(img: te.PrimExpr, cb: te.PrimExpr, ci: te.PrimExpr, tap: tuple[te.PrimExpr, te.PrimExpr],
                     p: te.PrimExpr) -> te.PrimExpr:
        phase, shift = _phase_and_shift(band, tap)
        return buffer[at + (phase * _i(c // block) + cb) * _i(band.plane * block) + shift * _i(block) + ci
                      + p * _i(block)]

    y0 = index_var(ctx, "y0")
    ragged = oh % rows != 0
    first_row = te.minimum(b * rows, _i(oh - rows)) if ragged else b * rows

    def once(img: te.PrimExpr, oc0: te.PrimExpr, j: te.PrimExpr, y: te.PrimExpr, x: te.PrimExpr,
             value: te.PrimExpr) -> Stmt:
        # The rows the last band recomputes are not stored again: a result written over its
        # residual input (compiler/tir/inplace.py) would add the residual twice.
        return IfThenElse(y >= b * rows, store(img, oc0, j, y, x, value))

    # A band's copy is sized for the caches only when the bands are many (one 7x7 map of 512
    # channels in four phases is 512 KB): the product weighs it as an A it reads in place, and
    # keeps the partial sums of a reduction in chunks per slot.
    copied = {"a_bytes": (size + slack) * itemsize(dtype), "chunk_slot": (slot, slots)}
    if block:
        fill = _copy_band_blocked(ctx, buffer, at, data, img, y0, band, grid.hp, edges, shared_copy)
        product = _product(ctx, dims, band, nr, read_band, packed, once if ragged else store, dtype, taps_outer,
                           (1, img, y0, rows), read_blocked, block, **copied)
    else:
        fill = _copy_band(ctx, buffer, at, data, img, y0, band, grid.hp, edges, shared_copy)
        product = _product(ctx, dims, band, nr, read_band, packed, once if ragged else store, dtype, taps_outer,
                           (1, img, y0, rows), **copied)
    held = None
    if groups > 1:
        # A slot copies a band once for all the groups it takes of it in a row.
        held = te.Buffer(ctx.fresh("held"), (1,), INDEX, scope="local")
        fill = IfThenElse(te.ne(held[0], item // groups), seq(fill, Store(held, (0,), item // groups)))
    body: Stmt = LetStmt(y0, first_row, seq(fill, product))
    unit = item // groups if groups > 1 else item
    body = LetStmt(img, unit // bands, LetStmt(b, unit % bands, body))
    if groups > 1:
        body = LetStmt(g, item % groups, body)
    work = For(item, _i(0), _i(items), body, ForKind.CLAIMED if slots > 1 else ForKind.SERIAL)
    if held is not None:
        work = Allocate(held, seq(Store(held, (0,), te.const(-1, INDEX)), work))
    if slack:
        s = index_var(ctx, "s")
        tail = For(s, _i(0), _i(slack), Store(buffer, (at + size + s,), te.const(0, dtype)), ForKind.VECTORIZED)
        work = seq(tail, work)
    return Allocate(buffer, For(slot, _i(0), _i(slots), work, ForKind.PARALLEL if slots > 1 else ForKind.SERIAL))


def _copy_band(
    ctx: KernelContext, buffer: te.Buffer, start: te.PrimExpr, data: te.Buffer, img: te.PrimExpr, y0: te.PrimExpr,
    band: Grid, hp: int, edges: tuple[int, int, int], parallel: bool,
) -> Stmt:
    """Grid rows [y0, y0 + band.hp) of every phase and channel of image `img`: input rows at their
    places, zeros in the padding and past the grid's last row (no band reaches past it, as the
    last one ends at the output's last row). Columns split statically, rows at the band's
    bounds, so no loop tests per element."""
    top, left, h = edges
    _, c, _, w = _nchw(data)
    (sh, sw), (ph, pw) = band.strides, band.phases
    dtype = buffer.dtype
    ci = index_var(ctx, "c")
    fills: list[Stmt] = []
    for ry in range(ph):
        for rx in range(pw):
            base = (ry * pw + rx) * c * band.plane

            def at(y: te.PrimExpr, x: te.PrimExpr, base: int = base) -> te.PrimExpr:
                return start + _i(base) + ci * band.plane + y * band.wp + x

            def zeros(y: te.PrimExpr, x_from: int, x_to: int, at: Callable[..., te.PrimExpr] = at) -> Stmt:
                if x_to <= x_from:
                    return seq()
                x = index_var(ctx, "xz")
                return For(x, _i(x_from), _i(x_to - x_from), Store(buffer, (at(y, x),), te.const(0, dtype)),
                           ForKind.VECTORIZED)

            def row(yy: te.PrimExpr, x_lo: int, x_hi: int, ry: int = ry, rx: int = rx,
                    at: Callable[..., te.PrimExpr] = at, zeros: Callable[..., Stmt] = zeros) -> Stmt:
                xx = index_var(ctx, "xx")
                at_y, at_x = (y0 + yy) * sh + (ry - top), xx * sw + (rx - left)
                if len(data.shape) == 5:
                    block = _i(int(data.shape[4]))  # type: ignore[arg-type]  # static shapes
                    value = data[img, ci // block, at_y, at_x, ci % block]
                else:
                    value = data[img, ci, at_y, at_x]
                return seq(
                    zeros(yy, 0, x_lo),
                    For(xx, _i(x_lo), _i(x_hi - x_lo), Store(buffer, (at(yy, xx),), te.cast(dtype, value)),
                        ForKind.VECTORIZED),
                    zeros(yy, x_hi, band.wp),
                )

            fills.append(_fill_phase(ctx, band, hp, y0, (ry - top, rx - left), (h, w), row,
                                     lambda y, zeros=zeros: zeros(y, 0, band.wp)))
    return For(ci, _i(0), _i(c), seq(*fills), ForKind.PARALLEL if parallel and c > 1 else ForKind.SERIAL)


def _fill_phase(
    ctx: KernelContext, band: Grid, hp: int, y0: te.PrimExpr, origin: tuple[int, int], sizes: tuple[int, int],
    row: Callable[[te.PrimExpr, int, int], Stmt], zero_row: Callable[[te.PrimExpr], Stmt],
) -> Stmt:
    """The band's rows of one phase, whose element (i, j) is input (i * sh + origin[0], j * sw +
    origin[1]) where that is inside the input's `sizes`: `row(y, x_lo, x_hi)` fills a band row the
    input has (its columns [x_lo, x_hi) from the input), `zero_row(y)` one it has not."""
    (sh, sw) = band.strides
    y_lo, y_hi = inside_range(hp, sh, origin[0], sizes[0])
    x_lo, x_hi = inside_range(band.wp, sw, origin[1], sizes[1])
    lo, hi = index_var(ctx, "lo"), index_var(ctx, "hi")
    lo_e = te.minimum(te.maximum(_i(y_lo) - y0, _i(0)), _i(band.hp))
    hi_e = te.minimum(te.maximum(_i(y_hi) - y0, lo), _i(band.hp))
    yy, yz, yz2 = index_var(ctx, "yy"), index_var(ctx, "yz"), index_var(ctx, "yz")
    return LetStmt(lo, lo_e, LetStmt(hi, hi_e, seq(
        For(yz, _i(0), lo, zero_row(yz)),
        For(yy, lo, hi - lo, row(yy, x_lo, x_hi)),
        For(yz2, hi, _i(band.hp) - hi, zero_row(yz2)),
    )))


def _phase_and_shift(grid: Grid, tap: tuple[te.PrimExpr, te.PrimExpr]) -> tuple[te.PrimExpr, te.PrimExpr]:
    """Tap (ky, kx)'s phase plane and its shift in pixels within it (Grid.offset's two parts)."""
    (sh, sw), (dh, dw), (ph, pw) = grid.strides, grid.dilation, grid.phases
    y, x = tap[0] * dh, tap[1] * dw
    shift = (y if sh == 1 else y // sh) * grid.wp + (x if sw == 1 else x // sw)
    phase = (y % sh if ph > 1 else _i(0)) * pw + (x % sw if pw > 1 else _i(0))
    return phase, shift


def _copy_band_blocked(
    ctx: KernelContext, buffer: te.Buffer, start: te.PrimExpr, data: te.Buffer, img: te.PrimExpr, y0: te.PrimExpr,
    band: Grid, hp: int, edges: tuple[int, int, int], parallel: bool,
) -> Stmt:
    """`_copy_band` of NCHW[b]c data into a band laid out (phase, channel block, y, x, b): each
    pixel's b channels are one contiguous run in the data and in the band, and each zero row or
    column run is one loop over contiguous elements."""
    top, left, h = edges
    _, blocks, height, w, b = (int(d) for d in data.shape)  # type: ignore[arg-type]  # static shapes
    (sh, sw), (ph, pw) = band.strides, band.phases
    dtype = buffer.dtype
    cb = index_var(ctx, "cb")
    fills: list[Stmt] = []
    for ry in range(ph):
        for rx in range(pw):
            base = (ry * pw + rx) * blocks * band.plane * b

            def at(y: te.PrimExpr, x: te.PrimExpr, base: int = base) -> te.PrimExpr:
                return start + _i(base) + (cb * _i(band.plane) + y * _i(band.wp) + x) * _i(b)

            def zeros(y: te.PrimExpr, x_from: int, x_to: int, at: Callable[..., te.PrimExpr] = at) -> Stmt:
                if x_to <= x_from:
                    return seq()
                e = index_var(ctx, "ez")
                return For(e, _i(0), _i((x_to - x_from) * b), Store(buffer, (at(y, _i(x_from)) + e,),
                                                                   te.const(0, dtype)), ForKind.VECTORIZED)

            def row(yy: te.PrimExpr, x_lo: int, x_hi: int, ry: int = ry, rx: int = rx,
                    at: Callable[..., te.PrimExpr] = at, zeros: Callable[..., Stmt] = zeros) -> Stmt:
                xx, j = index_var(ctx, "xx"), index_var(ctx, "j")
                y = (y0 + yy) * sh + (ry - top)
                if sw == 1 and data.dtype == "float16" and dtype == "float32" and x_hi > x_lo:
                    # The row's pixels are one run in the data and in the band: widened by one
                    # call rather than pixel by pixel (a float16 1x1 layer on 56x56: 0.89x).
                    first = (((img * _i(blocks) + cb) * _i(height) + y) * _i(w) + _i(x_lo + rx - left)) * _i(b)
                    run = te.CallExtern(WIDEN_AT, (buffer, at(yy, _i(x_lo)), data, first, _i((x_hi - x_lo) * b)),
                                        "void")
                    return seq(zeros(yy, 0, x_lo), Evaluate(run), zeros(yy, x_hi, band.wp))
                value = data[img, cb, y, xx * sw + (rx - left), j]
                # float16 data: the run is widened whole rather than lane by lane.
                pixel = stage_half_conversions(ctx, For(j, _i(0), _i(b), Store(buffer, (at(yy, xx) + j,),
                                                                               te.cast(dtype, value)),
                                                        ForKind.VECTORIZED))
                return seq(zeros(yy, 0, x_lo), For(xx, _i(x_lo), _i(x_hi - x_lo), pixel), zeros(yy, x_hi, band.wp))

            fills.append(_fill_phase(ctx, band, hp, y0, (ry - top, rx - left), (h, w), row,
                                     lambda y, zeros=zeros: zeros(y, 0, band.wp)))
    return For(cb, _i(0), _i(blocks), seq(*fills), ForKind.PARALLEL if parallel and blocks > 1 else ForKind.SERIAL)


def _product(
    ctx: KernelContext,
    dims: tuple[int, int, int, int, int, int, int, int],
    grid: Grid,
    nr: int,
    read: Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], te.PrimExpr],
    packed: Callable[[te.PrimExpr, Sequence[te.PrimExpr], te.PrimExpr], te.PrimExpr],
    store: Store6,
    dtype: str,
    taps_outer: bool,
    part: tuple[int, te.PrimExpr | None, te.PrimExpr, int],
    read_split: SplitReader | None = None,
    block: int = 1,
    a_bytes: int = 0,
    chunk_slot: tuple[te.PrimExpr, int] | None = None,
) -> Stmt:
    """The product over `part`: (images, the one image when that is 1 and fixed outside, first
    output row, output rows); row q of the product is output (y0 + q / width, q % width) and
    reads `grid`'s element (q / width) * wp + q % width plus the tap's shift, `width` being ow
    (rows numbered by pixels) or wp (by grid element; the padding columns are then computed and
    not stored). With `read_split` (taps outer, channel-blocked data read in place) the
    reduction's channel axis is two, (block, channel in the block)."""
    n, c, kh, kw, oh, ow, wp, o = dims
    images, fixed, y0, count = part
    k = (kh, kw, c // block, block) if read_split is not None else (kh, kw, c) if taps_outer else (c, kh, kw)
    width = numbering_width(ow, wp, k[-1])

    def image(b: te.PrimExpr) -> te.PrimExpr:
        return b if fixed is None else fixed

    planes = n * c if fixed is None else c  # (image, channel) planes of a phase of what `read` reads

    def a_row(b: te.PrimExpr, q: te.PrimExpr) -> RowReader:
        img = image(b)
        if width == wp:
            lets: tuple[tuple[te.Var, te.PrimExpr], ...] = ()
            p: te.PrimExpr = q
        else:
            p = index_var(ctx, "g")
            lets = ((p, (q // _i(width)) * _i(wp) + q % _i(width)),)
        if read_split is not None:
            return RowReader(lets, lambda ks: read_split(img, ks[2], ks[3], (ks[0], ks[1]), p))
        if taps_outer:
            return RowReader(lets, lambda ks: read(img, ks[2], grid.offset(ks[0], ks[1], planes), p))
        return RowReader(lets, lambda ks: read(img, ks[0], grid.offset(ks[1], ks[2], planes), p))

    def b_panel(img: te.PrimExpr, nb: te.PrimExpr, ks: Sequence[te.PrimExpr], j: te.PrimExpr) -> te.PrimExpr:
        return packed(nb, ks, j)

    def store_row(b: te.PrimExpr, q: te.PrimExpr, oc0: te.PrimExpr, columns: int,
                  value: Callable[[te.PrimExpr], te.PrimExpr]) -> Stmt:
        y, x, j = index_var(ctx, "y"), index_var(ctx, "x"), index_var(ctx, "j")
        # A float16 epilogue is staged so its roundings convert whole rows (half_stages.py)
        # rather than one lane at a time.
        put: Stmt = stage_half_conversions(
            ctx, For(j, _i(0), _i(columns), store(image(b), oc0, j, y, x, value(j)), ForKind.VECTORIZED))
        if width > ow:
            put = IfThenElse(x < ow, put)  # a padding column: computed, never stored
        return LetStmt(y, y0 + q // _i(width), LetStmt(x, q % _i(width), put))

    peel = peels_last_step(lambda value: store(_i(0), _i(0), _i(0), _i(0), _i(0), value), dtype)
    spec = GemmSpec(
        batch=images, m=count * width, n=o, k=k, dtype=dtype, a_row=a_row,
        b_load=_unused, store=_stores_go_through_store_row, panels=Panels(nr, b_panel), store_row=store_row,
        peel_last=peel, a_bytes=a_bytes, chunk_slot=chunk_slot,
    )
    return gemm(ctx, spec)


def _unused(bb: te.PrimExpr, ks: Sequence[te.PrimExpr], col: te.PrimExpr) -> te.PrimExpr:
    raise AssertionError("conv2d_packed reads its weight through GemmSpec.panels")


def _stores_go_through_store_row(*_: object) -> Stmt:
    raise AssertionError("conv2d_packed stores whole tile rows (GemmSpec.store_row)")
