"""Spatial rearrangements: nn.mirror_pad, nn.depth_to_space, nn.space_to_depth,
nn.batch_to_space_nd, nn.space_to_batch_nd, nn.upsampling, nn.upsampling3d, nn.dilate.

All are INJECTIVE, as in TVM: each output element reads a fixed set of input elements.

* mirror_pad: SYMMETRIC repeats the edge element (numpy "symmetric", padding <= dim), REFLECT
  does not (numpy "reflect", padding < dim).
* depth_to_space moves channel blocks into b x b spatial blocks: in DCR mode output channel c
  at block offset (i, j) reads input channel (i*b + j) * C_out + c, in CRD mode c*b*b + i*b + j.
  space_to_depth is the inverse of DCR (TVM ignores its `mode`).
* space_to_batch_nd / batch_to_space_nd are TensorFlow's: data is [batch] + M spatial dims +
  the rest; the block offsets go to the outer part of the batch (output batch = offset * batch
  + n); paddings use `pad_value`, crops remove elements after the batch is folded back.
* upsampling (2-D) and upsampling3d resize to round(size * scale) along each spatial axis,
  through TVM's resize: the input coordinate of output x is x * in/out ("asymmetric"),
  (x + 0.5) * in/out - 0.5 ("half_pixel", upsampling3d only) or x * (in-1)/(out-1)
  ("align_corners"; 0 when out is 1), computed in float32. Nearest neighbour rounds it down
  (plus 1e-5) or, with align_corners, to the nearest (halves away from zero); linear
  interpolation (bilinear / trilinear) lerps the two neighbours; bicubic uses the four
  neighbours with TVM's spline weights (alpha = -0.5). Neighbours outside the input are
  clamped to its edge. Values are interpolated in float32 and cast back, truncating for
  integer data. float64 data is the exception: its coordinates and values stay in float64
  (TVM rounds them to float32).
* dilate inserts strides-1 copies of `dilation_value` between neighbouring elements of each
  axis: output dim (d - 1) * stride + 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, Type
from compiler.ops.common import check_arity, row_major_index, static_dims, tensor_arg
from compiler.ops.domain import Domain, Draw
from compiler.ops.layout import from_canonical, plain_positions, to_canonical
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim as ShapeDim
from compiler.ops.shape_rules import ShapeArg, ShapeRule, dims, fill, int64, product
from compiler.tir import expr as te
from compiler.tir.compute import Index, TensorView
from compiler.tir.expr import PrimExpr, as_expr, cast, const, eq, intrin, maximum, minimum, select

F32 = "float32"
ALL_DTYPES = ("float32", "float32", "float64", "float16", "int32", "int8", "uint8", "int64")
FLOATS = ("float32", "float32", "float64", "float16")


def _fits(dtype: str, value: float) -> np.generic:
    """`value` as a scalar of `dtype`, as TVM casts a double attribute (ints truncate)."""
    return np.array(value).astype(dtype)[()]


def _fill(dtype: str, value: float) -> PrimExpr:
    """The loop-IR constant of `_fits(dtype, value)`."""
    return const(_fits(dtype, value).item(), dtype)


# --- nn.mirror_pad --------------------------------------------------------------------------------

MIRROR_MODES = ("SYMMETRIC", "REFLECT")


def _mirror_pad_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.mirror_pad"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    mode = attrs["mode"]
    if mode not in MIRROR_MODES:
        raise TypeRelationError(f"{op}: unknown mode {mode!r} (expected SYMMETRIC or REFLECT)")
    width = attrs["pad_width"]
    if len(width) != data.ndim or any(len(w) != 2 for w in width):
        raise TypeRelationError(
            f"{op}: pad_width {[list(w) for w in width]} needs one [before, after] pair per dim of {data}"
        )
    out: list[Dim] = []
    for dim, (before, after) in zip(data.shape, width):
        if before < 0 or after < 0:
            raise TypeRelationError(f"{op}: pad_width must not be negative, got {[list(w) for w in width]}")
        if dim is not ANY:
            limit = dim if mode == "SYMMETRIC" else dim - 1  # type: ignore[operator]  # an int
            if max(before, after) > limit:
                raise TypeRelationError(
                    f"{op}: {mode} padding of {before, after} needs a dim of at least "
                    f"{max(before, after) + (mode == 'REFLECT')}, got {dim}"
                )
        out.append(ANY if dim is ANY else dim + before + after)  # type: ignore[operator]  # an int
    return TensorType(tuple(out), data.dtype)


def _mirror_pad_shape(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
    data = dims(inputs[0], "data")
    return [tuple(int64(d) + before + after for d, (before, after) in zip(data, attrs["pad_width"]))]


def _mirror_pad(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    mode = "symmetric" if attrs["mode"] == "SYMMETRIC" else "reflect"
    return np.pad(a[0], [tuple(w) for w in attrs["pad_width"]], mode=mode)


def _mirror_pad_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    (data,) = inputs
    shape = static_dims(data.shape, "nn.mirror_pad")
    # SYMMETRIC mirrors about the edge between elements, REFLECT about the edge element.
    shift = 1 if attrs["mode"] == "SYMMETRIC" else 0
    source: list[PrimExpr] = []
    for i, extent, (before, after) in zip(idx, shape, attrs["pad_width"]):
        if before == after == 0:
            source.append(i)
            continue
        inner = i - before
        mirrored = select(inner < 0, -inner - shift, inner) if before else inner
        if after:
            mirrored = select(mirrored >= extent, 2 * extent - 2 + shift - mirrored, mirrored)
        source.append(mirrored)
    return data[tuple(source)]


def _mirror_pad_domain(d: Draw) -> Sample:
    shape = d.shape(1, 4, 1, 5)
    mode = d.choice(MIRROR_MODES)
    limit = (lambda n: n) if mode == "SYMMETRIC" else (lambda n: n - 1)
    width = [[d.integer(0, limit(n)), d.integer(0, limit(n))] for n in shape]
    return Sample((TensorType(shape, d.dtype(ALL_DTYPES)),), {"pad_width": width, "mode": mode}, int_high=100)


register(
    OpDef(
        name="nn.mirror_pad",
        num_inputs=1,
        type_rel=_mirror_pad_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_mirror_pad,
        compute=_mirror_pad_compute,
        shape_func=_mirror_pad_shape,
        attrs=(AttrSpec("mode", "str", "SYMMETRIC"), AttrSpec("pad_width", "nested_ints", REQUIRED)),
        samples=(
            Sample((TensorType((1, 2, 3, 3), F32),), {"pad_width": [[0, 0], [0, 0], [1, 3], [3, 2]]}),
            Sample((TensorType((3, 4), F32),), {"pad_width": [[2, 1], [1, 3]], "mode": "REFLECT"}),
            Sample((TensorType((5,), "int32"),), {"pad_width": [[4, 0]], "mode": "REFLECT"}, int_high=50),
        ),
        domain=Domain(draw=_mirror_pad_domain),
    )
)


# --- nn.depth_to_space / nn.space_to_depth ----------------------------------------------------------

SUBPIXEL_MODES = ("DCR", "CRD")
_SUBPIXEL_ATTRS = (
    AttrSpec("block_size", "int", 1),
    AttrSpec("layout", "str", "NCHW"),
    AttrSpec("mode", "str", "DCR"),
)


def _subpixel_read(data: TensorType, attrs: Attrs, op: str) -> tuple[tuple[int, ...], int]:
    if data.ndim != 4:
        raise TypeRelationError(f"{op} expects 4-D data, got {data}")
    positions = plain_positions(attrs["layout"], "NCHW", op, "layout")
    block = attrs["block_size"]
    if block <= 0:
        raise TypeRelationError(f"{op}: block_size must be positive, got {block}")
    if attrs["mode"] not in SUBPIXEL_MODES:
        raise TypeRelationError(f"{op}: unknown mode {attrs['mode']!r} (expected DCR or CRD)")
    return positions, block


def _depth_to_space_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.depth_to_space"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    positions, b = _subpixel_read(data, attrs, op)
    n, c, h, w = to_canonical(data.shape, positions)
    if c is not ANY and c % (b * b):  # type: ignore[operator]  # an int
        raise TypeRelationError(f"{op}: {c} channels of {data} are not divisible by block_size^2 = {b * b}")
    out = (n, _scaled(c, 1, b * b), _scaled(h, b), _scaled(w, b))
    return TensorType(from_canonical(out, positions), data.dtype)


def _scaled(dim: Dim, factor: int, divisor: int = 1) -> Dim:
    return ANY if dim is ANY else dim * factor // divisor  # type: ignore[operator]  # an int


def _space_to_depth_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.space_to_depth"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    positions, b = _subpixel_read(data, attrs, op)
    n, c, h, w = to_canonical(data.shape, positions)
    for name, dim in (("height", h), ("width", w)):
        if dim is not ANY and dim % b:  # type: ignore[operator]  # an int
            raise TypeRelationError(f"{op}: {name} {dim} of {data} is not divisible by block_size {b}")
    out = (n, _scaled(c, b * b), _scaled(h, 1, b), _scaled(w, 1, b))
    return TensorType(from_canonical(out, positions), data.dtype)


def _subpixel_shape(op: str, inverse: bool) -> ShapeRule:
    """depth_to_space trades channels for b x b blocks of space; space_to_depth (`inverse`)
    the other way."""

    def rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
        positions = plain_positions(attrs["layout"], "NCHW", op, "layout")
        n, c, h, w = (int64(d) for d in to_canonical(dims(inputs[0], "data"), positions))
        b = attrs["block_size"]
        out = (n, c * (b * b), h // b, w // b) if inverse else (n, c // (b * b), h * b, w * b)
        return [from_canonical(out, positions)]

    return rule


def _depth_to_space(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data = a[0]
    positions = plain_positions(attrs["layout"], "NCHW", "nn.depth_to_space", "layout")
    b = attrs["block_size"]
    x = np.transpose(data, positions)
    n, c, h, w = x.shape
    if attrs["mode"] == "DCR":
        blocks = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        blocks = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    out = blocks.reshape(n, c // (b * b), h * b, w * b)
    return np.ascontiguousarray(np.transpose(out, np.argsort(positions)))


def _space_to_depth(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data = a[0]
    positions = plain_positions(attrs["layout"], "NCHW", "nn.space_to_depth", "layout")
    b = attrs["block_size"]
    x = np.transpose(data, positions)
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    out = blocks.reshape(n, c * b * b, h // b, w // b)
    return np.ascontiguousarray(np.transpose(out, np.argsort(positions)))


def _depth_to_space_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    (data,) = inputs
    positions = plain_positions(attrs["layout"], "NCHW", "nn.depth_to_space", "layout")
    b = attrs["block_size"]
    c_in = static_dims(data.shape, "nn.depth_to_space")[positions[1]]
    n, c, y, x = (idx[p] for p in positions)
    by, bx = y % b, x % b
    if attrs["mode"] == "DCR":
        channel = (by * b + bx) * (c_in // (b * b)) + c
    else:
        channel = c * (b * b) + by * b + bx
    return data[_placed((n, channel, y // b, x // b), positions)]


def _space_to_depth_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    (data,) = inputs
    positions = plain_positions(attrs["layout"], "NCHW", "nn.space_to_depth", "layout")
    b = attrs["block_size"]
    c_in = static_dims(data.shape, "nn.space_to_depth")[positions[1]]
    n, c, y, x = (idx[p] for p in positions)
    offset = c // c_in
    return data[_placed((n, c % c_in, y * b + offset // b, x * b + offset % b), positions)]


def _placed(canonical: Sequence[PrimExpr], positions: Sequence[int]) -> tuple[PrimExpr, ...]:
    out: list[PrimExpr] = [const(0)] * len(canonical)
    for value, p in zip(canonical, positions):
        out[p] = value
    return tuple(out)


def _subpixel_domain(inverse: bool) -> Callable[[Draw], Sample]:
    def draw(d: Draw) -> Sample:
        b = d.choice((1, 2, 2, 3))
        layout = d.choice(("NCHW", "NHWC"))
        if inverse:
            dims = (d.integer(1, 2), d.integer(1, 3), b * d.integer(1, 3), b * d.integer(1, 3))
        else:
            dims = (d.integer(1, 2), b * b * d.integer(1, 2), d.integer(1, 3), d.integer(1, 3))
        shape = from_canonical(dims, plain_positions(layout, "NCHW", "domain", "layout"))
        attrs = {"block_size": b, "layout": layout, "mode": d.choice(SUBPIXEL_MODES)}
        return Sample((TensorType(shape, d.dtype(ALL_DTYPES)),), attrs, int_high=100)

    return draw


register(
    OpDef(
        name="nn.depth_to_space",
        num_inputs=1,
        type_rel=_depth_to_space_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_depth_to_space,
        compute=_depth_to_space_compute,
        shape_func=_subpixel_shape("nn.depth_to_space", inverse=False),
        attrs=_SUBPIXEL_ATTRS,
        samples=(
            Sample((TensorType((1, 8, 2, 3), F32),), {"block_size": 2}),
            Sample((TensorType((2, 9, 2, 1), F32),), {"block_size": 3, "mode": "CRD"}),
            Sample((TensorType((1, 2, 3, 8), "int32"),), {"block_size": 2, "layout": "NHWC", "mode": "CRD"}),
        ),
        domain=Domain(draw=_subpixel_domain(inverse=False)),
    )
)

register(
    OpDef(
        name="nn.space_to_depth",
        num_inputs=1,
        type_rel=_space_to_depth_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_space_to_depth,
        compute=_space_to_depth_compute,
        shape_func=_subpixel_shape("nn.space_to_depth", inverse=True),
        attrs=_SUBPIXEL_ATTRS,
        samples=(
            Sample((TensorType((1, 2, 4, 6), F32),), {"block_size": 2}),
            Sample((TensorType((2, 6, 3, 1), F32),), {"block_size": 3, "layout": "NHWC"}),
            Sample((TensorType((1, 3, 2, 2), "int8"),), {"block_size": 1}, int_high=100),
        ),
        domain=Domain(draw=_subpixel_domain(inverse=True)),
    )
)


# --- nn.space_to_batch_nd / nn.batch_to_space_nd ----------------------------------------------------


def _block_shape(data: TensorType, attrs: Attrs, pairs_name: str, op: str) -> tuple[tuple[int, ...], tuple]:
    block = tuple(attrs["block_shape"])
    pairs = attrs[pairs_name]
    if not block or min(block) <= 0:
        raise TypeRelationError(f"{op}: block_shape must be non-empty and positive, got {list(block)}")
    if data.ndim < len(block) + 1:
        raise TypeRelationError(f"{op}: data {data} needs a batch dim and {len(block)} spatial dims")
    if len(pairs) != len(block) or any(len(p) != 2 for p in pairs):
        raise TypeRelationError(
            f"{op}: {pairs_name} {[list(p) for p in pairs]} needs one [before, after] pair per block dim"
        )
    if any(v < 0 for p in pairs for v in p):
        raise TypeRelationError(f"{op}: {pairs_name} must not be negative, got {[list(p) for p in pairs]}")
    return block, pairs


def _space_to_batch_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.space_to_batch_nd"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    block, pads = _block_shape(data, attrs, "paddings", op)
    out: list[Dim] = [_scaled(data.shape[0], int(np.prod(block)))]
    for k, (b, (before, after)) in enumerate(zip(block, pads)):
        dim = data.shape[1 + k]
        if dim is ANY:
            out.append(ANY)
            continue
        total = dim + before + after  # type: ignore[operator]  # an int
        if total % b:
            raise TypeRelationError(
                f"{op}: padded spatial dim {k} of {data} ({total}) is not divisible by block {b}"
            )
        out.append(total // b)
    return TensorType(tuple(out) + tuple(data.shape[1 + len(block):]), data.dtype)


def _batch_to_space_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.batch_to_space_nd"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    block, crops = _block_shape(data, attrs, "crops", op)
    blocks = int(np.prod(block))
    batch = data.shape[0]
    if batch is not ANY and batch % blocks:  # type: ignore[operator]  # an int
        raise TypeRelationError(f"{op}: batch {batch} of {data} is not divisible by the {blocks} blocks")
    out: list[Dim] = [_scaled(batch, 1, blocks)]
    for k, (b, (before, after)) in enumerate(zip(block, crops)):
        dim = data.shape[1 + k]
        if dim is ANY:
            out.append(ANY)
            continue
        size = dim * b - before - after  # type: ignore[operator]  # an int
        if size < 0:
            raise TypeRelationError(f"{op}: crops {list(crops[k])} remove more than spatial dim {k} holds")
        out.append(size)
    return TensorType(tuple(out) + tuple(data.shape[1 + len(block):]), data.dtype)


def _space_to_batch_shape(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
    data = dims(inputs[0], "data")
    block = attrs["block_shape"]
    pads = attrs["paddings"]
    spatial = [(int64(data[1 + k]) + before + after) // b for k, (b, (before, after)) in enumerate(zip(block, pads))]
    return [(product(block) * int64(data[0]), *spatial, *data[1 + len(block):])]


def _batch_to_space_shape(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
    data = dims(inputs[0], "data")
    block = attrs["block_shape"]
    crops = attrs["crops"]
    spatial = [int64(data[1 + k]) * b - before - after for k, (b, (before, after)) in enumerate(zip(block, crops))]
    return [(int64(data[0]) // product(block), *spatial, *data[1 + len(block):])]


def _space_to_batch(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data = a[0]
    block = tuple(attrs["block_shape"])
    m = len(block)
    pads = [(0, 0)] + [tuple(p) for p in attrs["paddings"]] + [(0, 0)] * (data.ndim - 1 - m)
    padded = np.pad(data, pads, constant_values=_fits(str(data.dtype), attrs["pad_value"]))
    batch, spatial, rest = padded.shape[0], padded.shape[1 : 1 + m], padded.shape[1 + m :]
    split: list[int] = [batch]
    for size, b in zip(spatial, block):
        split += [size // b, b]
    x = padded.reshape(split + list(rest))
    order = [2 + 2 * k for k in range(m)] + [0] + [1 + 2 * k for k in range(m)]
    order += list(range(1 + 2 * m, x.ndim))
    x = x.transpose(order)
    return np.ascontiguousarray(x.reshape([batch * int(np.prod(block))] + [s // b for s, b in zip(spatial, block)]
                                          + list(rest)))


def _batch_to_space(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data = a[0]
    block = tuple(attrs["block_shape"])
    m = len(block)
    batch = data.shape[0] // int(np.prod(block))
    spatial, rest = data.shape[1 : 1 + m], data.shape[1 + m :]
    x = data.reshape(list(block) + [batch] + list(spatial) + list(rest))
    order = [m] + [v for k in range(m) for v in (m + 1 + k, k)] + list(range(2 * m + 1, x.ndim))
    x = x.transpose(order).reshape([batch] + [s * b for s, b in zip(spatial, block)] + list(rest))
    crop = (slice(None),) + tuple(slice(before, x.shape[1 + k] - after) for k, (before, after) in
                                  enumerate(attrs["crops"]))
    return np.ascontiguousarray(x[crop])


def _space_to_batch_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    (data,) = inputs
    shape = static_dims(data.shape, "nn.space_to_batch_nd")
    block = tuple(attrs["block_shape"])
    m = len(block)
    batch = shape[0]
    offsets = row_major_index(idx[0] // batch, block) if len(block) > 1 else (idx[0] // batch,)
    source: list[PrimExpr] = [idx[0] % batch]
    bounds: list[PrimExpr] = []
    for k, (b, (before, after)) in enumerate(zip(block, attrs["paddings"])):
        pos = idx[1 + k] * b + offsets[k] - before
        source.append(pos)
        bounds += ([pos >= 0] if before or b > 1 else []) + ([pos < shape[1 + k]] if after or b > 1 else [])
    source += list(idx[1 + m :])
    fill = _fill(data.dtype, attrs["pad_value"])
    # The load sits in select branches, so it is only evaluated inside the data's bounds. One
    # select per bound, not one on their conjunction: GCC 12 at -O3 -march=native (AMD EPYC)
    # vectorizes `a && b ? load : constant` into wrong masked loads.
    value = data[tuple(source)]
    for bound in reversed(bounds):
        value = select(bound, value, fill)
    return value


def _batch_to_space_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    (data,) = inputs
    block = tuple(attrs["block_shape"])
    m = len(block)
    out_batch = static_dims(out_type.shape, "nn.batch_to_space_nd")[0]  # type: ignore[attr-defined]  # a TensorType
    flat: PrimExpr = const(0)
    source: list[PrimExpr] = []
    for k, (b, (before, _)) in enumerate(zip(block, attrs["crops"])):
        full = idx[1 + k] + before
        flat = flat * b + full % b
        source.append(full // b)
    return data[(flat * out_batch + idx[0],) + tuple(source) + tuple(idx[1 + m :])]


def _space_batch_domain(to_batch: bool) -> Callable[[Draw], Sample]:
    def draw(d: Draw) -> Sample:
        m = d.integer(1, 2)
        block = [d.choice((1, 2, 3)) for _ in range(m)]
        rest = [d.integer(1, 3) for _ in range(d.integer(0, 2))]
        pairs = []
        spatial = []
        for b in block:
            before, after = d.integer(0, 2), d.integer(0, 2)
            if to_batch:
                # Grow `after` until the padded dim divides by the block.
                size = d.integer(1, 5)
                after += (-(size + before + after)) % b
                spatial.append(size)
            else:
                size = d.integer(1, 3)
                while size * b < before + after:
                    size += 1
                spatial.append(size)
            pairs.append([before, after])
        batch = d.integer(1, 2) * (1 if to_batch else int(np.prod(block)))
        shape = tuple([batch] + spatial + rest)
        dtype = d.dtype(ALL_DTYPES)
        attrs: dict[str, object] = {"block_shape": block}
        if to_batch:
            attrs["paddings"] = pairs
            attrs["pad_value"] = d.choice((0.0, 1.5, -3.0)) if dtype != "uint8" else 0.0
        else:
            attrs["crops"] = pairs
        return Sample((TensorType(shape, dtype),), attrs, int_high=100)

    return draw


register(
    OpDef(
        name="nn.space_to_batch_nd",
        num_inputs=1,
        type_rel=_space_to_batch_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_space_to_batch,
        compute=_space_to_batch_compute,
        shape_func=_space_to_batch_shape,
        attrs=(
            AttrSpec("block_shape", "ints", (1, 1)),
            AttrSpec("paddings", "nested_ints", REQUIRED),
            AttrSpec("pad_value", "float", 0.0),
        ),
        samples=(
            Sample((TensorType((1, 4, 4, 3), F32),), {"block_shape": [2, 2], "paddings": [[0, 0], [0, 0]]}),
            Sample(
                (TensorType((2, 3, 5, 2), F32),),
                {"block_shape": [2, 3], "paddings": [[1, 0], [2, 2]], "pad_value": 7.5},
            ),
            Sample((TensorType((1, 5), "int32"),), {"block_shape": [3], "paddings": [[1, 0]], "pad_value": -1.0}),
            # The shape that GCC 12 miscompiled when both bounds shared one select.
            Sample(
                (TensorType((1, 5, 2), "int64"),),
                {"block_shape": [1], "paddings": [[1, 2]], "pad_value": -3.0},
                int_high=100,
            ),
        ),
        domain=Domain(draw=_space_batch_domain(to_batch=True)),
    )
)

register(
    OpDef(
        name="nn.batch_to_space_nd",
        num_inputs=1,
        type_rel=_batch_to_space_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_batch_to_space,
        compute=_batch_to_space_compute,
        shape_func=_batch_to_space_shape,
        attrs=(AttrSpec("block_shape", "ints", (1, 1)), AttrSpec("crops", "nested_ints", REQUIRED)),
        samples=(
            Sample((TensorType((4, 2, 2, 3), F32),), {"block_shape": [2, 2], "crops": [[0, 0], [0, 0]]}),
            Sample((TensorType((12, 2, 3, 2), F32),), {"block_shape": [2, 3], "crops": [[1, 0], [2, 2]]}),
            Sample((TensorType((6, 2), "int32"),), {"block_shape": [3], "crops": [[1, 1]]}),
        ),
        domain=Domain(draw=_space_batch_domain(to_batch=False)),
    )
)


# --- nn.upsampling / nn.upsampling3d ---------------------------------------------------------------

BICUBIC_ALPHA = -0.5
NEAREST_EPSILON = 1e-5


def _out_size(size: Dim, scale: float) -> Dim:
    if size is ANY:
        return ANY
    return int(np.round(size * scale))  # type: ignore[operator]  # an int


def _upsampling_geometry(
    data: TensorType, attrs: Attrs, op: str
) -> tuple[tuple[int, ...], tuple[float, ...], tuple[Dim, ...], str, str]:
    """(positions, scales, canonical output shape, method, coordinate mode)."""
    three = op == "nn.upsampling3d"
    letters = "NCDHW" if three else "NCHW"
    if data.ndim != len(letters):
        raise TypeRelationError(f"{op} expects {len(letters)}-D data, got {data}")
    positions = plain_positions(attrs["layout"], letters, op, "layout")
    scales = tuple(attrs[name] for name in (("scale_d", "scale_h", "scale_w") if three else ("scale_h", "scale_w")))
    if min(scales) <= 0:
        raise TypeRelationError(f"{op}: scales must be positive, got {list(scales)}")
    method = attrs["method"]
    methods = {"nearest_neighbor": "nearest", "bilinear": "linear", "bicubic": "cubic"} if not three else {
        "nearest_neighbor": "nearest", "trilinear": "linear"}
    if method not in methods:
        raise TypeRelationError(f"{op}: unknown method {method!r} (expected one of {', '.join(methods)})")
    if three:
        mode = attrs["coordinate_transformation_mode"]
        if mode not in ("half_pixel", "align_corners", "asymmetric"):
            raise TypeRelationError(
                f"{op}: unknown coordinate_transformation_mode {mode!r} "
                "(expected half_pixel, align_corners or asymmetric)"
            )
    else:
        mode = "align_corners" if attrs["align_corners"] else "asymmetric"
    dims = to_canonical(data.shape, positions)
    out = tuple(dims[:2]) + tuple(_out_size(d, s) for d, s in zip(dims[2:], scales))
    for size in out[2:]:
        if size == 0:
            raise TypeRelationError(f"{op}: scales {list(scales)} shrink {data} to an empty output")
    return positions, scales, out, methods[method], mode


def _upsampling_rel(op: str) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, op)
        data = tensor_arg(types, 0, op)
        positions, _, out, _, _ = _upsampling_geometry(data, attrs, op)
        return TensorType(from_canonical(out, positions), data.dtype)

    return rel


def _upsampling_shape(op: str) -> ShapeRule:
    letters = "NCDHW" if op == "nn.upsampling3d" else "NCHW"
    scale_names = ("scale_d", "scale_h", "scale_w") if op == "nn.upsampling3d" else ("scale_h", "scale_w")

    def rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
        positions = plain_positions(attrs["layout"], letters, op, "layout")
        canonical = to_canonical(dims(inputs[0], "data"), positions)
        sizes = [
            round_half_even(te.cast("float64", int64(d)) * float(attrs[name]))
            for d, name in zip(canonical[2:], scale_names)
        ]
        return [fill(out_type, from_canonical((*canonical[:2], *sizes), positions))]

    return rule


def round_half_even(x: PrimExpr) -> PrimExpr:
    """`x` (float64) rounded to the nearest int64, halves to even: np.round, which the
    relation uses (and TVM's round, C's nearbyint), where the loop IR's round would take
    halves away from zero."""
    low = te.intrin("floor", x)
    rest = x - low
    whole = te.cast("int64", low)
    up = select(rest > 0.5, te.const(1, "int64"), select(eq(rest, 0.5), whole % 2, te.const(0, "int64")))
    return whole + up


def _coordinate_scale(size: int, out: int, mode: str, coord: type[np.floating]) -> np.floating:
    if mode == "align_corners":
        return coord(size - 1) / coord(out - 1) if out > 1 else coord(0.0)
    return coord(size) / coord(out)


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    a = BICUBIC_ALPHA
    t2, t3 = t * t, t * t * t
    return [
        a * (t3 - 2 * t2 + t),
        (a + 2) * t3 - (3 + a) * t2 + 1,
        -(a + 2) * t3 + (3 + 2 * a) * t2 - a * t,
        -a * t3 + a * t2,
    ]


def _taps(size: int, out: int, mode: str, method: str, coord: type[np.floating]) -> tuple[np.ndarray, np.ndarray]:
    """Per output position along one axis: the input indices read and their weights."""
    x = np.arange(out, dtype=coord)
    scale = _coordinate_scale(size, out, mode, coord)
    in_x = (x + coord(0.5)) * scale - coord(0.5) if mode == "half_pixel" else scale * x
    if method == "nearest":
        if mode == "align_corners":
            # C's round (in_x >= 0 here): halves away from zero.
            index = np.floor(in_x) + (in_x - np.floor(in_x) >= coord(0.5))
        else:
            index = np.floor(in_x + coord(NEAREST_EPSILON))
        indices, weights = index[:, None].astype(np.int64), np.ones((out, 1))
    else:
        base = np.floor(in_x)
        t = (in_x - base).astype(np.float64)
        if method == "linear":
            indices = base[:, None].astype(np.int64) + np.arange(2)
            weights = np.stack([1.0 - t, t], axis=1)
        else:
            indices = base[:, None].astype(np.int64) + np.arange(-1, 3)
            weights = np.stack(_cubic_weights(t), axis=1)
    return np.clip(indices, 0, size - 1), weights


def _upsample(a: Sequence[np.ndarray], attrs: Attrs, op: str) -> np.ndarray:
    data = a[0]
    positions, _, out, method, mode = _upsampling_geometry(TensorType(data.shape, str(data.dtype)), attrs, op)
    x = np.transpose(data, positions).astype(np.float64)
    coord = np.float64 if data.dtype == np.float64 else np.float32
    for k, target in enumerate(out[2:]):
        axis = 2 + k
        indices, weights = _taps(x.shape[axis], int(target), mode, method, coord)  # type: ignore[arg-type]  # static
        gathered = np.take(x, indices, axis=axis)  # (..., out, taps, ...)
        shape = [1] * gathered.ndim
        shape[axis], shape[axis + 1] = weights.shape
        x = np.sum(gathered * weights.reshape(shape), axis=axis + 1)
    if not np.issubdtype(data.dtype, np.floating):
        x = np.trunc(x)
    return np.ascontiguousarray(np.transpose(x.astype(data.dtype), np.argsort(positions)))


def _upsample_compute(op: str) -> Callable[..., PrimExpr]:
    def compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
        (data,) = inputs
        # `?` dims are the kernel's dim parameters (a placeholder of 1 for the geometry): the
        # batch and channels pass through, and a `?` spatial size makes its scale an
        # expression of the input's and the output's sizes, as TVM's resize computes it.
        in_type = TensorType(tuple(d if isinstance(d, int) else 1 for d in data.shape), data.dtype)
        positions, _, out, method, mode = _upsampling_geometry(in_type, attrs, op)
        sizes = to_canonical(tuple(data.shape), positions)
        assert isinstance(out_type, TensorType)
        targets = to_canonical(tuple(out_type.shape), positions)
        work = "float64" if data.dtype == "float64" else F32
        coord = np.float64 if work == "float64" else np.float32
        canonical = [idx[p] for p in positions]
        # Per spatial axis: the (index, weight) taps, from coordinates in `work`.
        axes_taps: list[list[tuple[PrimExpr, PrimExpr | None]]] = []
        for k in range(len(out) - 2):
            size, target = sizes[2 + k], targets[2 + k]
            if isinstance(size, int) and isinstance(target, int):
                scale = const(float(_coordinate_scale(size, target, mode, coord)), work)
            else:
                scale = _scale_expr(size, target, mode, work)
            xf = cast(work, canonical[2 + k])
            in_x = (xf + const(0.5, work)) * scale - const(0.5, work) if mode == "half_pixel" else scale * xf
            taps: list[tuple[PrimExpr, PrimExpr | None]] = []
            if method == "nearest":
                if mode == "align_corners":
                    index = cast("int32", intrin("round", in_x))
                else:
                    index = cast("int32", intrin("floor", in_x + const(NEAREST_EPSILON, work)))
                taps.append((_clamp(index, size), None))
            else:
                base = intrin("floor", in_x)
                t = cast(work, in_x - base)
                first = cast("int32", base)
                one = const(1.0, work)
                if method == "linear":
                    weights = [one - t, t]
                    offsets = [0, 1]
                else:
                    weights = _cubic_weights_expr(t, work)
                    offsets = [-1, 0, 1, 2]
                taps.extend((_clamp(first + o, size), w) for o, w in zip(offsets, weights))
            axes_taps.append(taps)

        def interpolate(k: int, chosen: tuple[PrimExpr, ...]) -> PrimExpr:
            if k == len(axes_taps):
                at = _placed(tuple(canonical[:2]) + chosen, positions)
                return cast(work, data[at])
            total: PrimExpr | None = None
            for index, weight in axes_taps[k]:
                value = interpolate(k + 1, chosen + (index,))
                term = value if weight is None else value * weight
                total = term if total is None else total + term
            assert total is not None
            return total

        return cast(data.dtype, interpolate(0, ()))

    return compute


def _clamp(index: PrimExpr, size: int | PrimExpr) -> PrimExpr:
    return maximum(minimum(index, size - 1), 0)


def _scale_expr(size: object, target: object, mode: str, work: str) -> PrimExpr:
    """`_coordinate_scale` of sizes known at run time, in the same `work` arithmetic."""
    size_f, target_f = cast(work, as_expr(size)), cast(work, as_expr(target))
    if mode == "align_corners":
        one = const(1.0, work)
        return select(as_expr(target) > 1, (size_f - one) / (target_f - one), const(0.0, work))
    return size_f / target_f


def _cubic_weights_expr(t: PrimExpr, dtype: str) -> list[PrimExpr]:
    a = BICUBIC_ALPHA
    t2 = t * t
    t3 = t2 * t

    def c(v: float) -> PrimExpr:
        return const(v, dtype)

    return [
        c(a) * (t3 - c(2.0) * t2 + t),
        c(a + 2) * t3 - c(3 + a) * t2 + c(1.0),
        c(-(a + 2)) * t3 + c(3 + 2 * a) * t2 - c(a) * t,
        c(-a) * t3 + c(a) * t2,
    ]


def _upsampling_domain(three: bool) -> Callable[[Draw], Sample]:
    def draw(d: Draw) -> Sample:
        letters = "NCDHW" if three else "NCHW"
        layout = d.choice((letters, "N" + letters[2:] + "C"))
        spatial = [d.integer(1, 4) for _ in range(len(letters) - 2)]
        scales = [d.choice((1.0, 2.0, 3.0, 0.5, 1.5, 2.5)) for _ in spatial]
        spatial = [max(n, 2) if s < 1 else n for n, s in zip(spatial, scales)]
        dims = (d.integer(1, 2), d.integer(1, 3), *spatial)
        shape = from_canonical(dims, plain_positions(layout, letters, "domain", "layout"))
        methods = ("nearest_neighbor", "trilinear") if three else ("nearest_neighbor", "bilinear", "bicubic")
        method = d.choice(methods)
        # Interpolating integer data truncates sums of float products: exact only for nearest.
        dtype = d.dtype(ALL_DTYPES if method == "nearest_neighbor" else FLOATS)
        names = ("scale_d", "scale_h", "scale_w") if three else ("scale_h", "scale_w")
        attrs: dict[str, object] = dict(zip(names, scales))
        attrs.update(layout=layout, method=method)
        if three:
            attrs["coordinate_transformation_mode"] = d.choice(("half_pixel", "align_corners", "asymmetric"))
        else:
            attrs["align_corners"] = d.boolean()
        return Sample((TensorType(shape, dtype),), attrs, int_high=100)

    return draw


register(
    OpDef(
        name="nn.upsampling",
        num_inputs=1,
        type_rel=_upsampling_rel("nn.upsampling"),
        pattern=OpPattern.INJECTIVE,
        reference=lambda a, attrs: _upsample(a, attrs, "nn.upsampling"),
        compute=_upsample_compute("nn.upsampling"),
        shape_func=_upsampling_shape("nn.upsampling"),
        attrs=(
            AttrSpec("scale_h", "float", REQUIRED),
            AttrSpec("scale_w", "float", REQUIRED),
            AttrSpec("layout", "str", "NCHW"),
            AttrSpec("method", "str", "nearest_neighbor"),
            AttrSpec("align_corners", "bool", False),
        ),
        samples=(
            Sample((TensorType((1, 2, 3, 4), F32),), {"scale_h": 2.0, "scale_w": 2.0}),
            Sample((TensorType((1, 2, 3, 4), F32),), {"scale_h": 2.0, "scale_w": 1.5, "method": "bilinear"}),
            Sample(
                (TensorType((2, 3, 4, 2), F32),),
                {"scale_h": 1.5, "scale_w": 3.0, "method": "bilinear", "align_corners": True, "layout": "NHWC"},
            ),
            Sample((TensorType((1, 1, 4, 5), F32),), {"scale_h": 2.0, "scale_w": 0.6, "method": "bicubic"}),
            Sample((TensorType((1, 2, 3, 3), "int32"),), {"scale_h": 3.0, "scale_w": 2.0, "align_corners": True},
                   int_high=50),
        ),
        domain=Domain(draw=_upsampling_domain(three=False), ulps=32),
    )
)

register(
    OpDef(
        name="nn.upsampling3d",
        num_inputs=1,
        type_rel=_upsampling_rel("nn.upsampling3d"),
        pattern=OpPattern.INJECTIVE,
        reference=lambda a, attrs: _upsample(a, attrs, "nn.upsampling3d"),
        compute=_upsample_compute("nn.upsampling3d"),
        shape_func=_upsampling_shape("nn.upsampling3d"),
        attrs=(
            AttrSpec("scale_d", "float", REQUIRED),
            AttrSpec("scale_h", "float", REQUIRED),
            AttrSpec("scale_w", "float", REQUIRED),
            AttrSpec("layout", "str", "NCDHW"),
            AttrSpec("method", "str", "nearest_neighbor"),
            AttrSpec("coordinate_transformation_mode", "str", "half_pixel"),
        ),
        samples=(
            Sample((TensorType((1, 2, 2, 3, 2), F32),), {"scale_d": 2.0, "scale_h": 2.0, "scale_w": 1.0}),
            Sample(
                (TensorType((1, 1, 2, 3, 3), F32),),
                {"scale_d": 2.0, "scale_h": 1.5, "scale_w": 2.0, "method": "trilinear"},
            ),
            Sample(
                (TensorType((1, 2, 3, 2, 2), F32),),
                {"scale_d": 1.0, "scale_h": 2.0, "scale_w": 3.0, "method": "trilinear",
                 "coordinate_transformation_mode": "align_corners", "layout": "NDHWC"},
            ),
            Sample(
                (TensorType((1, 1, 2, 2, 3), "int8"),),
                {"scale_d": 2.0, "scale_h": 1.0, "scale_w": 2.0, "coordinate_transformation_mode": "asymmetric"},
                int_high=100,
            ),
        ),
        domain=Domain(draw=_upsampling_domain(three=True), ulps=32),
    )
)


# --- nn.dilate --------------------------------------------------------------------------------------


def _dilate_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.dilate"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    strides = attrs["strides"]
    if len(strides) != data.ndim:
        raise TypeRelationError(f"{op}: strides {list(strides)} need one value per dim of {data}")
    if min(strides, default=1) <= 0:
        raise TypeRelationError(f"{op}: strides must be positive, got {list(strides)}")
    out: list[Dim] = []
    for dim, s in zip(data.shape, strides):
        out.append(ANY if dim is ANY else max(0, (dim - 1) * s + 1))  # type: ignore[operator]  # an int
    return TensorType(tuple(out), data.dtype)


def _dilate_shape(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
    data = dims(inputs[0], "data")
    return [tuple(maximum((int64(d) - 1) * s + 1, 0) for d, s in zip(data, attrs["strides"]))]


def _dilate(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data = a[0]
    strides = attrs["strides"]
    shape = tuple(max(0, (n - 1) * s + 1) for n, s in zip(data.shape, strides))
    out = np.full(shape, _fits(str(data.dtype), attrs["dilation_value"]), dtype=data.dtype)
    out[tuple(slice(None, None, s) for s in strides)] = data
    return out


def _dilate_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    (data,) = inputs
    strides = attrs["strides"]
    value = data[tuple(i // s if s > 1 else i for i, s in zip(idx, strides))]
    fill = _fill(data.dtype, attrs["dilation_value"])
    # One select per axis rather than one on the conjunction (see _space_to_batch_compute).
    for i, s in reversed(list(zip(idx, strides))):
        if s > 1:
            value = select(eq(i % s, 0), value, fill)
    return value


def _dilate_domain(d: Draw) -> Sample:
    shape = d.shape(1, 4, 1, 4)
    strides = [d.choice((1, 1, 2, 3)) for _ in shape]
    dtype = d.dtype(ALL_DTYPES)
    value = d.choice((0.0, 1.0, -2.5)) if dtype != "uint8" else d.choice((0.0, 7.0))
    return Sample((TensorType(shape, dtype),), {"strides": strides, "dilation_value": value}, int_high=100)


register(
    OpDef(
        name="nn.dilate",
        num_inputs=1,
        type_rel=_dilate_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_dilate,
        compute=_dilate_compute,
        shape_func=_dilate_shape,
        attrs=(AttrSpec("strides", "ints", (1, 1)), AttrSpec("dilation_value", "float", 0.0)),
        samples=(
            Sample((TensorType((2, 3), F32),), {}),
            Sample((TensorType((1, 2, 3, 3), F32),), {"strides": [1, 1, 2, 3], "dilation_value": -1.5}),
            Sample((TensorType((4,), "int32"),), {"strides": [3], "dilation_value": 9.0}),
        ),
        domain=Domain(draw=_dilate_domain),
    )
)
