"""Elementwise math: trigonometric and hyperbolic functions, log2/log10, sign, trunc, the float
class predicates (isnan, isinf, isfinite) and the fast_* approximations.

All fuse as ELEMWISE and keep the input's shape; the predicates return bool. The
transcendental functions take float tensors only (TVM's type relation would accept integers,
but its lowering has no integer sin). `sign` and `trunc` also take integers, which they leave
exact; TVM's sign is a pair of selects, so sign(NaN) is 0, not NaN.

TVM computes fast_exp, fast_tanh and fast_erf with polynomial approximations for float32
(and float16 for fast_erf). The references here are the exact functions, and the loops call
the exact math.h functions too: the domains' `ulps` state the bound the C meets, which is far
tighter than TVM's approximations.

`unary_domain` is the one domain factory for attribute-free unary ops: a dtype set, a value
range, and optionally special values (NaN, infinities, signed zeros, negative integers) that
uniform random inputs never reach.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type
from compiler.ops.common import check_arity, tensor_arg
from compiler.ops.domain import FLOAT_DTYPES, INT_DTYPES, Domain, Draw
from compiler.ops.elemwise import FLOAT, NUMERIC, elementwise_compute, require_kind, unary
from compiler.ops.registry import OpDef, OpPattern, Sample, register
from compiler.ops.shape_rules import same_shape_rule
from compiler.tir.dtypes import is_float
from compiler.tir.expr import Const, PrimExpr, intrin, logical_or, select, unary as unary_expr

ScalarFn = Callable[[PrimExpr], PrimExpr]

# Values uniform random inputs miss: the float classes and both zeros.
FLOAT_SPECIALS = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, -2.5, 3.0)
INT_SPECIALS = (-7, -1, 0, 1, 5)


def drawn_array(d: Draw, shape: tuple[int, ...], dtype: str, values: Sequence[float]) -> np.ndarray:
    """An array of `shape` whose every element is drawn from `values` (unsigned dtypes skip the
    negative ones)."""
    if np.dtype(dtype).kind == "u":
        values = [v for v in values if not v < 0] or [0]
    flat = [d.choice(values) for _ in range(int(np.prod(shape, dtype=np.int64)))]
    return np.array(flat, dtype=np.float64).astype(dtype).reshape(shape)


def unary_domain(
    dtypes: Sequence[str],
    low: float = -2.0,
    high: float = 2.0,
    specials: Sequence[float] = (),
    int_specials: Sequence[float] = (),
    ulps: float = 8.0,
) -> Domain:
    """A domain drawing one tensor of any rank (0 included) of a dtype in `dtypes`. Float
    inputs are uniform in [low, high], or a third of the time made of `specials`; integer inputs
    are small non-negative values, or a third of the time made of `int_specials`."""

    def draw(d: Draw) -> Sample:
        shape = d.shape(min_rank=0, max_rank=4)
        dtype = d.dtype(dtypes)
        special = specials if is_float(dtype) else int_specials
        if special and d.integer(0, 2) == 0:
            return Sample((drawn_array(d, shape, dtype, special),), low=low, high=high)
        return Sample((TensorType(shape, dtype),), low=low, high=high)

    return Domain(draw=draw, ulps=ulps)


def _math(name: str) -> ScalarFn:
    return lambda x: intrin(name, x)


def _float_unary(name: str, fn: Callable[[np.ndarray], np.ndarray], low: float, high: float,
                 intrinsic: str | None = None) -> OpDef:
    return unary(
        name, fn, FLOAT, low=low, high=high, compute=_math(intrinsic or name),
        domain=unary_domain(FLOAT_DTYPES, low, high),
    )


# Ranges keep every input inside the function's domain and away from overflow, float16's too
# (sinh(4) is 27; tan stays clear of its poles).
_float_unary("sin", np.sin, -4.0, 4.0)
_float_unary("cos", np.cos, -4.0, 4.0)
_float_unary("tan", np.tan, -1.4, 1.4)
_float_unary("sinh", np.sinh, -4.0, 4.0)
_float_unary("cosh", np.cosh, -4.0, 4.0)
_float_unary("asin", np.arcsin, -1.0, 1.0)
_float_unary("acos", np.arccos, -1.0, 1.0)
_float_unary("atan", np.arctan, -4.0, 4.0)
_float_unary("asinh", np.arcsinh, -4.0, 4.0)
_float_unary("acosh", np.arccosh, 1.0, 4.0)
_float_unary("atanh", np.arctanh, -0.95, 0.95)
_float_unary("log2", np.log2, 0.1, 8.0)
_float_unary("log10", np.log10, 0.1, 8.0)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x), dtype=np.float64)


# The exact functions stand in for TVM's approximations (see the module docstring).
_float_unary("fast_exp", np.exp, -4.0, 4.0, "exp")
_float_unary("fast_tanh", np.tanh, -4.0, 4.0, "tanh")
_float_unary("fast_erf", _erf, -3.0, 3.0, "erf")


def _sign(x: np.ndarray) -> np.ndarray:
    # TVM: select(x > 0, 1, select(x < 0, -1, 0)), so NaN gives 0.
    return np.where(x > 0, 1, np.where(x < 0, -1, 0)).astype(x.dtype)


def _sign_compute(x: PrimExpr) -> PrimExpr:
    one, zero = Const(1, x.dtype), Const(0, x.dtype)
    if x.dtype.startswith("uint"):
        return select(x > zero, one, zero)
    return select(x > zero, one, select(x < zero, Const(-1, x.dtype), zero))


def _trunc_compute(x: PrimExpr) -> PrimExpr:
    return intrin("trunc", x) if is_float(x.dtype) else x


_NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES
unary("sign", _sign, NUMERIC, compute=_sign_compute,
      domain=unary_domain(_NUMERIC_DTYPES, -3.0, 3.0, FLOAT_SPECIALS, INT_SPECIALS))
unary("trunc", np.trunc, NUMERIC, low=-5.0, high=5.0, compute=_trunc_compute,
      domain=unary_domain(_NUMERIC_DTYPES, -5.0, 5.0, FLOAT_SPECIALS, INT_SPECIALS))


# --- predicates: bool results -------------------------------------------------------------------


def _predicate_rel(name: str) -> Callable[[Sequence[Type], Attrs], Type]:
    def type_rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, name)
        x = tensor_arg(types, 0, name)
        require_kind(x, NUMERIC, name)
        return TensorType(x.shape, "bool")

    return type_rel


def _isnan(x: PrimExpr) -> PrimExpr:
    return intrin("isnan", x, dtype="bool") if is_float(x.dtype) else Const(False, "bool")


def _isinf(x: PrimExpr) -> PrimExpr:
    return intrin("isinf", x, dtype="bool") if is_float(x.dtype) else Const(False, "bool")


def _isfinite(x: PrimExpr) -> PrimExpr:
    if not is_float(x.dtype):
        return Const(True, "bool")
    return unary_expr("!", logical_or(_isnan(x), _isinf(x)))


_SPECIAL_INPUTS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -3.5, np.finfo(np.float32).max],
                           dtype=np.float32)


def _predicate(name: str, fn: Callable[[np.ndarray], np.ndarray], scalar: ScalarFn) -> OpDef:
    return register(
        OpDef(
            name=name,
            num_inputs=1,
            type_rel=_predicate_rel(name),
            pattern=OpPattern.ELEMWISE,
            shape_func=same_shape_rule,
            reference=lambda arrays, attrs: np.asarray(fn(arrays[0])),
            compute=elementwise_compute(scalar),
            samples=(
                Sample((_SPECIAL_INPUTS,)),
                Sample((_SPECIAL_INPUTS.astype(np.float64).reshape(2, 4),)),
                Sample((_SPECIAL_INPUTS[:7].astype(np.float16),)),
                Sample((TensorType((2, 3), "float32"),)),
                Sample((np.array([-5, 0, 7], dtype=np.int32),)),
                Sample((np.array(np.inf, dtype=np.float32),)),
            ),
            domain=unary_domain(_NUMERIC_DTYPES, -3.0, 3.0, FLOAT_SPECIALS, INT_SPECIALS),
        )
    )


_predicate("isnan", np.isnan, _isnan)
_predicate("isinf", np.isinf, _isinf)
_predicate("isfinite", np.isfinite, _isfinite)
