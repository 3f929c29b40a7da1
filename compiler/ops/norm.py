"""Normalisation: nn.batch_norm (inference form) and nn.layer_norm.

Both are rewritten into arithmetic by SimplifyInference before fusion. nn.layer_norm has no
fusion pattern in TVM, so it is registered OPAQUE and must be gone before FuseOps runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, TupleType, Type
from compiler.ops.common import check_arity, dims_equal, normalize_axis, same_dtype
from compiler.ops.domain import FLOAT_CHOICES, Domain, Draw, float_values, tensor_shape
from compiler.ops.nn import float_arg, merge_dim
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim as ShapeDim
from compiler.ops.shape_rules import ShapeArg, dims, fill, same_shape_rule
from compiler.ops.shape_rules import normalize_axis as rule_axis

F32 = "float32"

_NORM_ATTRS = (
    AttrSpec("epsilon", "float", 1e-5),
    AttrSpec("center", "bool", True),
    AttrSpec("scale", "bool", True),
)


def _channel_vectors(
    types: Sequence[Type], names: Sequence[str], data: TensorType, axis: int, op: str
) -> TensorType:
    """Check that the per-channel arguments are 1-D of the channel count; return their type."""
    channels = data.shape[axis]
    for index, name in enumerate(names, start=1):
        vec = float_arg(types, index, op)
        same_dtype(data, vec, op)
        if vec.ndim != 1 or not dims_equal(vec.shape[0], channels):
            raise TypeRelationError(
                f"{op}: {name} {vec} must be 1-D with the length of axis {axis} of data {data}"
            )
        channels = merge_dim(channels, vec.shape[0])
    return TensorType((channels,), data.dtype)


def _batch_norm_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.batch_norm"
    check_arity(types, 5, op)
    data = float_arg(types, 0, op)
    axis = normalize_axis(attrs["axis"], data.ndim, op)
    vector = _channel_vectors(types, ("gamma", "beta", "moving_mean", "moving_var"), data, axis, op)
    return TupleType((data, vector, vector))


def _batch_norm_shape(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
    """The data's shape, then the channel vectors' twice (the moving statistics pass through)."""
    data = dims(inputs[0], "data")
    channels = data[rule_axis(attrs["axis"], len(data))]
    return [tuple(data), fill(out_type, (channels,), 1), fill(out_type, (channels,), 2)]


def _along(vec: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = -1
    return vec.reshape(shape)


def _batch_norm(a: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    data, gamma, beta, mean, var = a
    axis = attrs["axis"] % data.ndim
    x = data.astype("float64")
    out = (x - _along(mean, axis, x.ndim)) / np.sqrt(_along(var, axis, x.ndim) + attrs["epsilon"])
    if attrs["scale"]:
        out = out * _along(gamma, axis, x.ndim)
    if attrs["center"]:
        out = out + _along(beta, axis, x.ndim)
    # Inference mode: the moving statistics pass through unchanged.
    return out.astype(data.dtype), mean.copy(), var.copy()


def _norm_attrs(d: Draw, axis: int) -> dict[str, object]:
    return {
        "axis": axis,
        # Values a float32 holds exactly: SimplifyInference rounds epsilon to float32 as TVM does,
        # while the references use it as given, which differs visibly for float64 data.
        "epsilon": d.choice((2.0**-17, 2.0**-10, 0.125)),
        "center": d.boolean(),
        "scale": d.boolean(),
    }


def _batch_norm_domain(d: Draw) -> Sample:
    dtype = d.dtype(FLOAT_CHOICES)
    shape = tensor_shape(d, min_rank=1)
    axis = d.axis(len(shape))
    channels = (shape[axis],)
    vector = TensorType(channels, dtype)
    # The variance is positive: drawn apart from the other inputs.
    variance = float_values(d, channels, dtype, 0.1, 2.0)
    return Sample((TensorType(shape, dtype), vector, vector, vector, variance), _norm_attrs(d, axis))


register(
    OpDef(
        name="nn.batch_norm",
        num_inputs=5,
        type_rel=_batch_norm_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=_batch_norm,
        shape_func=_batch_norm_shape,
        attrs=(AttrSpec("axis", "int", 1),) + _NORM_ATTRS,
        # Inputs are drawn positive so the variance is.
        samples=(
            Sample((TensorType((2, 3, 4, 4), F32),) + (TensorType((3,), F32),) * 4, low=0.5, high=2.0),
            Sample(
                (TensorType((4, 5), F32),) + (TensorType((5,), F32),) * 4,
                {"axis": -1, "epsilon": 1e-3, "center": False},
                low=0.5,
                high=2.0,
            ),
        ),
        domain=Domain(_batch_norm_domain, ulps=16.0),
    )
)


def _layer_norm_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.layer_norm"
    check_arity(types, 3, op)
    data = float_arg(types, 0, op)
    axis = normalize_axis(attrs["axis"], data.ndim, op)
    _channel_vectors(types, ("gamma", "beta"), data, axis, op)
    return data


def _layer_norm(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, gamma, beta = a
    axis = attrs["axis"] % data.ndim
    x = data.astype("float64")
    mean = np.mean(x, axis=axis, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=axis, keepdims=True)
    out = (x - mean) / np.sqrt(var + attrs["epsilon"])
    if attrs["scale"]:
        out = out * _along(gamma, axis, x.ndim)
    if attrs["center"]:
        out = out + _along(beta, axis, x.ndim)
    return out.astype(data.dtype)


def _layer_norm_domain(d: Draw) -> Sample:
    dtype = d.dtype(FLOAT_CHOICES)
    shape = tensor_shape(d, min_rank=1)
    axis = d.axis(len(shape))
    vector = TensorType((shape[axis],), dtype)
    return Sample((TensorType(shape, dtype), vector, vector), _norm_attrs(d, axis))


register(
    OpDef(
        name="nn.layer_norm",
        num_inputs=3,
        type_rel=_layer_norm_rel,
        pattern=OpPattern.OPAQUE,
        shape_func=same_shape_rule,
        reference=_layer_norm,
        attrs=(AttrSpec("axis", "int", -1),) + _NORM_ATTRS,
        samples=(
            Sample((TensorType((2, 6), F32), TensorType((6,), F32), TensorType((6,), F32))),
            Sample(
                (TensorType((2, 3, 4), F32), TensorType((3,), F32), TensorType((3,), F32)),
                {"axis": 1, "scale": False},
            ),
        ),
        domain=Domain(_layer_norm_domain, ulps=16.0, accumulates=True),
    )
)
