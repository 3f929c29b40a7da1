from __future__ import annotations

import math

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, TupleType, Type
from compiler.ops import AttrError, OpPattern, TypeRelationError

UNARY = ["negative", "abs", "floor", "ceil", "round", "copy", "logical_not", "exp", "log", "sqrt", "rsqrt",
         "tanh", "sigmoid", "erf"]
FLOAT_ONLY = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf"]


def run(name: str, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    result = op.reference(list(arrays), op.make_attrs(attrs))
    assert isinstance(result, np.ndarray)
    return result


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


# numpy references ----------------------------------------------------------------------------


def test_sigmoid_of_zero_is_one_half() -> None:
    assert run("sigmoid", np.array([0.0], np.float32)).tolist() == [0.5]


def test_sigmoid_saturates_without_overflow_warnings() -> None:
    with np.errstate(all="raise"):
        out = run("sigmoid", np.array([-1000.0, 1000.0], np.float32))
    np.testing.assert_array_equal(out, [0.0, 1.0])


def test_erf_matches_known_values_and_keeps_float32() -> None:
    out = run("erf", np.array([0.0, 1.0, -2.0], np.float32))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [0.0, 0.8427007929, -0.9953222650], rtol=1e-6)


def test_erf_of_a_scalar_is_a_zero_dimensional_array() -> None:
    out = run("erf", np.array(0.5, np.float64))
    assert out.shape == () and out.dtype == np.float64
    assert out.item() == pytest.approx(math.erf(0.5))


def test_float_references_keep_float16() -> None:
    out = run("exp", np.array([0.0, 1.0], np.float16))
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, [1.0, math.e], rtol=1e-3)


def test_rsqrt_of_four_is_one_half() -> None:
    assert run("rsqrt", np.array([4.0, 0.25], np.float32)).tolist() == [0.5, 2.0]


def test_round_sends_halves_away_from_zero_like_c_round() -> None:
    out = run("round", np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.7, -0.2], np.float32))
    assert out.tolist() == [1.0, 2.0, 3.0, -1.0, -3.0, 1.0, -0.0]


def test_round_is_exact_just_below_one_half() -> None:
    assert run("round", np.array([0.49999999999999994, -0.49999999999999994])).tolist() == [0.0, -0.0]


def test_floor_and_ceil_of_negative_values() -> None:
    x = np.array([-1.5, 1.5], np.float32)
    assert run("floor", x).tolist() == [-2.0, 1.0]
    assert run("ceil", x).tolist() == [-1.0, 2.0]


def test_negative_and_abs_of_integers_keep_the_dtype() -> None:
    x = np.array([-3, 0, 5], np.int8)
    neg, mag = run("negative", x), run("abs", x)
    assert neg.dtype == np.int8 and neg.tolist() == [3, 0, -5]
    assert mag.dtype == np.int8 and mag.tolist() == [3, 0, 5]


def test_copy_returns_a_new_buffer() -> None:
    x = np.array([1.0, 2.0], np.float32)
    out = run("copy", x)
    out[0] = 9.0
    assert x.tolist() == [1.0, 2.0]


def test_logical_not_flips_bools() -> None:
    assert run("logical_not", np.array([True, False])).tolist() == [False, True]


def test_clip_limits_floats_to_the_bounds() -> None:
    out = run("clip", np.array([-1.0, 3.0, 7.0], np.float32), a_min=0.0, a_max=6.0)
    assert out.dtype == np.float32 and out.tolist() == [0.0, 3.0, 6.0]


def test_clip_truncates_and_saturates_bounds_for_integers() -> None:
    out = run("clip", np.array([-128, -5, 0, 8, 127], np.int8), a_min=-1000.0, a_max=7.9)
    assert out.dtype == np.int8 and out.tolist() == [-128, -5, 0, 7, 7]


def test_clip_with_crossed_bounds_gives_a_min_everywhere() -> None:
    out = run("clip", np.array([-5.0, 0.0, 5.0], np.float32), a_min=1.0, a_max=-1.0)
    assert out.tolist() == [1.0, 1.0, 1.0]


def test_cast_from_float_to_int_truncates_toward_zero() -> None:
    out = run("cast", np.array([-1.7, -0.2, 1.7], np.float32), dtype="int32")
    assert out.dtype == np.int32 and out.tolist() == [-1, 0, 1]


def test_cast_to_bool_is_nonzero() -> None:
    out = run("cast", np.array([0, 2, -1], np.int8), dtype="bool")
    assert out.tolist() == [False, True, True]


# type relations ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", UNARY + ["clip", "cast"])
def test_elementwise_ops_fuse_as_elemwise(name: str) -> None:
    assert ops.get(name).pattern is OpPattern.ELEMWISE


@pytest.mark.parametrize("name", ["negative", "exp", "sigmoid", "floor"])
def test_unary_type_keeps_shape_with_unknown_dims(name: str) -> None:
    x = TensorType((ANY, 3, ANY), "float32")
    assert infer(name, x) == x


@pytest.mark.parametrize("name", FLOAT_ONLY)
def test_float_only_ops_reject_integer_tensors_naming_op_and_type(name: str) -> None:
    with pytest.raises(TypeRelationError, match=rf"^{name} .*Tensor\[\(2, 3\), int32\]"):
        infer(name, TensorType((2, 3), "int32"))


@pytest.mark.parametrize("name", ["negative", "abs", "round", "clip"])
def test_arithmetic_unary_ops_reject_bool_tensors(name: str) -> None:
    attrs = {"a_min": 0.0, "a_max": 1.0} if name == "clip" else {}
    with pytest.raises(TypeRelationError, match="bool"):
        infer(name, TensorType((2,), "bool"), **attrs)


def test_logical_not_rejects_floats() -> None:
    with pytest.raises(TypeRelationError, match=r"logical_not expects a bool tensor, got Tensor\[\(2\), float32\]"):
        infer("logical_not", TensorType((2,), "float32"))


def test_unary_rejects_a_second_argument() -> None:
    x = TensorType((2,), "float32")
    with pytest.raises(TypeRelationError, match="exp expects 1 arguments, got 2"):
        infer("exp", x, x)


def test_unary_rejects_a_tuple_argument() -> None:
    with pytest.raises(TypeRelationError, match="tanh expects a tensor"):
        infer("tanh", TupleType((TensorType((2,), "float32"),)))


def test_cast_changes_only_the_dtype() -> None:
    assert infer("cast", TensorType((ANY, 4), "float32"), dtype="int8") == TensorType((ANY, 4), "int8")


def test_cast_rejects_an_unknown_dtype() -> None:
    with pytest.raises(TypeRelationError, match='cast: unknown target dtype "float8"'):
        infer("cast", TensorType((2,), "float32"), dtype="float8")


def test_cast_rejects_an_empty_dtype() -> None:
    with pytest.raises(TypeRelationError, match='unknown target dtype ""'):
        infer("cast", TensorType((2,), "float32"), dtype="")


def test_cast_requires_its_dtype_attribute() -> None:
    with pytest.raises(AttrError, match="requires attribute dtype"):
        ops.get("cast").make_attrs({})


def test_clip_requires_both_bounds() -> None:
    with pytest.raises(AttrError, match="requires attribute a_max"):
        ops.get("clip").make_attrs({"a_min": 0.0})


def test_clip_accepts_integer_bounds_as_floats() -> None:
    attrs = ops.get("clip").make_attrs({"a_min": 0, "a_max": 6})
    assert attrs["a_min"] == 0.0 and isinstance(attrs["a_min"], float)


def test_clip_rejects_a_nan_bound() -> None:
    with pytest.raises(TypeRelationError, match="clip: a_max is NaN"):
        infer("clip", TensorType((2,), "float32"), a_min=0.0, a_max=float("nan"))
