"""compiler.frontend.onnx.ops_elementwise: each op imported and interpreted against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx import from_onnx
from tests.compiler.frontend.onnx.onnx_models import assert_matches_ort, interpret, model, single_node

RNG = np.random.default_rng(5)
X = RNG.standard_normal((3, 4)).astype("float32")
Y = RNG.standard_normal((4,)).astype("float32")


def _erf(values: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(values).astype(values.dtype)


@pytest.mark.parametrize(("op_type", "expected"), [
    ("Relu", lambda x: np.maximum(x, 0)),
    ("Sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    ("Tanh", np.tanh),
    ("Erf", _erf),
    ("Exp", np.exp),
    ("Neg", np.negative),
    ("Abs", np.abs),
    ("Floor", np.floor),
    ("Sign", np.sign),
    ("Reciprocal", lambda x: 1 / x),
    ("Softsign", lambda x: x / (1 + np.abs(x))),
])
def test_unary_op_matches_numpy(op_type: str, expected: object) -> None:
    (got,) = interpret(single_node(op_type, {"x": X}), {"x": X})
    np.testing.assert_allclose(got, expected(X), rtol=1e-5, atol=1e-6)  # type: ignore[operator]


@pytest.mark.parametrize(("op_type", "expected"), [
    ("Sqrt", np.sqrt), ("Log", np.log),
])
def test_unary_op_of_positive_values_matches_numpy(op_type: str, expected: object) -> None:
    x = np.abs(X) + 0.1
    (got,) = interpret(single_node(op_type, {"x": x}), {"x": x})
    np.testing.assert_allclose(got, expected(x), rtol=1e-5)  # type: ignore[operator]


@pytest.mark.parametrize(("op_type", "expected"), [
    ("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Div", np.divide),
    ("Equal", np.equal), ("Less", np.less), ("Greater", np.greater),
    ("LessOrEqual", np.less_equal), ("GreaterOrEqual", np.greater_equal),
])
def test_binary_op_broadcasts_as_numpy(op_type: str, expected: object) -> None:
    (got,) = interpret(single_node(op_type, {"x": X, "y": Y}), {"x": X, "y": Y})
    np.testing.assert_allclose(got, expected(X, Y), rtol=1e-6)  # type: ignore[operator]


def test_integer_div_truncates_toward_zero() -> None:
    a = np.array([7, -7, 7, -7], dtype="int32")
    b = np.array([2, 2, -2, -2], dtype="int32")
    (got,) = interpret(single_node("Div", {"a": a, "b": b}), {"a": a, "b": b})
    np.testing.assert_array_equal(got, np.array([3, -3, -3, 3], dtype="int32"))


def test_pow_with_an_integer_exponent_keeps_the_base_type() -> None:
    e = np.array([2, 3, 0, 1], dtype="int64")
    (got,) = interpret(single_node("Pow", {"x": X, "e": e}), {"x": X, "e": e})
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, X ** e.astype("float32"), rtol=1e-5)


@pytest.mark.parametrize(("op_type", "expected"), [
    ("Min", lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    ("Max", lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    ("Sum", lambda a, b, c: a + b + c),
    ("Mean", lambda a, b, c: (a + b + c) / 3),
])
def test_variadic_op_folds_every_input(op_type: str, expected: object) -> None:
    feeds = {"a": X, "b": Y, "c": X[:1]}
    (got,) = interpret(single_node(op_type, feeds), feeds)
    np.testing.assert_allclose(got, expected(X, Y, X[:1]), rtol=1e-6)  # type: ignore[operator]


def test_leaky_relu_defaults_to_alpha_0_01_and_takes_alpha() -> None:
    (got,) = interpret(single_node("LeakyRelu", {"x": X}), {"x": X})
    np.testing.assert_allclose(got, np.where(X < 0, 0.01 * X, X), rtol=1e-6)
    (got,) = interpret(single_node("LeakyRelu", {"x": X}, alpha=0.3), {"x": X})
    np.testing.assert_allclose(got, np.where(X < 0, 0.3 * X, X), rtol=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_its_definition(approximate: str) -> None:
    (got,) = interpret(single_node("Gelu", {"x": X}, opset=20, approximate=approximate), {"x": X})
    if approximate == "tanh":
        want = 0.5 * X * (1 + np.tanh(math.sqrt(2 / math.pi) * (X + 0.044715 * X**3)))
    else:
        want = 0.5 * X * (1 + _erf(X / math.sqrt(2)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_clip_with_constant_bounds_and_with_only_a_maximum() -> None:
    lo, hi = np.array(-0.5, dtype="float32"), np.array(0.7, dtype="float32")
    m = single_node("Clip", {"x": X}, initializers={"lo": lo, "hi": hi})
    np.testing.assert_allclose(interpret(m, {"x": X})[0], np.clip(X, -0.5, 0.7))
    m = single_node("Clip", {"x": X}, initializers={"hi": hi}, input_names=["x", "", "hi"])
    np.testing.assert_allclose(interpret(m, {"x": X})[0], np.minimum(X, 0.7))


def test_clip_of_integers_with_runtime_bounds() -> None:
    x = np.arange(-5, 5, dtype="int32")
    lo, hi = np.array(-2, dtype="int32"), np.array(3, dtype="int32")
    feeds = {"x": x, "lo": lo, "hi": hi}
    np.testing.assert_array_equal(interpret(single_node("Clip", feeds), feeds)[0], np.clip(x, -2, 3))


def test_cast_to_the_named_type() -> None:
    (got,) = interpret(single_node("Cast", {"x": X}, to=6), {"x": X})  # INT32
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, X.astype("int32"))


def test_bit_cast_keeps_the_bits() -> None:
    (got,) = interpret(single_node("BitCast", {"x": X}, opset=26, to=6), {"x": X})  # INT32
    np.testing.assert_array_equal(got, X.view("int32"))


def test_bit_cast_of_bool_reads_its_byte() -> None:
    flags = np.array([True, False, True])
    (got,) = interpret(single_node("BitCast", {"x": flags}, opset=26, to=2), {"x": flags})  # UINT8
    np.testing.assert_array_equal(got, np.array([1, 0, 1], dtype="uint8"))


def test_bit_cast_between_different_widths_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="BitCast .*64-bit elements"):
        from_onnx(single_node("BitCast", {"x": X.astype("float64")}, opset=26, to=6))


def test_where_selects_with_broadcasting() -> None:
    cond = X > 0
    feeds = {"c": cond, "a": X, "b": Y}
    np.testing.assert_array_equal(interpret(single_node("Where", feeds), feeds)[0], np.where(cond, X, Y))


def test_dropout_at_inference_passes_data_and_gives_an_all_true_mask() -> None:
    got, mask = interpret(single_node("Dropout", {"x": X}, n_out=2), {"x": X})
    np.testing.assert_array_equal(got, X)
    assert mask.dtype == np.bool_ and mask.all()


def test_dropout_in_training_mode_is_unsupported() -> None:
    m = single_node("Dropout", {"x": X}, initializers={"ratio": np.array(0.5, dtype="float32"),
                                                     "training": np.array(True)})
    with pytest.raises(UnsupportedError, match="training mode"):
        from_onnx(m)


def test_dropout_in_training_mode_with_ratio_zero_drops_nothing() -> None:
    m = single_node("Dropout", {"x": X}, n_out=2, initializers={"ratio": np.array(0.0, dtype="float32"),
                                                               "training": np.array(True)})
    got, mask = interpret(m, {"x": X})
    np.testing.assert_array_equal(got, X)
    assert mask.all()


def test_round_rounds_halves_to_even() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6], dtype="float32")
    np.testing.assert_array_equal(interpret(single_node("Round", {"x": x}), {"x": x})[0], np.round(x))


@pytest.mark.parametrize(("op_type", "attrs"), [
    ("Elu", {"alpha": 0.7}), ("Selu", {}), ("Celu", {"alpha": 1.3}), ("ThresholdedRelu", {"alpha": 0.2}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}), ("Softplus", {}), ("Mish", {}),
])
def test_activation_matches_onnxruntime(op_type: str, attrs: dict[str, object]) -> None:
    assert_matches_ort(single_node(op_type, {"x": X}, opset=18, **attrs), {"x": X})


def test_prelu_slope_broadcasts_over_channels() -> None:
    x = RNG.standard_normal((2, 3, 4)).astype("float32")
    slope = np.array([[0.1], [0.2], [0.3]], dtype="float32")
    m = single_node("PRelu", {"x": x}, initializers={"slope": slope})
    np.testing.assert_allclose(interpret(m, {"x": x})[0], np.where(x < 0, slope * x, x), rtol=1e-6)


def test_mod_follows_the_divisor_sign_unless_fmod() -> None:
    a = np.array([5, -5, 5, -5], dtype="int32")
    b = np.array([3, 3, -3, -3], dtype="int32")
    feeds = {"a": a, "b": b}
    np.testing.assert_array_equal(interpret(single_node("Mod", feeds), feeds)[0], np.mod(a, b))
    np.testing.assert_array_equal(interpret(single_node("Mod", feeds, fmod=1), feeds)[0], np.fmod(a, b))


def test_bit_shift_in_both_directions() -> None:
    a = np.array([16, 4, 1], dtype="uint8")
    b = np.array([1, 2, 3], dtype="uint8")
    feeds = {"a": a, "b": b}
    np.testing.assert_array_equal(interpret(single_node("BitShift", feeds, direction="LEFT"), feeds)[0], a << b)
    np.testing.assert_array_equal(interpret(single_node("BitShift", feeds, direction="RIGHT"), feeds)[0], a >> b)


def test_swish_and_swiglu() -> None:
    (got,) = interpret(single_node("Swish", {"x": X}, opset=24, alpha=2.0), {"x": X})
    np.testing.assert_allclose(got, X / (1 + np.exp(-2 * X)), rtol=1e-5)
    feeds = {"a": X, "b": X[::-1].copy()}
    (got,) = interpret(single_node("SwiGLU", feeds, opset=28), feeds)
    np.testing.assert_allclose(got, X / (1 + np.exp(-X)) * X[::-1], rtol=1e-5)


def test_bit_shift_by_the_width_or_a_negative_amount_gives_the_sign_fill() -> None:
    a = np.array([-8, 8, -8, 8], dtype="int32")
    b = np.array([32, 40, -1, -1], dtype="int32")
    feeds = {"a": a, "b": b}
    (right,) = interpret(single_node("BitShift", feeds, opset=28, direction="RIGHT"), feeds)
    np.testing.assert_array_equal(right, [-1, 0, -1, 0])
    (left,) = interpret(single_node("BitShift", feeds, opset=28, direction="LEFT"), feeds)
    np.testing.assert_array_equal(left, [0, 0, 0, 0])


def test_an_optional_tensor_input_is_a_present_tensor() -> None:
    optional = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [3, 4])))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("OptionalHasElement", [], ["absent"]),
             helper.make_node("OptionalGetElement", ["o"], ["value"])]
    outputs = [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
               helper.make_tensor_value_info("absent", TensorProto.BOOL, []),
               helper.make_tensor_value_info("value", TensorProto.FLOAT, [3, 4])]
    has, absent, value = interpret(model(nodes, [optional], outputs, opset=18), {"o": X})
    assert bool(has) and not bool(absent)
    np.testing.assert_array_equal(value, X)
