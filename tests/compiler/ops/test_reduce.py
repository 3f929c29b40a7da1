from __future__ import annotations

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType
from compiler.ops import AttrError, OpPattern, TypeRelationError

REDUCTIONS = ["sum", "mean", "max", "min", "prod", "argmax", "argmin"]
X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def run(name: str, x: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    result = op.reference([x], op.make_attrs(attrs))
    assert isinstance(result, np.ndarray)
    return result


def infer(name: str, x: TensorType, **attrs: object) -> object:
    op = ops.get(name)
    return op.type_rel([x], op.make_attrs(attrs))


# numpy references ----------------------------------------------------------------------------


def test_sum_without_axis_reduces_everything_to_a_scalar() -> None:
    out = run("sum", X)
    assert out.shape == () and out.dtype == np.float32 and out.item() == 276.0


def test_sum_with_exclude_reduces_the_axes_not_listed() -> None:
    out = run("sum", X, axis=[1], exclude=True)
    assert out.tolist() == [60.0, 92.0, 124.0]


def test_sum_with_keepdims_keeps_reduced_axes_as_ones() -> None:
    out = run("sum", X, axis=[0, -1], keepdims=True)
    assert out.shape == (1, 3, 1)
    assert out.ravel().tolist() == [60.0, 92.0, 124.0]


def test_sum_over_an_empty_axis_list_is_the_identity() -> None:
    assert run("sum", X, axis=[]).tolist() == X.tolist()


def test_exclude_with_no_axis_still_reduces_everything() -> None:
    assert run("max", X, exclude=True).item() == 23.0


def test_integer_sum_wraps_in_its_dtype() -> None:
    out = run("sum", np.array([100, 100], np.int8))
    assert out.dtype == np.int8 and out.item() == -56


def test_mean_of_ints_keeps_the_dtype_and_rounds_toward_zero() -> None:
    out = run("mean", np.array([[-3, 1, 4], [0, 0, 1]], np.int32), axis=[0])
    assert out.dtype == np.int32 and out.tolist() == [-1, 0, 2]


def test_mean_of_floats() -> None:
    out = run("mean", X, axis=[2])
    assert out.dtype == np.float32 and out.tolist() == [[1.5, 5.5, 9.5], [13.5, 17.5, 21.5]]


def test_prod_and_min_along_an_axis() -> None:
    x = np.array([[1.0, 2.0, 3.0], [4.0, -5.0, 6.0]], np.float32)
    assert run("prod", x, axis=[1]).tolist() == [6.0, -120.0]
    assert run("min", x, axis=[0]).tolist() == [1.0, -5.0, 3.0]


def test_argmax_picks_the_first_or_the_last_of_equal_maxima() -> None:
    x = np.array([[1, 3, 3], [2, 2, 0]], np.float32)
    first = run("argmax", x, axis=[1])
    last = run("argmax", x, axis=[1], select_last_index=True)
    assert first.dtype == np.int32 and first.tolist() == [1, 0]
    assert last.tolist() == [2, 1]


def test_argmin_with_select_last_index() -> None:
    x = np.array([[1, 1, 3], [0, 2, 0]], np.int32)
    assert run("argmin", x, axis=[-1]).tolist() == [0, 0]
    assert run("argmin", x, axis=[-1], select_last_index=True).tolist() == [1, 2]


def test_argmax_without_axis_returns_the_flat_index() -> None:
    x = np.array([[0, 7], [7, 1]], np.int8)
    assert run("argmax", x).item() == 1
    assert run("argmax", x, select_last_index=True).item() == 2


def test_argmax_over_two_axes_indexes_them_flattened_in_row_major_order() -> None:
    # For x[i, j, k] the reduced axes are i and k; the flat index is i * 4 + k.
    x = np.zeros((2, 3, 4), np.float32)
    x[1, 0, 2] = 5.0
    x[0, 2, 3] = 5.0
    out = run("argmax", x, axis=[0, 2], keepdims=True)
    assert out.shape == (1, 3, 1)
    assert out.ravel().tolist() == [6, 0, 3]


# type relations ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_fuse_as_comm_reduce(name: str) -> None:
    assert ops.get(name).pattern is OpPattern.COMM_REDUCE


@pytest.mark.parametrize(
    ("attrs", "expected"),
    [
        ({}, ()),
        ({"axis": [1]}, (ANY, 4)),
        ({"axis": [1], "keepdims": True}, (ANY, 1, 4)),
        ({"axis": [0]}, (3, 4)),
        ({"axis": [-1], "exclude": True}, (4,)),
        ({"axis": [0, 2], "keepdims": True}, (1, 3, 1)),
        ({"keepdims": True}, (1, 1, 1)),
        ({"axis": []}, (ANY, 3, 4)),
        ({"axis": [], "exclude": True}, ()),
        ({"axis": 2}, (ANY, 3)),
    ],
)
def test_sum_type_with_an_unknown_leading_dim(attrs: dict, expected: tuple) -> None:
    assert infer("sum", TensorType((ANY, 3, 4), "float32"), **attrs) == TensorType(expected, "float32")


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions_return_int32(name: str) -> None:
    assert infer(name, TensorType((ANY, 5), "float16"), axis=[1]) == TensorType((ANY,), "int32")


def test_reduce_attr_defaults_follow_tvm() -> None:
    assert dict(ops.get("sum").make_attrs({})) == {"axis": None, "keepdims": False, "exclude": False}
    assert ops.get("argmax").make_attrs({})["select_last_index"] is False


@pytest.mark.parametrize("axis", [3, -4])
def test_axis_out_of_range_is_a_type_error(axis: int) -> None:
    with pytest.raises(TypeRelationError, match=f"sum: axis {axis} is out of range for rank 3"):
        infer("sum", TensorType((2, 3, 4), "float32"), axis=[axis])


def test_the_same_axis_twice_is_a_type_error() -> None:
    with pytest.raises(TypeRelationError, match=r"mean: axis \[1, -2\] names the same axis twice"):
        infer("mean", TensorType((2, 3, 4), "float32"), axis=[1, -2])


def test_reducing_a_scalar_along_an_axis_is_a_type_error() -> None:
    with pytest.raises(TypeRelationError, match="out of range for rank 0"):
        infer("max", TensorType((), "float32"), axis=[0])


def test_axis_must_be_integers() -> None:
    with pytest.raises(AttrError, match="axis expects a list of integers"):
        ops.get("sum").make_attrs({"axis": ["a"]})


def test_sum_rejects_bool_tensors() -> None:
    with pytest.raises(TypeRelationError, match=r"sum expects a float or int tensor, got Tensor\[\(2\), bool\]"):
        infer("sum", TensorType((2,), "bool"))


def test_max_accepts_bool_tensors() -> None:
    assert infer("max", TensorType((2, 3), "bool"), axis=[1]) == TensorType((2,), "bool")
