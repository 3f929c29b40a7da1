"""compiler.frontend.onnx.ops_quant: QuantizeLinear / DequantizeLinear per tensor and per axis."""

from __future__ import annotations

import numpy as np

from tests.compiler.frontend.onnx.onnx_models import assert_matches_ort, interpret, single_node


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


def _conv2d_int(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """A plain NCHW integer convolution, stride 1."""
    x = np.pad(x.astype("int64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    out = np.zeros((n, o, h - kh + 1, wd - kw + 1), dtype="int64")
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + out.shape[2], j:j + out.shape[3]], w[:, :, i, j])
    return out


RNG = np.random.default_rng(11)
XQ = RNG.integers(0, 256, (1, 2, 4, 4)).astype("uint8")
WQ = RNG.integers(0, 256, (3, 2, 3, 3)).astype("uint8")


def test_conv_integer_pads_with_the_zero_point_and_takes_per_channel_weight_zeros() -> None:
    init = {"w": WQ, "xz": np.array(7, dtype="uint8"), "wz": np.array([1, 128, 255], dtype="uint8")}
    (got,) = interpret(single_node("ConvInteger", {"x": XQ}, initializers=init, pads=[1, 1, 1, 1]), {"x": XQ})
    centered_x = XQ.astype("int64") - 7
    centered_w = WQ.astype("int64") - init["wz"].reshape(3, 1, 1, 1)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _conv2d_int(centered_x, centered_w, 1))


def test_matmul_integer_subtracts_zero_points_exactly() -> None:
    a = RNG.integers(-128, 128, (3, 5)).astype("int8")
    b = RNG.integers(0, 256, (5, 2)).astype("uint8")
    init = {"b": b, "az": np.array(-3, dtype="int8"), "bz": np.array(200, dtype="uint8")}
    (got,) = interpret(single_node("MatMulInteger", {"a": a}, initializers=init), {"a": a})
    np.testing.assert_array_equal(got, (a.astype("int64") + 3) @ (b.astype("int64") - 200))


def test_qlinear_conv_matches_onnxruntime() -> None:
    init = {"xs": np.array(0.05, dtype="float32"), "xz": np.array(3, dtype="uint8"), "w": WQ,
            "ws": np.array([0.01, 0.02, 0.005], dtype="float32"), "wz": np.array(128, dtype="uint8"),
            "ys": np.array(0.3, dtype="float32"), "yz": np.array(20, dtype="uint8"),
            "b": np.array([100, -50, 7], dtype="int32")}
    m = single_node("QLinearConv", {"x": XQ}, initializers=init, input_names=["x", *init], pads=[1, 1, 1, 1])
    assert_matches_ort(m, {"x": XQ}, rtol=0, atol=0)


def test_dynamic_quantize_linear_spans_zero_and_rounds_half_to_even() -> None:
    x = np.array([[-1.0, 0.5, 2.0], [3.0, 1.25, -0.25]], dtype="float32")
    y, scale, zero = interpret(single_node("DynamicQuantizeLinear", {"x": x}, n_out=3, opset=13), {"x": x})
    want_scale = np.float32(4.0) / np.float32(255.0)
    want_zero = np.clip(np.round(np.float32(1.0) / want_scale), 0, 255)
    np.testing.assert_allclose(scale, want_scale, rtol=1e-7)
    assert zero.dtype == np.uint8 and zero == want_zero
    np.testing.assert_array_equal(y, np.clip(np.round(x / want_scale) + want_zero, 0, 255).astype("uint8"))
