"""nn.prelu, nn.fast_softmax, reinterpret and cast_like (compiler/ops/activation.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops import OpPattern, TypeRelationError
from tests.compiler.ops.domain_check import check_domain_draws
from tests.compiler.ops.relay_text import check_text_model

ALL = ["nn.prelu", "nn.fast_softmax", "reinterpret", "cast_like"]


def run(name: str, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    result = op.reference(list(arrays), op.make_attrs(attrs))
    assert isinstance(result, np.ndarray)
    return result


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def test_patterns_and_defaults_follow_tvm() -> None:
    assert ops.get("nn.prelu").pattern == OpPattern.BROADCAST
    assert ops.get("nn.fast_softmax").pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    assert ops.get("reinterpret").pattern == OpPattern.ELEMWISE
    assert ops.get("cast_like").pattern == OpPattern.ELEMWISE
    assert ops.get("nn.prelu").make_attrs({})["axis"] == 1
    assert ops.get("nn.fast_softmax").make_attrs({})["axis"] == -1


# --- nn.prelu -----------------------------------------------------------------------------------


def test_prelu_scales_negative_values_by_their_channel_alpha() -> None:
    x = np.array([[[-1.0, 2.0]], [[-4.0, -0.5]]], np.float32)  # (2, 1, 2)
    alpha = np.array([0.5, 0.25], np.float32)
    out = run("nn.prelu", x, alpha, axis=2)
    expected = np.where(x > 0, x, x * alpha.reshape(1, 1, 2))
    np.testing.assert_array_equal(out, expected)


def test_prelu_uses_axis_one_by_default() -> None:
    x = -np.ones((1, 3, 2), np.float32)
    out = run("nn.prelu", x, np.array([1.0, 2.0, 3.0], np.float32))
    np.testing.assert_array_equal(out[0, :, 0], [-1.0, -2.0, -3.0])


def test_prelu_type_keeps_data_and_copies_unknown_dims() -> None:
    data = TensorType((ANY, 3, 4), "float32")
    assert infer("nn.prelu", data, TensorType((3,), "float32")) == data
    assert infer("nn.prelu", TensorType((2, ANY), "float32"), TensorType((5,), "float32")) == TensorType((2, ANY), "float32")


def test_prelu_rejects_alpha_of_the_wrong_length_or_rank() -> None:
    with pytest.raises(TypeRelationError, match="nn.prelu: alpha .* must be 1-D with the length of axis 1"):
        infer("nn.prelu", TensorType((2, 3), "float32"), TensorType((2,), "float32"))
    with pytest.raises(TypeRelationError, match="nn.prelu: alpha"):
        infer("nn.prelu", TensorType((2, 3), "float32"), TensorType((1, 3), "float32"))


def test_prelu_rejects_negative_and_out_of_range_axes_as_tvm_does() -> None:
    for axis in (-1, 2):
        with pytest.raises(TypeRelationError, match=f"nn.prelu: axis {axis} must be in"):
            infer("nn.prelu", TensorType((2, 3), "float32"), TensorType((3,), "float32"), axis=axis)


def test_prelu_rejects_mixed_dtypes_and_integers() -> None:
    with pytest.raises(TypeRelationError, match="nn.prelu needs operands of one dtype"):
        infer("nn.prelu", TensorType((2, 3), "float32"), TensorType((3,), "float16"))
    with pytest.raises(TypeRelationError, match="nn.prelu expects a float tensor"):
        infer("nn.prelu", TensorType((2, 3), "int32"), TensorType((3,), "int32"))


# --- nn.fast_softmax ----------------------------------------------------------------------------


def test_fast_softmax_is_softmax_along_the_axis() -> None:
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1000.0]], np.float32)
    out = run("nn.fast_softmax", x)
    e = np.exp(x[0] - 3.0)
    np.testing.assert_allclose(out[0], e / e.sum(), rtol=1e-6)
    np.testing.assert_allclose(out[1], [0.0, 0.0, 1.0])
    np.testing.assert_allclose(run("nn.fast_softmax", x, axis=0).sum(axis=0), [1.0, 1.0, 1.0], rtol=1e-6)


def test_fast_softmax_rejects_bad_axes_and_integer_tensors() -> None:
    with pytest.raises(TypeRelationError, match="nn.fast_softmax: axis 2 is out of range for rank 2"):
        infer("nn.fast_softmax", TensorType((2, 3), "float32"), axis=2)
    with pytest.raises(TypeRelationError, match="nn.fast_softmax expects a float tensor"):
        infer("nn.fast_softmax", TensorType((2, 3), "int32"))


# --- reinterpret --------------------------------------------------------------------------------


def test_reinterpret_reads_the_same_bits() -> None:
    out = run("reinterpret", np.array([1.0, -0.0], np.float32), dtype="int32")
    assert out.tolist() == [0x3F800000, -(1 << 31)]
    assert run("reinterpret", np.array([-1], np.int8), dtype="uint8").tolist() == [255]
    scalar = run("reinterpret", np.array(0x3C00, np.uint16), dtype="float16")
    assert scalar.shape == () and scalar.item() == 1.0


def test_reinterpret_needs_the_same_bit_width() -> None:
    with pytest.raises(TypeRelationError, match="reinterpret: .* has 32-bit elements, int64 has 64"):
        infer("reinterpret", TensorType((2,), "float32"), dtype="int64")
    with pytest.raises(TypeRelationError, match='reinterpret: unknown target dtype "float13"'):
        infer("reinterpret", TensorType((2,), "float32"), dtype="float13")


def test_reinterpret_type_changes_only_the_dtype() -> None:
    assert infer("reinterpret", TensorType((ANY, 2), "float64"), dtype="uint64") == TensorType((ANY, 2), "uint64")


# --- cast_like ----------------------------------------------------------------------------------


def test_cast_like_takes_the_dtype_but_not_the_shape_of_its_second_argument() -> None:
    ty = infer("cast_like", TensorType((2, ANY), "float32"), TensorType((7,), "int8"))
    assert ty == TensorType((2, ANY), "int8")
    out = run("cast_like", np.array([-1.5, 2.7], np.float32), np.zeros((3, 3), np.int32))
    assert out.dtype == np.int32 and out.tolist() == [-1, 2]
    assert run("cast_like", np.array([0.0, -0.5], np.float32), np.zeros(1, bool)).tolist() == [False, True]


def test_cast_like_needs_two_tensors() -> None:
    with pytest.raises(TypeRelationError, match="cast_like expects 2 arguments"):
        infer("cast_like", TensorType((2,), "float32"))


@pytest.mark.parametrize("name", ALL)
def test_domain_draws_type_check(name: str) -> None:
    check_domain_draws(ops.get(name))


MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32], %alpha: Tensor[(3), float32], %like: Tensor[(1), float16]) {
  %0 = nn.prelu(%x, %alpha);
  %1 = nn.fast_softmax(%0, axis=1);
  %2 = reinterpret(%x, dtype="int32");
  %3 = reinterpret(%2, dtype="float32");
  %4 = add(%3, %1);
  %5 = cast_like(%4, %like);
  (%1, %2, %5)
}
"""


def test_text_model_of_activations_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    x = rng.uniform(-3, 3, (2, 3, 4)).astype(np.float32)
    alpha = np.array([0.1, 0.5, 2.0], np.float32)
    like = np.zeros(1, np.float16)
    out = check_text_model(MODEL, {"x": x, "alpha": alpha, "like": like}, tmp_path, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(out[1], x.view(np.int32))
    assert out[2].dtype == np.float16
