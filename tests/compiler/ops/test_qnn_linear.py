"""qnn.dense / batch_matmul / conv2d / conv2d_transpose: sums of zero-point-shifted products,
checked against numpy written here, and a quantized model in TVM's printed style compiled end to
end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.backend.shape_func import lower_shape_func
from compiler.diagnostics import UnsupportedError
from compiler.driver import export, lower
from compiler.parser.printer import astext
from compiler.ir.structural import structural_equal
from compiler.ir.types import TensorType
from compiler.ops.qnn import fixed_point_multiplier_shift
from compiler.ops.registry import TypeRelationError
from compiler.parser import parse
from compiler.parser.metadata import encode_metadata
from compiler.passes.infer_type import TypeCheckError
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule
from tests.compiler.backend.test_shape_func import run

HEADER = '#[version = "0.0.5"]\n'


def run_compiled(text: str, inputs: dict[str, np.ndarray], tmp_path: Path) -> np.ndarray:
    mod = parse(text)
    assert structural_equal(parse(astext(mod)), mod)
    expected = run_main(mod, inputs)
    export(lower(mod), tmp_path, text)
    got = CompiledModule(tmp_path).run(inputs).outputs
    assert got[0].dtype == expected[0].dtype
    np.testing.assert_array_equal(got[0], expected[0])
    return got[0]


def shape_text(a: np.ndarray) -> str:
    return f"Tensor[({', '.join(str(d) for d in a.shape)}), {a.dtype}]"


def conv2d_nchw(x: np.ndarray, w: np.ndarray, pad: int, stride: int, pad_value: int) -> np.ndarray:
    """Plain loops: the data padded with `pad_value`, as TVM pads quantized data with its zero point."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=pad_value)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            window = x[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", window, w.astype(np.int64))
    return out


def test_qnn_dense_sums_products_of_zero_point_shifted_operands(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (3, 5)).astype(np.int8)
    w = rng.integers(-128, 128, (4, 5)).astype(np.int8)
    text = HEADER + (
        f"def @main(%x: {shape_text(x)}, %w: {shape_text(w)}) {{\n"
        '  qnn.dense(%x, %w, 3, -2, 0.1f, 0.2f, units=4, out_dtype="int32")\n}\n'
    )
    got = run_compiled(text, {"x": x, "w": w}, tmp_path)
    expected = (x.astype(np.int64) - 3) @ (w.astype(np.int64) + 2).T
    np.testing.assert_array_equal(got, expected.astype(np.int32))


def test_qnn_dense_per_channel_kernel_zero_points_follow_the_units_axis() -> None:
    op = ops.get("qnn.dense")
    x = np.array([[1, 2]], np.int8)
    w = np.array([[1, 1], [1, 1], [1, 1]], np.int8)
    kzp = np.array([0, 1, 2], np.int32)
    attrs = op.make_attrs({"units": 3, "out_dtype": "int32"})
    args = [x, w, np.array(0, np.int32), kzp, np.array(0.1, np.float32), np.array([0.1, 0.1, 0.1], np.float32)]
    assert op.type_rel([TensorType(a.shape, str(a.dtype)) for a in args], attrs, args) == TensorType((1, 3), "int32")
    assert op.reference(args, attrs).tolist() == [[3, 0, -3]]


def test_qnn_conv2d_pads_with_the_input_zero_point(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    w = rng.integers(0, 256, (3, 2, 3, 3)).astype(np.uint8)
    text = HEADER + (
        f"def @main(%x: {shape_text(x)}, %w: {shape_text(w)}) {{\n"
        "  qnn.conv2d(%x, %w, 128, 120, 0.05f, 0.01f, strides=[2, 2], padding=[1, 1, 1, 1], "
        'channels=3, kernel_size=[3, 3], out_dtype="int32")\n}\n'
    )
    got = run_compiled(text, {"x": x, "w": w}, tmp_path)
    # (x - 128) padded with 0 is x padded with 128, minus 128.
    expected = conv2d_nchw(x.astype(np.int64) - 128, w.astype(np.int64) - 120, 1, 2, 0)
    np.testing.assert_array_equal(got, expected.astype(np.int32))
    again = conv2d_nchw(x, w.astype(np.int64) - 120, 1, 2, 128) - 128 * conv2d_nchw(
        np.ones_like(x), w.astype(np.int64) - 120, 1, 2, 1
    )
    np.testing.assert_array_equal(got, again.astype(np.int32))


def test_qnn_batch_matmul_shifts_both_operands(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (2, 3, 4)).astype(np.int8)
    b = rng.integers(-128, 128, (2, 5, 4)).astype(np.int8)
    text = HEADER + (
        f"def @main(%a: {shape_text(a)}, %b: {shape_text(b)}) {{\n"
        '  qnn.batch_matmul(%a, %b, 1, -1, 0.1f, 0.1f, transpose_b=True, out_dtype="int32")\n}\n'
    )
    got = run_compiled(text, {"a": a, "b": b}, tmp_path)
    expected = np.matmul(a.astype(np.int64) - 1, np.transpose(b.astype(np.int64) + 1, (0, 2, 1)))
    np.testing.assert_array_equal(got, expected.astype(np.int32))


def test_qnn_conv2d_transpose_matches_the_float_op_on_shifted_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (1, 2, 3, 3)).astype(np.int8)
    w = rng.integers(-128, 128, (2, 3, 2, 2)).astype(np.int8)
    text = HEADER + (
        f"def @main(%x: {shape_text(x)}, %w: {shape_text(w)}) {{\n"
        "  qnn.conv2d_transpose(%x, %w, 5, -3, 0.1f, 0.1f, strides=[2, 2], channels=3, "
        'kernel_size=[2, 2], out_dtype="int32")\n}\n'
    )
    got = run_compiled(text, {"x": x, "w": w}, tmp_path)
    # Stride 2 and a 2x2 kernel: every output pixel gets exactly one input pixel's contribution.
    xs, ws = x.astype(np.int64) - 5, w.astype(np.int64) + 3
    expected = np.zeros((1, 3, 6, 6), np.int64)
    for i in range(3):
        for j in range(3):
            expected[0, :, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2] += np.einsum("c,cohw->ohw", xs[0, :, i, j], ws)
    np.testing.assert_array_equal(got, expected.astype(np.int32))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ('qnn.dense(%x, %w, 0, 0, 0.1f, 0.1f, units=4, out_dtype="int8")', "out_dtype must be int32 or int64"),
        ("qnn.dense(%x, %w, 0, 0, 0.1f, 0.1f, units=4)", "out_dtype must be int32 or int64"),
        ('qnn.dense(%x, %w, 0f, 0, 0.1f, 0.1f, units=4, out_dtype="int32")', "input_zero_point must be int32"),
        ('qnn.dense(%x, %w, 0, 0, %s, 0.1f, units=4, out_dtype="int32")', "input_scale must be a constant"),
        ('qnn.dense(%f, %w, 0, 0, 0.1f, 0.1f, units=4, out_dtype="int32")', "data must be one of"),
    ],
)
def test_qnn_linear_misuse_is_a_type_error(call: str, message: str) -> None:
    text = HEADER + (
        "def @main(%x: Tensor[(2, 3), int8], %w: Tensor[(4, 3), int8], %f: Tensor[(2, 3), float32], "
        f"%s: Tensor[(), float32]) {{\n  {call}\n}}\n"
    )
    with pytest.raises(TypeCheckError, match=message):
        parse(text)


def test_per_channel_kernel_scale_must_have_one_value_per_output_channel() -> None:
    op = ops.get("qnn.conv2d")
    types = [
        TensorType((1, 2, 4, 4), "int8"), TensorType((3, 2, 3, 3), "int8"), TensorType((), "int32"),
        TensorType((), "int32"), TensorType((), "float32"), TensorType((2,), "float32"),
    ]
    values = [None, None, np.array(0, np.int32), np.array(0, np.int32), np.array(0.1, np.float32), np.array([0.1, 0.2], np.float32)]
    with pytest.raises(TypeRelationError, match="kernel_scale must be a scalar or a vector of the axis length 3"):
        op.type_rel(types, op.make_attrs({"out_dtype": "int32"}), values)


# --- a quantized model in TVM's printed style ---------------------------------------------------------


def quantized_cnn_text(kernel_scales: np.ndarray, kernel_zps: np.ndarray, acc_scales: np.ndarray) -> str:
    section = encode_metadata([kernel_scales, kernel_zps, acc_scales])
    return HEADER + (
        "def @main(%data: Tensor[(1, 3, 6, 6), float32], %weight: Tensor[(4, 3, 3, 3), int8]) {\n"
        '  %0 = qnn.quantize(%data, 0.02f, 5, out_dtype="int8");\n'
        "  %1 = qnn.conv2d(%0, %weight, 5, meta[relay.Constant][1], 0.02f, meta[relay.Constant][0], "
        'padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3], out_dtype="int32");\n'
        '  %2 = qnn.requantize(%1, meta[relay.Constant][2], 0, 0.05f, -3, axis=1, rounding="TONEAREST", out_dtype="int8");\n'
        "  %3 = clip(%2, a_min=-3f, a_max=127f);\n"
        "  %4 = nn.relu(%3);\n"
        "  qnn.dequantize(%4, 0.05f, -3)\n"
        "}\n"
        "#[metadata]\n" + section
    )


def test_quantized_cnn_compiles_and_matches_the_interpreter_and_numpy(tmp_path: Path) -> None:
    kernel_scales = np.array([0.01, 0.02, 0.015, 0.03], np.float32)
    kernel_zps = np.array([0, 1, -1, 2], np.int32)
    # The accumulator's scale per output channel, as frontends compute it: input * kernel scale.
    acc_scales = (np.float32(0.02) * kernel_scales).astype(np.float32)
    text = quantized_cnn_text(kernel_scales, kernel_zps, acc_scales)
    rng = np.random.default_rng(5)
    inputs = {
        "data": rng.uniform(-2.5, 2.5, (1, 3, 6, 6)).astype(np.float32),
        "weight": rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8),
    }
    got = run_compiled(text, inputs, tmp_path)
    assert got.shape == (1, 4, 6, 6) and got.dtype == np.float32

    # The same pipeline in numpy: quantize (round halves away from zero), shifted convolution,
    # fixed-point requantize with TONEAREST, clip and relu in int8, dequantize.
    scaled = inputs["data"] / np.float32(0.02)
    rounded = np.copysign(np.floor(np.abs(scaled) + np.float32(0.5)), scaled).astype(np.float32)
    q = np.clip(rounded + np.float32(5), -128, 127).astype(np.int64)
    acc = conv2d_nchw(q - 5, inputs["weight"].astype(np.int64) - kernel_zps.reshape(4, 1, 1, 1), 1, 1, 0)
    out = np.empty_like(acc)
    for o in range(4):
        mult, shift = fixed_point_multiplier_shift(float(acc_scales[o]) / float(np.float32(0.05)))
        total = 31 - shift if shift <= 0 else 31
        prod = (acc[:, o] << max(shift, 0)) * mult
        out[:, o] = (prod + np.where(prod >= 0, 1 << (total - 1), (1 << (total - 1)) - 1)) >> total
    requantized = np.clip(out - 3, -128, 127)
    activated = np.maximum(np.clip(requantized, -3, 127), 0)
    expected = (activated + 3).astype(np.float32) * np.float32(0.05)
    np.testing.assert_array_equal(got, expected)


def test_qnn_avg_pool2d_requantizes_then_averages_with_truncating_division(tmp_path: Path) -> None:
    x = np.array([[[[1, 2], [3, 5]], [[-1, -2], [-3, -5]]]], np.int8)
    text = HEADER + (
        f"def @main(%x: {shape_text(x)}) {{\n"
        "  qnn.avg_pool2d(%x, 0.1f, 0, 0.05f, 0, pool_size=[2, 2])\n}\n"
    )
    got = run_compiled(text, {"x": x}, tmp_path)
    # doubled: 22 / 4 -> 5 and -22 / 4 -> -5 (toward zero)
    assert got.tolist() == [[[[5]], [[-5]]]]


# --- shape rules -----------------------------------------------------------------------------------


def test_qnn_conv2d_shape_function_computes_the_nhwc_output_of_a_dynamic_input() -> None:
    text = HEADER + (
        "def @main(%x: Tensor[(?, ?, ?, 2), int8], %w: Tensor[(3, 3, 2, 4), int8]) {\n"
        "  qnn.conv2d(%x, %w, 0, 0, 0.5f, 0.25f, strides=[2, 1], padding=[1, 0, 0, 2], dilation=[1, 2],"
        ' channels=4, kernel_size=[3, 3], data_layout="NHWC", kernel_layout="HWIO", out_dtype="int32")\n}\n'
    )
    shape_func = lower_shape_func(parse(text).main, "shape_func_qnn_conv2d")
    # height: (9 + 1 - 3) // 2 + 1 = 4; width: (7 + 2 - 5) // 1 + 1 = 5
    assert run(shape_func.prim_func, [2, 9, 7, 2], [3, 3, 2, 4]) == [[2, 4, 5, 4]]


def test_qnn_avg_pool2d_shape_function_counts_ceil_mode_windows() -> None:
    text = HEADER + (
        "def @main(%x: Tensor[(?, 3, ?, ?), int8]) {\n"
        "  qnn.avg_pool2d(%x, 0.5f, 0, 0.5f, 0, pool_size=[2, 2], strides=[2, 2], ceil_mode=True)\n}\n"
    )
    shape_func = lower_shape_func(parse(text).main, "shape_func_qnn_avg_pool2d")
    assert run(shape_func.prim_func, [1, 3, 5, 4]) == [[1, 3, 3, 2]]


def test_qnn_conv2d_transpose_shape_function_in_a_blocked_layout_is_a_located_error() -> None:
    text = HEADER + (
        "def @main(%x: Tensor[(?, 1, 3, 3, 4), int8], %w: Tensor[(4, 4, 3, 3), int8]) {\n"
        "  qnn.conv2d_transpose(%x, %w, 0, 0, 0.5f, 0.25f, channels=4, kernel_size=[3, 3],"
        ' data_layout="NCHW4c", out_dtype="int32")\n}\n'
    )
    with pytest.raises(UnsupportedError, match="layout 'NCHW4c' is not a permutation of NCHW") as err:
        lower_shape_func(parse(text).main, "shape_func_qnn_conv2d_transpose")
    assert (err.value.span.line, err.value.span.column) == (3, 3)
