"""compiler.frontend.onnx.ops_norm: the normalizations against their definitions in numpy."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx import from_onnx
from tests.compiler.frontend.onnx.onnx_models import assert_matches_ort, interpret, single_node

RNG = np.random.default_rng(8)
X = RNG.standard_normal((2, 4, 3, 5)).astype("float32")


def test_batch_normalization_uses_the_running_statistics() -> None:
    s, b, m, v = (RNG.standard_normal(4).astype("float32") for _ in range(4))
    v = np.abs(v) + 0.5
    init = {"s": s, "b": b, "m": m, "v": v}
    (got,) = interpret(single_node("BatchNormalization", {"x": X}, initializers=init, epsilon=1e-3), {"x": X})
    shape = (1, 4, 1, 1)
    want = (X - m.reshape(shape)) / np.sqrt(v.reshape(shape) + 1e-3) * s.reshape(shape) + b.reshape(shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_batch_normalization_in_training_mode_is_unsupported() -> None:
    init = {k: np.ones(4, dtype="float32") for k in "sbmv"}
    m = single_node("BatchNormalization", {"x": X}, n_out=3, initializers=init, training_mode=1)
    with pytest.raises(UnsupportedError, match="training mode"):
        from_onnx(m)


@pytest.mark.parametrize(("axis", "with_bias"), [(-1, True), (-1, False), (2, True)])
def test_layer_normalization_over_the_trailing_axes(axis: int, with_bias: bool) -> None:
    norm_shape = X.shape[axis:]
    init = {"g": RNG.standard_normal(norm_shape).astype("float32")}
    if with_bias:
        init["b"] = RNG.standard_normal(norm_shape).astype("float32")
    (got,) = interpret(single_node("LayerNormalization", {"x": X}, initializers=init, axis=axis), {"x": X})
    axes = tuple(range(axis % 4, 4))
    mean = X.mean(axis=axes, keepdims=True)
    want = (X - mean) / np.sqrt(X.var(axis=axes, keepdims=True) + 1e-5) * init["g"] + init.get("b", 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_layer_normalization_statistics_outputs() -> None:
    init = {"g": np.ones(5, dtype="float32")}
    _, mean, inv_std = interpret(single_node("LayerNormalization", {"x": X}, n_out=3, initializers=init), {"x": X})
    np.testing.assert_allclose(mean, X.mean(axis=-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv_std, 1 / np.sqrt(X.var(axis=-1, keepdims=True) + 1e-5), rtol=1e-4)


def test_instance_and_group_normalization() -> None:
    init = {"s": RNG.standard_normal(4).astype("float32"), "b": RNG.standard_normal(4).astype("float32")}
    assert_matches_ort(single_node("InstanceNormalization", {"x": X}, initializers=init), {"x": X}, rtol=1e-4, atol=1e-5)
    (got,) = interpret(single_node("GroupNormalization", {"x": X}, initializers=init, opset=21, num_groups=2),
                       {"x": X})
    groups = X.reshape(2, 2, -1)
    normed = (groups - groups.mean(axis=-1, keepdims=True)) / np.sqrt(groups.var(axis=-1, keepdims=True) + 1e-5)
    want = normed.reshape(X.shape) * init["s"].reshape(1, 4, 1, 1) + init["b"].reshape(1, 4, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_rms_and_mean_variance_and_lp_normalization() -> None:
    g = RNG.standard_normal(5).astype("float32")
    (got,) = interpret(single_node("RMSNormalization", {"x": X}, initializers={"g": g}, opset=23), {"x": X})
    np.testing.assert_allclose(got, X / np.sqrt((X * X).mean(axis=-1, keepdims=True) + 1e-5) * g, rtol=1e-5)
    (got,) = interpret(single_node("MeanVarianceNormalization", {"x": X}), {"x": X})
    mean = X.mean(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(got, (X - mean) / (X.std(axis=(0, 2, 3), keepdims=True) + 1e-9), rtol=1e-4, atol=1e-5)
    (got,) = interpret(single_node("LpNormalization", {"x": X}, axis=1, p=1), {"x": X})
    np.testing.assert_allclose(got, X / np.abs(X).sum(axis=1, keepdims=True), rtol=1e-5)


def test_lrn_matches_onnxruntime() -> None:
    assert_matches_ort(single_node("LRN", {"x": X}, size=3, alpha=0.01, beta=0.6, bias=2.0), {"x": X}, rtol=1e-5)
