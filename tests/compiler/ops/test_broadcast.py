from __future__ import annotations

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, Dim, TensorType
from compiler.ops import OpPattern, TypeRelationError
from compiler.ops.broadcast import trunc_divide_ints

BINARY = ["add", "subtract", "multiply", "divide", "floor_divide", "mod", "floor_mod", "power", "maximum",
          "minimum", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
          "logical_or", "logical_xor"]
COMPARISONS = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]


def run(name: str, *arrays: np.ndarray) -> np.ndarray:
    op = ops.get(name)
    result = op.reference(list(arrays), op.make_attrs({}))
    assert isinstance(result, np.ndarray)
    return result


def infer(name: str, *types: TensorType) -> object:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs({}))


def f32(*shape: Dim) -> TensorType:
    return TensorType(shape, "float32")


# numpy references ----------------------------------------------------------------------------


def test_add_broadcasts_a_column_against_a_row() -> None:
    out = run("add", np.array([[1.0], [2.0]], np.float32), np.array([10.0, 20.0, 30.0], np.float32))
    assert out.dtype == np.float32
    assert out.tolist() == [[11.0, 21.0, 31.0], [12.0, 22.0, 32.0]]


def test_integer_divide_truncates_toward_zero() -> None:
    a = np.array([7, -7, 7, -7, 6], np.int32)
    b = np.array([2, 2, -2, -2, 3], np.int32)
    out = run("divide", a, b)
    assert out.dtype == np.int32 and out.tolist() == [3, -3, -3, 3, 2]


def test_integer_floor_divide_rounds_toward_minus_infinity() -> None:
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    assert run("floor_divide", a, b).tolist() == [3, -4, -4, 3]


def test_mod_takes_the_sign_of_the_dividend_and_floor_mod_of_the_divisor() -> None:
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    assert run("mod", a, b).tolist() == [1, -1, 1, -1]
    assert run("floor_mod", a, b).tolist() == [1, 1, -1, -1]


def test_float_divide_and_floor_divide() -> None:
    a = np.array([7.0, -7.0], np.float32)
    b = np.array([2.0, 2.0], np.float32)
    assert run("divide", a, b).tolist() == [3.5, -3.5]
    assert run("floor_divide", a, b).tolist() == [3.0, -4.0]


def test_truncated_division_is_exact_for_large_int64() -> None:
    a = np.array([2**62 + 1, -(2**62 + 1)], np.int64)
    b = np.array([3, 3], np.int64)
    assert trunc_divide_ints(a, b).tolist() == [(2**62 + 1) // 3, -((2**62 + 1) // 3)]


def test_integer_power_with_a_negative_exponent_truncates() -> None:
    a = np.array([2, -1, 2, 3], np.int32)
    b = np.array([-1, -1, 10, 0], np.int32)
    out = run("power", a, b)
    assert out.dtype == np.int32 and out.tolist() == [0, -1, 1024, 1]


def test_comparisons_return_bool() -> None:
    a = np.array([1, 2, 3], np.int32)
    b = np.array([2], np.int32)
    assert run("less", a, b).tolist() == [True, False, False]
    assert run("greater_equal", a, b).tolist() == [False, True, True]
    assert run("not_equal", a, b).dtype == np.bool_


def test_logical_ops_combine_bools() -> None:
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    assert run("logical_and", a, b).tolist() == [True, False, False, False]
    assert run("logical_or", a, b).tolist() == [True, True, True, False]
    assert run("logical_xor", a, b).tolist() == [False, True, True, False]


def test_where_broadcasts_condition_values_and_a_scalar() -> None:
    cond = np.array([[True], [False], [True]])
    x = np.array([1.0, 2.0], np.float32)
    y = np.array(-1.0, np.float32)
    out = run("where", cond, x, y)
    assert out.dtype == np.float32
    assert out.tolist() == [[1.0, 2.0], [-1.0, -1.0], [1.0, 2.0]]


# type relations ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BINARY + ["where"])
def test_broadcasting_ops_fuse_as_broadcast(name: str) -> None:
    assert ops.get(name).pattern is OpPattern.BROADCAST


@pytest.mark.parametrize(
    ("lhs", "rhs", "expected"),
    [
        ((2, 1, 4), (3, 1), (2, 3, 4)),
        ((ANY, 3), (2, 1), (2, 3)),
        ((ANY, 1), (1, 4), (ANY, 4)),
        ((ANY,), (1,), (ANY,)),
        ((ANY,), (ANY,), (ANY,)),
        ((ANY, 5), (), (ANY, 5)),
        ((4,), (ANY, ANY), (ANY, 4)),
    ],
)
def test_add_broadcasts_shapes_with_unknown_dims(lhs: tuple, rhs: tuple, expected: tuple) -> None:
    assert infer("add", f32(*lhs), f32(*rhs)) == f32(*expected)


@pytest.mark.parametrize("name", COMPARISONS)
def test_comparisons_infer_bool(name: str) -> None:
    assert infer(name, f32(ANY, 3), f32(3)) == TensorType((ANY, 3), "bool")


def test_add_rejects_an_int8_tensor_plus_an_int32_scalar_naming_both_types() -> None:
    with pytest.raises(TypeRelationError) as info:
        infer("add", TensorType((2,), "int8"), TensorType((), "int32"))
    message = str(info.value)
    assert message.startswith("add ")
    assert "Tensor[(2), int8]" in message and "int32" in message


def test_add_rejects_shapes_that_do_not_broadcast() -> None:
    expected = r"add: shapes of Tensor\[\(2, 3\), float32\] and Tensor\[\(4\), float32\] do not broadcast"
    with pytest.raises(TypeRelationError, match=expected):
        infer("add", f32(2, 3), f32(4))


@pytest.mark.parametrize("name", ["add", "divide", "power"])
def test_arithmetic_rejects_bool_operands(name: str) -> None:
    b = TensorType((2,), "bool")
    with pytest.raises(TypeRelationError, match=f"{name} expects a float or int tensor"):
        infer(name, b, b)


def test_logical_and_rejects_float_operands() -> None:
    with pytest.raises(TypeRelationError, match="logical_and expects a bool tensor"):
        infer("logical_and", f32(2), f32(2))


def test_binary_ops_take_exactly_two_arguments() -> None:
    with pytest.raises(TypeRelationError, match="multiply expects 2 arguments, got 3"):
        infer("multiply", f32(2), f32(2), f32(2))


def test_where_broadcasts_three_shapes() -> None:
    cond = TensorType((ANY, 1, 1), "bool")
    assert infer("where", cond, f32(1, 4, 1), f32(5)) == f32(ANY, 4, 5)


def test_where_requires_a_bool_condition() -> None:
    with pytest.raises(TypeRelationError, match=r"where expects a bool condition, got Tensor\[\(2\), int32\]"):
        infer("where", TensorType((2,), "int32"), f32(2), f32(2))


def test_where_requires_values_of_one_dtype() -> None:
    with pytest.raises(TypeRelationError, match=r"where .*Tensor\[\(2\), float32\] and Tensor\[\(2\), int32\]"):
        infer("where", TensorType((2,), "bool"), f32(2), TensorType((2,), "int32"))


def test_where_names_all_three_types_when_shapes_clash() -> None:
    with pytest.raises(TypeRelationError, match=r"where: shapes of Tensor\[\(3\), bool\], .*\(2\).*\(2\)"):
        infer("where", TensorType((3,), "bool"), f32(2), f32(2))
