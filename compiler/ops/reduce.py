"""Reductions: sum, mean, max, min, prod, argmax and argmin (COMM_REDUCE for fusion).

All take TVM's ReduceAttrs: `axis=None` reduces every axis; negative axes count from the end;
`exclude=True` reduces the axes *not* listed (with `axis=None` it still reduces all, as in
TVM); `keepdims=True` keeps each reduced axis with extent 1. An explicit empty list reduces
nothing. argmax/argmin add `select_last_index` and return int32 indices; over several axes the
index is into the reduced axes flattened in row-major order.

Integer sums and products accumulate in the input dtype and wrap, as the C kernel does. The
mean of an integer tensor keeps its dtype: the wrapped integer sum is divided by the element
count rounding toward zero (C division), so mean([-3, 0]) is -1 and mean([3, 0]) is 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import Dim, TensorType, Type
from compiler.ops.broadcast import trunc_divide_ints
from compiler.ops.common import check_arity, normalize_axis, tensor_arg
from compiler.ops.elemwise import ANY_DTYPE, NUMERIC, dtype_kind, require_kind
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register

REDUCE_ATTRS = (
    AttrSpec("axis", "ints", None, optional=True),
    AttrSpec("keepdims", "bool", False),
    AttrSpec("exclude", "bool", False),
)
ARG_REDUCE_ATTRS = REDUCE_ATTRS + (AttrSpec("select_last_index", "bool", False),)

# Computes the reduction of an array over the given (sorted, non-negative) axes, dropping them.
ReduceFn = Callable[[np.ndarray, tuple[int, ...], Attrs], np.ndarray]


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


def reduction(
    name: str,
    compute: ReduceFn,
    kinds: frozenset[str],
    attrs: tuple[AttrSpec, ...] = REDUCE_ATTRS,
    result_dtype: str | None = None,
    samples: tuple[Sample, ...] = _SAMPLES,
) -> OpDef:
    """Register a reduction whose numpy form is `compute` (which drops the reduced axes)."""

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
        )
    )


reduction("sum", _sum, NUMERIC)
reduction("prod", _prod, NUMERIC)
reduction(
    "mean",
    _mean,
    NUMERIC,
    samples=_SAMPLES + (Sample((np.array([[-3, 1, 4], [0, 0, 1]], dtype=np.int32),), {"axis": [0]}),),
)
reduction("max", _max, ANY_DTYPE, samples=_ANY_DTYPE_SAMPLES)
reduction("min", _min, ANY_DTYPE, samples=_ANY_DTYPE_SAMPLES)
reduction("argmax", _arg_reduce(np.argmax), ANY_DTYPE, ARG_REDUCE_ATTRS, "int32", _ARG_SAMPLES)
reduction("argmin", _arg_reduce(np.argmin), ANY_DTYPE, ARG_REDUCE_ATTRS, "int32", _ARG_SAMPLES)
