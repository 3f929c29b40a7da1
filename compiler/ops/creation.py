"""Tensor creation: zeros, ones, full, zeros_like, ones_like (all ELEMWISE, as in TVM).

Loops: every element is the same scalar; the *_like ops never read their input's values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type, is_valid_dtype
from compiler.ops.common import check_arity, tensor_arg
from compiler.ops.domain import FLOAT_CHOICES, INT_CHOICES, Domain, Draw, kind_dtype, tensor_shape
from compiler.ops.elemwise import ANY_DTYPE, dtype_kind
from compiler.ops.registry import (
    REQUIRED,
    AttrSpec,
    OpDef,
    OpPattern,
    Sample,
    TypeRel,
    TypeRelationError,
    register,
)
from compiler.ops.shape_rules import same_shape_rule, static_rule
from compiler.tir.compute import Index, TensorView
from compiler.tir.expr import Const, PrimExpr, cast

F32 = "float32"


def _target(op: str, shape: Sequence[int], dtype: str) -> TensorType:
    if any(d < 0 for d in shape):
        raise TypeRelationError(f"{op}: shape {list(shape)} has a negative dim")
    if not is_valid_dtype(dtype):
        raise TypeRelationError(f"{op}: unknown dtype {dtype!r}")
    return TensorType(tuple(shape), dtype)


def filled(value: int) -> Callable[[Index, Sequence[TensorView], Attrs, Type], PrimExpr]:
    """The compute of a tensor whose every element is `value` in the result dtype."""

    def compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
        assert isinstance(out_type, TensorType)
        return Const(np.asarray(value).astype(out_type.dtype).item(), out_type.dtype)

    return compute


def _constant_rel(op: str) -> TypeRel:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 0, op)
        return _target(op, attrs["shape"], attrs["dtype"])

    return rel


# TVM's InitOpAttrs default dtype is "unset"; a printed zeros/ones always carries it, and an
# unset one has no meaning, so we require it.
_INIT_ATTRS = (AttrSpec("shape", "ints", REQUIRED), AttrSpec("dtype", "dtype", REQUIRED))

_ALL_DTYPES = FLOAT_CHOICES + INT_CHOICES + ("bool",)


def _constant_domain(d: Draw) -> Sample:
    return Sample((), {"shape": tensor_shape(d, empty=True), "dtype": d.dtype(_ALL_DTYPES)})


register(
    OpDef(
        name="zeros",
        num_inputs=0,
        type_rel=_constant_rel("zeros"),
        pattern=OpPattern.ELEMWISE,
        reference=lambda a, attrs: np.zeros(attrs["shape"], dtype=attrs["dtype"]),
        compute=filled(0),
        attrs=_INIT_ATTRS,
        shape_func=static_rule,  # the shape is an attribute
        samples=(Sample((), {"shape": [2, 3], "dtype": F32}), Sample((), {"shape": [4], "dtype": "int64"})),
        domain=Domain(_constant_domain),
    )
)

register(
    OpDef(
        name="ones",
        num_inputs=0,
        type_rel=_constant_rel("ones"),
        pattern=OpPattern.ELEMWISE,
        reference=lambda a, attrs: np.ones(attrs["shape"], dtype=attrs["dtype"]),
        compute=filled(1),
        attrs=_INIT_ATTRS,
        shape_func=static_rule,  # the shape is an attribute
        samples=(Sample((), {"shape": [3, 1, 2], "dtype": F32}), Sample((), {"shape": [], "dtype": "int32"})),
        domain=Domain(_constant_domain),
    )
)


def _full_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "full"
    check_arity(types, 1, op)
    value = tensor_arg(types, 0, op)
    if value.ndim != 0:
        raise TypeRelationError(f"{op}: fill_value must be a scalar, got {value}")
    return _target(op, attrs["shape"], attrs["dtype"] or value.dtype)


def _full_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    assert isinstance(out_type, TensorType)
    return cast(out_type.dtype, inputs[0][()])


def _full_domain(d: Draw) -> Sample:
    source = d.dtype(_ALL_DTYPES)
    target = d.choice(("", "", d.dtype(_ALL_DTYPES)))
    attrs = {"shape": tensor_shape(d, empty=True), "dtype": target}
    low, high = -9.0, 9.0
    if dtype_kind(source) == "float" and dtype_kind(target) == "int":
        # A float converts to an integer only when its truncation fits.
        low = 0.0 if target.startswith("uint") else low
    return Sample((TensorType((), source),), attrs, low=low, high=high, int_high=100)


register(
    OpDef(
        name="full",
        num_inputs=1,
        type_rel=_full_rel,
        pattern=OpPattern.ELEMWISE,
        reference=lambda a, attrs: np.full(attrs["shape"], a[0], dtype=attrs["dtype"] or a[0].dtype),
        compute=_full_compute,
        shape_func=static_rule,  # the shape is an attribute
        # An empty dtype means the fill value's dtype.
        attrs=(AttrSpec("shape", "ints", REQUIRED), AttrSpec("dtype", "dtype", "")),
        samples=(
            Sample((np.array(1.5, dtype=F32),), {"shape": [2, 3]}),
            Sample((np.array(7, dtype="int32"),), {"shape": [3], "dtype": "float32"}),
        ),
        domain=Domain(_full_domain),
    )
)


def _like_rel(op: str) -> TypeRel:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, op)
        return tensor_arg(types, 0, op)

    return rel


def _like_domain(d: Draw) -> Sample:
    return Sample((TensorType(tensor_shape(d, empty=True), kind_dtype(d, ANY_DTYPE)),))


register(
    OpDef(
        name="zeros_like",
        num_inputs=1,
        type_rel=_like_rel("zeros_like"),
        pattern=OpPattern.ELEMWISE,
        shape_func=same_shape_rule,
        reference=lambda a, attrs: np.zeros_like(a[0]),
        compute=filled(0),
        samples=(Sample((TensorType((2, 3), F32),)), Sample((TensorType((4,), "int32"),))),
        domain=Domain(_like_domain),
    )
)

register(
    OpDef(
        name="ones_like",
        num_inputs=1,
        type_rel=_like_rel("ones_like"),
        pattern=OpPattern.ELEMWISE,
        shape_func=same_shape_rule,
        reference=lambda a, attrs: np.ones_like(a[0]),
        compute=filled(1),
        samples=(Sample((TensorType((2, 3), F32),)), Sample((TensorType((4,), "int8"),))),
        domain=Domain(_like_domain),
    )
)
