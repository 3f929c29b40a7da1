"""More normalisation: nn.group_norm, nn.instance_norm (both decomposed by SimplifyInference,
as TVM does) and nn.lrn (its own loops).

* group_norm splits axis `axis` (C channels) into `num_groups` groups of C/num_groups and
  normalises each group together with every axis after `axis` (not the axes before it), then
  scales and shifts per channel.
* instance_norm normalises over every axis except the batch axis 0 and `axis`, then scales and
  shifts per channel of `axis`. TVM would normalise over no axis at all when there is nothing
  but batch and channel; we reject that call instead (it makes every output equal to beta).
* lrn, TVM's formula: out = data / (bias + alpha / size * s) ** beta, where s sums the squares
  of the `size` neighbours along `axis` centred on i (zero outside the axis). As in TOPI, data
  is 4-D, axis is 1 or 3 (-3 or -1) and size is odd. Like TVM's, it is OPAQUE: nothing fuses
  into it.

Like layer_norm, group_norm and instance_norm have no TOpPattern in TVM: they are registered
OPAQUE and have no loops; SimplifyInference rewrites them into reshape / mean / arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.common import check_arity, normalize_axis
from compiler.ops.domain import Domain, Draw
from compiler.ops.nn import float_arg
from compiler.ops.norm import _NORM_ATTRS, _along, _channel_vectors
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import same_shape_rule
from compiler.tir.compute import Index, TensorView
from compiler.tir.expr import PrimExpr, cast, const, intrin, select

F32 = "float32"
FLOATS = ("float32", "float32", "float64", "float16")


def _epsilon(attrs: Attrs) -> float:
    """epsilon as TVM's SimplifyInference uses it: rounded to a C float first."""
    return float(np.float32(attrs["epsilon"]))


def _affine(out: np.ndarray, gamma: np.ndarray, beta: np.ndarray, axis: int, attrs: Attrs) -> np.ndarray:
    if attrs["scale"]:
        out = out * _along(gamma.astype("float64"), axis, out.ndim)
    if attrs["center"]:
        out = out + _along(beta.astype("float64"), axis, out.ndim)
    return out


# --- nn.group_norm --------------------------------------------------------------------------------


def _group_norm_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.group_norm"
    check_arity(types, 3, op)
    data = float_arg(types, 0, op)
    axis = normalize_axis(attrs["axis"], data.ndim, op)
    _channel_vectors(types, ("gamma", "beta"), data, axis, op)
    groups = attrs["num_groups"]
    channels = data.shape[axis]
    if groups <= 0:
        raise TypeRelationError(f"{op}: num_groups must be positive, got {groups}")
    if channels is not ANY and channels % groups:  # type: ignore[operator]  # an int here
        raise TypeRelationError(f"{op}: num_groups {groups} does not divide the {channels} channels of {data}")
    return data


def _group_norm(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, gamma, beta = a
    axis = attrs["axis"] % data.ndim
    groups = attrs["num_groups"]
    shape = data.shape
    x = data.astype("float64").reshape(shape[:axis] + (groups, shape[axis] // groups) + shape[axis + 1:])
    reduced = tuple(range(axis + 1, x.ndim))
    mean = np.mean(x, axis=reduced, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=reduced, keepdims=True)
    out = ((x - mean) / np.sqrt(var + _epsilon(attrs))).reshape(shape)
    return _affine(out, gamma, beta, axis, attrs).astype(data.dtype)


def _group_norm_domain(d: Draw) -> Sample:
    rank = d.integer(2, 5)
    axis = d.axis(rank)
    groups = d.choice((1, 2, 3))
    shape = list(d.shape(rank, rank, 1, 4))
    shape[axis] = groups * d.integer(1, 3)
    dtype = d.dtype(FLOATS)
    vec = TensorType((shape[axis],), dtype)
    attrs = {"num_groups": groups, "axis": axis, "epsilon": d.choice((1e-5, 1e-3, 0.1)),
             "center": d.boolean(), "scale": d.boolean()}
    return Sample((TensorType(tuple(shape), dtype), vec, vec), attrs)


register(
    OpDef(
        name="nn.group_norm",
        num_inputs=3,
        type_rel=_group_norm_rel,
        pattern=OpPattern.OPAQUE,
        reference=_group_norm,
        shape_func=same_shape_rule,
        attrs=(AttrSpec("num_groups", "int", 0), AttrSpec("axis", "int", 1)) + _NORM_ATTRS,
        samples=(
            Sample((TensorType((2, 6, 3, 3), F32), TensorType((6,), F32), TensorType((6,), F32)), {"num_groups": 3}),
            Sample(
                (TensorType((2, 5, 4), F32), TensorType((4,), F32), TensorType((4,), F32)),
                {"num_groups": 2, "axis": -1, "center": False, "epsilon": 1e-3},
            ),
            Sample(
                (TensorType((1, 4, 2, 2, 3), "float64"), TensorType((4,), "float64"), TensorType((4,), "float64")),
                {"num_groups": 1, "scale": False},
            ),
        ),
        domain=Domain(draw=_group_norm_domain, ulps=64, accumulates=True),
    )
)


# --- nn.instance_norm -----------------------------------------------------------------------------


def instance_norm_axes(ndim: int, axis: int) -> tuple[int, ...]:
    """The axes instance_norm normalises over: all but the batch axis 0 and the channel axis."""
    return tuple(i for i in range(1, ndim) if i != axis)


def _instance_norm_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.instance_norm"
    check_arity(types, 3, op)
    data = float_arg(types, 0, op)
    axis = normalize_axis(attrs["axis"], data.ndim, op)
    _channel_vectors(types, ("gamma", "beta"), data, axis, op)
    if not instance_norm_axes(data.ndim, axis):
        raise TypeRelationError(
            f"{op}: {data} with axis {attrs['axis']} leaves no axis to normalise over besides batch and channel"
        )
    return data


def _instance_norm(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, gamma, beta = a
    axis = attrs["axis"] % data.ndim
    x = data.astype("float64")
    reduced = instance_norm_axes(x.ndim, axis)
    mean = np.mean(x, axis=reduced, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=reduced, keepdims=True)
    out = (x - mean) / np.sqrt(var + _epsilon(attrs))
    return _affine(out, gamma, beta, axis, attrs).astype(data.dtype)


def _instance_norm_domain(d: Draw) -> Sample:
    rank = d.integer(3, 5)
    shape = d.shape(rank, rank, 1, 4)
    axis = d.choice((1, 1, -1, rank - 1, 0, -rank + 1))
    dtype = d.dtype(FLOATS)
    vec = TensorType((shape[axis],), dtype)
    attrs = {"axis": axis, "epsilon": d.choice((1e-5, 1e-3, 0.1)), "center": d.boolean(), "scale": d.boolean()}
    return Sample((TensorType(shape, dtype), vec, vec), attrs)


register(
    OpDef(
        name="nn.instance_norm",
        num_inputs=3,
        type_rel=_instance_norm_rel,
        pattern=OpPattern.OPAQUE,
        reference=_instance_norm,
        shape_func=same_shape_rule,
        attrs=(AttrSpec("axis", "int", 1),) + _NORM_ATTRS,
        samples=(
            Sample((TensorType((2, 3, 4, 4), F32), TensorType((3,), F32), TensorType((3,), F32))),
            Sample(
                (TensorType((2, 5, 3), F32), TensorType((3,), F32), TensorType((3,), F32)),
                {"axis": -1, "scale": False, "epsilon": 1e-3},
            ),
            Sample(
                (TensorType((1, 2, 3, 2, 2), "float64"), TensorType((2,), "float64"), TensorType((2,), "float64")),
                {"center": False},
            ),
        ),
        domain=Domain(draw=_instance_norm_domain, ulps=64, accumulates=True),
    )
)


# --- nn.lrn ----------------------------------------------------------------------------------------


def _lrn_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.lrn"
    check_arity(types, 1, op)
    data = float_arg(types, 0, op)
    if data.ndim != 4:
        raise TypeRelationError(f"{op} expects 4-D data (NCHW or NHWC), got {data}")
    if normalize_axis(attrs["axis"], data.ndim, op) not in (1, 3):
        raise TypeRelationError(f"{op}: axis must be the channel axis 1 or 3, got {attrs['axis']}")
    if attrs["size"] <= 0 or attrs["size"] % 2 == 0:
        raise TypeRelationError(f"{op}: size must be a positive odd number, got {attrs['size']}")
    return data


def _lrn(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data = a[0]
    axis = attrs["axis"] % data.ndim
    size = attrs["size"]
    radius = size // 2
    x = np.moveaxis(data.astype("float64"), axis, -1)
    n = x.shape[-1]
    squares = np.pad(x * x, [(0, 0)] * (x.ndim - 1) + [(radius, size)])
    total = sum(squares[..., k : k + n] for k in range(size))
    out = x / (attrs["bias"] + attrs["alpha"] / size * total) ** attrs["beta"]
    return np.moveaxis(out, -1, axis).astype(data.dtype)


def _lrn_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    (data,) = inputs
    shape = data.shape  # a `?` extent is the kernel's dim parameter
    axis = attrs["axis"] % len(shape)
    size = attrs["size"]
    # float16 sums and powers in float, as C's half math does anyway.
    work = F32 if data.dtype == "float16" else data.dtype
    total: PrimExpr = const(0.0, work)
    for k in range(size):
        pos = idx[axis] + (k - size // 2)
        at = tuple(pos if i == axis else c for i, c in enumerate(idx))
        value = cast(work, data[at])
        square = value * value
        # Nested selects, not one on `pos >= 0 && pos < n`: GCC 12 -O3 -march=native
        # miscompiles that form (see space.py's _space_to_batch_compute).
        zero = const(0.0, work)
        total = total + select(pos >= 0, select(pos < shape[axis], square, zero), zero)
    base = const(attrs["bias"], work) + const(attrs["alpha"] / size, work) * total
    denominator = intrin("pow", base, const(attrs["beta"], work))
    return cast(data.dtype, cast(work, data[tuple(idx)]) / denominator)


def _lrn_domain(d: Draw) -> Sample:
    shape = d.shape(4, 4, 1, 6)
    attrs = {
        "size": d.choice((1, 3, 5, 7)),
        "axis": d.choice((1, 3, -1, -3)),
        "bias": d.choice((2.0, 1.0, 0.5)),
        "alpha": d.choice((1e-4, 0.5, 1.0)),
        "beta": d.choice((0.75, 0.5, 1.0)),
    }
    return Sample((TensorType(shape, d.dtype(FLOATS)),), attrs)


register(
    OpDef(
        name="nn.lrn",
        num_inputs=1,
        type_rel=_lrn_rel,
        pattern=OpPattern.OPAQUE,
        reference=_lrn,
        shape_func=same_shape_rule,
        compute=_lrn_compute,
        attrs=(
            AttrSpec("size", "int", 5),
            AttrSpec("axis", "int", 1),
            AttrSpec("bias", "float", 2.0),
            AttrSpec("alpha", "float", 1e-4),
            AttrSpec("beta", "float", 0.75),
        ),
        samples=(
            Sample((TensorType((1, 7, 3, 3), F32),)),
            Sample((TensorType((2, 3, 3, 6), F32),), {"size": 3, "axis": 3, "alpha": 0.5, "bias": 1.0, "beta": 0.5}),
            Sample((TensorType((2, 5, 1, 2), "float64"),), {"size": 7, "axis": -3, "alpha": 1.0}),
            Sample((TensorType((1, 4, 2, 2), "float16"),), {"size": 3, "alpha": 0.5}),
        ),
        domain=Domain(draw=_lrn_domain, ulps=16),
    )
)
