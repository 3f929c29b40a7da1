"""Elementwise operators: each output element depends on the same element of the one input.

All of them fuse as ELEMWISE and keep the input's shape. Their numpy references return the
input's dtype (cast excepted): floats are computed in float64 and rounded back once, so the
reference is at least as accurate as the C kernel it checks. Their loops are one scalar
function of the input element (`unary(..., compute=...)`), inlined wherever they are fused.

Dtype classes used by the type relations of several families live here too: `FLOAT`,
`NUMERIC`, `BOOL`, `ANY_DTYPE` and `require_kind`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type, is_valid_dtype
from compiler.ops.common import check_arity, tensor_arg
from compiler.ops.domain import (
    FLOAT_CHOICES,
    INT_CHOICES,
    Domain,
    Draw,
    int_range,
    int_values,
    kind_dtype,
    tensor_shape,
)
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import same_shape_rule
from compiler.tir.compute import Index, TensorView
from compiler.tir.dtypes import is_float
from compiler.tir.expr import Const, PrimExpr, cast, intrin, maximum, minimum, ne, select, unary as unary_expr

# The loop body of a unary op: the output element from the input element.
ScalarFn = Callable[[PrimExpr], PrimExpr]

FLOAT = frozenset({"float"})
NUMERIC = frozenset({"float", "int"})
BOOL = frozenset({"bool"})
ANY_DTYPE = frozenset({"float", "int", "bool"})


def dtype_kind(dtype: str) -> str:
    """The dtype class of a dtype name: float, int (signed or unsigned) or bool."""
    if dtype == "bool":
        return "bool"
    if dtype.startswith("float"):
        return "float"
    return "int"


def require_kind(ty: TensorType, kinds: frozenset[str], op: str) -> None:
    """Reject a tensor whose dtype class is not one of `kinds`, naming the op and the type."""
    if dtype_kind(ty.dtype) not in kinds:
        wanted = " or ".join(sorted(kinds))
        raise TypeRelationError(f"{op} expects a {wanted} tensor, got {ty}")


def _same_as_input(name: str, kinds: frozenset[str]) -> Callable[[Sequence[Type], Attrs], Type]:
    def type_rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, name)
        x = tensor_arg(types, 0, name)
        require_kind(x, kinds, name)
        return x

    return type_rel


def _in_input_dtype(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    # np.asarray: numpy ufuncs turn 0-d arrays into scalars.
    if dtype_kind(str(x.dtype)) == "float":
        return np.asarray(fn(x.astype(np.float64))).astype(x.dtype)
    return np.asarray(fn(x)).astype(x.dtype)


def _default_samples(kinds: frozenset[str], low: float, high: float) -> tuple[Sample, ...]:
    samples: list[Sample] = []
    if "float" in kinds:
        samples.append(Sample((TensorType((2, 3), "float32"),), low=low, high=high))
        samples.append(Sample((TensorType((4,), "float64"),), low=low, high=high))
        samples.append(Sample((TensorType((), "float32"),), low=low, high=high))
    if "int" in kinds:
        samples.append(Sample((TensorType((2, 2), "int32"),)))
        samples.append(Sample((np.array([-3, 0, 5, -128, 127], dtype=np.int8),)))
    if "bool" in kinds:
        samples.append(Sample((TensorType((3, 2), "bool"),)))
    return tuple(samples)


def elementwise_compute(scalar: ScalarFn) -> Callable[[Index, Sequence[TensorView], Attrs, Type], PrimExpr]:
    """An op compute applying `scalar` to the input element at the output's own index."""
    return lambda idx, inputs, attrs, out_type: scalar(inputs[0][tuple(idx)])


def unary_domain(kinds: frozenset[str], low: float, high: float, ulps: float = 8.0) -> Domain:
    """Calls of a unary op on any shape (empty ones too) of a dtype in `kinds`: floats in
    [low, high] or a range 4 times wider, integers signed and up to a narrow dtype's extremes."""

    def draw(d: Draw) -> Sample:
        dtype = kind_dtype(d, kinds)
        shape = tensor_shape(d, empty=True)
        if dtype_kind(dtype) == "int":
            return Sample((int_values(d, shape, dtype, *int_range(d, dtype)),))
        scale = d.choice((1.0, 4.0))
        return Sample((TensorType(shape, dtype),), low=low * scale, high=high * scale)

    return Domain(draw, ulps=ulps)


def unary(
    name: str,
    fn: Callable[[np.ndarray], np.ndarray],
    kinds: frozenset[str] = NUMERIC,
    low: float = -2.0,
    high: float = 2.0,
    compute: ScalarFn | None = None,
    domain: Domain | None = None,
) -> OpDef:
    """Register an attribute-free elementwise op computing `fn` (numpy) / `compute` (loops);
    its domain is `unary_domain(kinds, low, high)` unless given."""
    return register(
        OpDef(
            name=name,
            num_inputs=1,
            type_rel=_same_as_input(name, kinds),
            pattern=OpPattern.ELEMWISE,
            shape_func=same_shape_rule,
            reference=lambda arrays, attrs: _in_input_dtype(fn, arrays[0]),
            samples=_default_samples(kinds, low, high),
            compute=None if compute is None else elementwise_compute(compute),
            domain=unary_domain(kinds, low, high) if domain is None else domain,
        )
    )


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # The tanh form never overflows, unlike 1 / (1 + exp(-x)) for large negative x.
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _round_half_away_from_zero(x: np.ndarray) -> np.ndarray:
    # TVM lowers round to C's round() (llvm.round), not numpy's round-half-to-even. Splitting off
    # the fraction is exact, unlike floor(x + 0.5), which misrounds 0.49999999999999994.
    if x.dtype.kind != "f":
        return x
    magnitude = np.abs(x)
    whole = np.floor(magnitude)
    return np.copysign(whole + (magnitude - whole >= 0.5), x)


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    # numpy has no erf; frompyfunc yields an object array, hence the explicit cast.
    return np.asarray(_erf_scalar(x), dtype=np.float64)


def _math(name: str) -> ScalarFn:
    return lambda x: intrin(name, x)


def _rounding(name: str) -> ScalarFn:
    # Integers are already whole: floor, ceil and round leave them unchanged.
    return lambda x: intrin(name, x) if is_float(x.dtype) else x


def _abs(x: PrimExpr) -> PrimExpr:
    # No integer abs intrinsic: abs() of int8 -128 would also widen. -x wraps back on the store.
    return intrin("fabs", x) if is_float(x.dtype) else select(x < 0, -x, x)


unary("negative", np.negative, compute=lambda x: -x)
unary("abs", np.abs, compute=_abs)
unary("floor", np.floor, compute=_rounding("floor"))
unary("ceil", np.ceil, compute=_rounding("ceil"))
unary("round", _round_half_away_from_zero, compute=_rounding("round"))
unary("copy", np.copy, ANY_DTYPE, compute=lambda x: x)
unary("logical_not", np.logical_not, BOOL, compute=lambda x: unary_expr("!", x))
unary("exp", np.exp, FLOAT, compute=_math("exp"))
unary("log", np.log, FLOAT, low=0.1, high=4.0, compute=_math("log"))
unary("sqrt", np.sqrt, FLOAT, low=0.0, high=4.0, compute=_math("sqrt"))
unary("rsqrt", lambda x: 1.0 / np.sqrt(x), FLOAT, low=0.1, high=4.0, compute=_math("rsqrt"))
unary("tanh", np.tanh, FLOAT, compute=_math("tanh"))
unary("sigmoid", _sigmoid, FLOAT, compute=_math("sigmoid"))
unary("erf", _erf, FLOAT, compute=_math("erf"))


def _clip_bound(value: float, dtype: np.dtype) -> np.ndarray:
    """A clip bound in the tensor's dtype; integer tensors get it truncated and saturated."""
    if dtype.kind == "f":
        with np.errstate(over="ignore"):
            return np.asarray(value).astype(dtype)
    info = np.iinfo(dtype)
    bounded = min(max(value, float(info.min)), float(info.max))
    return np.asarray(int(bounded), dtype=dtype)


def _clip_type_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    x = _same_as_input("clip", NUMERIC)(types, attrs)
    for key in ("a_min", "a_max"):
        value = attrs[key]
        assert isinstance(value, float)
        if math.isnan(value):
            raise TypeRelationError(f"clip: {key} is NaN for {x}")
    return x


def _clip_reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = arrays[0]
    low = _clip_bound(float(attrs["a_min"]), x.dtype)
    high = _clip_bound(float(attrs["a_max"]), x.dtype)
    # min first, then max: when a_min > a_max every element becomes a_min, as in TVM.
    return np.asarray(np.maximum(np.minimum(x, high), low))


def _clip_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    x = inputs[0][tuple(idx)]
    dtype = np.dtype(x.dtype)
    low = Const(_clip_bound(float(attrs["a_min"]), dtype).item(), x.dtype)
    high = Const(_clip_bound(float(attrs["a_max"]), dtype).item(), x.dtype)
    return maximum(minimum(x, high), low)


def _clip_domain(d: Draw) -> Sample:
    dtype = kind_dtype(d, NUMERIC)
    shape = tensor_shape(d, empty=True)
    # Ordinary bounds, fractional ones (truncated for integers), bounds past an int8's range,
    # a_min > a_max (everything becomes a_min) and a_min == a_max.
    a_min, a_max = d.choice(
        ((0.0, 6.0), (-1.5, 1.5), (-0.5, 0.25), (-1000.0, 7.9), (1.0, -1.0), (2.0, 2.0), (-3.0, 1e4))
    )
    attrs = {"a_min": a_min, "a_max": a_max}
    if dtype_kind(dtype) == "int":
        return Sample((int_values(d, shape, dtype, *int_range(d, dtype)),), attrs)
    return Sample((TensorType(shape, dtype),), attrs, low=-4.0, high=8.0)


register(
    OpDef(
        name="clip",
        num_inputs=1,
        type_rel=_clip_type_rel,
        pattern=OpPattern.ELEMWISE,
        shape_func=same_shape_rule,
        reference=_clip_reference,
        compute=_clip_compute,
        attrs=(AttrSpec("a_min", "float"), AttrSpec("a_max", "float")),
        samples=(
            Sample((TensorType((2, 3), "float32"),), {"a_min": 0.0, "a_max": 6.0}, low=-4.0, high=8.0),
            Sample((TensorType((4,), "float16"),), {"a_min": -1, "a_max": 0.5}),
            Sample((np.array([-128, -5, 0, 5, 100], dtype=np.int8),), {"a_min": -1000.0, "a_max": 7.9}),
            Sample((TensorType((3,), "float32"),), {"a_min": 1.0, "a_max": -1.0}),
        ),
        domain=Domain(_clip_domain),
    )
)


def _cast_type_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "cast")
    x = tensor_arg(types, 0, "cast")
    dtype = attrs["dtype"]
    assert isinstance(dtype, str)
    if not is_valid_dtype(dtype):
        raise TypeRelationError(f'cast: unknown target dtype "{dtype}" for {x}')
    return TensorType(x.shape, dtype)


def _cast_reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    # astype truncates floats toward zero, like a C conversion of an in-range value.
    return np.asarray(arrays[0]).astype(str(attrs["dtype"]))


def _cast_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    x = inputs[0][tuple(idx)]
    dtype = str(attrs["dtype"])
    # A C conversion to uint8_t keeps the low bits; a bool is whether the value is non-zero.
    if dtype == "bool" and x.dtype != "bool":
        return ne(x, Const(0, x.dtype))
    return cast(dtype, x)


_ALL_DTYPES = FLOAT_CHOICES + INT_CHOICES + ("bool",)


def _cast_domain(d: Draw) -> Sample:
    source, target = d.dtype(_ALL_DTYPES), d.dtype(_ALL_DTYPES)
    shape = tensor_shape(d, empty=True)
    attrs = {"dtype": target}
    if dtype_kind(source) == "int":
        return Sample((int_values(d, shape, source, *int_range(d, source)),), attrs)
    if dtype_kind(source) == "bool":
        return Sample((TensorType(shape, source),), attrs)
    # A float converts to an integer only when its truncation fits (else C and numpy differ).
    if dtype_kind(target) == "int":
        info = np.iinfo(target)
        low, high = max(float(info.min), -100.0), min(float(info.max), 100.0)
        return Sample((TensorType(shape, source),), attrs, low=low, high=high)
    return Sample((TensorType(shape, source),), attrs, low=-9.0, high=9.0)


register(
    OpDef(
        name="cast",
        num_inputs=1,
        type_rel=_cast_type_rel,
        pattern=OpPattern.ELEMWISE,
        shape_func=same_shape_rule,
        reference=_cast_reference,
        compute=_cast_compute,
        attrs=(AttrSpec("dtype", "dtype"),),
        samples=(
            Sample((TensorType((2, 3), "float32"),), {"dtype": "int32"}, low=-9.0, high=9.0),
            Sample((TensorType((2, 3), "int32"),), {"dtype": "float32"}),
            Sample((TensorType((5,), "float32"),), {"dtype": "float16"}),
            Sample((TensorType((4,), "float32"),), {"dtype": "uint8"}, low=0.0, high=250.0),
            Sample((TensorType((4,), "int8"),), {"dtype": "bool"}),
            Sample((TensorType((3,), "bool"),), {"dtype": "float32"}),
        ),
        domain=Domain(_cast_domain),
    )
)
