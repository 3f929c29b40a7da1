"""compiler.frontend.onnx.ops_quant: QuantizeLinear / DequantizeLinear per tensor and per axis."""

from __future__ import annotations

import numpy as np

from tests.compiler.frontend.onnx.onnx_models import interpret, single_node


def test_quantize_rounds_half_to_even_and_saturates() -> None:
    x = np.array([0.0, 1.0, 3.0, 5.0, -300.0, 1000.0], dtype="float32")
    init = {"s": np.array(2.0, dtype="float32"), "z": np.array(10, dtype="uint8")}
    (got,) = interpret(single_node("QuantizeLinear", {"x": x}, initializers=init), {"x": x})
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, [10, 10, 12, 12, 0, 255])


def test_quantize_and_dequantize_per_axis() -> None:
    x = np.arange(12, dtype="float32").reshape(2, 3, 2)
    scale = np.array([1.0, 2.0, 4.0], dtype="float32")
    zero = np.array([0, 1, -1], dtype="int8")
    init = {"s": scale, "z": zero}
    (q,) = interpret(single_node("QuantizeLinear", {"x": x}, initializers=init, axis=1), {"x": x})
    want = np.clip(np.round(x / scale.reshape(1, 3, 1)) + zero.reshape(1, 3, 1), -128, 127).astype("int8")
    np.testing.assert_array_equal(q, want)
    (d,) = interpret(single_node("DequantizeLinear", {"q": q}, initializers=init, axis=1), {"q": q})
    np.testing.assert_allclose(d, (q.astype("float32") - zero.reshape(1, 3, 1)) * scale.reshape(1, 3, 1))


def test_qlinear_matmul_accumulates_in_integers_and_requantizes() -> None:
    rng = np.random.default_rng(4)
    a = rng.integers(0, 255, size=(3, 5), dtype="uint8")
    b = rng.integers(0, 255, size=(5, 2), dtype="uint8")
    init = {"sa": np.array(0.02, dtype="float32"), "za": np.array(113, dtype="uint8"),
            "sb": np.array(0.01, dtype="float32"), "zb": np.array(100, dtype="uint8"),
            "sy": np.array(0.05, dtype="float32"), "zy": np.array(120, dtype="uint8")}
    m = single_node("QLinearMatMul", {"a": a, "b": b}, initializers=init, opset=21,
                    input_names=["a", "sa", "za", "b", "sb", "zb", "sy", "zy"])
    (got,) = interpret(m, {"a": a, "b": b})
    acc = (a.astype("int32") - 113) @ (b.astype("int32") - 100)
    want = np.clip(np.round(acc * np.float32(0.02 * 0.01 / 0.05)) + 120, 0, 255).astype("uint8")
    np.testing.assert_array_equal(got, want)
