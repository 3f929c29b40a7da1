"""Reductions: sum, mean, max, min, prod, argmax and argmin (COMM_REDUCE for fusion).

All take TVM's ReduceAttrs: `axis=None` reduces every axis; negative axes count from the end;
`exclude=True` reduces the axes *not* listed (with `axis=None` it still reduces all, as in
TVM); `keepdims=True` keeps each reduced axis with extent 1. An explicit empty list reduces
nothing. argmax/argmin add `select_last_index` and return int32 indices; over several axes the
index is into the reduced axes flattened in row-major order.

Integer sums and products accumulate in the input dtype and wrap, as the C kernel does. The
mean of an integer tensor keeps its dtype: the wrapped integer sum is divided by the element
count rounding toward zero (C division), so mean([-3, 0]) is -1 and mean([3, 0]) is 1.

Loops: every reduction is a `Reduction` built by `over_reduced_axes(combiner)` from the same
axis rules; only the combiner (and mean's final division) differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import Dim, TensorType, Type
from compiler.ops.broadcast import trunc_divide_ints
from compiler.ops.common import check_arity, normalize_axis, tensor_arg
from compiler.ops.domain import Domain, Draw, int_range, int_values, kind_dtype, tensor_shape
from compiler.ops.elemwise import ANY_DTYPE, NUMERIC, dtype_kind, require_kind
from compiler.ops import shape_rules as sr
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.tir.compute import Index, Reduction, TensorView
from compiler.tir.dtypes import is_float
from compiler.tir.expr import Const, PrimExpr, binary as binary_expr, cast

REDUCE_ATTRS = (
    AttrSpec("axis", "ints", None, optional=True),
    AttrSpec("keepdims", "bool", False),
    AttrSpec("exclude", "bool", False),
)
ARG_REDUCE_ATTRS = REDUCE_ATTRS + (AttrSpec("select_last_index", "bool", False),)

# Computes the reduction of an array over the given (sorted, non-negative) axes, dropping them.
ReduceFn = Callable[[np.ndarray, tuple[int, ...], Attrs], np.ndarray]
# The loop form of a reduction op (OpDef.reduction).
ReductionFn = Callable[[Sequence[TensorView], Attrs, Type], Reduction]
# Turns the combined value into the result, given the number of elements combined.
Finalize = Callable[[PrimExpr, "PrimExpr | int"], PrimExpr]


def reduce_axes(ndim: int, attrs: Attrs, op: str) -> tuple[int, ...]:
    """The sorted axes that `attrs` reduce on a tensor of rank `ndim`."""
    axis = attrs["axis"]
    if axis is None:
        return tuple(range(ndim))
    assert isinstance(axis, tuple)
    listed = [normalize_axis(a, ndim, op) for a in axis]
    if len(set(listed)) != len(listed):
        raise TypeRelationError(f"{op}: axis {list(axis)} names the same axis twice for rank {ndim}")
    if attrs["exclude"]:
        return tuple(i for i in range(ndim) if i not in listed)
    return tuple(sorted(listed))


def reduced_shape(shape: Sequence[Dim], axes: tuple[int, ...], keepdims: bool) -> tuple[Dim, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def reduce_rule(op: str) -> sr.ShapeRule:
    """The shape rule of a reduction with REDUCE_ATTRS (axis, keepdims, exclude): the input's
    dims without (or with 1 for) the reduced axes."""

    def rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
        shape = sr.dims(inputs[0])
        return [reduced_shape(shape, reduce_axes(len(shape), attrs, op), bool(attrs["keepdims"]))]

    return rule


def _accumulator(x: np.ndarray) -> np.dtype:
    # Floats accumulate in double for an accurate reference; integers wrap in their own dtype.
    return np.dtype(np.float64) if dtype_kind(str(x.dtype)) == "float" else x.dtype


def _sum(x: np.ndarray, axes: tuple[int, ...], attrs: Attrs) -> np.ndarray:
    return np.sum(x, axis=axes, dtype=_accumulator(x))


def _prod(x: np.ndarray, axes: tuple[int, ...], attrs: Attrs) -> np.ndarray:
    return np.prod(x, axis=axes, dtype=_accumulator(x))


def _mean(x: np.ndarray, axes: tuple[int, ...], attrs: Attrs) -> np.ndarray:
    if dtype_kind(str(x.dtype)) == "float":
        return np.mean(x, axis=axes, dtype=np.float64)
    total = np.asarray(np.sum(x, axis=axes, dtype=x.dtype))
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    # Divide in int64: the count itself may not fit the input dtype.
    return trunc_divide_ints(total.astype(np.int64), np.asarray(count, dtype=np.int64))


def _max(x: np.ndarray, axes: tuple[int, ...], attrs: Attrs) -> np.ndarray:
    return np.max(x, axis=axes)


def _min(x: np.ndarray, axes: tuple[int, ...], attrs: Attrs) -> np.ndarray:
    return np.min(x, axis=axes)


def _arg_reduce(pick: Callable[..., np.ndarray]) -> ReduceFn:
    """argmax/argmin over several axes: move them last, flatten them, pick along the result."""

    def compute(x: np.ndarray, axes: tuple[int, ...], attrs: Attrs) -> np.ndarray:
        kept = [i for i in range(x.ndim) if i not in axes]
        count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
        rows = np.transpose(x, kept + list(axes)).reshape([x.shape[i] for i in kept] + [count])
        if attrs["select_last_index"]:
            # numpy picks the first of equal candidates; search the reversed rows instead.
            return count - 1 - pick(rows[..., ::-1], axis=-1)
        return pick(rows, axis=-1)

    return compute


def over_reduced_axes(combiner: str, finalize: Finalize | None = None) -> ReductionFn:
    """The loop form of a reduction: `combiner` over the axes the attrs select.

    The reduce index walks the reduced axes in order (row-major, as argmax's flattened index
    requires); the output index supplies the kept axes, skipping the unit axes keepdims leaves.
    """

    def lower(inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> Reduction:
        x = inputs[0]
        axes = reduce_axes(x.ndim, attrs, combiner)
        keepdims = bool(attrs["keepdims"])
        assert isinstance(out_type, TensorType)

        def body(out_idx: Index, red_idx: Index) -> PrimExpr:
            kept = iter(i for pos, i in enumerate(out_idx) if not (keepdims and pos in axes))
            reduced = iter(red_idx)
            return x[tuple(next(reduced) if d in axes else next(kept) for d in range(x.ndim))]

        extents = tuple(x.shape[a] for a in axes)
        count: PrimExpr | int = 1
        for extent in extents:
            count = count * extent if isinstance(count, int) and isinstance(extent, int) else extent * count
        # argmax/argmin accumulate the winning index; the others accumulate the result itself.
        dtype = out_type.dtype if combiner in ("argmax", "argmin") else x.dtype
        return Reduction(
            combiner=combiner,
            extents=extents,
            body=body,
            dtype=dtype,
            finalize=None if finalize is None else lambda acc, out_idx: finalize(acc, count),
            select_last=bool(attrs.get("select_last_index", False)),
        )

    return lower


def _divide_by_count(total: PrimExpr, count: PrimExpr | int) -> PrimExpr:
    if is_float(total.dtype):
        return total / (float(count) if isinstance(count, int) else cast(total.dtype, count))
    # As the reference: the wrapped sum over the count, truncated, in 64 bits (the count may
    # not fit the input dtype).
    wide_count = Const(count, "int64") if isinstance(count, int) else cast("int64", count)
    return binary_expr("tdiv", cast("int64", total), wide_count)


_SAMPLES = (
    Sample((TensorType((2, 3, 4), "float32"),)),
    Sample((TensorType((2, 3, 4), "float32"),), {"axis": [1]}),
    Sample((TensorType((2, 3, 4), "float64"),), {"axis": [-1], "keepdims": True}),
    Sample((TensorType((2, 3, 4), "float32"),), {"axis": [0, 2], "exclude": True}),
    Sample((TensorType((2, 3, 4), "float32"),), {"axis": [2, 0], "keepdims": True}),
    Sample((TensorType((3, 5), "int32"),), {"axis": [0]}, int_high=9),
    Sample((TensorType((3,), "float32"),), {"axis": []}),
    Sample((TensorType((), "float32"),),),
)
_ANY_DTYPE_SAMPLES = _SAMPLES + (Sample((TensorType((3, 2), "bool"),), {"axis": [1]}),)
_ARG_SAMPLES = _ANY_DTYPE_SAMPLES + (
    Sample((np.array([[1, 3, 3], [2, 2, 0]], dtype=np.float32),), {"axis": [1], "select_last_index": True}),
    Sample((TensorType((2, 3, 4), "int8"),), {"axis": [0, 2], "select_last_index": True, "keepdims": True}),
)


def reduce_axis_attr(d: Draw, ndim: int) -> tuple[int, ...] | None:
    """An `axis` attribute: None (all), [] (none), or some axes in any order, negative or not."""
    form = d.integer(0, 4)
    if form == 0 or ndim == 0:
        return None if form < 3 else ()
    if form == 1:
        return ()
    picked = list(d.subset(range(ndim), min_size=1))
    # Shuffle by drawing each position in turn, and write some axes negatively.
    order = []
    while picked:
        order.append(picked.pop(d.integer(0, len(picked) - 1)))
    return tuple(a - ndim if d.boolean() else a for a in order)


def reduction_domain(
    kinds: frozenset[str], arg: bool = False, empty: bool = False, product: bool = False
) -> Domain:
    """Calls over every axis form with keepdims and exclude. `empty` allows zero-size inputs
    (only sums and products have an identity); `product` keeps shapes and values small enough
    for the product to stay finite and, for wide integers, not to overflow."""

    def draw(d: Draw) -> Sample:
        dtype = kind_dtype(d, kinds)
        # TVM's argmax/argmin type relation rejects a scalar (our type relation accepts it).
        shape = tensor_shape(
            d, min_rank=1 if arg else 0, max_rank=3 if product else 4, max_dim=3 if product else 5, empty=empty
        )
        attrs: dict[str, object] = {"axis": reduce_axis_attr(d, len(shape))}
        attrs["keepdims"] = d.boolean()
        attrs["exclude"] = d.boolean()
        if arg:
            attrs["select_last_index"] = d.boolean()
        if dtype_kind(dtype) == "int":
            low, high = int_range(d, dtype)
            if product and np.iinfo(dtype).bits > 16:
                low, high = -1, 1
            return Sample((int_values(d, shape, dtype, low, high),), attrs)
        bound = 1.25 if product else 2.0
        return Sample((TensorType(shape, dtype),), attrs, low=-bound, high=bound)

    return Domain(draw, ulps=16.0, accumulates=True)


def reduction(
    name: str,
    compute: ReduceFn,
    kinds: frozenset[str],
    attrs: tuple[AttrSpec, ...] = REDUCE_ATTRS,
    result_dtype: str | None = None,
    samples: tuple[Sample, ...] = _SAMPLES,
    lowering: ReductionFn | None = None,
    domain: Domain | None = None,
) -> OpDef:
    """Register a reduction whose numpy form is `compute` (which drops the reduced axes) and
    whose loop form is `lowering`; its domain is `reduction_domain(kinds)` unless given."""

    def type_rel(types: Sequence[Type], call_attrs: Attrs) -> Type:
        check_arity(types, 1, name)
        x = tensor_arg(types, 0, name)
        require_kind(x, kinds, name)
        axes = reduce_axes(x.ndim, call_attrs, name)
        shape = reduced_shape(x.shape, axes, bool(call_attrs["keepdims"]))
        return TensorType(shape, result_dtype or x.dtype)

    def reference(arrays: Sequence[np.ndarray], call_attrs: Attrs) -> np.ndarray:
        x = arrays[0]
        axes = reduce_axes(x.ndim, call_attrs, name)
        shape = reduced_shape(x.shape, axes, bool(call_attrs["keepdims"]))
        out = np.asarray(compute(x, axes, call_attrs)).reshape(shape)
        return out.astype(result_dtype or x.dtype)

    return register(
        OpDef(
            name=name,
            num_inputs=1,
            type_rel=type_rel,
            pattern=OpPattern.COMM_REDUCE,
            reference=reference,
            attrs=attrs,
            samples=samples,
            reduction=lowering,
            shape_func=reduce_rule(name),
            domain=reduction_domain(kinds, arg=attrs is ARG_REDUCE_ATTRS) if domain is None else domain,
        )
    )


reduction("sum", _sum, NUMERIC, lowering=over_reduced_axes("sum"), domain=reduction_domain(NUMERIC, empty=True))
reduction(
    "prod", _prod, NUMERIC, lowering=over_reduced_axes("prod"),
    domain=reduction_domain(NUMERIC, empty=True, product=True),
)
reduction(
    "mean",
    _mean,
    NUMERIC,
    samples=_SAMPLES + (Sample((np.array([[-3, 1, 4], [0, 0, 1]], dtype=np.int32),), {"axis": [0]}),),
    lowering=over_reduced_axes("sum", _divide_by_count),
)
reduction("max", _max, ANY_DTYPE, samples=_ANY_DTYPE_SAMPLES, lowering=over_reduced_axes("max"))
reduction("min", _min, ANY_DTYPE, samples=_ANY_DTYPE_SAMPLES, lowering=over_reduced_axes("min"))
reduction(
    "argmax", _arg_reduce(np.argmax), ANY_DTYPE, ARG_REDUCE_ATTRS, "int32", _ARG_SAMPLES,
    lowering=over_reduced_axes("argmax"),
)
reduction(
    "argmin", _arg_reduce(np.argmin), ANY_DTYPE, ARG_REDUCE_ATTRS, "int32", _ARG_SAMPLES,
    lowering=over_reduced_axes("argmin"),
)
