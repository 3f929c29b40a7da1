"""Broadcasting operators: binary arithmetic, comparisons, logical ops and `where`.

Shapes broadcast as in numpy (a `?` dim unifies with anything, see common.broadcast_shapes).
As in TVM the operands must have one dtype: `add(int8 tensor, 1)` is a type error, the
literal must be written `1i8`. Comparisons return bool.

Integer division follows TVM, which follows C: `divide` and `mod` truncate toward zero
(-7 / 2 == -3, -7 mod 2 == -1); `floor_divide` and `floor_mod` round toward minus infinity.

Loops: a binary op's compute is a scalar function of its two operand elements
(`binary(..., compute=...)`); `broadcast_index` turns the output index into each operand's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type
from compiler.ops.common import broadcast_shapes, check_arity, same_dtype, tensor_arg
from compiler.ops.domain import (
    Domain,
    Draw,
    away_from_zero,
    broadcast_pair,
    float_values,
    int_range,
    int_values,
    kind_dtype,
    tensor_shape,
)
from compiler.ops.elemwise import ANY_DTYPE, BOOL, NUMERIC, dtype_kind, require_kind
from compiler.ops.registry import OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import broadcast_rule
from compiler.tir.compute import Index, TensorView
from compiler.tir.dtypes import is_float
from compiler.tir.expr import (
    Const,
    PrimExpr,
    binary as binary_expr,
    cast,
    eq,
    intrin,
    maximum,
    minimum,
    select,
)

BinaryFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
# The loop body of a binary op: the output element from the two (broadcast) operand elements.
ScalarBinaryFn = Callable[[PrimExpr, PrimExpr], PrimExpr]


def broadcast_index(idx: Index, shape: Sequence[object], out_shape: Sequence[object] | None = None) -> tuple[PrimExpr, ...]:
    """The element of a tensor of `shape` that numpy broadcasting pairs with output index `idx`.

    The tensor's dims align with the trailing output dims (missing leading dims are dropped);
    a dim of extent 1 is read at 0 whatever the output index, and a dim known only at run time
    is tested there, unless it is the output's own dim (`out_shape`), which never broadcasts.
    """
    lead = len(idx) - len(shape)
    if lead < 0:
        raise ValueError(f"a rank-{len(shape)} operand cannot broadcast to rank {len(idx)}")
    out: list[PrimExpr] = []
    for i, d in enumerate(shape):
        if isinstance(d, PrimExpr):
            if out_shape is not None and out_shape[lead + i] is d:
                out.append(idx[lead + i])
            else:
                out.append(select(eq(d, 1), Const(0, idx[lead + i].dtype), idx[lead + i]))
        else:
            out.append(Const(0) if d == 1 else idx[lead + i])
    return tuple(out)


def load_broadcast(view: TensorView, idx: Index, out_shape: Sequence[object] | None = None) -> PrimExpr:
    """`view`'s element paired with output index `idx` under broadcasting to `out_shape`."""
    return view[broadcast_index(idx, view.shape, out_shape)]


def _is_float(a: np.ndarray) -> bool:
    return dtype_kind(str(a.dtype)) == "float"


def trunc_divide_ints(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer quotient rounded toward zero (C's `/`), exact for every integer width."""
    quotient = np.floor_divide(a, b)
    # Floor and truncation differ exactly when the division is inexact and the signs differ.
    inexact_negative = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return quotient + inexact_negative.astype(quotient.dtype)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.true_divide(a, b) if _is_float(a) else trunc_divide_ints(a, b)


def _floor_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # TVM's float floor_divide is floor(a / b), which can differ from numpy's divmod-based one.
    return np.floor(np.true_divide(a, b)) if _is_float(a) else np.floor_divide(a, b)


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _is_float(a):
        return np.power(a, b)
    # Integer powers go through double pow() in C, so negative exponents truncate to 0 or ±1
    # instead of failing as numpy's integer power does.
    return np.trunc(np.power(a.astype(np.float64), b.astype(np.float64)))


def _trunc_or_true_divide(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return a / b if is_float(a.dtype) else binary_expr("tdiv", a, b)


def _floor_divide_compute(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return intrin("floor", a / b) if is_float(a.dtype) else a // b


def _mod_compute(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return intrin("fmod", a, b) if is_float(a.dtype) else binary_expr("tmod", a, b)


def _power_compute(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if is_float(a.dtype):
        return intrin("pow", a, b)
    # As the reference: double pow(), truncated back to the integer type by the conversion.
    return cast(a.dtype, intrin("pow", cast("float64", a), cast("float64", b)))


def _operator(op: str) -> ScalarBinaryFn:
    return lambda a, b: binary_expr(op, a, b)


def _broadcast_type_rel(
    name: str, kinds: frozenset[str], result_dtype: str | None
) -> Callable[[Sequence[Type], Attrs], Type]:
    def type_rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 2, name)
        lhs = tensor_arg(types, 0, name)
        rhs = tensor_arg(types, 1, name)
        dtype = same_dtype(lhs, rhs, name)
        require_kind(lhs, kinds, name)
        return TensorType(broadcast_shapes(lhs, rhs, name), result_dtype or dtype)

    return type_rel


def _samples_for(kinds: frozenset[str]) -> tuple[Sample, ...]:
    samples: list[Sample] = []
    if "float" in kinds:
        samples.append(Sample((TensorType((2, 3), "float32"), TensorType((2, 3), "float32"))))
        samples.append(Sample((TensorType((2, 1, 4), "float32"), TensorType((3, 1), "float32"))))
        samples.append(Sample((TensorType((2, 3), "float64"), TensorType((), "float64"))))
    if "int" in kinds:
        samples.append(Sample((TensorType((2, 3), "int32"), TensorType((3,), "int32"))))
        samples.append(Sample((TensorType((), "int8"), TensorType((4,), "int8"))))
    if "bool" in kinds:
        samples.append(Sample((TensorType((2, 2), "bool"), TensorType((2, 1), "bool"))))
    return tuple(samples)


# Random integer divisors include 0, so the division family uses fixed operands of all signs.
_SIGNED_DIVISION = (
    Sample((TensorType((2, 3), "float32"), TensorType((3,), "float32")), low=0.5, high=3.0),
    Sample(
        (
            np.array([7, -7, 7, -7, 0, 6, -1], dtype=np.int32),
            np.array([2, 2, -2, -2, 3, 3, 5], dtype=np.int32),
        )
    ),
    Sample((np.array([[9], [-9]], dtype=np.int8), np.array([4, -4], dtype=np.int8))),
)


# --- domains: the operands of one drawn call, given their dtype and shapes ---------------------------

Operands = Callable[[Draw, str, tuple[int, ...], tuple[int, ...]], Sample]


def _any_operands(d: Draw, dtype: str, a: tuple[int, ...], b: tuple[int, ...]) -> Sample:
    if dtype_kind(dtype) == "int":
        low, high = int_range(d, dtype)
        return Sample((int_values(d, a, dtype, low, high), int_values(d, b, dtype, low, high)))
    if dtype_kind(dtype) == "float" and d.integer(0, 2) == 0:
        # Whole numbers, so that comparisons meet equal operands.
        whole = (np.asarray(np.round(float_values(d, s, dtype, -2.0, 2.0))).astype(dtype) for s in (a, b))
        return Sample(tuple(whole))
    return Sample((TensorType(a, dtype), TensorType(b, dtype)))


def _division_operands(d: Draw, dtype: str, a: tuple[int, ...], b: tuple[int, ...]) -> Sample:
    """Divisors of both signs and never 0 (nor -1 under the most negative dividend, whose
    quotient overflows)."""
    if dtype_kind(dtype) == "int":
        low, high = int_range(d, dtype)
        divisor = away_from_zero(int_values(d, b, dtype, -9, 9), 1)
        if low < -9:
            divisor = np.where(divisor == -1, np.asarray(-2, dtype), divisor).astype(dtype)
        return Sample((int_values(d, a, dtype, low, high), divisor))
    return Sample(
        (TensorType(a, dtype), away_from_zero(float_values(d, b, dtype, -3.0, 3.0), 0.25)), low=-6.0, high=6.0
    )


def _power_operands(d: Draw, dtype: str, a: tuple[int, ...], b: tuple[int, ...]) -> Sample:
    """Positive float bases (a negative one has no real power); non-zero integer bases with
    exponents small enough for the result to fit the dtype."""
    if dtype_kind(dtype) == "int":
        base = away_from_zero(int_values(d, a, dtype, -5, 5), 1)
        return Sample((base, int_values(d, b, dtype, -2, 3)))
    return Sample((TensorType(a, dtype), float_values(d, b, dtype, -3.0, 3.0)), low=0.1, high=3.0)


def binary_domain(kinds: frozenset[str], operands: Operands = _any_operands) -> Domain:
    """Calls on operands of one dtype in `kinds` whose shapes broadcast: one side may miss
    leading dims or have 1s, and the shapes may be empty."""

    def draw(d: Draw) -> Sample:
        dtype = kind_dtype(d, kinds)
        a, b = broadcast_pair(d, tensor_shape(d, empty=True))
        return operands(d, dtype, a, b)

    return Domain(draw)


def binary(
    name: str,
    fn: BinaryFn,
    kinds: frozenset[str] = NUMERIC,
    result_dtype: str | None = None,
    samples: tuple[Sample, ...] | None = None,
    compute: ScalarBinaryFn | None = None,
    domain: Domain | None = None,
) -> OpDef:
    """Register a broadcasting binary op computing `fn` (numpy) / `compute` (loops) on operands
    of one dtype in `kinds`; its domain is `binary_domain(kinds)` unless given."""

    def reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
        lhs, rhs = arrays
        return np.asarray(fn(lhs, rhs)).astype(result_dtype or lhs.dtype)

    def loop_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
        assert compute is not None
        return compute(load_broadcast(inputs[0], idx, out_type.shape), load_broadcast(inputs[1], idx, out_type.shape))

    return register(
        OpDef(
            name=name,
            num_inputs=2,
            type_rel=_broadcast_type_rel(name, kinds, result_dtype),
            pattern=OpPattern.BROADCAST,
            shape_func=broadcast_rule,
            reference=reference,
            samples=_samples_for(kinds) if samples is None else samples,
            compute=None if compute is None else loop_compute,
            domain=binary_domain(kinds) if domain is None else domain,
        )
    )


binary("add", np.add, compute=_operator("+"))
binary("subtract", np.subtract, compute=_operator("-"))
binary("multiply", np.multiply, compute=_operator("*"))
_DIVISION_DOMAIN = binary_domain(NUMERIC, _division_operands)
binary("divide", _divide, samples=_SIGNED_DIVISION, compute=_trunc_or_true_divide, domain=_DIVISION_DOMAIN)
binary(
    "floor_divide", _floor_divide, samples=_SIGNED_DIVISION, compute=_floor_divide_compute, domain=_DIVISION_DOMAIN
)
binary("mod", np.fmod, samples=_SIGNED_DIVISION, compute=_mod_compute, domain=_DIVISION_DOMAIN)
# The loop IR's `%` is numpy's floor modulo for every dtype, floats included.
binary("floor_mod", np.mod, samples=_SIGNED_DIVISION, compute=_operator("%"), domain=_DIVISION_DOMAIN)
binary(
    "power",
    _power,
    samples=(
        Sample((TensorType((2, 3), "float32"), TensorType((3,), "float32")), low=0.1, high=3.0),
        Sample((np.array([2, -3, 5, 2], dtype=np.int32), np.array([3, 2, 0, -1], dtype=np.int32))),
    ),
    compute=_power_compute,
    domain=binary_domain(NUMERIC, _power_operands),
)
binary("maximum", np.maximum, ANY_DTYPE, compute=maximum)
binary("minimum", np.minimum, ANY_DTYPE, compute=minimum)
binary("equal", np.equal, ANY_DTYPE, "bool", compute=_operator("=="))
binary("not_equal", np.not_equal, ANY_DTYPE, "bool", compute=_operator("!="))
binary("less", np.less, ANY_DTYPE, "bool", compute=_operator("<"))
binary("less_equal", np.less_equal, ANY_DTYPE, "bool", compute=_operator("<="))
binary("greater", np.greater, ANY_DTYPE, "bool", compute=_operator(">"))
binary("greater_equal", np.greater_equal, ANY_DTYPE, "bool", compute=_operator(">="))
binary("logical_and", np.logical_and, BOOL, compute=_operator("&&"))
binary("logical_or", np.logical_or, BOOL, compute=_operator("||"))
# Bools hold exactly 0 or 1, so "differ" is exclusive or.
binary("logical_xor", np.logical_xor, BOOL, compute=_operator("!="))


def _where_type_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 3, "where")
    cond, x, y = (tensor_arg(types, i, "where") for i in range(3))
    if cond.dtype != "bool":
        raise TypeRelationError(f"where expects a bool condition, got {cond}")
    dtype = same_dtype(x, y, "where")
    try:
        values = broadcast_shapes(x, y, "where")
        shape = broadcast_shapes(cond, TensorType(values, dtype), "where")
    except TypeRelationError:
        raise TypeRelationError(f"where: shapes of {cond}, {x} and {y} do not broadcast") from None
    return TensorType(shape, dtype)


def _where_reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    cond, x, y = arrays
    return np.asarray(np.where(cond, x, y)).astype(x.dtype)


def _where_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    cond, x, y = (load_broadcast(view, idx, out_type.shape) for view in inputs)
    return select(cond, x, y)


def _where_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, empty=True)
    dtype = kind_dtype(d, ANY_DTYPE)
    # Any of the three may be the one of full rank; the others broadcast against it.
    shapes = [shape, d.broadcastable(shape), d.broadcastable(shape)]
    first = d.integer(0, 2)
    shapes[0], shapes[first] = shapes[first], shapes[0]
    return Sample((TensorType(shapes[0], "bool"), TensorType(shapes[1], dtype), TensorType(shapes[2], dtype)))


register(
    OpDef(
        name="where",
        num_inputs=3,
        type_rel=_where_type_rel,
        pattern=OpPattern.BROADCAST,
        shape_func=broadcast_rule,
        reference=_where_reference,
        compute=_where_compute,
        samples=(
            Sample((TensorType((2, 3), "bool"), TensorType((2, 3), "float32"), TensorType((2, 3), "float32"))),
            Sample((TensorType((3, 1), "bool"), TensorType((4,), "float32"), TensorType((), "float32"))),
            Sample((TensorType((), "bool"), TensorType((2, 1), "int32"), TensorType((1, 5), "int32"))),
        ),
        domain=Domain(_where_domain),
    )
)
