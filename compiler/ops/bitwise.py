"""Bitwise operators, shifts and truncating division.

`bitwise_not` is ELEMWISE; the binary ops broadcast like compiler/ops/broadcast.py's (one
dtype for both operands, BROADCAST fusion). and/or/xor/not take integers and bools (TVM's bool
is a one-bit unsigned integer, so bitwise_not of a bool is its negation). Shifts take integers
only and are C's: `right_shift` of a signed value is arithmetic; a shift amount outside
[0, bits) is undefined in C, so the domains never draw one.

`trunc_divide` and `trunc_mod` round the quotient toward zero. For integers that is C's `/`
and `%` (a zero divisor gives 0, as numpy); for floats TVM computes `trunc(a / b)` and
`a - trunc(a / b) * b` (not fmod), and so do the references here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.types import TensorType
from compiler.ops.broadcast import ScalarBinaryFn, binary, trunc_divide_ints
from compiler.ops.domain import FLOAT_DTYPES, INT_DTYPES, Domain, Draw
from compiler.ops.elemwise import unary
from compiler.ops.math import drawn_array, unary_domain
from compiler.ops.registry import Sample
from compiler.tir.dtypes import is_float
from compiler.tir.expr import PrimExpr, binary as binary_expr, intrin, unary as unary_expr

INT = frozenset({"int"})
INT_OR_BOOL = frozenset({"int", "bool"})
_INT_OR_BOOL_DTYPES = INT_DTYPES + ("bool",)
_NEGATIVE_INTS = (-128, -7, -1, 0, 1, 6, 127)


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f"


# --- domains ------------------------------------------------------------------------------------


def _operand_shapes(d: Draw) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast, either one the larger."""
    shape = d.shape(min_rank=0, max_rank=4)
    other = d.broadcastable(shape)
    return (shape, other) if d.boolean() else (other, shape)


def _operand(d: Draw, shape: tuple[int, ...], dtype: str, values: Sequence[float]) -> object:
    """A random tensor of small non-negative values, or a third of the time one of `values`."""
    if dtype != "bool" and d.integer(0, 2) == 0:
        return drawn_array(d, shape, dtype, values)
    return TensorType(shape, dtype)


def _bitwise_domain(d: Draw) -> Sample:
    lhs, rhs = _operand_shapes(d)
    dtype = d.dtype(_INT_OR_BOOL_DTYPES)
    inputs = (_operand(d, lhs, dtype, _NEGATIVE_INTS), _operand(d, rhs, dtype, _NEGATIVE_INTS))
    # Wide random integers wrap in narrow dtypes, which reaches the sign bit.
    return Sample(inputs, int_high=d.choice((4, 256, 1 << 20)))


def _bits(dtype: str) -> int:
    return np.iinfo(dtype).bits


def _shift_domain(d: Draw) -> Sample:
    lhs, rhs = _operand_shapes(d)
    dtype = d.dtype(INT_DTYPES)
    bits = _bits(dtype)
    if d.boolean():
        # Random tensors drawn below the bit width serve as both values and amounts.
        return Sample((TensorType(lhs, dtype), TensorType(rhs, dtype)), int_high=bits)
    # The shift amounts come from [0, bits) only: C leaves other amounts undefined.
    return Sample((_operand(d, lhs, dtype, _NEGATIVE_INTS), drawn_array(d, rhs, dtype, tuple(range(bits)))),
                  int_high=d.choice((4, 256, 1 << 20)))


# Dividends on a grid of quarters and divisors powers of two: every quotient is exact in every
# float dtype, so truncation cannot flip at a rounding boundary between numpy and C.
_FLOAT_DIVIDENDS = tuple(k / 4 for k in range(-32, 33, 3)) + (0.0, -8.0, 8.0)
_FLOAT_DIVISORS = (-4.0, -2.0, -0.5, 0.25, 1.0, 2.0)
_INT_DIVIDENDS = (-20, -9, -7, -1, 0, 1, 6, 7, 13, 20)
_INT_DIVISORS = (-7, -3, -2, -1, 1, 2, 3, 5)


def _trunc_division_domain(d: Draw) -> Sample:
    lhs, rhs = _operand_shapes(d)
    dtype = d.dtype(FLOAT_DTYPES + INT_DTYPES)
    if dtype in ("float32", "float64") and d.boolean():
        # Random positive operands: a quotient rounding onto an integer in C but not in float64
        # is too unlikely at these precisions to matter (float16 uses the exact grid below).
        return Sample((TensorType(lhs, dtype), TensorType(rhs, dtype)), low=0.5, high=4.0)
    if is_float(dtype):
        dividends, divisors = _FLOAT_DIVIDENDS, _FLOAT_DIVISORS
    else:
        dividends, divisors = _INT_DIVIDENDS, _INT_DIVISORS
    return Sample((drawn_array(d, lhs, dtype, dividends), drawn_array(d, rhs, dtype, divisors)))


# --- numpy references ---------------------------------------------------------------------------


def _trunc_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _is_float(a):
        return np.trunc(a.astype(np.float64) / b.astype(np.float64))
    return trunc_divide_ints(a, b)


def _trunc_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _is_float(a):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        return a64 - np.trunc(a64 / b64) * b64
    return np.fmod(a, b)


# --- loops --------------------------------------------------------------------------------------


def _operator(op: str) -> ScalarBinaryFn:
    return lambda a, b: binary_expr(op, a, b)


def _trunc_divide_compute(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return intrin("trunc", a / b) if is_float(a.dtype) else binary_expr("tdiv", a, b)


def _trunc_mod_compute(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return a - intrin("trunc", a / b) * b if is_float(a.dtype) else binary_expr("tmod", a, b)


def _bitwise_not_compute(x: PrimExpr) -> PrimExpr:
    return unary_expr("!", x) if x.dtype == "bool" else unary_expr("~", x)


# --- samples ------------------------------------------------------------------------------------

_BITWISE_SAMPLES = (
    Sample((TensorType((2, 3), "int32"), TensorType((3,), "int32")), int_high=1 << 20),
    Sample((np.array([-128, -1, 0, 85, 127], np.int8), np.array([15, -16, 7, -86, 1], np.int8))),
    Sample((TensorType((4,), "uint8"), TensorType((), "uint8")), int_high=256),
    Sample((TensorType((2, 1), "int64"), TensorType((1, 3), "int64")), int_high=1 << 40),
    Sample((TensorType((2, 2), "bool"), TensorType((2, 1), "bool"))),
)
_SHIFT_SAMPLES = (
    Sample((np.array([1, -1, -128, 127, 3], np.int8), np.array([0, 7, 1, 1, 6], np.int8))),
    Sample((np.array([[1], [-5], [1 << 30]], np.int32), np.array([0, 1, 31], np.int32))),
    Sample((np.array([255, 1, 128], np.uint8), np.array([1, 7, 3], np.uint8))),
    Sample((np.array([-(1 << 62), 3], np.int64), np.array([63, 40], np.int64))),
    Sample((TensorType((2, 3), "int16"), TensorType((), "int16")), int_high=16),
)
_TRUNC_DIVISION_SAMPLES = (
    Sample(
        (
            np.array([7, -7, 7, -7, 0, 6, -1], np.int32),
            np.array([2, 2, -2, -2, 3, 3, 5], np.int32),
        )
    ),
    Sample((np.array([[9], [-9], [-128]], np.int8), np.array([4, -4], np.int8))),
    Sample((np.array([7.5, -7.5, 7.5, -7.5, 0.0, 6.0], np.float32), np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0], np.float32))),
    Sample((np.array([[5.25], [-3.75]], np.float64), np.array([0.5, -2.0], np.float64))),
    Sample((np.array([9.0, -2.5, 4.0], np.float16), np.array(2.0, np.float16))),
)


# --- registrations ------------------------------------------------------------------------------

unary(
    "bitwise_not",
    np.invert,
    INT_OR_BOOL,
    compute=_bitwise_not_compute,
    domain=unary_domain(_INT_OR_BOOL_DTYPES, int_specials=_NEGATIVE_INTS),
)
# numpy's bitwise ops on bools are the logical ones, as TVM's on one-bit integers.
binary("bitwise_and", np.bitwise_and, INT_OR_BOOL, samples=_BITWISE_SAMPLES, compute=_operator("&"),
       domain=Domain(_bitwise_domain))
binary("bitwise_or", np.bitwise_or, INT_OR_BOOL, samples=_BITWISE_SAMPLES, compute=_operator("|"),
       domain=Domain(_bitwise_domain))
binary("bitwise_xor", np.bitwise_xor, INT_OR_BOOL, samples=_BITWISE_SAMPLES, compute=_operator("^"),
       domain=Domain(_bitwise_domain))
binary("left_shift", np.left_shift, INT, samples=_SHIFT_SAMPLES, compute=_operator("<<"),
       domain=Domain(_shift_domain))
binary("right_shift", np.right_shift, INT, samples=_SHIFT_SAMPLES, compute=_operator(">>"),
       domain=Domain(_shift_domain))
binary("trunc_divide", _trunc_divide, samples=_TRUNC_DIVISION_SAMPLES, compute=_trunc_divide_compute,
       domain=Domain(_trunc_division_domain))
binary("trunc_mod", _trunc_mod, samples=_TRUNC_DIVISION_SAMPLES, compute=_trunc_mod_compute,
       domain=Domain(_trunc_division_domain))
