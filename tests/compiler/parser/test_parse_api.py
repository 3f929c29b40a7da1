"""compiler.parser's public functions: parse (with type inference), parse_file, parse_expr, and
round trips through the printer."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import InputError, ParseError, TypeCheckError
from compiler.ir.expr import Call, Constant, Function, Tuple
from compiler.parser.printer import astext
from compiler.ir.structural import structural_equal
from compiler.ir.types import TensorType, TupleType
from compiler.parser import parse, parse_expr, parse_file
from compiler.parser.metadata import encode_metadata

HEADER = '#[version = "0.0.5"]\n'

CONV_MODEL = HEADER + """def @main(%image: Tensor[(1, 3, 8, 8), float32], %kernel: Tensor[(4, 3, 3, 3), float32]) -> Tensor[(1, 4), float32] {
  %0 = nn.conv2d(%image, %kernel, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]) /* ty=Tensor[(1, 4, 8, 8), float32] */;
  %1 = nn.bias_add(%0, meta[relay.Constant][0] /* ty=Tensor[(4), float32] */);
  %2 = nn.relu(%1);
  %3 = nn.global_avg_pool2d(%2);
  %4 = (%3, %3);
  %5 = %4.0;
  reshape(%5, newshape=[1, -1])
}
#[metadata]
""" + encode_metadata([np.linspace(-1, 1, 4).astype("float32")])


def test_parse_infers_types_by_default():
    mod = parse(CONV_MODEL, "conv.relay")
    body = mod.main.body
    assert isinstance(body, Call)
    assert body.checked_type == TensorType((1, 4), "float32")
    bias = body.args[0]
    assert bias.checked_type == TensorType((1, 4, 1, 1), "float32")


def test_parse_without_inference_leaves_types_unset():
    mod = parse(CONV_MODEL, infer_types=False)
    assert not mod.main.body.has_type


def test_parse_reports_type_errors_from_inference_with_location():
    text = HEADER + "def @main(%a: Tensor[(2, 3), float32], %b: Tensor[(4), float32]) {\n  add(%a, %b)\n}"
    with pytest.raises(TypeCheckError) as info:
        parse(text, "shapes.relay")
    assert info.value.span is not None and info.value.span.source_name == "shapes.relay"
    assert info.value.line == 3


def test_parse_file_names_errors_after_the_path_as_given(tmp_path):
    path = tmp_path / "broken.relay"
    path.write_text(HEADER + "def @main(%x: float32) {\n  nn.nothing(%x)\n}\n")
    with pytest.raises(ParseError) as info:
        parse_file(str(path))
    assert info.value.one_line().startswith(f"{path}:3:3: error: unknown operator `nn.nothing`")


def test_parse_file_reads_a_model(tmp_path):
    path = tmp_path / "conv.relay"
    path.write_text(CONV_MODEL)
    mod = parse_file(str(path))
    assert mod.main.body.checked_type == TensorType((1, 4), "float32")
    assert mod.main.span is not None and mod.main.span.source_name == str(path)


def test_parse_file_turns_unreadable_files_into_input_errors(tmp_path):
    with pytest.raises(InputError, match="cannot read .*missing.relay"):
        parse_file(str(tmp_path / "missing.relay"))
    with pytest.raises(InputError, match="cannot read"):
        parse_file(str(tmp_path))
    binary = tmp_path / "weights.relay"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    with pytest.raises(InputError, match="not UTF-8"):
        parse_file(str(binary))


def test_parse_expr_returns_an_untyped_expression():
    expr = parse_expr("fn (%a: Tensor[(3), float32]) { (%a, exp(%a)) }")
    assert isinstance(expr, Function)
    assert not expr.has_type


ROUND_TRIP_MODELS = {
    "conv": CONV_MODEL,
    "partitioned": HEADER
    + """
def @main(%x: Tensor[(16, 40), float32], %w1: Tensor[(20, 40), float32], %b1: Tensor[(20), float32]) -> Tensor[(16, 20), float32] {
  @acme_main_0(%x, %w1, %b1)
}
def @acme_main_0(%i0: Tensor[(16, 40), float32], %i1: Tensor[(20, 40), float32], %i2: Tensor[(20), float32], Compiler="acme", Primitive=1, Inline=1, global_symbol="acme_main_0") -> Tensor[(16, 20), float32] {
  %0 = fn (%FunctionVar_0_0: Tensor[(16, 40), float32], %FunctionVar_0_1: Tensor[(20, 40), float32], %FunctionVar_0_2: Tensor[(20), float32], PartitionedFromPattern="nn.dense_nn.bias_add_nn.relu_", Composite="acme.dense_bias_relu") -> Tensor[(16, 20), float32] {
    %1 = nn.dense(%FunctionVar_0_0, %FunctionVar_0_1, units=None);
    %2 = nn.bias_add(%1, %FunctionVar_0_2, axis=-1);
    nn.relu(%2)
  };
  %0(%i0, %i1, %i2)
}
""",
    "control flow": HEADER
    + """
def @main(%flag: bool, %v: Tensor[(3), float32], %n: int64) -> (Tensor[(3), float32], int64) {
  let %shared = exp(%v);
  %0 = if (%flag) { add(%shared, 1f) } else { multiply(%shared, %shared) };
  %1 = (%0, add(%n, 7i64));
  %1
}
""",
    "scalars": HEADER
    + """
def @main(%h: float16, %d: float64, %s: int16) {
  (add(%h, 0.5f16), multiply(%d, 0.1f64), subtract(%s, 3i16), 1e-05f, True, 2)
}
""",
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP_MODELS))
@pytest.mark.parametrize("show_types", [False, True])
def test_printed_modules_parse_back_to_equal_modules(name, show_types):
    original = parse(ROUND_TRIP_MODELS[name])
    text = astext(original, show_types=show_types)
    again = parse(text, "printed.relay")
    assert structural_equal(original, again), text
    assert astext(again, show_types=show_types) == text


def test_round_trip_keeps_sharing_of_meta_constants():
    weights = np.arange(6, dtype="int8").reshape(2, 3)
    text = HEADER + (
        "def @main(%x: Tensor[(2, 3), int8]) {\n"
        "  %0 = add(%x, meta[relay.Constant][0]);\n"
        "  (%0, multiply(%0, meta[relay.Constant][0]))\n"
        "}\n#[metadata]\n" + encode_metadata([weights])
    )
    again = parse(astext(parse(text)))
    body = again.main.body
    assert isinstance(body, Tuple)
    assert body.checked_type == TupleType((TensorType((2, 3), "int8"), TensorType((2, 3), "int8")))
    first, second = body.fields
    assert isinstance(first, Call) and isinstance(second, Call)
    shared = second.args[1]
    assert isinstance(shared, Constant) and first.args[1] is shared
    np.testing.assert_array_equal(shared.data, weights)


def test_parse_bytes_locates_the_first_byte_that_is_not_utf8():
    from compiler.parser import parse_bytes

    with pytest.raises(InputError) as info:
        parse_bytes(b'#[version = "0.0.5"]\ndef @main(%x: float32) {\n  %x \xc3\x28\n}', "m.relay")
    assert info.value.one_line() == (
        "m.relay:3:6: error: cannot read m.relay: not UTF-8 text (invalid continuation byte at byte 51)"
    )
    assert info.value.source_line == "  %x \ufffd("
    assert parse_bytes('#[version = "0.0.5"]\ndef @main(%x: float32) { %x /* é */ }'.encode()).main is not None
