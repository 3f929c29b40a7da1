"""ONNX ops that move or select data without arithmetic: Reshape, Flatten, Transpose,
Squeeze/Unsqueeze, Concat, Split, Slice, Gather, Pad, Expand, Tile, and the value makers
(Constant, ConstantOfShape, Shape, Size, Range).

ONNX passes shapes, axes and pads as tensors (inputs) since opset 13; ours are attributes, so
those inputs must be known at import time (constants, initializers, or what folds to one)."""

from __future__ import annotations

import math

import numpy as np

from compiler.frontend.onnx.context import Converted, NodeContext, normalize_axis
from compiler.frontend.onnx.dtypes import dtype_of_code
from compiler.frontend.onnx.registry import converter
from compiler.frontend.onnx.shape_values import reshape_target
from compiler.ir.expr import Expr
from compiler.ir.types import TensorType

_INT32_MAX = 2**31 - 1


def _ints(array: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(array).reshape(-1)]


@converter("Constant", (13, 19, 21, 23, 24, 25))
def _constant(ctx: NodeContext) -> Converted:
    for key, dtype in (("value_float", "float32"), ("value_floats", "float32"),
                       ("value_int", "int64"), ("value_ints", "int64")):
        if key in ctx.attrs:
            return ctx.const(np.asarray(ctx.attrs[key], dtype=dtype))
    if "value" in ctx.attrs:
        value = np.asarray(ctx.attrs["value"])
        if value.dtype.kind in "OSUc":
            raise ctx.unsupported(f"a constant of dtype {value.dtype} has no relaycc dtype")
        return ctx.const(value)
    raise ctx.unsupported(f"only tensor and numeric constants are supported, got {', '.join(ctx.attrs)}")


@converter("ConstantOfShape", (9, 20, 21, 23, 24, 25))
def _constant_of_shape(ctx: NodeContext) -> Converted:
    shape = tuple(_ints(ctx.const_input(0, "shape")))
    fill = ctx.attr("value")
    value = np.asarray(fill).reshape(-1) if fill is not None else np.zeros(1, dtype="float32")
    if value.dtype.kind in "OSUc":
        raise ctx.unsupported(f"a fill value of dtype {value.dtype} has no relaycc dtype")
    if math.prod(shape) <= 4096:
        return ctx.const(np.full(shape, value[0], dtype=value.dtype))
    return ctx.op("full", ctx.const(value[0]), shape=shape, dtype=str(value.dtype))


@converter("Shape", (13, 15, 19, 21, 23, 24, 25))
def _shape(ctx: NodeContext) -> Converted:
    shape = ctx.shape(0)
    rank = len(shape)
    start = ctx.int_attr("start", 0)
    end = ctx.int_attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    dims = shape[start:end]
    if all(isinstance(d, int) for d in dims):
        return ctx.const(np.array(dims, dtype="int64").reshape(-1))
    full = ctx.op("shape_of", ctx.input(0), dtype="int64")
    if (start, end) == (0, rank):
        return full
    return ctx.op("strided_slice", full, begin=(start,), end=(end,), strides=(1,), axes=None)


@converter("Size", (13, 19, 21, 23, 24, 25))
def _size(ctx: NodeContext) -> Converted:
    return ctx.const(np.array(math.prod(ctx.static_shape(0)), dtype="int64"))


@converter("Reshape", (13, 14, 19, 21, 23, 24, 25))
def _reshape(ctx: NodeContext) -> Converted:
    allowzero = ctx.int_attr("allowzero", 0)
    target = ctx.shape_value(1)
    if ctx.value(1) is None and target is not None and not allowzero:
        newshape = reshape_target(target, ctx.input_names[0], ctx.shape(0))
        if newshape is not None:
            return ctx.op("reshape", ctx.input(0), newshape=newshape)
    shape = _ints(ctx.const_input(1, "shape"))
    return ctx.op("reshape", ctx.input(0), newshape=tuple(shape), allowzero=allowzero)


@converter("Flatten", (13, 21, 23, 24, 25))
def _flatten(ctx: NodeContext) -> Converted:
    shape = ctx.shape(0)
    axis = normalize_axis(ctx.int_attr("axis", 1), len(shape))
    before, after = shape[:axis], shape[axis:]
    if all(isinstance(d, int) for d in after):
        newshape = (-1, math.prod(after))  # type: ignore[arg-type]  # ints, checked
        if axis == 0:
            newshape = (1, newshape[1])
    elif all(isinstance(d, int) for d in before):
        newshape = (math.prod(before), -1)  # type: ignore[arg-type]  # ints, checked
    else:
        raise ctx.unsupported(f"flattening {ctx.type(0)} at axis {axis} needs static dims on one side")
    return ctx.op("reshape", ctx.input(0), newshape=newshape)


@converter("Transpose", (13, 21, 23, 24, 25))
def _transpose(ctx: NodeContext) -> Converted:
    perm = ctx.ints_attr("perm") or list(reversed(range(ctx.rank(0))))
    return ctx.op("transpose", ctx.input(0), axes=tuple(perm))


@converter("Squeeze", (13, 21, 23, 24, 25))
def _squeeze(ctx: NodeContext) -> Converted:
    if not ctx.has_input(1):
        return ctx.op("squeeze", ctx.input(0), axis=None)
    rank = ctx.rank(0)
    axes = sorted(normalize_axis(a, rank) for a in _ints(ctx.const_input(1, "axes")))
    return ctx.op("squeeze", ctx.input(0), axis=tuple(axes))


@converter("Unsqueeze", (13, 21, 23, 24, 25))
def _unsqueeze(ctx: NodeContext) -> Converted:
    values = _ints(ctx.const_input(1, "axes"))
    out_rank = ctx.rank(0) + len(values)
    result = ctx.input(0)
    # Ascending output positions: each insertion leaves the earlier ones where they are.
    for axis in sorted(normalize_axis(a, out_rank) for a in values):
        result = ctx.op("expand_dims", result, axis=axis, num_newaxis=1)
    return result


@converter("Concat", (13,))
def _concat(ctx: NodeContext) -> Converted:
    parts = [ctx.input(i) for i in range(len(ctx.inputs)) if ctx.has_input(i)]
    axis = normalize_axis(ctx.int_attr("axis", 0), ctx.rank(0))
    return ctx.op("concatenate", ctx.tuple(parts), axis=axis)


@converter("Split", (13, 18))
def _split(ctx: NodeContext) -> Converted:
    rank = ctx.rank(0)
    axis = normalize_axis(ctx.int_attr("axis", 0), rank)
    count = ctx.num_outputs
    if ctx.has_input(1):
        sizes = _ints(ctx.const_input(1, "split"))
    else:
        dim = ctx.shape(0)[axis]
        if "num_outputs" in ctx.attrs:
            count = ctx.int_attr("num_outputs", count)
        if isinstance(dim, int) and dim % count:
            # Opset 18: uneven parts are ceil(dim / n) long, the last one shorter.
            chunk = -(-dim // count)
            sizes = [min(chunk, dim - k * chunk) for k in range(count)]
        else:
            sizes = []
    if sizes and all(sizes):
        indices = tuple(int(v) for v in np.cumsum(sizes)[:-1])
        parts = ctx.op("split", ctx.input(0), indices_or_sections=indices, axis=axis)
        count = len(sizes)
    elif sizes:
        # An empty part (split may give 0) is no `split` index: each part sliced on its own.
        bounds = [0, *(int(v) for v in np.cumsum(sizes))]
        return [ctx.op("strided_slice", ctx.input(0), begin=(lo,), end=(hi,), strides=(1,), axes=(axis,))
                for lo, hi in zip(bounds, bounds[1:])]
    else:
        parts = ctx.op("split", ctx.input(0), indices_or_sections=count, axis=axis)
    return [ctx.item(parts, k) for k in range(count)]


@converter("Slice", (13,))
def _slice(ctx: NodeContext) -> Converted:
    shape = ctx.shape(0)
    rank = len(shape)
    if ctx.value(2) is None and ctx.shape_value(2) is not None:
        return _slice_to_a_dim(ctx)
    starts = _ints(ctx.const_input(1, "starts"))
    ends = _ints(ctx.const_input(2, "ends"))
    axes = _ints(ctx.const_input(3, "axes")) if ctx.has_input(3) else list(range(len(starts)))
    steps = _ints(ctx.const_input(4, "steps")) if ctx.has_input(4) else [1] * len(starts)
    result = ctx.input(0)
    begin_out, end_out, stride_out, axes_out = [], [], [], []
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = normalize_axis(axis, rank)
        dim = shape[axis]
        if step == 0:
            raise ctx.unsupported("a step of 0")
        if not isinstance(dim, int):
            if step < 0:
                raise ctx.unsupported(f"a negative step along the `?` axis {axis}")
            begin_out.append(max(min(start, _INT32_MAX), -_INT32_MAX))
            end_out.append(max(min(end, _INT32_MAX), -_INT32_MAX))
            stride_out.append(step)
            axes_out.append(axis)
            continue
        # ONNX clamps as Python's slices do.
        lo, hi, stride = slice(start, end, step).indices(dim)
        if step == 1 and hi > lo and not all(isinstance(d, int) for d in shape):
            # A static axis of a tensor with `?` dims (torch's chunk with a dynamic batch):
            # strided_slice's kernel takes static shapes only, split's any.
            parts = ctx.op("split", result, indices_or_sections=tuple(i for i in (lo, hi) if 0 < i < dim), axis=axis)
            result = ctx.item(parts, 1 if lo > 0 else 0)
            continue
        if step < 0:
            # Walking backwards past index 0 has no `end` strided_slice can state (it reads a
            # negative end from the back): the picked indices, taken.
            picked = np.arange(lo, hi, stride, dtype="int64")
            result = ctx.op("take", result, ctx.const(picked), axis=axis, mode="clip")
            continue
        if (lo, hi, stride) == (0, dim, 1):
            continue
        begin_out.append(lo)
        end_out.append(max(hi, lo))
        stride_out.append(stride)
        axes_out.append(axis)
    if not axes_out:
        return result
    return ctx.op("strided_slice", result, begin=tuple(begin_out), end=tuple(end_out),
                  strides=tuple(stride_out), axes=tuple(axes_out))


def _slice_to_a_dim(ctx: NodeContext) -> Converted:
    """A slice of one static axis ending at a dim known at run time (`positions[:, :x.size(1)]`
    with a dynamic sequence length): the indices start, start + step, ... below the end, taken.
    The other axes keep their static dims, as a strided_slice with a run-time end would not."""
    shape = ctx.shape(0)
    starts = _ints(ctx.const_input(1, "starts"))
    axes = _ints(ctx.const_input(3, "axes")) if ctx.has_input(3) else [0]
    steps = _ints(ctx.const_input(4, "steps")) if ctx.has_input(4) else [1]
    if len(starts) != 1:
        raise ctx.unsupported("ends known only at run time need a slice of one axis")
    axis = normalize_axis(axes[0], len(shape))
    dim = shape[axis]
    if not isinstance(dim, int) or steps[0] < 1:
        raise ctx.unsupported(f"an end known only at run time needs a static axis and a positive step, "
                              f"got axis {axis} of {ctx.type(0)} and step {steps[0]}")
    start = slice(starts[0], None).indices(dim)[0]
    end = ctx.op("minimum", ctx.op("reshape", ctx.input(2), newshape=()),
                 ctx.scalar(dim, ctx.dtype(2)))
    end = ctx.op("maximum", end, ctx.scalar(start, ctx.dtype(2)))
    dtype = ctx.dtype(2)
    indices = ctx.op("arange", ctx.scalar(start, dtype), end, ctx.scalar(steps[0], dtype), dtype=dtype)
    return ctx.op("take", ctx.input(0), indices, axis=axis, mode="clip")


def _nonnegative_indices(ctx: NodeContext, index: int, dim: object) -> Expr:
    """Indices input `index` with ONNX's negative indices counted from the back of `dim`."""
    value = ctx.value(index)
    if value is not None:
        if isinstance(dim, int):
            value = np.where(value < 0, value + dim, value).astype(value.dtype)
        if (value >= 0).all():
            return ctx.const(value)
    indices = ctx.input(index)
    if not isinstance(dim, int):
        raise ctx.unsupported("negative indices along a `?` axis")
    dtype = ctx.dtype(index)
    wrapped = ctx.op("add", indices, ctx.scalar(dim, dtype))
    return ctx.op("where", ctx.op("less", indices, ctx.scalar(0, dtype)), wrapped, indices)


@converter("Gather", (13,))
def _gather(ctx: NodeContext) -> Converted:
    axis = normalize_axis(ctx.int_attr("axis", 0), ctx.rank(0))
    indices = _nonnegative_indices(ctx, 1, ctx.shape(0)[axis])
    return ctx.op("take", ctx.input(0), indices, axis=axis, mode="clip")


@converter("GatherElements", (13,))
def _gather_elements(ctx: NodeContext) -> Converted:
    axis = normalize_axis(ctx.int_attr("axis", 0), ctx.rank(0))
    indices = _nonnegative_indices(ctx, 1, ctx.shape(0)[axis])
    return ctx.op("gather", ctx.input(0), indices, axis=axis)


@converter("Pad", (13, 18, 19, 21, 23, 24, 25))
def _pad(ctx: NodeContext) -> Converted:
    rank = ctx.rank(0)
    mode = ctx.str_attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise ctx.unsupported(f"pad mode {mode!r} (supported: constant, reflect, edge)")
    pads = _ints(ctx.const_input(1, "pads"))
    axes = [normalize_axis(a, rank) for a in _ints(ctx.const_input(3, "axes"))] if ctx.has_input(3) else list(range(rank))
    width = [[0, 0] for _ in range(rank)]
    n = len(axes)
    for k, axis in enumerate(axes):
        width[axis] = [pads[k], pads[k + n]]
    dtype = ctx.dtype(0)
    if ctx.has_input(2):
        value = ctx.value(2)
        pad_value = ctx.const(np.asarray(value, dtype=dtype).reshape(())) if value is not None else ctx.op(
            "reshape", ctx.input(2), newshape=())
    else:
        pad_value = ctx.scalar(0, dtype)
    grow = [[max(b, 0), max(e, 0)] for b, e in width]
    result = ctx.input(0)
    if any(b or e for b, e in grow):
        result = ctx.op("nn.pad", result, pad_value, pad_width=tuple(map(tuple, grow)), pad_mode=mode)
    # Negative pads crop.
    crop = [(axis, -min(b, 0), -min(e, 0)) for axis, (b, e) in enumerate(width) if b < 0 or e < 0]
    if crop:
        shape = result.checked_type.shape  # type: ignore[attr-defined]  # a tensor: nn.pad's result
        result = ctx.op(
            "strided_slice", result,
            begin=tuple(b for _, b, _ in crop),
            end=tuple(int(shape[axis]) - e for axis, _, e in crop),
            strides=tuple(1 for _ in crop), axes=tuple(axis for axis, _, _ in crop),
        )
    return result


def _broadcast_shape(a: tuple[object, ...], b: tuple[int, ...]) -> tuple[object, ...]:
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    return tuple(y if x == 1 else x for x, y in zip(a, b))


@converter("Expand", (13,))
def _expand(ctx: NodeContext) -> Converted:
    target = tuple(_ints(ctx.const_input(1, "shape")))
    shape = _broadcast_shape(ctx.shape(0), target)
    if not all(isinstance(d, int) for d in shape):
        raise ctx.unsupported(f"expanding {ctx.type(0)} to {list(target)} needs static dims")
    return ctx.op("broadcast_to", ctx.input(0), shape=shape)


@converter("Tile", (13,))
def _tile(ctx: NodeContext) -> Converted:
    return ctx.op("tile", ctx.input(0), reps=tuple(_ints(ctx.const_input(1, "repeats"))))


@converter("Range", (11, 27))
def _range(ctx: NodeContext) -> Converted:
    start, limit, delta = (ctx.const_input(i, name) for i, name in enumerate(("start", "limit", "delta")))
    if any(np.asarray(v).size != 1 for v in (start, limit, delta)):
        raise ctx.unsupported("start, limit and delta must be scalars")
    # ONNX's own function bodies (AffineGrid's) pass one-element tensors for the scalars.
    start, limit, delta = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    dtype = ctx.dtype(0)
    count = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    values = np.asarray(start, dtype=dtype) + np.arange(count, dtype=dtype) * np.asarray(delta, dtype=dtype)
    return ctx.const(values.astype(dtype))


@converter("Trilu", (14,))
def _trilu(ctx: NodeContext) -> Converted:
    k = ctx.input(1) if ctx.has_input(1) else ctx.scalar(0, "int64")
    if isinstance(k.checked_type, TensorType) and k.checked_type.shape:
        k = ctx.op("reshape", k, newshape=())
    return ctx.op("trilu", ctx.input(0), k, upper=bool(ctx.int_attr("upper", 1)))


@converter("DepthToSpace", (13, 28))
def _depth_to_space(ctx: NodeContext) -> Converted:
    return ctx.op("nn.depth_to_space", ctx.input(0), block_size=ctx.int_attr("blocksize", 1),
                  mode=ctx.str_attr("mode", "DCR"))


@converter("SpaceToDepth", (13, 28))
def _space_to_depth(ctx: NodeContext) -> Converted:
    block = ctx.int_attr("blocksize", 1)
    if ctx.str_attr("mode", "DCR") == "DCR":
        return ctx.op("nn.space_to_depth", ctx.input(0), block_size=block)
    # CRD (opset 28): each channel's blocks stay together; written as the reshape and
    # transpose ONNX defines it.
    n, c, h, w = ctx.static_shape(0)
    blocks = ctx.op("reshape", ctx.input(0), newshape=(n, c, h // block, block, w // block, block))
    moved = ctx.op("transpose", blocks, axes=(0, 1, 3, 5, 2, 4))
    return ctx.op("reshape", moved, newshape=(n, c * block * block, h // block, w // block))


@converter("CumSum", (11, 14))
def _cumsum(ctx: NodeContext) -> Converted:
    axis = normalize_axis(_ints(ctx.const_input(1, "axis"))[0], ctx.rank(0))
    x = ctx.input(0)
    reverse = bool(ctx.int_attr("reverse", 0))
    if reverse:
        x = ctx.op("reverse", x, axis=axis)
    out = ctx.op("cumsum", x, axis=axis, exclusive=bool(ctx.int_attr("exclusive", 0)))
    return ctx.op("reverse", out, axis=axis) if reverse else out


@converter("OneHot", (11, 28))
def _one_hot(ctx: NodeContext) -> Converted:
    depth = int(np.asarray(ctx.const_input(1, "depth")).reshape(-1)[0])
    values = ctx.input(2)
    dtype = ctx.dtype(2)
    off = ctx.op("reshape", ctx.op("strided_slice", values, begin=(0,), end=(1,), strides=(1,), axes=None), newshape=())
    on = ctx.op("reshape", ctx.op("strided_slice", values, begin=(1,), end=(2,), strides=(1,), axes=None), newshape=())
    indices = ctx.input(0)
    idtype = ctx.dtype(0)
    if idtype.startswith("float"):
        indices = ctx.op("cast", indices, dtype="int64")
        idtype = "int64"
    wrapped = ctx.op("add", indices, ctx.scalar(depth, idtype))
    indices = ctx.op("where", ctx.op("less", indices, ctx.scalar(0, idtype)), wrapped, indices)
    # A negative axis counts in the output, one rank more than the indices.
    axis = normalize_axis(ctx.int_attr("axis", -1), ctx.rank(0) + 1)
    return ctx.op("one_hot", indices, on, off, depth=depth, axis=axis, dtype=dtype)


def _index_axis_first(ctx: NodeContext, indices: Expr) -> Expr:
    """ONNX puts the index tuple on the last axis of GatherND/ScatterND indices, ours first."""
    rank = len(indices.checked_type.shape)  # type: ignore[attr-defined]  # a tensor
    return ctx.op("transpose", indices, axes=(rank - 1, *range(rank - 1)))


@converter("GatherND", (13,))
def _gather_nd(ctx: NodeContext) -> Converted:
    return ctx.op("gather_nd", ctx.input(0), _index_axis_first(ctx, ctx.input(1)),
                  batch_dims=ctx.int_attr("batch_dims", 0))


_SCATTER_MODES = {"none": "update", "add": "add", "mul": "mul", "max": "max", "min": "min"}


@converter("ScatterElements", (13, 16, 18))
def _scatter_elements(ctx: NodeContext) -> Converted:
    axis = normalize_axis(ctx.int_attr("axis", 0), ctx.rank(0))
    indices = _nonnegative_indices(ctx, 1, ctx.shape(0)[axis])
    reduction = _SCATTER_MODES[ctx.str_attr("reduction", "none")]
    return ctx.op("scatter_elements", ctx.input(0), indices, ctx.input(2), axis=axis, reduction=reduction)


@converter("ScatterND", (13, 16, 18))
def _scatter_nd(ctx: NodeContext) -> Converted:
    mode = _SCATTER_MODES[ctx.str_attr("reduction", "none")]
    return ctx.op("scatter_nd", ctx.input(0), _index_axis_first(ctx, ctx.input(1)), ctx.input(2), mode=mode)


@converter("Einsum", (12, 28))
def _einsum(ctx: NodeContext) -> Converted:
    parts = [ctx.input(i) for i in range(len(ctx.inputs))]
    return ctx.op("einsum", ctx.tuple(parts), equation=ctx.str_attr("equation", "").replace(" ", ""))


@converter("CenterCropPad", (18,))
def _center_crop_pad(ctx: NodeContext) -> Converted:
    shape = ctx.static_shape(0)
    rank = len(shape)
    target = [int(v) for v in np.asarray(ctx.const_input(1, "shape")).reshape(-1)]
    axes = [normalize_axis(a, rank) for a in (ctx.ints_attr("axes") or list(range(rank)))]
    result = ctx.input(0)
    width = [[0, 0] for _ in range(rank)]
    begin, end, crop_axes = [], [], []
    for axis, size in zip(axes, target):
        dim = shape[axis]
        if size < dim:
            start = (dim - size) // 2
            begin.append(start)
            end.append(start + size)
            crop_axes.append(axis)
        elif size > dim:
            before = (size - dim) // 2
            width[axis] = [before, size - dim - before]
    if crop_axes:
        result = ctx.op("strided_slice", result, begin=tuple(begin), end=tuple(end),
                        strides=tuple(1 for _ in crop_axes), axes=tuple(crop_axes))
    if any(b or e for b, e in width):
        result = ctx.op("nn.pad", result, ctx.scalar(0, ctx.dtype(0)), pad_width=tuple(map(tuple, width)))
    return result


_WINDOWS = {"HannWindow": (0.5, 0.5, 0.0), "HammingWindow": (25 / 46, 21 / 46, 0.0),
            "BlackmanWindow": (0.42, 0.5, 0.08)}


def _window(op_type: str) -> None:
    a0, a1, a2 = _WINDOWS[op_type]

    def convert(ctx: NodeContext) -> Converted:
        # A function of the (import-time) size only: computed here in float32, as ONNX's
        # function body does, then cast.
        size = int(np.asarray(ctx.const_input(0, "size")).reshape(-1)[0])
        periodic = bool(ctx.int_attr("periodic", 1))
        n = np.float32(size if periodic else size - 1)
        angle = np.arange(size, dtype="float32") * (np.float32(2 * math.pi) / n)
        values = np.float32(a0) - np.float32(a1) * np.cos(angle) + np.float32(a2) * np.cos(angle * np.float32(2))
        dtype = dtype_of_code(ctx.int_attr("output_datatype", 1), f"{op_type} node {ctx.name!r}")
        return ctx.const(values.astype("float32").astype(dtype))

    converter(op_type, (17,))(convert)


for _op_type in _WINDOWS:
    _window(_op_type)


@converter("EyeLike", (9, 22))
def _eye_like(ctx: NodeContext) -> Converted:
    rows, cols = ctx.static_shape(0)
    code = ctx.int_attr("dtype", 0)
    dtype = dtype_of_code(code, f"EyeLike node {ctx.name!r}") if code else ctx.dtype(0)
    return ctx.const(np.eye(rows, cols, k=ctx.int_attr("k", 0), dtype=dtype))


@converter("ReverseSequence", (10, 28))
def _reverse_sequence(ctx: NodeContext) -> Converted:
    return ctx.op("reverse_sequence", ctx.input(0), ctx.input(1), seq_axis=ctx.int_attr("time_axis", 0),
                  batch_axis=ctx.int_attr("batch_axis", 1))
