"""qnn.quantize / dequantize / requantize / fixed_point_multiply / add / subtract / mul: TVM's
integer arithmetic on hand-checked values, compiled to C and compared bit-exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.backend.shape_func import lower_shape_func
from compiler.driver import export, lower
from compiler.parser.printer import astext
from compiler.ir.structural import structural_equal
from compiler.ops.qnn import fixed_point_multiplier_shift
from compiler.parser import parse
from compiler.parser.metadata import encode_metadata
from compiler.passes.infer_type import TypeCheckError
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule
from tests.compiler.backend.test_shape_func import run

HEADER = '#[version = "0.0.5"]\n'


def compile_and_run(text: str, inputs: dict[str, np.ndarray], tmp_path: Path) -> np.ndarray:
    """The single output of `text`'s @main, compiled to C; it must equal the interpreter's bit for bit."""
    mod = parse(text)
    assert structural_equal(parse(astext(mod)), mod), "print -> parse changed the module"
    expected = run_main(mod, inputs)
    export(lower(mod), tmp_path, text)
    got = CompiledModule(tmp_path).run(inputs).outputs
    assert len(got) == len(expected) == 1
    assert got[0].dtype == expected[0].dtype
    np.testing.assert_array_equal(got[0], expected[0])
    return got[0]


def unary_model(x: np.ndarray, call: str) -> str:
    shape = ", ".join(str(d) for d in x.shape)
    return HEADER + f"def @main(%x: Tensor[({shape}), {x.dtype}]) {{\n  {call}\n}}\n"


# --- the fixed-point multiplier -------------------------------------------------------------------


def test_fixed_point_multiplier_is_the_rounded_31_bit_significand_and_exponent() -> None:
    assert fixed_point_multiplier_shift(0.5) == (1 << 30, 0)
    assert fixed_point_multiplier_shift(1.0) == (1 << 30, 1)
    assert fixed_point_multiplier_shift(0.75) == (3 << 29, 0)
    # frexp(0.3) = (0.6, -1); 0.6 * 2**31 = 1288490188.8 rounds up.
    assert fixed_point_multiplier_shift(0.3) == (1288490189, -1)
    assert fixed_point_multiplier_shift(12.5) == (1677721600, 4)
    assert fixed_point_multiplier_shift(0.0) == (0, 0)


def test_fixed_point_multiplier_that_rounds_to_two_pow_31_is_halved() -> None:
    assert fixed_point_multiplier_shift(1.0 - 2.0**-40) == (1 << 30, 1)


def test_fixed_point_multiply_rounds_halves_upward(tmp_path: Path) -> None:
    x = np.array([3, -3, 5, -5, 4, -4, 0, 1], np.int32)
    got = compile_and_run(unary_model(x, f"fixed_point_multiply(%x, multiplier={1 << 30}, shift=0)"), {"x": x}, tmp_path)
    # times 0.5: 1.5 -> 2, -1.5 -> -1, 2.5 -> 3, -2.5 -> -2
    assert got.tolist() == [2, -1, 3, -2, 2, -2, 0, 1]


# --- requantize -----------------------------------------------------------------------------------

TIES = np.array([-5, -3, -1, 1, 3, 5, -4, 4, 0], np.int32)


def test_requantize_upward_rounds_halves_toward_positive_infinity(tmp_path: Path) -> None:
    call = 'qnn.requantize(%x, 0.5f, 0, 1f, 0, out_dtype="int8")'
    got = compile_and_run(unary_model(TIES, call), {"x": TIES}, tmp_path)
    # halves of -2.5 -1.5 -0.5 0.5 1.5 2.5 -2 2 0
    assert got.tolist() == [-2, -1, 0, 1, 2, 3, -2, 2, 0]


def test_requantize_rounding_none_means_upward(tmp_path: Path) -> None:
    call = 'qnn.requantize(%x, 0.5f, 0, 1f, 0, rounding="None", out_dtype="int8")'
    got = compile_and_run(unary_model(TIES, call), {"x": TIES}, tmp_path)
    assert got.tolist() == [-2, -1, 0, 1, 2, 3, -2, 2, 0]


def test_requantize_tonearest_rounds_halves_away_from_zero(tmp_path: Path) -> None:
    call = 'qnn.requantize(%x, 0.5f, 0, 1f, 0, rounding="TONEAREST", out_dtype="int8")'
    got = compile_and_run(unary_model(TIES, call), {"x": TIES}, tmp_path)
    assert got.tolist() == [-3, -2, -1, 1, 2, 3, -2, 2, 0]


@pytest.mark.parametrize("compute_dtype", ["float32", "float64"])
@pytest.mark.parametrize(("rounding", "expected"), [("UPWARD", [-2, -1, 0, 1, 2, 3, -2, 2, 0]), ("TONEAREST", [-3, -2, -1, 1, 2, 3, -2, 2, 0])])
def test_requantize_in_float_rounds_ties_like_the_integer_path(
    compute_dtype: str, rounding: str, expected: list[int], tmp_path: Path
) -> None:
    call = f'qnn.requantize(%x, 0.5f, 0, 1f, 0, rounding="{rounding}", compute_dtype="{compute_dtype}", out_dtype="int8")'
    got = compile_and_run(unary_model(TIES, call), {"x": TIES}, tmp_path)
    assert got.tolist() == expected


def test_requantize_subtracts_and_adds_zero_points_and_clips_to_out_dtype(tmp_path: Path) -> None:
    x = np.array([14, 2, 1000, -1000, 5], np.int32)
    call = 'qnn.requantize(%x, 0.1f, 2, 0.03f, -5, out_dtype="int8")'
    got = compile_and_run(unary_model(x, call), {"x": x}, tmp_path)
    # (x - 2) * 0.1 / 0.03 - 5: 12 -> 40 - 5; 0 -> -5; clipped; 3 -> 10 - 5
    assert got.tolist() == [35, -5, 127, -128, 5]


def test_requantize_to_uint8_clips_at_zero(tmp_path: Path) -> None:
    x = np.array([-128, -1, 0, 127], np.int8)
    call = 'qnn.requantize(%x, 0.25f, 0, 0.25f, 10, out_dtype="uint8")'
    got = compile_and_run(unary_model(x, call), {"x": x}, tmp_path)
    assert got.tolist() == [0, 9, 10, 137]


def test_requantize_per_channel_scales_run_along_axis(tmp_path: Path) -> None:
    x = np.array([[3, -3], [6, -6]], np.int32)
    scales = encode_metadata([np.array([0.5, 0.25], np.float32)])
    text = (
        HEADER
        + "def @main(%x: Tensor[(2, 2), int32]) {\n"
        + '  qnn.requantize(%x, meta[relay.Constant][0], 0, 1f, 0, axis=0, out_dtype="int32")\n}\n'
        + "#[metadata]\n"
        + scales
    )
    got = compile_and_run(text, {"x": x}, tmp_path)
    # row 0 times 0.5: 1.5 -> 2, -1.5 -> -1; row 1 times 0.25: the same halves.
    assert got.tolist() == [[2, -1], [2, -1]]


# --- quantize / dequantize -------------------------------------------------------------------------


def test_quantize_rounds_halves_away_from_zero_adds_zero_point_and_saturates(tmp_path: Path) -> None:
    x = np.array([-1.25, -0.75, -0.25, 0.25, 0.75, 1.25, 100.0, -100.0], np.float32)
    got = compile_and_run(unary_model(x, 'qnn.quantize(%x, 0.5f, 1, out_dtype="int8")'), {"x": x}, tmp_path)
    # x / 0.5 = -2.5 -1.5 -0.5 0.5 1.5 2.5 200 -200, rounded away from zero, plus 1
    assert got.tolist() == [-2, -1, 0, 2, 3, 4, 127, -128]


def test_quantize_per_channel_uses_each_channels_scale_and_zero_point() -> None:
    op = ops.get("qnn.quantize")
    x = np.array([[1.0, 1.0], [1.0, 1.0]], np.float32)
    scale, zp = np.array([0.5, 0.25], np.float32), np.array([0, 10], np.int32)
    out = op.reference([x, scale, zp], op.make_attrs({"out_dtype": "uint8", "axis": 1}))
    assert out.tolist() == [[2, 14], [2, 14]]


def test_dequantize_to_float16_saturates_at_its_largest_finite_value(tmp_path: Path) -> None:
    x = np.array([-30000, 1, 30000], np.int16)
    got = compile_and_run(unary_model(x, 'qnn.dequantize(%x, 4f, 0, out_dtype="float16")'), {"x": x}, tmp_path)
    assert got.dtype == np.float16 and got.tolist() == [-65504.0, 4.0, 65504.0]


def test_dequantize_subtracts_the_zero_point_then_scales(tmp_path: Path) -> None:
    x = np.array([0, 128, 255], np.uint8)
    got = compile_and_run(unary_model(x, "qnn.dequantize(%x, 0.5f, 128)"), {"x": x}, tmp_path)
    assert got.dtype == np.float32 and got.tolist() == [-64.0, 0.0, 63.5]


# --- add / subtract / mul --------------------------------------------------------------------------


def binary_model(op: str, a: np.ndarray, b: np.ndarray, params: str) -> str:
    sa = ", ".join(str(d) for d in a.shape)
    sb = ", ".join(str(d) for d in b.shape)
    return HEADER + (
        f"def @main(%a: Tensor[({sa}), {a.dtype}], %b: Tensor[({sb}), {b.dtype}]) {{\n"
        f"  {op}(%a, %b, {params})\n}}\n"
    )


def test_qnn_add_requantizes_both_operands_to_the_output_parameters(tmp_path: Path) -> None:
    a, b = np.array([10, -10], np.int8), np.array([4, 4], np.int8)
    got = compile_and_run(binary_model("qnn.add", a, b, "0.5f, 0, 0.25f, 0, 0.5f, 1"), {"a": a, "b": b}, tmp_path)
    # real 5 + 1 = 6 -> 6 / 0.5 + 1 = 13; -5 + 1 = -4 -> -8 + 1 = -7
    assert got.tolist() == [13, -7]


def test_qnn_subtract_adds_the_output_zero_point_back(tmp_path: Path) -> None:
    a, b = np.array([10, 0], np.int8), np.array([4, 4], np.int8)
    got = compile_and_run(binary_model("qnn.subtract", a, b, "0.5f, 0, 0.25f, 0, 0.5f, 1"), {"a": a, "b": b}, tmp_path)
    # real 5 - 1 = 4 -> 9; 0 - 1 -> -2 + 1 = -1
    assert got.tolist() == [9, -1]


def test_qnn_mul_requantizes_the_product_from_the_product_of_scales(tmp_path: Path) -> None:
    a, b = np.array([4, -6, 127], np.int8), np.array([3, 3, 127], np.int8)
    got = compile_and_run(binary_model("qnn.mul", a, b, "0.5f, 0, 0.5f, 1, 1f, 0"), {"a": a, "b": b}, tmp_path)
    # (4)(3 - 1) * 0.25 = 2; (-6)(2) * 0.25 = -3; 127 * 126 * 0.25 saturates
    assert got.tolist() == [2, -3, 127]


def test_qnn_add_broadcasts_like_add(tmp_path: Path) -> None:
    a, b = np.arange(6, dtype=np.uint8).reshape(2, 3) * 40, np.array([7, 100, 250], np.uint8)
    got = compile_and_run(binary_model("qnn.add", a, b, "0.1f, 128, 0.2f, 3, 0.15f, 120"), {"a": a, "b": b}, tmp_path)
    assert got.shape == (2, 3)


# --- type errors ------------------------------------------------------------------------------------


def test_a_scale_that_is_not_a_constant_is_a_located_type_error() -> None:
    text = HEADER + (
        "def @main(%x: Tensor[(4), int32], %s: Tensor[(), float32]) {\n"
        '  qnn.requantize(%x, %s, 0, 1f, 0, out_dtype="int8")\n}\n'
    )
    with pytest.raises(TypeCheckError, match="input_scale must be a constant") as info:
        parse(text)
    assert str(info.value).startswith("<string>:3:3: error: in call to qnn.requantize")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ('qnn.requantize(%x, 0.5f, 0, 1f, 0, rounding="DOWN", out_dtype="int8")', 'rounding must be "UPWARD" or "TONEAREST"'),
        ('qnn.requantize(%x, 0.5f, 0, 1f, 0, out_dtype="float32")', "out_dtype must be one of"),
        ('qnn.requantize(%x, 0.5f, 0, 1f, 0, compute_dtype="int32", out_dtype="int8")', 'compute_dtype must be "int64"'),
        ('qnn.requantize(%x, 0.5f, 0, 1f, 0, out_dtype="uint16")', "out_dtype must be one of int8, uint8, int16, int32"),
        ('qnn.dequantize(%x, 0.5f, 0, out_dtype="float64")', "out_dtype must be one of float32, float16"),
        ("qnn.requantize(%x, 0.5f, 0f, 1f, 0)", "input_zero_point must be int32"),
        ('qnn.requantize(%x, 0f, 0, 1f, 0, out_dtype="int8")', "input_scale must be positive"),
        ('qnn.quantize(%x, 0.5f, 0, out_dtype="int8")', "data must be float32"),
        ("qnn.dequantize(%x, 2, 0)", "input_scale must be float32"),
        ("fixed_point_multiply(%y, multiplier=1, shift=0)", "data must be int32"),
    ],
)
def test_qnn_misuse_is_a_type_error(call: str, message: str) -> None:
    text = HEADER + f"def @main(%x: Tensor[(4), int32], %y: Tensor[(4), int8]) {{\n  {call}\n}}\n"
    with pytest.raises(TypeCheckError, match=message):
        parse(text)


def test_per_channel_scale_must_match_the_axis_length() -> None:
    op = ops.get("qnn.dequantize")
    from compiler.ir.types import TensorType
    from compiler.ops.registry import TypeRelationError

    types = [TensorType((2, 3), "int8"), TensorType((2,), "float32"), TensorType((), "int32")]
    values = [None, np.array([0.1, 0.2], np.float32), np.array(0, np.int32)]
    with pytest.raises(TypeRelationError, match="vector of the axis length 3"):
        op.type_rel(types, op.make_attrs({}), values)
    assert op.type_rel(types, op.make_attrs({"axis": 0}), values) == TensorType((2, 3), "float32")


@pytest.mark.parametrize(
    "call",
    [
        'qnn.quantize(%f, 0.5f, 3, out_dtype="uint8", axis=0)',
        "qnn.dequantize(%x, 0.5f, 3, axis=0)",
        'qnn.dequantize(%x, 0.5f, 3, out_dtype="float16")',
        'qnn.requantize(%x, 0.5f, 0, 1f, 0, axis=0, rounding="TONEAREST", compute_dtype="int64", out_dtype="int8")',
        "fixed_point_multiply(%x, multiplier=1073741824, shift=-2)",
        "qnn.add(%x, %x, 0.5f, 0, 0.25f, 1, 1f, 0, lhs_axis=0, rhs_axis=0)",
        "qnn.subtract(%x, %x, 0.5f, 0, 0.25f, 1, 1f, 0)",
        "qnn.mul(%x, %x, 0.5f, 0, 0.25f, 1, 1f, 0)",
    ],
)
def test_qnn_attrs_round_trip_through_the_printer(call: str) -> None:
    text = HEADER + f"def @main(%x: Tensor[(4), int32], %f: Tensor[(4), float32]) {{\n  {call}\n}}\n"
    mod = parse(text)
    assert structural_equal(parse(astext(mod)), mod)


def test_qnn_add_per_channel_lhs_scales_run_along_lhs_axis(tmp_path: Path) -> None:
    a, b = np.full((2, 2), 10, np.int8), np.array([[0, 2], [-2, 0]], np.int8)
    section = encode_metadata([np.array([0.5, 0.25], np.float32)])
    text = HEADER + (
        "def @main(%a: Tensor[(2, 2), int8], %b: Tensor[(2, 2), int8]) {\n"
        "  qnn.add(%a, %b, meta[relay.Constant][0], 0, 1f, 0, 0.5f, 0, lhs_axis=1)\n}\n"
        "#[metadata]\n" + section
    )
    got = compile_and_run(text, {"a": a, "b": b}, tmp_path)
    # lhs column 0 is 5.0 (10 at 0.5), column 1 is 2.5 (5 at 0.5); rhs doubles.
    assert got.tolist() == [[10, 9], [6, 5]]


def test_qnn_mul_with_per_channel_scales_on_different_axes_is_a_type_error() -> None:
    section = encode_metadata([np.array([0.5, 0.25], np.float32)])
    text = HEADER + (
        "def @main(%a: Tensor[(2, 2), int8]) {\n"
        "  qnn.mul(%a, %a, meta[relay.Constant][0], 0, meta[relay.Constant][0], 0, 0.5f, 0, lhs_axis=0)\n}\n"
        "#[metadata]\n" + section
    )
    with pytest.raises(TypeCheckError, match="per-channel scales need lhs_axis == rhs_axis"):
        parse(text)


# --- leaky_relu and the dequantize-function-quantize ops --------------------------------------------


def test_qnn_leaky_relu_scales_negative_values_by_fixed_point_alpha(tmp_path: Path) -> None:
    x = np.array([-10, -3, 0, 3, 10, -128, 127], np.int8)
    got = compile_and_run(unary_model(x, "qnn.leaky_relu(%x, 0.1f, 0, 0.1f, 0, alpha=0.25f)"), {"x": x}, tmp_path)
    # -2.5 -> -2 and -0.75 -> -1 (halves upward); -32 exactly.
    assert got.tolist() == [-2, -1, 0, 3, 10, -32, 127]


def test_qnn_leaky_relu_adds_the_scaled_output_zero_point_below_the_input_zero_point(tmp_path: Path) -> None:
    x = np.array([0, 8, 10, 30], np.uint8)
    got = compile_and_run(unary_model(x, "qnn.leaky_relu(%x, 0.5f, 10, 0.5f, 10, alpha=0.5f)"), {"x": x}, tmp_path)
    # Below 10: 0.5 * x + 0.5 * 10 (fixed point, halves upward); at and above: x.
    assert got.tolist() == [5, 9, 10, 30]


FLOAT_FUNCTIONS = ["tanh", "exp", "sqrt", "rsqrt", "erf", "sigmoid", "hardswish", "log", "abs"]


@pytest.mark.parametrize("name", FLOAT_FUNCTIONS)
def test_qnn_float_function_is_bit_exact_on_every_int8_value(name: str, tmp_path: Path) -> None:
    x = np.arange(-128, 128, dtype=np.int8)
    zp = -129 if name in ("sqrt", "rsqrt", "log") else 3
    scale = 0.02 if name == "exp" else 0.05
    got = compile_and_run(unary_model(x, f"qnn.{name}(%x, {scale}f, {zp}, 0.01f, -5)"), {"x": x}, tmp_path)
    assert got.dtype == np.int8


def test_qnn_tanh_is_dequantize_tanh_quantize() -> None:
    op = ops.get("qnn.tanh")
    x = np.array([-128, -20, 0, 20, 127], np.int8)
    args = [x, np.array(0.05, np.float32), np.array(0, np.int32), np.array(1 / 128, np.float32), np.array(0, np.int32)]
    real = np.tanh(x.astype(np.float64) * 0.05)
    expected = np.clip(np.copysign(np.floor(np.abs(real * 128) + 0.5), real), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(op.reference(args, op.make_attrs({})), expected)


# --- concatenate ---------------------------------------------------------------------------------------


def test_qnn_concatenate_requantizes_inputs_whose_parameters_differ(tmp_path: Path) -> None:
    a, b = np.array([[10, -10]], np.int8), np.array([[10, -100]], np.int8)
    text = HEADER + (
        "def @main(%a: Tensor[(1, 2), int8], %b: Tensor[(1, 2), int8]) {\n"
        "  qnn.concatenate((%a, %b), (0.1f, 0.2f), (0, -3), 0.1f, 0, axis=1)\n}\n"
    )
    got = compile_and_run(text, {"a": a, "b": b}, tmp_path)
    # a keeps its values; b: (10 + 3) * 2 = 26, (-100 + 3) * 2 saturates at -128.
    assert got.tolist() == [[10, -10, 26, -128]]


def test_qnn_concatenate_needs_one_scale_per_input() -> None:
    text = HEADER + (
        "def @main(%a: Tensor[(1, 2), int8]) {\n"
        "  qnn.concatenate((%a, %a), (0.1f,), (0, 0), 0.1f, 0)\n}\n"
    )
    with pytest.raises(TypeCheckError, match="2 inputs need as many input_scales"):
        parse(text)


# --- softmax -------------------------------------------------------------------------------------------


def test_qnn_softmax_is_tvms_integer_shift_approximation(tmp_path: Path) -> None:
    x = np.array([[0, 0], [10, 0]], np.int8)
    got = compile_and_run(unary_model(x, "qnn.softmax(%x, 0.1f, 0, 0.00390625f, -128)"), {"x": x}, tmp_path)
    # x0 = 10. Row 0: e = [10, 10], (2**30 // 20) * 10 >> 23 = 63 -> 126 - 128.
    # Row 1: p = [0, -14], q = [0, 1], e = [20, 8], 2**30 // 28 = 38347922 -> [91, 36] -> x2 - 128.
    assert got.tolist() == [[-2, -2], [54, -56]]


def test_qnn_softmax_rejects_an_input_scale_above_one() -> None:
    with pytest.raises(TypeCheckError, match="scale must be at most 1"):
        parse(HEADER + "def @main(%x: Tensor[(4), int8]) {\n  qnn.softmax(%x, 2f, 0, 0.01f, 0)\n}\n")


def test_fixed_point_multiply_per_axis_reads_each_channels_multiplier_and_shifts(tmp_path: Path) -> None:
    x = np.array([3, -3, 5, 5], np.int32)
    m = np.full(4, 1 << 30, np.int32)
    ls, rs = np.array([0, 0, 0, 2], np.int32), np.array([0, 0, 1, 0], np.int32)
    text = HEADER + (
        "def @main(%x: Tensor[(4), int32], %m: Tensor[(4), int32], %l: Tensor[(4), int32], %r: Tensor[(4), int32]) {\n"
        "  fixed_point_multiply_per_axis(%x, %m, %l, %r, is_lshift_required=True, is_rshift_required=True, axes=[0])\n}\n"
    )
    got = compile_and_run(text, {"x": x, "m": m, "l": ls, "r": rs}, tmp_path)
    # times 0.5, 0.5, 0.25 and 2: 1.5 -> 2, -1.5 -> -1, 1.25 -> 1, 10
    assert got.tolist() == [2, -1, 1, 10]


# --- shape rules -----------------------------------------------------------------------------------


def test_qnn_add_shape_function_broadcasts_the_operands_but_not_their_per_channel_scales() -> None:
    # Scales of 3 channels along axis 0: broadcast with the operands right-aligned they would
    # stretch the trailing dim of 1 to 3.
    section = encode_metadata([np.array([0.5, 0.25, 1.0], np.float32)])
    text = HEADER + (
        "def @main(%a: Tensor[(?, ?), int8], %b: Tensor[(?, ?), int8]) {\n"
        "  qnn.add(%a, %b, meta[relay.Constant][0], 0, meta[relay.Constant][0], 0, 0.5f, 0, lhs_axis=0, rhs_axis=0)\n}\n"
        "#[metadata]\n" + section
    )
    shape_func = lower_shape_func(parse(text).main, "shape_func_qnn_add")
    assert run(shape_func.prim_func, [3, 1], [3, 1]) == [[3, 1]]
    assert run(shape_func.prim_func, [3, 1], [1, 4]) == [[3, 4]]


def test_qnn_concatenate_shape_function_adds_the_extents_along_its_axis() -> None:
    text = HEADER + (
        "def @main(%a: Tensor[(?, ?), int8], %b: Tensor[(?, ?), int8]) {\n"
        "  qnn.concatenate((%a, %b), (0.5f, 0.25f), (0, 1), 0.5f, 0, axis=-1)\n}\n"
    )
    shape_func = lower_shape_func(parse(text).main, "shape_func_qnn_concatenate")
    assert run(shape_func.prim_func, [2, 3], [2, 5]) == [[2, 8]]
