"""Tokenizer: token kinds, literals, comments, headers, positions and lexical errors."""

from __future__ import annotations

import math

import pytest

from compiler.diagnostics import ParseError, Source
from compiler.parser.tokenizer import Lexed, Literal, Token, tokenize


def lex(text: str) -> Lexed:
    return tokenize(Source("lex.relay", text))


def kinds_and_texts(text: str) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in lex(text).tokens if t.kind != "eof"]


def lex_error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        lex(text)
    return info.value


def test_tokenizer_splits_a_binding_line_into_kinds():
    assert kinds_and_texts("%3 = nn.conv2d(%data, @weights, axis=-1);") == [
        ("graph", "%3"),
        ("=", "="),
        ("ident", "nn.conv2d"),
        ("(", "("),
        ("local", "%data"),
        (",", ","),
        ("global", "@weights"),
        (",", ","),
        ("ident", "axis"),
        ("=", "="),
        ("number", "-1"),
        (")", ")"),
        (";", ";"),
    ]


def test_tokenizer_reads_two_character_operators_as_one_token():
    assert [k for k, _ in kinds_and_texts("-> == != <= >= < > + * /")] == [
        "->", "==", "!=", "<=", ">=", "<", ">", "+", "*", "/",
    ]


def test_tokenizer_pads_the_stream_with_end_of_input_tokens():
    tokens = lex("%x").tokens
    assert [t.kind for t in tokens] == ["local", "eof", "eof", "eof"]


def test_tokenizer_keeps_dotted_operator_and_attribute_names_whole():
    assert kinds_and_texts("qnn.requantize relay.reshape_only") == [
        ("ident", "qnn.requantize"),
        ("ident", "relay.reshape_only"),
    ]


def test_tokenizer_reads_pytorch_style_dotted_local_names():
    assert kinds_and_texts("%encoder.dense.weight") == [("local", "%encoder.dense.weight")]


def test_tokenizer_reads_sequential_indices_inside_pytorch_local_names():
    assert kinds_and_texts("%layer1.0.conv1.weight %features.3.1.bn.running_var") == [
        ("local", "%layer1.0.conv1.weight"),
        ("local", "%features.3.1.bn.running_var"),
    ]


def test_tokenizer_keeps_trailing_numeric_parts_as_projections():
    assert kinds_and_texts("%t.0.1 %layer1.0.out.1") == [
        ("local", "%t"), (".", "."), ("number", "0"), (".", "."), ("number", "1"),
        ("local", "%layer1.0.out"), (".", "."), ("number", "1"),
    ]


def test_tokenizer_reads_slash_names_but_keeps_division_between_operands():
    assert kinds_and_texts("%block1/conv %a/%b %a / 2") == [
        ("local", "%block1/conv"),
        ("local", "%a"),
        ("/", "/"),
        ("local", "%b"),
        ("local", "%a"),
        ("/", "/"),
        ("number", "2"),
    ]


def test_tokenizer_reads_chained_projections_as_integer_indices():
    assert kinds_and_texts("%pair.1.0") == [
        ("local", "%pair"),
        (".", "."),
        ("number", "1"),
        (".", "."),
        ("number", "0"),
    ]


def test_tokenizer_treats_minus_after_an_operand_as_subtraction():
    assert kinds_and_texts("%x -1") == [("local", "%x"), ("-", "-"), ("number", "1")]
    assert kinds_and_texts("7-2") == [("number", "7"), ("-", "-"), ("number", "2")]


def test_tokenizer_folds_minus_into_a_literal_where_an_operand_is_expected():
    assert kinds_and_texts("(-3, [-2i64], - 4)") == [
        ("(", "("),
        ("number", "-3"),
        (",", ","),
        ("[", "["),
        ("number", "-2i64"),
        ("]", "]"),
        (",", ","),
        ("-", "-"),
        ("number", "4"),
        (")", ")"),
    ]


@pytest.mark.parametrize(
    "text, value, dtype",
    [
        ("1f", 1.0, "float32"),
        ("0.25f", 0.25, "float32"),
        ("1e-05f", 1e-05, "float32"),
        ("2.5e3f32", 2500.0, "float32"),
        ("3f16", 3.0, "float16"),
        ("2.5f64", 2.5, "float64"),
        ("12", 12, "int32"),
        ("3000000000", 3000000000, "int64"),
        ("5i", 5, "int32"),
        ("1i64", 1, "int64"),
        ("-7i64", -7, "int64"),
        ("3i16", 3, "int16"),
        ("-32768i16", -32768, "int16"),
    ],
)
def test_tokenizer_gives_literals_their_value_and_dtype(text, value, dtype):
    (token,) = [t for t in lex(text).tokens if t.kind == "number"]
    assert token.literal is not None
    assert token.literal.value == value
    assert token.literal.dtype == dtype
    assert not token.literal.bare_decimal


def test_tokenizer_reads_infinities():
    tokens = [t for t in lex("(inff, -inff)").tokens if t.kind == "number"]
    assert [t.literal.value for t in tokens if t.literal] == [math.inf, -math.inf]
    assert all(t.literal is not None and t.literal.dtype == "float32" for t in tokens)


def test_tokenizer_marks_decimals_without_suffix_as_bare():
    (token,) = [t for t in lex("0.75").tokens if t.kind == "number"]
    assert token.literal is not None
    assert token.literal.bare_decimal
    assert token.literal.value == 0.75


def test_tokenizer_reads_booleans_and_strings_without_escapes():
    assert kinds_and_texts('True False "C:\\dir\\n"') == [
        ("bool", "True"),
        ("bool", "False"),
        ("string", '"C:\\dir\\n"'),
    ]


def test_tokenizer_reads_meta_references_whole():
    assert kinds_and_texts("meta[relay.Constant][12]") == [("meta", "meta[relay.Constant][12]")]


def test_tokenizer_skips_line_and_type_annotation_comments():
    text = "%1 /* ty=Tensor[(4, 8), float32] span=aten::linear_0:0:0 */ // trailing words\n%2"
    assert kinds_and_texts(text) == [("graph", "%1"), ("graph", "%2")]


def test_tokenizer_skips_nested_block_comments():
    assert kinds_and_texts("%a /* outer /* inner */ still outer */ %b") == [("local", "%a"), ("local", "%b")]


def test_tokenizer_skips_deeply_nested_block_comments_without_recursing():
    assert kinds_and_texts("%a " + "/*" * 50_000 + "*/" * 50_000 + " %b") == [("local", "%a"), ("local", "%b")]


def test_tokenizer_positions_count_lines_through_multiline_comments():
    lexed = lex('#[version = "0.0.5"]\n/* one\n two /* three\n */ */  %late\n\t%tabbed')
    late, tabbed = [t for t in lexed.tokens if t.kind == "local"]
    assert lexed.location(late.offset) == (4, 9)
    assert lexed.location(tabbed.offset) == (5, 2)
    span = lexed.span(late)
    assert (span.line, span.column, span.end_column) == (4, 9, 14)


def test_tokenizer_accepts_windows_line_endings():
    lexed = lex("%a\r\n%b")
    second = lexed.tokens[1]
    assert second.text == "%b"
    assert lexed.location(second.offset) == (2, 1)


def test_tokenizer_reads_the_version_header():
    (header, *_rest) = lex('#[ version = "0.0.5" ]').tokens
    assert header.kind == "version"


def test_tokenizer_stops_at_metadata_and_keeps_the_rest_as_text():
    lexed = lex('%x\n#[metadata]\n{"root": 1, "weird": %% not relay %%}')
    assert [t.kind for t in lexed.tokens] == ["local", "metadata", "eof", "eof", "eof"]
    assert lexed.metadata_text == '\n{"root": 1, "weird": %% not relay %%}'
    assert lexed.metadata_token is lexed.tokens[1]


def test_token_describes_itself_for_error_messages():
    assert Token("ident", "nn.dense", 0).describe() == "`nn.dense`"
    assert Token("eof", "", 0).describe() == "end of input"
    assert Token("string", '"' + "x" * 40 + '"', 0).describe() == '`"' + "x" * 26 + "...`"


@pytest.mark.parametrize(
    "text, column, fragment",
    [
        ("%x = 1h;", 6, "use f, f16"),
        ("(1.5i32)", 2, "invalid integer literal `1.5i32`"),
        ("1i8", 1, "unknown literal suffix `i8`"),
        ("  70000i16", 3, "out of range for int16"),
        ("70000f16", 1, "out of range for float16"),
        ("99999999999999999999", 1, "out of range for int64"),
        ("%a $ %b", 4, "unexpected character '$'"),
        ("%a # b", 4, "unexpected character '#'"),
        ('%a "open', 4, "unterminated string literal"),
        ("%a /* never closed", 4, "unterminated block comment"),
        ("%a /* a /* b */", 4, "unterminated block comment"),
        ("meta[relay.Constant]", 1, "malformed meta reference"),
    ],
)
def test_tokenizer_reports_bad_input_at_its_column(text, column, fragment):
    error = lex_error(text)
    assert fragment in error.message
    assert (error.line, error.column) == (1, column)


def test_tokenizer_hints_at_f16_for_an_h_suffix():
    assert "1f16" in lex_error("1h").message


def test_tokenizer_reports_an_unterminated_string_on_a_later_line():
    error = lex_error('%a\n  %b = "no end\n"')
    assert (error.line, error.column) == (2, 8)


@pytest.mark.parametrize(
    "header, fragment",
    [
        ('#[version = "0.0.4"]', 'unsupported Relay text version "0.0.4"'),
        ("#[version = 0.0.5]", "unsupported Relay text version 0.0.5"),
        ('#[version "0.0.5"]', "malformed version header"),
        ("#[experimental]", "unknown header `#[experimental]`"),
        ('#[version = "0.0.5"', "unterminated `#[`"),
    ],
)
def test_tokenizer_rejects_bad_headers(header, fragment):
    error = lex_error("\n" + header)
    assert fragment in error.message
    assert (error.line, error.column) == (2, 1)


# Found by the parser fuzzing: int() refuses more than 4300 digits with a ValueError.
@pytest.mark.parametrize(
    "text, message",
    [
        ("9" * 5000, "integer literal `999999999999999999...999999999999999999 (5000 characters)` is out of range for int64"),
        ("1" * 21 + "i64", "integer literal `111111111111111111111i64` is out of range for int64"),
        ("%" + "1" * 5000, "graph variable `%11111111111111111...111111111111111111 (5001 characters)` has too many digits"),
        ("meta[relay.Constant][" + "1" * 5000 + "]",
         "meta reference `meta[relay.Constan...11111111111111111] (5022 characters)`: the index is out of range"),
    ],
    ids=["integer", "suffixed integer", "graph variable", "meta index"],
)
def test_tokenizer_refuses_numbers_of_thousands_of_digits_as_out_of_range(text, message):
    error = lex_error("  " + text)
    assert error.message == message
    assert (error.line, error.column) == (1, 3)


def test_tokenizer_keeps_twenty_digit_integers_to_range_check_them():
    assert lex_error("18446744073709551616").message == "integer literal `18446744073709551616` is out of range for int64"
    assert lex("00000000000000000000000000001").tokens[0].literal.value == 1


@pytest.mark.parametrize("text", ["1e309f64", "1e400", "-1e999f64"])
def test_tokenizer_refuses_float64_literals_that_overflow_to_infinity(text):
    assert lex_error(text).message.endswith("is out of range for float64")


def test_tokenizer_still_reads_float64_infinity_by_name():
    assert lex("inff64").tokens[0].literal == Literal(float("inf"), "float64")
