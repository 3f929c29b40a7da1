"""Parser errors: each kind of bad input is reported with its message, line and column."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import ParseError, TypeCheckError
from compiler.parser import parse, parse_expr
from compiler.parser.metadata import encode_metadata

HEADER = '#[version = "0.0.5"]\n'
PARAMS = "%x: Tensor[(2, 4), float32], %w: Tensor[(3, 4), float32]"


def parse_error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(text, "bad.relay", infer_types=False)
    return info.value


def body_error(body: str) -> ParseError:
    """An error in the body of a @main with params %x and %w; the body starts on line 3."""
    return parse_error(HEADER + f"def @main({PARAMS}) {{\n" + body + "\n}")


END = object()  # marks the `}` that closes @main, on the line after the body


def expected_position(body: str, marker: str | object) -> tuple[int, int]:
    """Line and column of the first occurrence of `marker` in a body_error body."""
    if marker is END:
        return 3 + body.count("\n") + 1, 1
    assert isinstance(marker, str)
    index = body.index(marker)
    return 3 + body.count("\n", 0, index), index - body.rfind("\n", 0, index)


@pytest.mark.parametrize(
    "body, marker, fragment",
    [
        ("  nn.frobnicate(%x)", "nn.frobnicate", "unknown operator `nn.frobnicate`"),
        ("  %0 = nn.dense(%x, %w, units=3, unit=3);\n  %0", "unit=", "has no attribute unit"),
        ('  nn.dense(%x, %w, units="three")', "units", "units expects an integer"),
        ("  nn.softmax(%x, axis=[1, 2])", "axis", "axis expects an integer"),
        ("  nn.pad(%x, 0f, pad_width=[1, 2])", "pad_width", "pad_width expects a list"),
        ("  %0 = exp(%x);\n  clip(%0)", "clip", "requires attribute a_min"),
        ("  add(%x, %missing)", "%missing", "undefined variable %missing"),
        ("  %0 = exp(%x);\n  add(%0, %3)", "%3", "%3 is not bound"),
        ("  @nowhere(%x)", "@nowhere", "undefined global @nowhere"),
        ("  %1 = exp(%x);\n  %1 = exp(%1);\n  %1", "%1 = exp(%1)", "%1 is already bound in this function (line 3)"),
        ("  add(%x, 1.5)", "1.5", "invalid number `1.5`"),
        ("  add(%x, 2e3)", "2e3", "needs a suffix, e.g. `2e3f`"),
        ("  add(%x, %x", END, "expected `,` or `)` in the argument list, found `}`"),
        ("  add(%x %x)", "%x)", "found `%x`"),
        ("  %0 = exp(%x)\n  nn.relu(%0)", "nn.relu", "expected `;` after the binding of %0"),
        ('  "text"', '"text"', "a string is only allowed as an attribute value"),
        ("  -%x", "-", "there is no unary minus"),
        ("  add(%x)", "add", "add takes 2 arguments, got 1"),
        ("  %w(%x, axis=1)", "axis", "only operator calls take attributes"),
        ("  nn.softmax(axis=1, %x)", "%x", "positional arguments must come before attributes"),
        ("  nn.softmax(%x, axis=1, axis=0)", "axis=0", "attribute axis is given twice"),
        ("  let @g = %x;\n  %x", "@g", "`let` binds a local variable"),
        ("  (%x, %w).first", "first", "expected a tuple index after `.`"),
        ("  (%x, %w).-1", "-1", "expected a tuple index after `.`"),
        ("  match (%x) { Foo => %x }", "Foo", "unknown constructor `Foo` in pattern"),
        ("  match (%x) { (%a, %a) => %x }", "%a)", "%a is bound twice in this pattern"),
        ("  match (%x) { _ -> %x }", "->", "expected `=>` after the pattern"),
        ("  meta[relay.attrs.Conv2DAttrs][0]", "meta", "only meta[relay.Constant]"),
        ("  nn.conv2d(%x, %w, padding=meta[relay.attrs.Conv2DAttrs][0])", "meta", "not supported as attribute values"),
        ("  let %y: Tensor[(2), bfloat16] = %x;\n  %y", "bfloat16", "dtype `bfloat16` is not supported"),
        ("  let %y: Tensor[(2), float32x4] = %x;\n  %y", "float32x4", "vector dtype `float32x4` (lanes)"),
        ("  let %y: Tensor[(2), int4] = %x;\n  %y", "int4", "dtype `int4` is not supported; bit widths"),
        ("  let %y: Tensor[(2), uint1] = %x;\n  %y", "uint1", "dtype `uint1` is not supported"),
        ("  let %y: Tensor[(2), handle] = %x;\n  %y", "handle", "dtype `handle` (an opaque pointer)"),
        ("  let %y: Tensor[(2), floaty] = %x;\n  %y", "floaty", "unknown type or dtype `floaty`"),
        ("  let %y: Tensor[(-2), float32] = %x;\n  %y", "-2", "dimension -2 is negative"),
        ("  let %y: Tensor[(2.5f), float32] = %x;\n  %y", "2.5f", "expected a dimension"),
        ("  let %y: List[float32] = %x;\n  %y", "List", "unknown type `List`"),
        ("  if (%x) { %x }", END, "expected `else`"),
        ("  fn [T, T](%a: T) { %a }", "T]", "duplicate type parameter T"),
        ("  fn (%a: float32, Primitive=1, %b: float32) { %a }", "%b", "parameters must come before function attributes"),
        ("  fn (%a: float32, %a: float32) { %a }", "%a: float32)", "duplicate parameter %a"),
        ("  fn (%a {virtual_device=1}: float32) { %a }", "virtual_device=", "virtual_device must be meta[VirtualDevice][i]"),
        ("  %0 = exp(%x);", END, "expected an expression, found `}`"),
    ],
)
def test_parser_reports_bad_bodies_with_location(body, marker, fragment):
    error = body_error(body)
    assert fragment in error.message
    assert (error.line, error.column) == expected_position(body, marker)
    assert error.span is not None and error.span.source_name == "bad.relay"


def test_parser_reports_unknown_operator_with_location_and_caret():
    error = body_error("  %0 = nn.foo(%x);\n  %0")
    assert str(error) == (
        "bad.relay:3:8: error: unknown operator `nn.foo`\n"
        "    %0 = nn.foo(%x);\n"
        "         ^~~~~~"
    )


def test_unannotated_parameter_whose_type_nothing_determines_is_a_type_error_at_it():
    with pytest.raises(TypeCheckError) as info:
        parse(HEADER + "def @main(%x: float32, %y) { %x }", "bad.relay")
    assert "cannot infer the type of %y" in info.value.message
    assert (info.value.line, info.value.column) == (2, 24)


def test_parser_reports_a_duplicate_definition_at_the_second():
    error = parse_error(HEADER + "def @f(%a: float32) { %a }\n\ndef @f(%b: float32) { %b }")
    assert "duplicate definition of @f (first defined on line 2)" in error.message
    assert (error.line, error.column) == (4, 5)


def test_parser_reports_the_first_use_of_an_undefined_global():
    error = parse_error(
        HEADER
        + "def @main(%a: float32) {\n  %0 = @later(%a);\n  @missing(%0)\n}\n"
        + "def @later(%b: float32) { @gone(%b) }"
    )
    assert error.message == "undefined global @missing"
    assert (error.line, error.column) == (4, 3)


def test_module_without_version_header_reads_as_version_0_0_5():
    mod = parse("\n  def @main(%x: float32) { %x }")
    assert [gv.name_hint for gv in mod] == ["main"]


def test_meta_reference_without_metadata_section_is_one_error_at_the_first_use():
    text = HEADER + (
        "def @main(%x: Tensor[(2), float32]) {\n"
        "  %0 = add(%x, meta[relay.Constant][0]);\n"
        "  multiply(%0, meta[relay.Constant][1])\n}\n"
    )
    with pytest.raises(ParseError) as info:
        parse(text, "bad.relay")
    error = info.value
    assert "printed without its metadata section" in error.message
    assert (error.line, error.column) == (3, 16)
    assert str(error).count("error:") == 1


def test_parser_rejects_an_unsupported_version():
    error = parse_error('#[version = "0.0.4"]\ndef @main(%x: float32) { %x }')
    assert "unsupported Relay text version" in error.message
    assert (error.line, error.column) == (1, 1)


def test_parser_reports_unterminated_strings_and_comments():
    error = body_error('  nn.conv2d(%x, %w, data_layout="NCHW)')
    assert "unterminated string literal" in error.message and (error.line, error.column) == (3, 33)
    error = body_error("  /* a comment /* with a nested one */ that never ends\n  %x")
    assert "unterminated block comment" in error.message and (error.line, error.column) == (3, 3)


def test_parser_explains_a_missing_metadata_section():
    error = body_error("  add(%x, meta[relay.Constant][0] /* ty=Tensor[(2, 4), float32] */)")
    assert "meta[relay.Constant][0]" in error.message and "#[metadata]" in error.message
    assert (error.line, error.column) == (3, 11)


def test_parser_reports_meta_references_the_section_cannot_satisfy():
    section = "\n#[metadata]\n" + encode_metadata([np.zeros((2, 4), "float32")])
    error = parse_error(HEADER + f"def @main({PARAMS}) {{\n  add(%x, meta[relay.Constant][1])\n}}" + section)
    assert "out of range: the metadata section holds 1" in error.message
    assert (error.line, error.column) == (3, 11)


def test_parser_reports_a_malformed_metadata_section_at_its_header():
    error = parse_error(HEADER + "def @main(%x: float32) { %x }\n#[metadata]\n{ not json")
    assert "not valid JSON" in error.message
    assert (error.line, error.column) == (3, 1)


def test_parser_rejects_top_level_items_other_than_definitions():
    error = parse_error(HEADER + "extern def @main(%x: float32) { %x }")
    assert error.message == "expected `type` after `extern`, found `def`" and (error.line, error.column) == (2, 8)
    error = parse_error(HEADER + "def @main(%x: float32) { %x }\n%x")
    assert error.message == "expected `def`, `type`, `extern type` or end of input, found `%x`"
    assert (error.line, error.column) == (3, 1)


def test_parser_rejects_duplicate_types_and_constructors():
    error = parse_error(HEADER + "type T { A }\ntype T { B }")
    assert "duplicate definition of type T (first defined on line 2)" in error.message
    assert (error.line, error.column) == (3, 6)
    error = parse_error(HEADER + "type T { A, A }")
    assert error.message == "duplicate constructor A" and (error.line, error.column) == (2, 13)


def test_parser_checks_type_arguments_and_constructor_pattern_fields():
    text = HEADER + "type List[A] { Cons(A, List[A]), Nil }\n"
    error = parse_error(text + "def @main(%l: List) { %l }")
    assert error.message == "type List takes 1 type arguments, 0 given" and (error.line, error.column) == (3, 15)
    error = parse_error(text + "def @main(%l: List[float32]) { match (%l) { Cons(%h) => %h, Nil => 0f } }")
    assert error.message == "constructor Cons has 2 fields, the pattern gives 1"
    assert (error.line, error.column) == (3, 45)


def test_parser_reports_unexpected_end_of_input():
    error = parse_error(HEADER + "def @main(%x: float32) {\n  add(%x,")
    assert error.message == "expected an expression, found end of input"
    assert (error.line, error.column) == (3, 10)


def test_parse_expr_rejects_globals_and_trailing_tokens():
    with pytest.raises(ParseError, match="undefined global @f"):
        parse_expr("@f(1f)")
    with pytest.raises(ParseError, match="expected end of input, found `2f`") as info:
        parse_expr("1f 2f")
    assert info.value.column == 4


@pytest.mark.parametrize("body", ["if (negative) { %x } else { %x }", "(nn.relu, %x).1", "let %f = add; %x"])
def test_an_operator_used_as_a_value_is_refused_at_its_name(body):
    # Found by the parser fuzzing: the type checker refused it, but an Op has no span.
    error = body_error(body)
    assert error.message.endswith("used as a value; call it instead")
    assert (error.line, error.column) == (3, body.index(error.message.split()[1]) + 1)
