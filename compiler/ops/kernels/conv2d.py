"""nn.conv2d loops: an implicit-im2col `gemm`, or a direct convolution when groups are narrow.

Seen as a product per (image, group), a convolution has one row per output pixel, one column
per output channel of the group and a reduction over (input channel, kernel row, kernel
column). The GEMM reads A straight from the input with the pixel's window offsets bound once
per tile, so nothing is copied in im2col form; B (the weights) is packed by `gemm`. Padding is
materialized once into a workspace copy of the input, which keeps bounds checks out of the
reduction loops. Layouts (any permutation of NCHW / OIHW) are index mappings at each access,
and the reduction runs with the input's innermost axis innermost.

Depthwise and other narrow-group convolutions (fewer output channels per group than a vector
has lanes) would waste most of a register tile, so they use a direct loop nest vectorized
along the output row instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compiler.ops.kernels import conv2d_by_channels as by_channels
from compiler.ops.kernels.common import buffer_dims, canonical_dims, place
from compiler.ops.kernels.gemm import (
    PARALLEL_MIN_MACS,
    GemmSpec,
    Panels,
    RowReader,
    gemm,
    index_var,
    loop_nest,
    packed_once,
    peels_last_step,
    tile_rows,
    vector_lanes,
)
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, LetStmt, Stmt, Store, seq

# Output-row chunk of the direct kernel: its accumulators live on the stack.
DIRECT_ROW_CHUNK = 128
# Output pixels per product when the image size is known only at run time: the tiled product is
# built for this many rows (16 tiles of 6) and run once per chunk, the weights packed once.
DYNAMIC_ROW_CHUNK = 96
PARALLEL_MIN_PAD_COPY = 1 << 15

# Readers and writers in canonical coordinates: (n, c, y, x) of the input, (o, i, ky, kx) of the
# weight, (n, o, y, x) of the output; each already converted to the accumulation dtype.
Load4 = Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], te.PrimExpr]
Store4 = Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], Stmt]


@dataclass(frozen=True)
class Conv2DLayout:
    """Where N, C, H, W (data, out) and O, I, H, W (weight) sit in each buffer's dims, plus the
    window: strides, dilation and (top, left, bottom, right) padding; and the group count."""

    data_pos: tuple[int, ...]
    kernel_pos: tuple[int, ...]
    out_pos: tuple[int, ...]
    strides: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int, int, int]
    groups: int


def conv2d_loops(
    ctx: KernelContext, data: te.Buffer, weight: te.Buffer, out: te.Buffer, epilogue: Epilogue, layout: Conv2DLayout
) -> Stmt:
    n, c, h, w = canonical_dims(buffer_dims(data), layout.data_pos)
    o, cg, kh, kw = canonical_dims(buffer_dims(weight), layout.kernel_pos)
    _, _, oh, ow = canonical_dims(buffer_dims(out), layout.out_pos)
    if n * o * oh * ow == 0:
        return seq()
    (sh, sw), (dh, dw) = layout.strides, layout.dilation
    top, left, _, _ = layout.padding
    if by_channels.applies(out.dtype, layout.groups, o, (sh, sw), oh * ow):
        def read(nn: te.PrimExpr, cc: te.PrimExpr, hh: te.PrimExpr, ww: te.PrimExpr) -> te.PrimExpr:
            return data[place((nn, cc, hh, ww), layout.data_pos)]

        def put(nn: te.PrimExpr, oo: te.PrimExpr, y: te.PrimExpr, x: te.PrimExpr, value: te.PrimExpr) -> Stmt:
            idx = place((nn, oo, y, x), layout.out_pos)
            return Store(out, idx, te.cast(out.dtype, epilogue(value, idx)))

        def weight_at(oo: te.PrimExpr, ii: te.PrimExpr, y: te.PrimExpr, x: te.PrimExpr) -> te.PrimExpr:
            return te.cast(out.dtype, weight[place((oo, ii, y, x), layout.kernel_pos)])

        return by_channels.conv2d_by_channels(
            ctx, data, layout.data_pos == (0, 1, 2, 3), (n, c, h, w, o, kh, kw, oh, ow),
            ((sh, sw), (dh, dw), (top, left)), read, weight_at, put, out.dtype,
        )
    # Only the rows and columns some window reaches are copied.
    hp, wp = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    source = data
    pad_copy: te.Buffer | None = None
    if top or left or hp > h or wp > w:
        pad_dims = [0] * 4
        for coord, pos in zip((n, c, hp, wp), layout.data_pos):
            pad_dims[pos] = coord
        pad_copy = te.Buffer(ctx.fresh("padded"), tuple(pad_dims), data.dtype)
        source = pad_copy

    def src(nn: te.PrimExpr, cc: te.PrimExpr, hh: te.PrimExpr, ww: te.PrimExpr) -> te.PrimExpr:
        return te.cast(out.dtype, source[place((nn, cc, hh, ww), layout.data_pos)])

    def wgt(oo: te.PrimExpr, ii: te.PrimExpr, y: te.PrimExpr, x: te.PrimExpr) -> te.PrimExpr:
        return te.cast(out.dtype, weight[place((oo, ii, y, x), layout.kernel_pos)])

    def store(nn: te.PrimExpr, oo: te.PrimExpr, y: te.PrimExpr, x: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        idx = place((nn, oo, y, x), layout.out_pos)
        return Store(out, idx, te.cast(out.dtype, epilogue(value, idx)))

    geometry = _Geometry(n, c, o, cg, kh, kw, oh, ow, layout)
    if o // layout.groups >= vector_lanes(ctx, out.dtype):
        body = _gemm_conv(ctx, geometry, src, wgt, store, out.dtype)
    else:
        body = _direct_conv(ctx, geometry, src, wgt, store, out.dtype)
    if pad_copy is None:
        return body
    return Allocate(pad_copy, seq(_pad(ctx, data, pad_copy, layout, (h, w)), body))


def conv2d_dynamic_loops(
    ctx: KernelContext, data: te.Buffer, weight: te.Buffer, out: te.Buffer, epilogue: Epilogue, layout: Conv2DLayout,
    packed: tuple[int, bool] | None = None,
) -> Stmt | None:
    """conv2d over an image whose size (and batch) is known only at run time: the same
    implicit-im2col product as `conv2d_loops`, over the output pixels of all images as rows,
    `DYNAMIC_ROW_CHUNK` of them per product (the chunks shared among the threads), the last
    few one at a time; the weights are packed once per call, and the padding copied into a
    buffer the kernel takes from the heap. With `packed` (b, taps outer) the weight is already
    in the panel layout, OHWI[b]o or OIHW[b]o (AlterOpLayout packs a constant one at compile
    time), and is read in place: ResNet-50's last layers packed 8-9 MB of weights per call.
    A 5-d `data` is NCHW[x]c (read with an OHWI[b]o weight, the reduction over (channel block,
    channel in block)) and a 5-d `out` NCHW[b]c, so a tile row's b channels are one contiguous
    store instead of b stores a channel plane apart (BlockedActivations' layouts; `layout`'s
    positions then describe the blocked buffers' first four dims).
    None for a weight of `?` dims or narrow groups (fewer output channels per group than a
    vector has lanes), which the caller runs as a plain reduction."""
    if not all(isinstance(d, int) for d in weight.shape):
        return None
    x_block = int(data.shape[4]) if len(data.shape) == 5 else 0  # type: ignore[arg-type]  # static block
    out_block = int(out.shape[4]) if len(out.shape) == 5 else 0  # type: ignore[arg-type]  # static block
    if x_block and (packed is None or not packed[1] or layout.groups != 1):
        return None  # blocked data is read with an OHWI[b]o weight only
    if packed is not None:
        block, taps_outer = packed
        outer, *middle, _ = buffer_dims(weight)
        kh, kw, cg = middle if taps_outer else (middle[1], middle[2], middle[0])
        o = outer * block
    else:
        o, cg, kh, kw = canonical_dims(buffer_dims(weight), layout.kernel_pos)
    n, c, h, w = (data.shape[p] for p in layout.data_pos)
    if x_block:
        c = te.as_expr(c) * x_block
    oh, ow = (out.shape[p] for p in layout.out_pos[2:])
    groups = layout.groups
    og = o // groups
    if og < vector_lanes(ctx, out.dtype) or (out_block and og % out_block):
        return None
    (sh, sw), (dh, dw) = layout.strides, layout.dilation
    top, left, bottom, right = layout.padding
    source = data
    pad_copy: te.Buffer | None = None
    if top or left or bottom or right:
        # Without padding every window lies inside the image; with it, the copy holds all of it.
        pad_dims: list[int | te.PrimExpr] = list(data.shape)
        padded_hw = (te.as_expr(h) + (top + bottom), te.as_expr(w) + (left + right))
        for coord, pos in zip(padded_hw, layout.data_pos[2:]):
            pad_dims[pos] = coord
        pad_copy = te.Buffer(ctx.fresh("padded"), tuple(pad_dims), data.dtype, "heap")
        source = pad_copy
    # The reduction runs in the order the weight (packed) or the data (channels last) keeps.
    taps_first = packed[1] if packed is not None else layout.data_pos[1] == 3
    if x_block:
        k_axes: tuple[int, ...] = (kh, kw, cg // x_block, x_block)
    else:
        k_axes = (kh, kw, cg) if taps_first else (cg, kh, kw)

    def split_k(ks: Sequence[te.PrimExpr]) -> tuple[te.PrimExpr, te.PrimExpr, te.PrimExpr]:
        if x_block:
            return ks[2] * x_block + ks[3], ks[0], ks[1]
        return (ks[2], ks[0], ks[1]) if taps_first else (ks[0], ks[1], ks[2])

    pixels = te.as_expr(oh) * ow

    # The source's strides by canonical axis (n, c, y, x): a row's reads are its base offset
    # plus ci, ky and kx times these, affine in the reduction's indices with run-time
    # coefficients, which gcc turns into pointer steps (the 4-d index it had multiplied out anew
    # at every step: 1.2x on a 1x1 layer). Blocked data steps by channel block, and by one
    # within a block.
    rank = len(source.shape)
    strides: list[te.PrimExpr] = [te.const(1, "int64")] * rank
    for pos in range(rank - 2, -1, -1):
        strides[pos] = strides[pos + 1] * source.shape[pos + 1]
    s_n, s_c, s_y, s_x = (strides[pos] for pos in layout.data_pos)
    zeros = (te.const(0, "int64"),) * (rank - 1)

    def channel_offset(ks: Sequence[te.PrimExpr]) -> te.PrimExpr:
        if x_block:
            return ks[2] * s_c + ks[3]
        return split_k(ks)[0] * s_c

    def split_row(row: te.PrimExpr) -> tuple[te.PrimExpr, te.PrimExpr, te.PrimExpr]:
        """(image, y, x) of output row `row`. Each split is a division by a run-time size, and
        a tile's six rows had two each for their reads and two for their stores: a 1x1 layer
        with 64 input channels spent as long dividing as multiplying (1.5x the static build's
        time). With one image, a tile's rows are its first row's (y, x) stepped along x, with
        at most one wrap to the next output row when the row is at least a tile wide, so the
        tile divides once (gcc shares its first row's quotient among the rows)."""
        if not (isinstance(n, int) and n == 1):
            p = row % pixels
            return row // pixels, p // ow, p % ow
        start, step = _constant_step(row)
        qy, qx = start // ow, start % ow
        if step == 0:
            return te.const(0, "int64"), qy, qx
        stepped = qx + step
        wrap = stepped >= ow
        y = qy + te.cast("int64", wrap)
        x = te.select(wrap, stepped - ow, stepped)
        if isinstance(ow, int) and ow > step:
            return te.const(0, "int64"), y, x
        wide = te.as_expr(ow) > step
        return (te.const(0, "int64"), te.select(wide, y, (start + step) // ow),
                te.select(wide, x, (start + step) % ow))

    def a_row(grp: te.PrimExpr, row: te.PrimExpr) -> RowReader:
        img, y0, x0, base = (index_var(ctx, name) for name in ("img", "y0", "x0", "base"))
        image, y, x = split_row(row)
        lets = ((img, image), (y0, y * sh), (x0, x * sw),
                (base, img * s_n + (grp * cg) * s_c + y0 * s_y + x0 * s_x))

        def load(ks: Sequence[te.PrimExpr]) -> te.PrimExpr:
            _, ky, kx = split_k(ks)
            return te.cast(out.dtype, source[(*zeros, base + channel_offset(ks) + (ky * dh) * s_y + (kx * dw) * s_x)])

        return RowReader(lets, load)

    def b_load(grp: te.PrimExpr, ks: Sequence[te.PrimExpr], col: te.PrimExpr) -> te.PrimExpr:
        ci, ky, kx = split_k(ks)
        return te.cast(out.dtype, weight[place((grp * og + col, ci, ky, kx), layout.kernel_pos)])

    def out_index(img: te.PrimExpr, oc: te.PrimExpr, y: te.PrimExpr, x: te.PrimExpr) -> tuple[te.PrimExpr, ...]:
        if out_block:
            return (img, oc // out_block, y, x, oc % out_block)
        return place((img, oc, y, x), layout.out_pos)

    def store(grp: te.PrimExpr, row: te.PrimExpr, col: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        p = row % pixels
        idx = out_index(row // pixels, grp * og + col, p // ow, p % ow)
        return Store(out, idx, te.cast(out.dtype, epilogue(value, idx)))

    def store_row(grp: te.PrimExpr, row: te.PrimExpr, n0: te.PrimExpr, width: int,
                  value: Callable[[te.PrimExpr], te.PrimExpr]) -> Stmt:
        # A row's pixel is split into (image, y, x) once, not at every column: with the sizes
        # known only at run time each split is a division, and per column they were most of the
        # kernel (a 1x1 64->256 layer on 56x56: 3.4x the static build's pixel-rows time).
        img, y, x, j = (index_var(ctx, name) for name in ("img", "y", "x", "j"))
        if out_block == width:
            # A tile row starts a channel block (the panels are the blocks): one contiguous run.
            idx = (img, (grp * og + n0) // out_block, y, x, j)
            extent: te.PrimExpr = te.const(width, "int64")
        else:
            idx = out_index(img, grp * og + n0 + j, y, x)
            extent = te.minimum(te.const(width, "int64"), og - n0)
        put = Store(out, idx, te.cast(out.dtype, epilogue(value(j), idx)))
        columns = For(j, te.const(0, "int64"), extent, put, ForKind.VECTORIZED)
        image, at_y, at_x = split_row(row)
        return LetStmt(img, image, LetStmt(y, at_y, LetStmt(x, at_x, columns)))

    def product(rows: int, first: te.PrimExpr, panels: Panels | None, stored_from: te.PrimExpr | None = None) -> GemmSpec:
        def kept(r: te.PrimExpr, stmt: Stmt) -> Stmt:
            # Rows before `stored_from` belong to the tiles before: stored once, by those (an
            # output written over its residual must not read it back).
            return stmt if stored_from is None else IfThenElse(first + r >= stored_from, stmt)

        return GemmSpec(
            batch=groups, m=rows, n=og, k=k_axes, dtype=out.dtype,
            a_row=lambda g, r: a_row(g, _offset_row(first, r)), b_load=b_load,
            store=lambda g, r, col, value: kept(r, store(g, first + r, col, value)),
            store_row=lambda g, r, n0, width, value: kept(r, store_row(g, _offset_row(first, r), n0, width, value)),
            b_batches=groups, b_batch_of=lambda g: g, panels=panels, parallel_min_macs=1 << 62,
            peel_last=peel,
        )

    zero = te.const(0, "int64")
    peel = peels_last_step(lambda value: store(zero, zero, zero, value), out.dtype)
    packed_b: te.Buffer | None = None
    stmts: list[Stmt] = []
    if packed is not None:
        def in_place(bb: te.PrimExpr, nb: te.PrimExpr, ks: Sequence[te.PrimExpr], j: te.PrimExpr) -> te.PrimExpr:
            ci, ky, kx = split_k(ks)
            return te.cast(out.dtype, weight[(nb, ky, kx, ci, j) if taps_first else (nb, ci, ky, kx, j)])

        panels = Panels(packed[0], in_place)
    else:
        packed_b, pack, panels = packed_once(ctx, product(DYNAMIC_ROW_CHUNK, te.const(0, "int64"), None))
        stmts.append(pack)
    total = te.as_expr(n) * pixels
    # Chunks of 96 rows, then register tiles, the last of which ends at the last row and stores
    # only the rows the tiles before it did not: a 7x7 map's 49 pixels are nine tiles. One row
    # at a time, each remaining row had read all of the weights (ResNet-50's 9 MB of 3x3
    # weights for the 49th pixel of its 7x7 layers). Maps smaller than a tile go a row at a time.
    tile = tile_rows(ctx, out.dtype, panels.width)
    kind = ForKind.PARALLEL if ctx.parallel else ForKind.SERIAL
    chunk, t, row = (index_var(ctx, name) for name in ("chunk", "tile", "row"))
    chunks = total // DYNAMIC_ROW_CHUNK
    stmts.append(For(chunk, te.const(0, "int64"), chunks,
                     gemm(ctx, product(DYNAMIC_ROW_CHUNK, chunk * DYNAMIC_ROW_CHUNK, panels)), kind))
    done = chunks * DYNAMIC_ROW_CHUNK
    start = done + t * tile
    tiles = For(t, te.const(0, "int64"), (total - done + (tile - 1)) // tile, gemm(ctx, product(
        tile, te.minimum(start, total - tile), panels, stored_from=start)), kind)
    single_rows = For(row, te.const(0, "int64"), total, gemm(ctx, product(1, row, panels)))
    stmts.append(IfThenElse(total >= tile, tiles, single_rows))
    body = seq(*stmts)
    if packed_b is not None:
        body = Allocate(packed_b, body)
    if pad_copy is None:
        return body
    return Allocate(pad_copy, seq(_pad(ctx, data, pad_copy, layout, (h, w)), body))


def _offset_row(first: te.PrimExpr, r: te.PrimExpr) -> te.PrimExpr:
    """`first + r` with `r`'s constant step outermost, where `_constant_step` finds it."""
    start, step = _constant_step(r)
    base = first + start
    return base if step == 0 else te.Binary("+", base, te.const(step, "int64"), "int64")


def _constant_step(row: te.PrimExpr) -> tuple[te.PrimExpr, int]:
    """`row` as (start, step) with `row == start + step` and step a constant (a tile's rows
    are its first row plus 0, 1, 2, ...)."""
    if isinstance(row, te.Binary) and row.op == "+" and isinstance(row.b, te.Const) and isinstance(row.b.value, int):
        start, step = _constant_step(row.a)
        return start, step + row.b.value
    return row, 0


@dataclass(frozen=True)
class _Geometry:
    n: int
    c: int
    o: int
    cg: int
    kh: int
    kw: int
    oh: int
    ow: int
    layout: Conv2DLayout


def _pad(
    ctx: KernelContext, data: te.Buffer, padded: te.Buffer, layout: Conv2DLayout,
    hw: tuple[int | te.PrimExpr, int | te.PrimExpr],
) -> Stmt:
    """Copies `data` into `padded` (same layout, zeros around it), in storage order. Dims may
    be the kernel's `?` parameters; such a copy runs on the threads when its channels can."""
    dims = padded.shape
    top, left, _, _ = layout.padding
    h_axis, w_axis = layout.data_pos[2], layout.data_pos[3]

    def body(idx: list[te.Var]) -> Stmt:
        src_idx = list(idx)
        src_idx[h_axis] = idx[h_axis] - top
        src_idx[w_axis] = idx[w_axis] - left
        y, x = src_idx[h_axis], src_idx[w_axis]
        inside = te.logical_and(te.logical_and(y >= 0, y < hw[0]), te.logical_and(x >= 0, x < hw[1]))
        return Store(padded, tuple(idx), te.select(inside, data[tuple(src_idx)], te.const(0, data.dtype)))

    rank = len(dims)
    kinds = [ForKind.SERIAL] * rank
    kinds[-1] = ForKind.VECTORIZED
    if all(isinstance(d, int) for d in dims):
        total = 1
        for d in dims:
            total *= d  # type: ignore[assignment, operator]  # ints
        if ctx.parallel and total >= PARALLEL_MIN_PAD_COPY and dims[0] > 1:  # type: ignore[operator]  # an int
            kinds[0] = ForKind.PARALLEL
        elif ctx.parallel and total >= PARALLEL_MIN_PAD_COPY:
            kinds[1] = ForKind.PARALLEL
    elif ctx.parallel:
        kinds[1] = ForKind.PARALLEL
    static = all(isinstance(d, int) for d in dims)
    # int64 loop variables against run-time extents: int32 ones are cast back in every index.
    vars_ = [ctx.var(f"p{i}") if static else index_var(ctx, f"p{i}") for i in range(rank)]
    stmt = body(vars_)
    for k in reversed(range(rank)):
        stmt = For(vars_[k], te.const(0, vars_[k].dtype), te.as_expr(dims[k]), stmt, kinds[k])
    return stmt


def _gemm_conv(ctx: KernelContext, g: _Geometry, src: Load4, wgt: Load4, store: Store4, dtype: str) -> Stmt:
    layout = g.layout
    groups = layout.groups
    og = g.o // groups
    (sh, sw), (dh, dw) = layout.strides, layout.dilation
    channels_last = layout.data_pos[1] == 3
    k_axes = (g.kh, g.kw, g.cg) if channels_last else (g.cg, g.kh, g.kw)

    def split_k(ks: Sequence[te.PrimExpr]) -> tuple[te.PrimExpr, te.PrimExpr, te.PrimExpr]:
        if channels_last:
            return ks[2], ks[0], ks[1]
        return ks[0], ks[1], ks[2]

    def image_group(b: te.PrimExpr) -> tuple[te.PrimExpr, te.PrimExpr]:
        return (b, te.const(0)) if groups == 1 else (b // groups, b % groups)

    def a_row(b: te.PrimExpr, pixel: te.PrimExpr) -> RowReader:
        img, grp = image_group(b)
        y0, x0 = ctx.var("y0"), ctx.var("x0")
        lets = ((y0, (pixel // g.ow) * sh), (x0, (pixel % g.ow) * sw))

        def load(ks: Sequence[te.PrimExpr]) -> te.PrimExpr:
            ci, ky, kx = split_k(ks)
            return src(img, grp * g.cg + ci, y0 + ky * dh, x0 + kx * dw)

        return RowReader(lets, load)

    def b_load(grp: te.PrimExpr, ks: Sequence[te.PrimExpr], col: te.PrimExpr) -> te.PrimExpr:
        ci, ky, kx = split_k(ks)
        return wgt(grp * og + col, ci, ky, kx)

    def store_at(b: te.PrimExpr, pixel: te.PrimExpr, col: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        img, grp = image_group(b)
        return store(img, grp * og + col, pixel // g.ow, pixel % g.ow, value)

    spec = GemmSpec(
        batch=g.n * groups, m=g.oh * g.ow, n=og, k=k_axes, dtype=dtype, a_row=a_row, b_load=b_load,
        store=store_at, b_batches=groups, b_batch_of=lambda b: b % groups,
    )
    return gemm(ctx, spec)


def _direct_conv(ctx: KernelContext, g: _Geometry, src: Load4, wgt: Load4, store: Store4, dtype: str) -> Stmt:
    """One output row chunk at a time: acc[x] += w[o, c, ky, kx] * in[c, y*sh + ky*dh, x*sw + kx*dw]."""
    layout = g.layout
    og = g.o // layout.groups
    (sh, sw), (dh, dw) = layout.strides, layout.dilation
    chunk = min(g.ow, DIRECT_ROW_CHUNK)
    chunks = -(-g.ow // chunk)
    t = ctx.var("row")
    img, oc, y = ctx.var("n"), ctx.var("o"), ctx.var("y")
    x0 = ctx.var("x0")
    acc = te.Buffer(ctx.fresh("acc"), (chunk,), dtype, scope="local")
    width = te.const(chunk) if g.ow % chunk == 0 else te.minimum(chunk, g.ow - x0)

    def reduce(ks: list[te.Var]) -> Stmt:
        ci, ky, kx = ks
        wv = te.Var(ctx.fresh("wv"), dtype)
        x = ctx.var("x")
        c_abs = (oc // og) * g.cg + ci
        update = Store(acc, (x,), acc[x] + wv * src(img, c_abs, y * sh + ky * dh, (x0 + x) * sw + kx * dw))
        return LetStmt(wv, wgt(oc, ci, ky, kx), For(x, te.const(0), width, update, ForKind.VECTORIZED))

    zx, sx = ctx.var("x"), ctx.var("x")
    chunk_body = seq(
        For(zx, te.const(0), width, Store(acc, (zx,), te.const(0, dtype)), ForKind.VECTORIZED),
        loop_nest(ctx, "r", (g.cg, g.kh, g.kw), reduce),
        For(sx, te.const(0), width, store(img, oc, y, x0 + sx, acc[sx]), ForKind.VECTORIZED),
    )
    c = ctx.var("chunk")
    body: Stmt = For(c, te.const(0), te.const(chunks), LetStmt(x0, c * chunk, Allocate(acc, chunk_body)))
    rows = g.n * g.o * g.oh
    body = LetStmt(img, t // (g.o * g.oh), LetStmt(oc, (t // g.oh) % g.o, LetStmt(y, t % g.oh, body)))
    macs = rows * g.ow * g.cg * g.kh * g.kw
    kind = ForKind.PARALLEL if ctx.parallel and rows > 1 and macs >= PARALLEL_MIN_MACS else ForKind.SERIAL
    return For(t, te.const(0), te.const(rows), body, kind)
