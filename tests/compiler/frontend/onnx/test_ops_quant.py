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
