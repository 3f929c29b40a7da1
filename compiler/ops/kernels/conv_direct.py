"""Direct N-d convolution loops, shared by conv1d/conv3d, the transposed convolutions and the
blocked (NCHWc) convolutions.

Two steps, as in the narrow-group branch of the conv2d kernel:

1. Pack: the input is copied once into a workspace in canonical order (N, C, *spatial), already
   converted to the accumulation dtype (the output dtype, as TVM computes), with the zero
   padding materialized. This normalizes every data layout (NWC, NDHWC, NCHW8c, ...) and keeps
   bounds checks out of the reduction. A transposed convolution is packed as the equivalent
   stride-1 convolution's input: the data spread `stride` apart, framed by the padding that
   makes each output position see every input its kernel touches.
2. Convolve: one output row chunk at a time, an accumulator on the stack, the reduction over
   (input channel of the group, kernel taps) outermost and the output row vectorized innermost:
   `acc[x] += w[o, c, k...] * packed[n, g*cg + c, y*s + k*d ...]`.

Weights are read in place through their layout (OIW, DHWIO, IOHW, OIHW8i8o, ...); the output is
written through its layout with the fused epilogue applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from compiler.ops.kernels.common import buffer_dims, unflatten
from compiler.ops.kernels.gemm import PARALLEL_MIN_MACS, loop_nest
from compiler.ops.layout import Layout
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, LetStmt, Stmt, Store, seq

ROW_CHUNK = 128
PARALLEL_MIN_PACK = 1 << 15


@dataclass(frozen=True)
class ConvSpec:
    """One convolution call in canonical terms.

    `spatial` names the spatial axes ("W", "HW", "DHW"). Canonical dims: data (N, C, *S), out
    (N, O, *OS), kernel (O, C/groups, *K) or, when `transposed`, (C, O/groups, *K). Layouts map
    those canonical coordinates (by letter) to each buffer's index.
    """

    spatial: str
    data_layout: Layout
    kernel_layout: Layout
    out_layout: Layout
    data: tuple[int, ...]
    kernel: tuple[int, ...]
    out: tuple[int, ...]
    strides: tuple[int, ...]
    dilation: tuple[int, ...]
    pad_before: tuple[int, ...]
    groups: int
    transposed: bool


def layout_index(layout: Layout, coords: Mapping[str, te.PrimExpr]) -> tuple[te.PrimExpr, ...]:
    """The buffer index in `layout` of the element with primal coordinates `coords`
    (a split axis `C` of NCHW8c stores `c // 8`, its sub-axis `c` stores `c % 8`)."""
    out: list[te.PrimExpr] = []
    for letter, factor in layout.axes:
        if factor is not None:
            out.append(coords[letter.upper()] % factor)
            continue
        split = layout.factor(letter)
        out.append(coords[letter] if split is None else coords[letter] // split)
    return tuple(out)


def _clamp(value: te.PrimExpr, extent: int) -> te.PrimExpr:
    return te.minimum(te.maximum(value, 0), extent - 1)


def conv_direct_loops(
    ctx: KernelContext, data: te.Buffer, weight: te.Buffer, out: te.Buffer, epilogue: Epilogue, spec: ConvSpec
) -> Stmt:
    for buffer in (data, weight, out):
        buffer_dims(buffer)  # static shapes only
    dtype = out.dtype
    n, c, *sizes = spec.data
    _, o, *out_sizes = spec.out
    ksizes = spec.kernel[2:]
    total = 1
    for d in spec.out:
        total *= d
    if total == 0:
        return seq()
    nd = len(spec.spatial)
    if spec.transposed:
        steps = (1,) * nd
        # Output y reads packed[y + k*d] for k = 0..K-1 against the flipped kernel.
        offsets = tuple((k - 1) * d - p for k, d, p in zip(ksizes, spec.dilation, spec.pad_before))
        packed_sizes = tuple(os + (k - 1) * d for os, k, d in zip(out_sizes, ksizes, spec.dilation))
    else:
        steps = spec.strides
        offsets = spec.pad_before
        packed_sizes = tuple(
            (os - 1) * s + (k - 1) * d + 1 for os, k, s, d in zip(out_sizes, ksizes, spec.strides, spec.dilation)
        )
    packed = te.Buffer(ctx.fresh("packed"), (n, c, *packed_sizes), dtype)
    pack = _pack(ctx, data, packed, spec, offsets, tuple(sizes))
    body = _convolve(ctx, packed, weight, out, epilogue, spec, steps, offsets, c // spec.groups, o // spec.groups)
    return Allocate(packed, seq(pack, body))


def _pack(
    ctx: KernelContext,
    data: te.Buffer,
    packed: te.Buffer,
    spec: ConvSpec,
    offsets: tuple[int, ...],
    sizes: tuple[int, ...],
) -> Stmt:
    """packed[n, c, p...] = data at spatial (p - offset) (divided by the stride when transposed),
    zero where that falls outside the data or between the transposed convolution's strides."""
    dims = buffer_dims(packed)
    vars_ = [ctx.var(f"p{i}") for i in range(len(dims))]
    conditions: list[te.PrimExpr] = []
    coords: dict[str, te.PrimExpr] = {"N": vars_[0], "C": vars_[1]}
    for j, letter in enumerate(spec.spatial):
        p, size, offset = vars_[2 + j], sizes[j], offsets[j]
        q = p - offset
        if spec.transposed and spec.strides[j] > 1:
            s = spec.strides[j]
            conditions += [q >= 0, te.eq(q % s, 0), q < (size - 1) * s + 1]
            coords[letter] = _clamp(q // s, size)
        elif offset != 0 or dims[2 + j] > size:
            conditions += [q >= 0, q < size]
            coords[letter] = _clamp(q, size)
        else:
            coords[letter] = q
    value = te.cast(packed.dtype, data[layout_index(spec.data_layout, coords)])
    if conditions:
        inside = conditions[0]
        for cond in conditions[1:]:
            inside = te.logical_and(inside, cond)
        value = te.select(inside, value, te.const(0, packed.dtype))
    stmt: Stmt = Store(packed, tuple(vars_), value)
    count = 1
    for d in dims:
        count *= d
    kinds = [ForKind.SERIAL] * len(dims)
    kinds[-1] = ForKind.VECTORIZED
    if ctx.parallel and count >= PARALLEL_MIN_PACK:
        kinds[0 if dims[0] > 1 else 1] = ForKind.PARALLEL
    for k in reversed(range(len(dims))):
        stmt = For(vars_[k], te.const(0), te.const(dims[k]), stmt, kinds[k])
    return stmt


def _convolve(
    ctx: KernelContext,
    packed: te.Buffer,
    weight: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    spec: ConvSpec,
    steps: tuple[int, ...],
    offsets: tuple[int, ...],
    cg: int,
    og: int,
) -> Stmt:
    dtype = out.dtype
    n, o, *out_sizes = spec.out
    ksizes = spec.kernel[2:]
    nd = len(spec.spatial)
    ow = out_sizes[-1]
    chunk = min(ow, ROW_CHUNK)
    chunks = -(-ow // chunk)
    t = ctx.var("row")
    row_dims = (n, o, *out_sizes[:-1])
    row_vars = [ctx.var(name) for name in ("n", "o", *(f"y{j}" for j in range(nd - 1)))]
    img, oc, ys = row_vars[0], row_vars[1], row_vars[2:]
    x0 = ctx.var("x0")
    acc = te.Buffer(ctx.fresh("acc"), (chunk,), dtype, scope="local")
    width = te.const(chunk) if ow % chunk == 0 else te.minimum(chunk, ow - x0)
    group = oc // og

    def weight_value(ci: te.PrimExpr, taps: Sequence[te.PrimExpr]) -> te.PrimExpr:
        if spec.transposed:
            coords = {"I": group * cg + ci, "O": oc % og}
            flipped = [k - 1 - tap for k, tap in zip(ksizes, taps)]
            coords.update(zip(spec.spatial, flipped))
        else:
            coords = {"O": oc, "I": ci}
            coords.update(zip(spec.spatial, taps))
        return te.cast(dtype, weight[layout_index(spec.kernel_layout, coords)])

    def reduce(ks: list[te.Var]) -> Stmt:
        ci, taps = ks[0], ks[1:]
        wv = te.Var(ctx.fresh("wv"), dtype)
        x = ctx.var("x")
        index: list[te.PrimExpr] = [img, group * cg + ci]
        for j in range(nd - 1):
            index.append(ys[j] * steps[j] + taps[j] * spec.dilation[j])
        index.append((x0 + x) * steps[-1] + taps[-1] * spec.dilation[-1])
        update = Store(acc, (x,), acc[x] + wv * packed[tuple(index)])
        stmt: Stmt = LetStmt(wv, weight_value(ci, taps), For(x, te.const(0), width, update, ForKind.VECTORIZED))
        if spec.transposed:
            # Along the outer axes a tap either reads a spread-out data row or a row of zeros
            # between them, the same for the whole output row: skip the zero rows.
            for j in range(nd - 1):
                if spec.strides[j] > 1:
                    phase = (ys[j] + taps[j] * spec.dilation[j] - offsets[j]) % spec.strides[j]
                    stmt = IfThenElse(te.eq(phase, 0), stmt)
        return stmt

    def store(x: te.PrimExpr) -> Stmt:
        coords = {"N": img, "C": oc}
        coords.update(zip(spec.spatial, [*ys, x0 + x]))
        idx = layout_index(spec.out_layout, coords)
        return Store(out, idx, te.cast(dtype, epilogue(acc[x], idx)))

    zx, sx = ctx.var("x"), ctx.var("x")
    chunk_body = seq(
        For(zx, te.const(0), width, Store(acc, (zx,), te.const(0, dtype)), ForKind.VECTORIZED),
        loop_nest(ctx, "r", (cg, *ksizes), reduce),
        For(sx, te.const(0), width, store(sx), ForKind.VECTORIZED),
    )
    c = ctx.var("chunk")
    body: Stmt = For(c, te.const(0), te.const(chunks), LetStmt(x0, c * chunk, Allocate(acc, chunk_body)))
    for var, value in reversed(list(zip(row_vars, unflatten(t, row_dims)))):
        body = LetStmt(var, value, body)
    rows = 1
    for d in row_dims:
        rows *= d
    macs = rows * ow * cg
    for k in ksizes:
        macs *= k
    kind = ForKind.PARALLEL if ctx.parallel and rows > 1 and macs >= PARALLEL_MIN_MACS else ForKind.SERIAL
    return For(t, te.const(0), te.const(rows), body, kind)
