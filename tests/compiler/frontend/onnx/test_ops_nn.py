"""compiler.frontend.onnx.ops_nn: convolutions, pools, Gemm, MatMul, softmax, interpreted and
compared with numpy or (for windows and padding) with onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx import from_onnx
from tests.compiler.frontend.onnx.onnx_models import assert_matches_ort, compile_and_run, interpret, single_node

RNG = np.random.default_rng(7)
IMG = RNG.standard_normal((1, 4, 9, 8)).astype("float32")


@pytest.mark.parametrize("attrs", [
    {"pads": [1, 0, 2, 1], "strides": [2, 1]},
    {"dilations": [2, 2], "group": 2},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 3]},
    {"auto_pad": "VALID"},
])
def test_conv2d_attributes_match_onnxruntime(attrs: dict[str, object]) -> None:
    group = int(attrs.get("group", 1))  # type: ignore[call-overload]
    w = RNG.standard_normal((6, 4 // group, 3, 3)).astype("float32")
    b = RNG.standard_normal(6).astype("float32")
    m = single_node("Conv", {"x": IMG}, initializers={"w": w, "b": b}, **attrs)
    assert_matches_ort(m, {"x": IMG}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rank", [3, 5])
def test_conv1d_and_conv3d(rank: int) -> None:
    shape = (1, 2, 7) if rank == 3 else (1, 2, 5, 4, 6)
    x = RNG.standard_normal(shape).astype("float32")
    w = RNG.standard_normal((3, 2, *([2] * (rank - 2)))).astype("float32")
    m = single_node("Conv", {"x": x}, initializers={"w": w}, pads=[1] * (2 * (rank - 2)))
    assert_matches_ort(m, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 2]},
    {"strides": [2, 2], "pads": [1, 0, 1, 1], "output_padding": [1, 0]},
    {"strides": [2, 2], "output_shape": [18, 16]},
    {"group": 2},
])
def test_conv_transpose_attributes_match_onnxruntime(attrs: dict[str, object]) -> None:
    group = int(attrs.get("group", 1))  # type: ignore[call-overload]
    w = RNG.standard_normal((4, 6 // group, 3, 3)).astype("float32")
    m = single_node("ConvTranspose", {"x": IMG}, initializers={"w": w}, **attrs)
    assert_matches_ort(m, {"x": IMG}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("op_type", "attrs"), [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
])
def test_pool_attributes_match_onnxruntime(op_type: str, attrs: dict[str, object]) -> None:
    assert_matches_ort(single_node(op_type, {"x": IMG}, opset=19, **attrs), {"x": IMG})


def test_global_pools_keep_the_spatial_dims_as_ones() -> None:
    (got,) = interpret(single_node("GlobalAveragePool", {"x": IMG}), {"x": IMG})
    np.testing.assert_allclose(got, IMG.mean(axis=(2, 3), keepdims=True), rtol=1e-5)
    x3 = IMG.reshape(1, 4, 72)
    (got,) = interpret(single_node("GlobalMaxPool", {"x": x3}), {"x": x3})
    np.testing.assert_array_equal(got, x3.max(axis=2, keepdims=True))


@pytest.mark.parametrize(("trans_a", "trans_b", "alpha", "beta"), [(0, 0, 1.0, 1.0), (1, 1, 0.5, 2.0)])
def test_gemm_transposes_and_scales(trans_a: int, trans_b: int, alpha: float, beta: float) -> None:
    a = RNG.standard_normal((3, 5) if not trans_a else (5, 3)).astype("float32")
    b = RNG.standard_normal((5, 4) if not trans_b else (4, 5)).astype("float32")
    c = RNG.standard_normal(4).astype("float32")
    feeds = {"a": a, "b": b, "c": c}
    m = single_node("Gemm", feeds, transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
    (got,) = interpret(m, feeds)
    want = alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b)) + beta * c
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("shape_a", "shape_b"), [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (3, 4, 5)),
    ((4,), (4, 5)), ((2, 3, 4), (4,)), ((4,), (4,)), ((3, 4), (2, 4, 5)),
])
def test_matmul_follows_numpy_broadcasting(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> None:
    feeds = {"a": RNG.standard_normal(shape_a).astype("float32"), "b": RNG.standard_normal(shape_b).astype("float32")}
    (got,) = interpret(single_node("MatMul", feeds), feeds)
    want = feeds["a"] @ feeds["b"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax_along_one_axis(axis: int) -> None:
    x = RNG.standard_normal((3, 4, 5)).astype("float32")
    (got,) = interpret(single_node("Softmax", {"x": x}, axis=axis), {"x": x})
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=axis, keepdims=True), rtol=1e-5)
    (got,) = interpret(single_node("LogSoftmax", {"x": x}, axis=axis), {"x": x})
    np.testing.assert_allclose(got, np.log(e / e.sum(axis=axis, keepdims=True)), rtol=1e-5, atol=1e-6)


def test_lp_pool_is_the_p_norm_of_each_window() -> None:
    x = RNG.standard_normal((1, 1, 4, 4)).astype("float32")
    (got,) = interpret(single_node("LpPool", {"x": x}, kernel_shape=[2, 2], strides=[2, 2], p=3), {"x": x})
    windows = np.abs(x).reshape(1, 1, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 1, 2, 2, 4)
    np.testing.assert_allclose(got, (windows**3).sum(axis=-1) ** (1 / 3), rtol=1e-5)


def test_matmul_with_a_dynamic_dim_among_several_batch_dims_interprets_and_compiles(tmp_path: Path) -> None:
    # Attention's (batch, heads, seq, d) x (batch, heads, d, seq) exported with a dynamic batch.
    a = RNG.standard_normal((3, 2, 5, 4)).astype("float32")
    b = RNG.standard_normal((3, 2, 4, 5)).astype("float32")
    m = single_node("MatMul", {"a": a, "b": b})
    for vi in m.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_param = "n"
    (got,) = interpret(m, {"a": a, "b": b})
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-6)
    (compiled,) = compile_and_run(m, {"a": a, "b": b}, tmp_path)
    np.testing.assert_allclose(compiled, a @ b, rtol=1e-5, atol=1e-6)


def test_matmul_with_two_dynamic_batch_dims_is_unsupported() -> None:
    a = RNG.standard_normal((3, 2, 5, 4)).astype("float32")
    m = single_node("MatMul", {"a": a, "b": a.transpose(0, 1, 3, 2).copy()})
    for vi in m.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_param = "n"
        vi.type.tensor_type.shape.dim[1].dim_param = "h"
    with pytest.raises(UnsupportedError, match="MatMul with `\\?` batch dims needs them equal on both sides, one"):
        from_onnx(m)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_in_ceil_mode_counts_explicit_pads_but_not_the_ceil_extension(count_include_pad: int) -> None:
    # torch's AvgPool2d(3, 2, 1, ceil_mode=True) exports as this; the last window runs past the pad.
    x = np.random.default_rng(4).standard_normal((1, 2, 7, 7)).astype("float32")
    m = single_node("AveragePool", {"x": x}, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                    count_include_pad=count_include_pad)
    assert_matches_ort(m, {"x": x})
