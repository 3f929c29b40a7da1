"""Ops about shapes: arange, shape_of, ndarray_size and the `*_like` ops that take their shape
from a second tensor (reshape_like, broadcast_to_like, collapse_sum_like, slice_like,
full_like).

Attribute names and defaults are TVM's (`include/tvm/relay/attrs/transform.h`, `algorithm.h`
for shape_of / ndarray_size, whose dtype defaults are the Python API's "int32").

* arange(start, stop, step, dtype): the three inputs are 0-d tensors of `dtype`. As in TVM's
  type relation the length is known only when all three are constants:
  `ceil((stop - start) / step)` computed in double, which must be positive; otherwise it is `?`.
  So this op's type relation reads constant argument values (`extras["constant_args"]`, passed
  by InferType). Element i is `start + step * i` computed in `dtype`, as topi does.
* shape_of / ndarray_size: the input's shape (1-D) and element count (0-d) in `dtype`.
* reshape_like: dims [lhs_begin, lhs_end) of data are replaced by dims [rhs_begin, rhs_end) of
  shape_like (None: to the end; negative: from the end); element counts must agree.
* broadcast_to_like / collapse_sum_like: the result has the second input's type; data must
  broadcast to it (broadcast_to_like), or it must broadcast to data and data is summed over the
  broadcast dims (collapse_sum_like). As in TVM, both inputs have one dtype.
* slice_like(axes): data[0:n] along each listed axis (all leading axes shape_like has when
  axes is None), n being shape_like's dim, which must not exceed data's.
* full_like(data, fill_value): data's type, every element the 0-d fill value cast to data's dtype.

Loops: collapse_sum_like is a sum reduction; all others are computes (shape_of and ndarray_size
only need the static input shape).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, Type, is_valid_dtype
from compiler.ops.broadcast import broadcast_index
from compiler.ops.common import (
    broadcast_shapes,
    check_arity,
    dims_equal,
    normalize_axis,
    product,
    reshape_index,
    static_dims,
    tensor_arg,
)
from compiler.ops.domain import Domain, Draw
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.tir.compute import Index, Reduction, TensorView
from compiler.tir.dtypes import is_float
from compiler.tir.expr import Const, PrimExpr, cast, eq, select
from compiler.ops import shape_rules as sr
from compiler.tir import expr as te

F32 = "float32"
DATA_DTYPES = ("float32", "float32", "int32", "float16", "float64", "int8", "int64", "uint8", "bool")
NUMERIC_DTYPES = ("float32", "float32", "int32", "float16", "float64", "int8", "int64", "uint8")
SIZE_DTYPES = ("int32", "int64")


def _show(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _out(out_type: Type) -> TensorType:
    assert isinstance(out_type, TensorType)
    return out_type


def _check_dtype(op: str, dtype: str) -> str:
    if not is_valid_dtype(dtype) or dtype == "bool":
        raise TypeRelationError(f"{op}: unsupported dtype {dtype!r}")
    return dtype


# --- arange ---------------------------------------------------------------------------------------


_MAX_DIM = float(2**63 - 1)


def arange_length(start: float, stop: float, step: float) -> int:
    """TVM's element count: ceil((stop - start) / step) in double, truncated to an integer."""
    if step == 0:
        raise TypeRelationError("arange: step must not be 0")
    count = (float(stop) - float(start)) / float(step)
    # An infinite or NaN bound (`-inff` is valid Relay) gives no count; nor does one past int64.
    if not math.isfinite(count) or count > _MAX_DIM:
        raise TypeRelationError(f"arange: start {start}, stop {stop} and step {step} give no finite element count")
    return int(math.ceil(count))


def _arange_rel(types: Sequence[Type], attrs: Attrs, values: Sequence[np.ndarray | None] = ()) -> Type:
    op = "arange"
    check_arity(types, 3, op)
    dtype = _check_dtype(op, attrs["dtype"])
    for k, name in enumerate(("start", "stop", "step")):
        ty = tensor_arg(types, k, op)
        if ty.ndim != 0 or ty.dtype != dtype:
            raise TypeRelationError(f"{op}: {name} must be a 0-d {dtype} tensor (the dtype attr), got {ty}")
    if len(values) == 3 and all(v is not None for v in values):
        start, stop, step = (np.asarray(v).item() for v in values)
        length = arange_length(start, stop, step)
        if length <= 0:
            raise TypeRelationError(f"{op}: start {start}, stop {stop} and step {step} give no elements")
        return TensorType((length,), dtype)
    return TensorType((ANY,), dtype)


def _arange_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """arange_length from the values of start, stop and step (data-dependent, as in TVM), in
    double as the type relation computes it; a range that gives no elements is empty."""
    if not all(isinstance(v, TensorView) for v in inputs):
        raise sr.ShapeRuleError("arange's rule reads the values of start, stop and step")
    start, stop, step = (te.cast("float64", v[()]) for v in inputs)  # type: ignore[index]  # TensorViews
    length = te.cast("int64", te.intrin("ceil", (stop - start) / step))
    return [sr.fill(out_type, (te.maximum(length, 0),))]


def _arange(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    start, stop, step = (np.asarray(v).item() for v in a)
    dtype = attrs["dtype"]
    length = max(arange_length(start, stop, step), 0)
    if is_float(dtype):
        return (np.float64(start) + np.float64(step) * np.arange(length, dtype=np.float64)).astype(dtype)
    return (np.int64(start) + np.int64(step) * np.arange(length, dtype=np.int64)).astype(dtype)


def _arange_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    start, _, step = inputs
    dtype = attrs["dtype"]
    return cast(dtype, start[()] + step[()] * cast(dtype, idx[0]))


ARANGE_CASES = (
    (0, 5, 1),
    (1, 10, 3),  # the last step overshoots the stop
    (5, -1, -2),  # counting down
    (-3, 3, 2),
    (2, 3, 5),  # one element
)
FLOAT_ARANGE_CASES = ((0.5, 2.0, 0.25), (1.0, -1.0, -0.3), (0.0, 1.0, 0.1))


def _arange_domain(d: Draw) -> Sample:
    dtype = d.dtype(("float32", "int32", "int64", "float64", "float16", "int8"))
    cases = ARANGE_CASES + (FLOAT_ARANGE_CASES if is_float(dtype) else ())
    start, stop, step = d.choice(cases)
    return Sample(tuple(np.array(v, dtype=dtype) for v in (start, stop, step)), {"dtype": dtype})


register(
    OpDef(
        name="arange",
        num_inputs=3,
        type_rel=_arange_rel,
        pattern=OpPattern.OPAQUE,
        reference=_arange,
        attrs=(AttrSpec("dtype", "dtype", REQUIRED),),
        compute=_arange_compute,
        shape_func=_arange_rule,
        shape_data_dependent=True,
        domain=Domain(_arange_domain),
        # Array inputs of samples and domains are the call's constant arguments.
        extras={"constant_args": True},
        samples=(
            Sample(tuple(np.array(v, F32) for v in (0, 5, 1)), {"dtype": F32}),
            Sample(tuple(np.array(v, "int32") for v in (1, 10, 3)), {"dtype": "int32"}),
            Sample(tuple(np.array(v, "int64") for v in (5, -1, -2)), {"dtype": "int64"}),
            Sample(tuple(np.array(v, "float64") for v in (1.0, -1.0, -0.3)), {"dtype": "float64"}),
            Sample(tuple(np.array(v, "float16") for v in (0.5, 2.0, 0.25)), {"dtype": "float16"}),
        ),
    )
)


# --- shape_of / ndarray_size ----------------------------------------------------------------------


def _shape_of_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "shape_of")
    data = tensor_arg(types, 0, "shape_of")
    return TensorType((data.ndim,), _check_dtype("shape_of", attrs["dtype"]))


def _shape_of_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    dims = inputs[0].shape  # a `?` dim is an int64 expression of the kernel's dim parameters
    dtype = attrs["dtype"]
    if not dims:
        return Const(0, dtype)  # an empty result: never evaluated

    def dim(d: object) -> PrimExpr:
        return Const(d, dtype) if isinstance(d, int) else cast(dtype, d)  # type: ignore[arg-type]  # PrimExpr

    value: PrimExpr = dim(dims[-1])
    for k in reversed(range(len(dims) - 1)):
        value = select(eq(idx[0], k), dim(dims[k]), value)
    return value


def _shape_domain(d: Draw) -> Sample:
    return Sample((TensorType(d.shape(0, 4, 1, 6), d.dtype(DATA_DTYPES)),), {"dtype": d.dtype(SIZE_DTYPES)})


register(
    OpDef(
        name="shape_of",
        num_inputs=1,
        type_rel=_shape_of_rel,
        pattern=OpPattern.OPAQUE,
        reference=lambda a, attrs: np.array(a[0].shape, dtype=attrs["dtype"]).reshape(a[0].ndim),
        attrs=(AttrSpec("dtype", "dtype", "int32"),),
        compute=_shape_of_compute,
        shape_func=sr.static_rule,  # (rank,): known when compiling
        domain=Domain(_shape_domain),
        samples=(
            Sample((TensorType((2, 3, 4), F32),)),
            Sample((TensorType((5,), "int8"),), {"dtype": "int64"}),
            Sample((TensorType((1, 7), "bool"),)),
        ),
    )
)


def _ndarray_size_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "ndarray_size")
    tensor_arg(types, 0, "ndarray_size")
    return TensorType((), _check_dtype("ndarray_size", attrs["dtype"]))


def _ndarray_size_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    return Const(math.prod(static_dims(inputs[0].shape, "ndarray_size")), attrs["dtype"])


register(
    OpDef(
        name="ndarray_size",
        num_inputs=1,
        type_rel=_ndarray_size_rel,
        pattern=OpPattern.INJECTIVE,
        reference=lambda a, attrs: np.array(a[0].size, dtype=attrs["dtype"]),
        attrs=(AttrSpec("dtype", "dtype", "int32"),),
        compute=_ndarray_size_compute,
        shape_func=sr.static_rule,
        domain=Domain(_shape_domain),
        samples=(
            Sample((TensorType((2, 3, 4), F32),)),
            Sample((TensorType((), "int32"),), {"dtype": "int64"}),
        ),
    )
)


# --- reshape_like ---------------------------------------------------------------------------------


def _span(begin: int, end: int | None, rank: int, which: str) -> tuple[int, int]:
    b = begin + rank if begin < 0 else begin
    e = rank if end is None else (end + rank if end < 0 else end)
    if not 0 <= b <= e <= rank:
        raise TypeRelationError(
            f"reshape_like: {which}_begin={begin}, {which}_end={end} do not select dims of a rank-{rank} "
            "tensor"
        )
    return b, e


def reshape_like_shape(lhs: Sequence[Dim], rhs: Sequence[Dim], attrs: Attrs) -> tuple[Dim, ...]:
    lb, le = _span(attrs["lhs_begin"], attrs["lhs_end"], len(lhs), "lhs")
    rb, re_ = _span(attrs["rhs_begin"], attrs["rhs_end"], len(rhs), "rhs")
    shape = tuple(lhs[:lb]) + tuple(rhs[rb:re_]) + tuple(lhs[le:])
    total_in, total_out = product(lhs), product(shape)
    if total_in is not ANY and total_out is not ANY and total_in != total_out:
        raise TypeRelationError(
            f"reshape_like: cannot reshape {_show(lhs)} ({total_in} elements) to {_show(shape)} "
            f"({total_out} elements)"
        )
    return shape


def _reshape_like_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 2, "reshape_like")
    data, like = tensor_arg(types, 0, "reshape_like"), tensor_arg(types, 1, "reshape_like")
    return TensorType(reshape_like_shape(data.shape, like.shape, attrs), data.dtype)


def _reshape_like_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    lhs, rhs = sr.dims(inputs[0]), sr.dims(inputs[1])
    lb, le = _span(attrs["lhs_begin"], attrs["lhs_end"], len(lhs), "lhs")
    rb, re_ = _span(attrs["rhs_begin"], attrs["rhs_end"], len(rhs), "rhs")
    return [sr.fill(out_type, lhs[:lb] + rhs[rb:re_] + lhs[le:])]


def _reshape_like_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    data = inputs[0]
    out_shape = static_dims(_out(out_type).shape, "reshape_like")
    return data[reshape_index(idx, out_shape, static_dims(data.shape, "reshape_like"))]


def _reshape_like_domain(d: Draw) -> Sample:
    lhs = d.shape(1, 4, 1, 4)
    lb = d.integer(0, len(lhs))
    le = d.integer(lb, len(lhs))
    count = math.prod(lhs[lb:le])
    # A run of dims with the same count: count split into factors, padded with 1s around.
    factors = [f for f in range(1, count + 1) if count % f == 0]
    first = d.choice(factors)
    middle = [first, count // first] if count // first != 1 or d.boolean() else [first]
    before = [d.integer(1, 3) for _ in range(d.integer(0, 1))]
    after = [d.integer(1, 3) for _ in range(d.integer(0, 1))]
    rhs = before + middle + after
    rb, re_ = len(before), len(before) + len(middle)
    attrs: dict[str, object] = {
        "lhs_begin": d.choice((lb, lb - len(lhs) if lb < len(lhs) else lb)),
        "lhs_end": d.choice((le, None if le == len(lhs) else le, le - len(lhs) if le < len(lhs) else le)),
        "rhs_begin": rb,
        "rhs_end": d.choice((re_, None if re_ == len(rhs) else re_)),
    }
    like = TensorType(tuple(rhs), d.dtype(DATA_DTYPES))
    return Sample((TensorType(lhs, d.dtype(DATA_DTYPES)), like), attrs)


register(
    OpDef(
        name="reshape_like",
        num_inputs=2,
        type_rel=_reshape_like_rel,
        pattern=OpPattern.INJECTIVE,
        reference=lambda a, attrs: a[0].reshape(reshape_like_shape(a[0].shape, a[1].shape, attrs)),
        attrs=(
            AttrSpec("lhs_begin", "int", 0),
            AttrSpec("lhs_end", "int", None, optional=True),
            AttrSpec("rhs_begin", "int", 0),
            AttrSpec("rhs_end", "int", None, optional=True),
        ),
        compute=_reshape_like_compute,
        shape_func=_reshape_like_rule,
        domain=Domain(_reshape_like_domain),
        samples=(
            Sample((TensorType((2, 6), F32), TensorType((3, 4), "int32"))),
            Sample(
                (TensorType((2, 3, 4), "int8"), TensorType((5, 12, 7), F32)),
                {"lhs_begin": 1, "rhs_begin": 1, "rhs_end": 2},
            ),
            Sample(
                (TensorType((6, 5), "float16"), TensorType((2, 3, 1), F32)),
                {"lhs_end": -1, "rhs_end": -1},
            ),
        ),
    )
)


# --- broadcast_to_like / collapse_sum_like --------------------------------------------------------


def _like_pair(types: Sequence[Type], op: str) -> tuple[TensorType, TensorType]:
    check_arity(types, 2, op)
    data, like = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    if data.dtype != like.dtype:
        raise TypeRelationError(f"{op}: data {data} and {like} must have one dtype")
    return data, like


def _same_dims(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    return len(a) == len(b) and all(dims_equal(x, y) for x, y in zip(a, b))


def _broadcast_to_like_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "broadcast_to_like"
    data, like = _like_pair(types, op)
    if not _same_dims(broadcast_shapes(data, like, op), like.shape):
        raise TypeRelationError(f"{op}: {data} does not broadcast to {like}")
    return like


def _broadcast_to_like_compute(
    idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type
) -> PrimExpr:
    data = inputs[0]
    return data[broadcast_index(idx, data.shape)]


def _like_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """The second input's shape (broadcast_to_like, collapse_sum_like)."""
    return [sr.fill(out_type, sr.dims(inputs[1]))]


def _like_domain(d: Draw) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    """(big, small, dtype) with `small` broadcasting to `big`."""
    big = d.shape(0, 4, 1, 4)
    return big, d.broadcastable(big), d.dtype(NUMERIC_DTYPES)


def _broadcast_to_like_domain(d: Draw) -> Sample:
    big, small, dtype = _like_domain(d)
    return Sample((TensorType(small, dtype), TensorType(big, dtype)))


register(
    OpDef(
        name="broadcast_to_like",
        num_inputs=2,
        type_rel=_broadcast_to_like_rel,
        pattern=OpPattern.BROADCAST,
        reference=lambda a, attrs: np.broadcast_to(a[0], a[1].shape).copy(),
        compute=_broadcast_to_like_compute,
        shape_func=_like_rule,
        domain=Domain(_broadcast_to_like_domain),
        samples=(
            Sample((TensorType((3, 1), F32), TensorType((2, 3, 4), F32))),
            Sample((TensorType((4,), "int8"), TensorType((3, 4), "int8"))),
            Sample((TensorType((), "float16"), TensorType((2, 2), "float16"))),
        ),
    )
)


def _collapse_sum_like_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "collapse_sum_like"
    data, like = _like_pair(types, op)
    if not _same_dims(broadcast_shapes(data, like, op), data.shape):
        raise TypeRelationError(f"{op}: {like} does not broadcast to data {data}, so data cannot collapse")
    return like


def collapsed_axes(data_shape: Sequence[int], like_shape: Sequence[int]) -> tuple[int, ...]:
    """The data axes collapse_sum_like sums over: the leading ones `like` lacks, and those where
    `like` has 1 and data does not."""
    lead = len(data_shape) - len(like_shape)
    return tuple(
        k for k, d in enumerate(data_shape) if k < lead or (like_shape[k - lead] == 1 and d != 1)
    )


def _collapse_sum_like(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, like = a
    axes = collapsed_axes(data.shape, like.shape)
    wide = data.astype(np.float64) if is_float(str(data.dtype)) else data.astype(np.int64)
    total = np.asarray(wide.sum(axis=axes)).reshape(like.shape)
    return total.astype(data.dtype)


def _collapse_sum_like_reduction(inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> Reduction:
    data = inputs[0]
    data_shape = static_dims(data.shape, "collapse_sum_like")
    like_shape = static_dims(_out(out_type).shape, "collapse_sum_like")
    axes = collapsed_axes(data_shape, like_shape)
    lead = len(data_shape) - len(like_shape)

    def body(out_idx: Index, red_idx: Index) -> PrimExpr:
        reduced = iter(red_idx)
        return data[tuple(next(reduced) if k in axes else out_idx[k - lead] for k in range(len(data_shape)))]

    return Reduction("sum", tuple(data_shape[k] for k in axes), body, data.dtype)


def _collapse_sum_like_domain(d: Draw) -> Sample:
    big, small, dtype = _like_domain(d)
    return Sample((TensorType(big, dtype), TensorType(small, dtype)))


register(
    OpDef(
        name="collapse_sum_like",
        num_inputs=2,
        type_rel=_collapse_sum_like_rel,
        pattern=OpPattern.COMM_REDUCE,
        reference=_collapse_sum_like,
        reduction=_collapse_sum_like_reduction,
        shape_func=_like_rule,
        domain=Domain(_collapse_sum_like_domain, ulps=16, accumulates=True),
        samples=(
            Sample((TensorType((2, 3, 4), F32), TensorType((3, 1), F32))),
            Sample((TensorType((3, 4), "int32"), TensorType((4,), "int32"))),
            Sample((TensorType((2, 5), "float16"), TensorType((1, 1), "float16"))),
            Sample((TensorType((3, 2), "int8"), TensorType((), "int8")), int_high=100),
        ),
    )
)


# --- slice_like -----------------------------------------------------------------------------------


def slice_like_shape(data: Sequence[Dim], like: Sequence[Dim], axes: Sequence[int] | None) -> tuple[Dim, ...]:
    op = "slice_like"
    out = list(data)
    if axes is None:
        chosen = list(range(min(len(data), len(like))))
    else:
        if not axes:
            raise TypeRelationError(f"{op}: axes must not be empty")
        chosen = [normalize_axis(a, len(data), op) for a in axes]
    for axis in chosen:
        if axis >= len(like):
            raise TypeRelationError(
                f"{op}: axis {axis} exceeds the rank {len(like)} of shape_like {_show(like)}"
            )
        target, extent = like[axis], data[axis]
        if target is not ANY and extent is not ANY and target > extent:  # type: ignore[operator]  # ints
            raise TypeRelationError(
                f"{op}: dim {axis} of shape_like {_show(like)} exceeds the data's {_show(data)}"
            )
        out[axis] = target
    return tuple(out)


def _slice_like_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 2, "slice_like")
    data, like = tensor_arg(types, 0, "slice_like"), tensor_arg(types, 1, "slice_like")
    return TensorType(slice_like_shape(data.shape, like.shape, attrs["axes"]), data.dtype)


def _slice_like_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    data, like = sr.dims(inputs[0]), sr.dims(inputs[1])
    axes = attrs["axes"]
    chosen = range(min(len(data), len(like))) if axes is None else [sr.normalize_axis(a, len(data)) for a in axes]
    return [sr.fill(out_type, tuple(like[k] if k in chosen else d for k, d in enumerate(data)))]


def _slice_like(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, like = a
    shape = slice_like_shape(data.shape, like.shape, attrs["axes"])
    return data[tuple(slice(0, n) for n in shape)].copy()


def _slice_like_domain(d: Draw) -> Sample:
    data = d.shape(1, 4, 1, 5)
    like = [d.integer(1, n) for n in data][: d.integer(1, len(data))]
    if len(like) == len(data) and d.boolean():
        like.append(d.integer(1, 6))  # shape_like may have more dims than data
    common = min(len(data), len(like))
    axes = None if d.boolean() else [d.choice((a, a - len(data))) for a in d.subset(range(common), 1)]
    return Sample(
        (TensorType(data, d.dtype(DATA_DTYPES)), TensorType(tuple(like), d.dtype(DATA_DTYPES))),
        {"axes": axes},
    )


register(
    OpDef(
        name="slice_like",
        num_inputs=2,
        type_rel=_slice_like_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_slice_like,
        attrs=(AttrSpec("axes", "ints", None, optional=True),),
        compute=lambda idx, inputs, attrs, out_type: inputs[0][tuple(idx)],
        shape_func=_slice_like_rule,
        domain=Domain(_slice_like_domain),
        samples=(
            Sample((TensorType((4, 5), F32), TensorType((2, 3), "int32"))),
            Sample((TensorType((3, 4, 5), "int8"), TensorType((1, 2, 3), F32)), {"axes": [-1, 1]}),
            # shape_like of fewer dims: only its leading axes are cut
            Sample((TensorType((4, 5, 2), "float16"), TensorType((3,), F32))),
        ),
    )
)


# --- full_like ------------------------------------------------------------------------------------


def _full_like_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "full_like"
    check_arity(types, 2, op)
    data, fill = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    if fill.ndim != 0:
        raise TypeRelationError(f"{op}: fill_value must be a scalar, got {fill}")
    return data


def _full_like_domain(d: Draw) -> Sample:
    dtype = d.dtype(NUMERIC_DTYPES)
    fill_dtype = d.choice((dtype, dtype, "float32", "int32"))
    both_float = is_float(fill_dtype) and is_float(dtype)
    value = d.choice((0.0, -1.5, 2.25)) if both_float else d.choice((0, 1, 3, 7))
    return Sample((TensorType(d.shape(0, 3, 1, 4), dtype), np.array(value, dtype=fill_dtype)))


register(
    OpDef(
        name="full_like",
        num_inputs=2,
        type_rel=_full_like_rel,
        pattern=OpPattern.ELEMWISE,
        reference=lambda a, attrs: np.full(a[0].shape, np.asarray(a[1]).astype(a[0].dtype), dtype=a[0].dtype),
        compute=lambda idx, inputs, attrs, out_type: cast(_out(out_type).dtype, inputs[1][()]),
        shape_func=sr.same_shape_rule,
        domain=Domain(_full_like_domain),
        samples=(
            Sample((TensorType((2, 3), F32), np.array(1.5, F32))),
            Sample((TensorType((4,), "int8"), np.array(7, "int32"))),
            Sample((TensorType((2, 2), "float16"), np.array(-2.0, "float64"))),
        ),
    )
)
