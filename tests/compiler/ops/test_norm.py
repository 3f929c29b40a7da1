"""nn.batch_norm and nn.layer_norm (compiler/ops/norm.py)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, TupleType, Type
from compiler.ops.registry import OpPattern, TypeRelationError

F32 = "float32"


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def run(name: str, *arrays: np.ndarray, **attrs: object) -> object:
    op = ops.get(name)
    return op.reference(list(arrays), op.make_attrs(attrs))


def test_batch_norm_returns_a_three_tuple_typed_by_the_channel_axis() -> None:
    assert infer("nn.batch_norm", t(2, 3, 4, 4), t(3), t(3), t(3), t(3)) == TupleType(
        (t(2, 3, 4, 4), t(3), t(3))
    )
    assert infer("nn.batch_norm", t(2, 5), *[t(5)] * 4, axis=-1) == TupleType((t(2, 5), t(5), t(5)))
    # An unknown channel count is taken from the per-channel vectors.
    assert infer("nn.batch_norm", t("?", "?", 4), *[t(3)] * 4) == TupleType((t("?", "?", 4), t(3), t(3)))


def test_batch_norm_inference_normalises_with_moving_statistics() -> None:
    x = np.array([[1.0, 10.0], [3.0, 20.0]], dtype=F32)  # channels on axis 1
    gamma, beta = np.array([2.0, 1.0], F32), np.array([0.5, -1.0], F32)
    mean, var = np.array([2.0, 15.0], F32), np.array([4.0, 25.0], F32)
    out, m, v = run("nn.batch_norm", x, gamma, beta, mean, var, epsilon=0.0)
    np.testing.assert_allclose(
        out, [[2 * (-1 / 2) + 0.5, (-5 / 5) - 1], [2 * (1 / 2) + 0.5, (5 / 5) - 1]], rtol=1e-6
    )
    np.testing.assert_array_equal(m, mean)
    np.testing.assert_array_equal(v, var)


def test_batch_norm_center_and_scale_flags_drop_beta_and_gamma() -> None:
    x = np.array([[4.0]], dtype=F32)
    ones = np.ones(1, F32)
    out, _, _ = run(
        "nn.batch_norm", x, 3 * ones, 5 * ones, 0 * ones, ones, epsilon=0.0, center=False, scale=False
    )
    assert out[0, 0] == pytest.approx(4.0)


def test_batch_norm_rejects_vectors_of_the_wrong_length() -> None:
    with pytest.raises(
        TypeRelationError, match=r"nn.batch_norm: moving_var Tensor\[\(4\), float32\] must be 1-D"
    ):
        infer("nn.batch_norm", t(2, 3, 4), t(3), t(3), t(3), t(4))


def test_layer_norm_normalises_over_the_axis() -> None:
    x = np.array([[1.0, 2.0, 3.0, 6.0]], dtype=F32)
    gamma, beta = np.array([1, 2, 1, 1], F32), np.zeros(4, F32)
    out = run("nn.layer_norm", x, gamma, beta, epsilon=0.0)
    mean, std = 3.0, np.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + 0 + (6 - 3) ** 2) / 4)
    np.testing.assert_allclose(
        out[0], [(1 - mean) / std, 2 * (2 - mean) / std, 0, (6 - mean) / std], rtol=1e-6
    )
    assert infer("nn.layer_norm", t("?", 4), t(4), t(4)) == t("?", 4)


def test_layer_norm_on_a_middle_axis() -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(F32)
    out = run("nn.layer_norm", x, np.ones(3, F32), np.zeros(3, F32), axis=1)
    np.testing.assert_allclose(out.mean(axis=1), 0.0, atol=1e-5)
    np.testing.assert_allclose(out.var(axis=1), 1.0, rtol=1e-3)


def test_layer_norm_errors_and_pattern() -> None:
    with pytest.raises(TypeRelationError, match="nn.layer_norm: gamma"):
        infer("nn.layer_norm", t(2, 4), t(3), t(4))
    with pytest.raises(TypeRelationError, match="floating-point"):
        infer("nn.layer_norm", t(2, 4, dtype="int32"), t(4), t(4))
    # TVM registers no pattern: SimplifyInference must remove it before fusion.
    assert ops.get("nn.layer_norm").pattern is OpPattern.OPAQUE
    assert ops.get("nn.batch_norm").pattern is OpPattern.OUT_ELEMWISE_FUSABLE
