"""The hostile text corpus (compiler/testing/relay_text.py's hostile_corpus): each input ends in
a module that type-checks or in one exact, located error; never another exception. `make fuzz`
runs the same corpus at full size (10^6 let bindings instead of 10^5, and a 4 MiB line of
322,000 bindings): about 100 s and 2.7 GB, too much for make test."""

from __future__ import annotations

import sys

import pytest

from compiler.diagnostics import CompileError, InputError, ParseError, UnsupportedError
from compiler.driver import BuildOptions, lower
from compiler.ir.expr import Let
from compiler.parser import MAX_NESTING, parse, parse_bytes
from compiler.testing.relay_text import LET_BINDINGS_IN_SUITE, hostile_corpus

CORPUS = hostile_corpus()


def parsed(name: str):  # type: ignore[no-untyped-def]
    data = CORPUS[name]
    return parse_bytes(data, "hostile.relay") if isinstance(data, bytes) else parse(data, "hostile.relay")


def refusal(name: str, kind: type[CompileError] = ParseError) -> CompileError:
    with pytest.raises(CompileError) as info:
        parsed(name)
    assert type(info.value) is kind
    assert info.value.span is not None
    return info.value


def test_fifty_thousand_nested_parentheses_give_a_located_error():
    error = refusal("parentheses")
    assert error.one_line() == f"hostile.relay:3:{MAX_NESTING + 3}: error: input nests deeper than {MAX_NESTING} levels"


def test_fifty_thousand_nested_calls_give_a_located_error_and_keep_the_recursion_limit():
    limit = sys.getrecursionlimit()
    error = refusal("calls")
    # `negative(` is 9 characters wide: the error is at the `(` that opens level 501.
    assert error.one_line() == f"hostile.relay:3:{9 * MAX_NESTING + 2}: error: input nests deeper than {MAX_NESTING} levels"
    assert sys.getrecursionlimit() == limit


def test_a_hundred_thousand_let_bindings_parse_and_type_check():
    mod = parsed("let bindings")
    count, node = 0, mod.main.body
    while isinstance(node, Let):
        count, node = count + 1, node.body
    assert count == LET_BINDINGS_IN_SUITE
    assert str(mod.main.checked_type.ret_type) == "Tensor[(2), float32]"


def test_a_shape_whose_product_overflows_int64_type_checks_and_is_refused_at_compile_time():
    mod = parsed("shape product overflowing int64")
    assert str(mod.main.body.checked_type) == "Tensor[(4294967296, 4294967296, 4294967296), float32]"
    with pytest.raises(UnsupportedError) as info:
        lower(mod, BuildOptions())
    assert info.value.one_line().startswith(
        "hostile.relay:2:11: error: a tensor of type Tensor[(4294967296, 4294967296, 4294967296), float32] "
        "holds 316,912,650,057,057,350,374,175,801,344 bytes, more than the 4,294,967,296 bytes a tensor may have"
    )


def test_a_tensor_of_a_trillion_elements_type_checks_and_compiling_it_is_a_located_error():
    mod = parsed("a trillion elements")
    assert str(mod.main.params[0].checked_type) == "Tensor[(1000000, 1000000), float32]"
    with pytest.raises(UnsupportedError) as info:
        lower(mod, BuildOptions())
    assert info.value.one_line() == (
        "hostile.relay:2:11: error: a tensor of type Tensor[(1000000, 1000000), float32] holds "
        "4,000,000,000,000 bytes, more than the 4,294,967,296 bytes a tensor may have "
        "(pass config relaycc.max_tensor_bytes)"
    )


def test_a_hundred_thousand_digit_integer_literal_is_out_of_range_not_a_value_error():
    error = refusal("huge integer literal")
    assert error.one_line() == (
        "hostile.relay:3:3: error: integer literal `999999999999999999...999999999999999999 "
        "(100000 characters)` is out of range for int64"
    )


def test_an_integer_literal_just_above_int64_is_out_of_range():
    assert refusal("integer literal above int64").one_line() == (
        "hostile.relay:3:3: error: integer literal `9223372036854775808i64` is out of range for int64"
    )


def test_a_float64_literal_that_overflows_to_infinity_is_out_of_range():
    assert refusal("huge float literal").one_line() == (
        "hostile.relay:3:3: error: float literal `1e999999f64` is out of range for float64"
    )


def test_a_float_literal_of_a_million_digits_is_out_of_range():
    assert refusal("float literal of a million digits").one_line() == (
        "hostile.relay:3:3: error: float literal `999999999999999999...999999999999999.5f "
        "(1000003 characters)` is out of range for float32"
    )


def test_a_metadata_section_that_is_not_json_is_located_at_the_section():
    assert refusal("metadata not JSON").one_line() == (
        "hostile.relay:5:1: error: the metadata section is not valid JSON: Expecting property name "
        "enclosed in double quotes at its line 2, column 3"
    )


def test_a_truncated_metadata_section_is_located_at_the_section():
    error = refusal("metadata truncated")
    assert error.one_line().startswith("hostile.relay:5:1: error: the metadata section is not valid JSON:")


def test_a_reference_past_the_metadata_entries_is_located_at_the_reference():
    assert refusal("metadata missing entry").one_line() == (
        "hostile.relay:3:3: error: meta[relay.Constant][1] is out of range: the metadata section holds 1"
    )


def test_a_reference_to_a_missing_metadata_key_is_located_at_the_reference():
    assert refusal("metadata missing key").one_line() == (
        "hostile.relay:3:3: error: the metadata section has no entry for meta[relay.Constant]"
    )


def test_metadata_json_nested_a_hundred_thousand_deep_is_a_parse_error_not_a_recursion_error():
    assert refusal("metadata nested deeply").one_line() == (
        "hostile.relay:5:1: error: the metadata section nests its JSON too deeply"
    )


def test_non_utf8_bytes_are_an_input_error_at_the_first_bad_byte():
    error = refusal("non-UTF-8 bytes", InputError)
    assert error.one_line() == (
        "hostile.relay:3:6: error: cannot read hostile.relay: not UTF-8 text (invalid start byte at byte 51)"
    )


def test_a_four_mebibyte_line_naming_an_undefined_variable_gives_a_short_located_error():
    error = refusal("4 MiB single line naming an undefined variable")
    assert error.one_line().startswith("hostile.relay:2:26: error: undefined variable %aaaa")
    assert len(error.render()) < 2500


def test_a_four_mebibyte_comment_on_one_line_is_skipped():
    assert str(parsed("4 MiB single line inside a comment").main.body.checked_type) == "float32"


def test_the_corpus_has_an_exact_outcome_for_every_input():
    tested = {
        "parentheses", "calls", "let bindings", "shape product overflowing int64", "a trillion elements",
        "huge integer literal", "integer literal above int64", "huge float literal",
        "float literal of a million digits", "metadata not JSON", "metadata truncated", "metadata missing entry",
        "metadata missing key", "metadata nested deeply", "non-UTF-8 bytes",
        "4 MiB single line naming an undefined variable", "4 MiB single line inside a comment",
    }
    assert set(CORPUS) == tested
