"""Slicing and gathering: strided_slice and take.

strided_slice follows TVM's index rules: a negative index counts from the end; indices are then
clamped to [0, extent] (to [-1, extent - 1] for a negative stride, where -1 means "before the
first element"); a canonical begin past the end (against the stride's direction) is an error, as
in TVM. In slice_mode="size", `end` holds sizes (negative: to the end) and strides are ignored;
unlike TVM we add the size to the *canonical* begin, so begin=-2 with size 2 takes the last two
elements instead of failing.

Loops: strided_slice reads `begin + i * stride` per axis. take loads the index value, fixes it
up for its mode (int64 indices in 64-bit arithmetic, so clipping a huge one cannot wrap) and
reads the data there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, Type
from compiler.ops.common import (
    check_arity,
    dims_equal,
    normalize_axis,
    row_major_index,
    static_dims,
    tensor_arg,
)
from compiler.ops.domain import Domain, Draw, int_values, kind_dtype, tensor_shape
from compiler.ops.elemwise import ANY_DTYPE
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.tir.compute import Index, TensorView
from compiler.ops import shape_rules as sr
from compiler.tir import expr as te
from compiler.tir.expr import PrimExpr, cast, maximum, minimum

F32 = "float32"

# (begin, end, stride) of one sliced axis, in canonical (non-negative, clamped) form.
AxisSlice = tuple[int, int, int]


def _canonical(index: int, extent: int, stride: int) -> int:
    low, high = (-1, extent - 1) if stride < 0 else (0, extent)
    if index < 0:
        index += extent
    return min(max(index, low), high)


def strided_slice_plan(shape: Sequence[Dim], attrs: Attrs) -> tuple[list[AxisSlice | None], tuple[Dim, ...]]:
    """Per axis the canonical slice (None: the axis is kept whole or its extent is unknown),
    and the output shape."""
    op = "strided_slice"
    ndim = len(shape)
    axes, strides = _sliced_axes(ndim, attrs)
    mode, begin, end = attrs["slice_mode"], list(attrs["begin"]), list(attrs["end"])
    plan: list[AxisSlice | None] = [None] * ndim
    out = list(shape)
    for k, ax in enumerate(axes):
        stride = strides[k]
        extent = shape[ax]
        if extent is ANY:
            out[ax] = ANY
            continue
        assert isinstance(extent, int)
        b = _canonical(begin[k], extent, stride) if k < len(begin) else (0 if stride > 0 else extent - 1)
        if mode == "size":
            size = end[k] if k < len(end) else -1
            e = extent if size < 0 else min(b + size, extent)
        else:
            e = _canonical(end[k], extent, stride) if k < len(end) else (extent if stride > 0 else -1)
        if (stride > 0 and b > e) or (stride < 0 and b < e):
            raise TypeRelationError(
                f"{op}: begin {b} lies beyond end {e} for stride {stride} along axis {ax} of extent "
                f"{extent} (from begin {begin}, end {end})"
            )
        plan[ax] = (b, e, stride)
        out[ax] = (abs(e - b) + abs(stride) - 1) // abs(stride)
    return plan, tuple(out)


def _sliced_axes(ndim: int, attrs: Attrs) -> tuple[list[int], list[int]]:
    """The axes strided_slice slices, in the order of begin/end, and the stride of each."""
    op = "strided_slice"
    mode = attrs["slice_mode"]
    if mode not in ("end", "size"):
        raise TypeRelationError(f"{op}: unknown slice_mode {mode!r} (expected end or size)")
    begin, end = list(attrs["begin"]), list(attrs["end"])
    strides = list(attrs["strides"] or ())
    if attrs["axes"] is None:
        if max(len(begin), len(end), len(strides)) > ndim:
            raise TypeRelationError(
                f"{op}: begin {begin}, end {end} or strides {strides} is longer than the rank {ndim}"
            )
        axes = list(range(max(len(begin), len(end))))
    else:
        axes = [normalize_axis(a, ndim, op) for a in attrs["axes"]]
        if len(set(axes)) != len(axes):
            raise TypeRelationError(f"{op}: axes {list(attrs['axes'])} repeats an axis")
        if len(begin) != len(axes) or len(end) != len(axes) or len(strides) > len(axes):
            raise TypeRelationError(
                f"{op}: begin {begin}, end {end} and strides {strides} must have one entry per axis in {axes}"
            )
    chosen = [1 if mode == "size" or k >= len(strides) else strides[k] for k in range(len(axes))]
    if 0 in chosen:
        raise TypeRelationError(f"{op}: strides {strides} contains 0")
    return axes, chosen


def _canonical_dim(index: int, extent: sr.Dim, stride: int) -> te.PrimExpr:
    """_canonical over a run-time extent."""
    extent = sr.int64(extent)
    low, high = (te.const(-1, "int64"), extent - 1) if stride < 0 else (te.const(0, "int64"), extent)
    value = extent + index if index < 0 else te.const(index, "int64")
    return te.minimum(te.maximum(value, low), high)


def _strided_slice_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """strided_slice_plan's extents at run time; a begin beyond its end (an error for a known
    extent) gives an empty axis rather than a negative one."""
    shape = sr.dims(inputs[0])
    axes, strides = _sliced_axes(len(shape), attrs)
    begin, end = list(attrs["begin"]), list(attrs["end"])
    out: list[sr.Dim] = list(shape)
    for k, ax in enumerate(axes):
        stride, extent = strides[k], sr.int64(shape[ax])
        b = _canonical_dim(begin[k], extent, stride) if k < len(begin) else (0 if stride > 0 else extent - 1)
        if attrs["slice_mode"] == "size":
            size = end[k] if k < len(end) else -1
            e = extent if size < 0 else te.minimum(b + size, extent)
        else:
            e = _canonical_dim(end[k], extent, stride) if k < len(end) else (extent if stride > 0 else -1)
        length = e - b if stride > 0 else b - e
        out[ax] = sr.ceil_div(te.maximum(sr.int64(length), 0), abs(stride))
    return [sr.fill(out_type, out)]


def _strided_slice_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "strided_slice")
    data = tensor_arg(types, 0, "strided_slice")
    return TensorType(strided_slice_plan(data.shape, attrs)[1], data.dtype)


def _strided_slice(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    out = a[0]
    plan, _ = strided_slice_plan(out.shape, attrs)
    for axis, entry in enumerate(plan):
        if entry is not None:
            out = np.take(out, np.arange(*entry), axis=axis)
    return out


def _strided_slice_compute(
    idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type
) -> PrimExpr:
    data = inputs[0]
    plan, _ = strided_slice_plan(static_dims(data.shape, "strided_slice"), attrs)
    source = tuple(i if entry is None else entry[0] + i * entry[2] for i, entry in zip(idx, plan))
    return data[source]


def _slice_bounds(d: Draw, extent: int, stride: int) -> tuple[int, int]:
    """begin and end for one axis: in range, negative, or far outside; ordered along `stride`
    (the other order is an error, in TVM too)."""

    def index() -> int:
        return d.choice((d.integer(-extent - 2, extent + 2), d.integer(0, extent), -100, 100, -1))

    begin, end = index(), index()
    b, e = _canonical(begin, extent, stride), _canonical(end, extent, stride)
    if (stride > 0 and b > e) or (stride < 0 and b < e):
        begin, end = end, begin
    return begin, end


def _strided_slice_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, min_rank=1, max_dim=6, empty=True)
    ndim = len(shape)
    axes: tuple[int, ...] | None = None
    if d.boolean():
        picked = list(d.subset(range(ndim), min_size=1))
        order = []
        while picked:
            order.append(picked.pop(d.integer(0, len(picked) - 1)))
        axes = tuple(a - ndim if d.boolean() else a for a in order)
        sliced = [a % ndim for a in axes]
    else:
        sliced = list(range(d.integer(1, ndim)))
    mode = d.choice(("end", "end", "size"))
    # Without axes, strides may be shorter than begin (the rest are 1). TVM requires them
    # (not None), and one per axis when axes are given. Size mode ignores them.
    strides = [d.choice((1, 1, 2, 3, 7, -1, -2, -7)) for _ in sliced]
    given = strides[: d.integer(0, len(strides))] if mode == "end" and axes is None else strides
    begin, end = [], []
    for k, ax in enumerate(sliced):
        stride = given[k] if mode == "end" and k < len(given) else 1
        extent = shape[ax]
        if mode == "size":
            begin.append(d.integer(0, extent))
            end.append(d.choice((-1, d.integer(0, extent + 2))))
        else:
            b, e = _slice_bounds(d, extent, stride)
            begin.append(b)
            end.append(e)
    attrs = {"begin": begin, "end": end, "strides": given, "slice_mode": mode, "axes": axes}
    return Sample((TensorType(shape, kind_dtype(d, ANY_DTYPE)),), attrs)


register(
    OpDef(
        name="strided_slice",
        num_inputs=1,
        type_rel=_strided_slice_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_strided_slice,
        compute=_strided_slice_compute,
        shape_func=_strided_slice_rule,
        attrs=(
            AttrSpec("begin", "ints", REQUIRED),
            AttrSpec("end", "ints", REQUIRED),
            AttrSpec("strides", "ints", REQUIRED, optional=True),
            AttrSpec("slice_mode", "str", "end"),
            AttrSpec("axes", "ints", REQUIRED, optional=True),
        ),
        samples=(
            Sample(
                (TensorType((4, 5), F32),), {"begin": [1, 0], "end": [3, 5], "strides": [1], "axes": None}
            ),
            Sample(
                (TensorType((4, 6), F32),),
                {"begin": [-1, 1], "end": [-100, 100], "strides": [-2, 2], "axes": None},
            ),
            Sample((TensorType((3, 4, 5), F32),), {"begin": [1], "end": [3], "strides": None, "axes": [-1]}),
            Sample(
                (TensorType((4, 5), F32),),
                {"begin": [-2, 1], "end": [2, -1], "strides": None, "slice_mode": "size", "axes": None},
            ),
        ),
        domain=Domain(_strided_slice_domain),
    )
)


# --- take -----------------------------------------------------------------------------------------

TAKE_MODES = ("clip", "wrap", "fast")


def _take_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "take"
    check_arity(types, 2, op)
    data, indices = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    if not indices.dtype.startswith(("int", "uint")):
        raise TypeRelationError(f"{op}: indices must be integers, got {indices}")
    if attrs["mode"] not in TAKE_MODES:
        raise TypeRelationError(
            f"{op}: unknown mode {attrs['mode']!r} (expected one of {', '.join(TAKE_MODES)})"
        )
    if attrs["axis"] is None:
        return TensorType(indices.shape, data.dtype)
    axis = normalize_axis(attrs["axis"], data.ndim, op)
    batch_dims = _batch_dims(attrs, indices.ndim, axis)
    for k in range(batch_dims):
        if not dims_equal(data.shape[k], indices.shape[k]):
            raise TypeRelationError(f"{op}: batch dim {k} differs between data {data} and indices {indices}")
    shape: tuple[Dim, ...] = data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis + 1 :]
    return TensorType(shape, data.dtype)


def _take_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    data, indices = sr.dims(inputs[0]), sr.dims(inputs[1])
    if attrs["axis"] is None:
        return [indices]
    axis = sr.normalize_axis(attrs["axis"], len(data))
    batch_dims = _batch_dims(attrs, len(indices), axis)
    return [sr.fill(out_type, data[:axis] + indices[batch_dims:] + data[axis + 1 :])]


def _batch_dims(attrs: Attrs, indices_ndim: int, axis: int) -> int:
    batch_dims = attrs["batch_dims"]
    if batch_dims < 0:
        batch_dims += indices_ndim
    if not 0 <= batch_dims <= min(axis, indices_ndim):
        raise TypeRelationError(
            f"take: batch_dims={attrs['batch_dims']} must lie in [0, {min(axis, indices_ndim)}] "
            f"for axis {axis} and indices of rank {indices_ndim}"
        )
    return batch_dims


def _fix_indices(indices: np.ndarray, extent: int, mode: str) -> np.ndarray:
    indices = indices.astype("int64")
    if mode == "clip":
        return np.clip(indices, 0, extent - 1)
    if mode == "wrap":
        return np.mod(indices, extent)
    return indices  # fast: the caller promises in-range indices


def _take(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, indices = a
    mode = attrs["mode"]
    if attrs["axis"] is None:
        flat = data.reshape(-1)
        return np.asarray(flat[_fix_indices(indices, flat.size, mode)])
    axis = attrs["axis"] % data.ndim
    batch_dims = _batch_dims(attrs, indices.ndim, axis)
    fixed = _fix_indices(indices, data.shape[axis], mode)
    if batch_dims == 0:
        # np.take gives a numpy scalar, not a 0-d array, for a scalar index into 1-D data.
        return np.asarray(np.take(data, fixed, axis=axis))
    shape = data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis + 1 :]
    out = np.empty(shape, dtype=data.dtype)
    for batch in np.ndindex(*data.shape[:batch_dims]):
        out[batch] = np.take(data[batch], fixed[batch], axis=axis - batch_dims)
    return out


# Index dtypes whose every value an int32 holds; wider ones are fixed up in int64 first.
_NARROW_INDEX = ("int8", "int16", "int32", "uint8", "uint16")


def _fixed_index(value: PrimExpr, extent: int | PrimExpr, mode: str) -> PrimExpr:
    """An index value brought into [0, extent) as `mode` says, as an int32 loop index; a `?`
    extent is the kernel's int64 dim parameter."""
    index = cast("int32" if value.dtype in _NARROW_INDEX and isinstance(extent, int) else "int64", value)
    if not isinstance(extent, int):
        extent = cast("int64", extent)
    if mode == "clip":
        index = maximum(minimum(index, extent - 1), 0)
    elif mode == "wrap":
        index = index % extent
    return cast("int32", index)


def _take_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    data, indices = inputs
    shape = data.shape  # `?` dims are the kernel's dim parameters
    mode = attrs["mode"]
    if attrs["axis"] is None:
        return data[row_major_index(_fixed_index(indices[tuple(idx)], math.prod(shape), mode), shape)]
    axis = normalize_axis(attrs["axis"], data.ndim, "take")
    batch_dims = _batch_dims(attrs, indices.ndim, axis)
    # The output index is data's leading dims, then indices' own dims, then data's trailing dims.
    taken = indices.ndim - batch_dims
    position = tuple(idx[:batch_dims]) + tuple(idx[axis : axis + taken])
    chosen = _fixed_index(indices[position], shape[axis], mode)
    return data[tuple(idx[:axis]) + (chosen,) + tuple(idx[axis + taken :])]


def _take_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, min_rank=1, max_rank=3)
    data = TensorType(shape, kind_dtype(d, ANY_DTYPE))
    mode = d.choice(TAKE_MODES)
    axis = None if d.integer(0, 3) == 0 else d.axis(len(shape))
    batch_dims = 0
    index_shape = tensor_shape(d, max_rank=2)
    if axis is not None:
        positive = axis % len(shape)
        batch_dims = d.integer(0, positive)
        index_shape = tuple(shape[:batch_dims]) + index_shape
        if batch_dims and d.boolean():
            batch_dims -= len(index_shape)  # counted from the end of the indices' dims
    extent = int(np.prod(shape)) if axis is None else shape[axis]
    dtype = d.dtype(("int32", "int32", "int64", "int8", "uint8", "int16"))
    if mode == "fast":
        low, high = 0, extent - 1  # fast promises in-range indices
    elif dtype == "int64" and d.boolean():
        low, high = -(2**40), 2**40  # clipping or wrapping must not go through 32 bits
    else:
        low, high = -2 * extent - 1, 2 * extent + 1
    indices = int_values(d, index_shape, dtype, low, high)
    return Sample((data, indices), {"batch_dims": batch_dims, "axis": axis, "mode": mode})


register(
    OpDef(
        name="take",
        num_inputs=2,
        type_rel=_take_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_take,
        compute=_take_compute,
        shape_func=_take_rule,
        attrs=(
            AttrSpec("batch_dims", "int", 0),
            AttrSpec("axis", "int", None, optional=True),
            AttrSpec("mode", "str", "clip"),
        ),
        samples=(
            Sample((TensorType((3, 4), F32), np.array([[0, 5], [-1, 2]], dtype="int32"))),
            Sample(
                (TensorType((3, 4), F32), np.array([0, 2, 7, -1], dtype="int64")), {"axis": 1, "mode": "wrap"}
            ),
            Sample(
                (TensorType((5, 2), F32), np.array([4, 0, 3], dtype="int32")), {"axis": 0, "mode": "fast"}
            ),
            Sample(
                (TensorType((2, 4, 3), F32), np.array([[0, 3], [1, 1]], dtype="int32")),
                {"axis": 1, "batch_dims": 1},
            ),
        ),
        domain=Domain(_take_domain),
    )
)
