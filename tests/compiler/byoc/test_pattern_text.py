import pytest

from compiler.byoc.pattern import (
    AltPattern,
    AttrPattern,
    CallPattern,
    ConstantPattern,
    TupleGetItemPattern,
    TuplePattern,
    WildcardPattern,
)
from compiler.byoc.pattern_text import parse_pattern
from compiler.diagnostics import ParseError
from compiler.ir.expr import Function
from compiler.parser import parse_expr


def body(text):
    func = parse_expr(text)
    assert isinstance(func, Function)
    return func.body


def test_nested_calls_with_wildcards_round_trip_through_text():
    text = "nn.relu(nn.bias_add(nn.dense(*, *), *))"
    pattern = parse_pattern(text)
    assert isinstance(pattern, CallPattern) and pattern.op.name == "nn.relu"
    assert str(pattern) == text


def test_each_star_is_its_own_wildcard():
    pattern = parse_pattern("add(*, *)")
    first, second = pattern.args
    assert isinstance(first, WildcardPattern) and first is not second
    assert pattern.match(body("fn (%x: Tensor[(3), float32], %y: Tensor[(3), float32]) { add(%x, %y) }"))


def test_const_matches_only_constants():
    pattern = parse_pattern("subtract(*, const)")
    assert isinstance(pattern.args[1], ConstantPattern)
    assert pattern.match(body("fn (%x: Tensor[(3), float32]) { subtract(%x, 2f) }"))
    assert not pattern.match(body("fn (%x: Tensor[(3), float32], %y: Tensor[(3), float32]) { subtract(%x, %y) }"))


def test_alternatives_have_the_lowest_precedence():
    pattern = parse_pattern("nn.relu(*) | exp(*) | negative(*)")
    assert isinstance(pattern, AltPattern) and isinstance(pattern.left, AltPattern)
    assert pattern.match(body("fn (%x: Tensor[(3), float32]) { negative(%x) }"))


def test_parentheses_group_alternatives_inside_a_call():
    pattern = parse_pattern("nn.relu((add(*, *) | subtract(*, *)))")
    assert isinstance(pattern.args[0], AltPattern)
    assert pattern.match(body("fn (%x: Tensor[(3), float32]) { nn.relu(subtract(%x, %x)) }"))
    # Arguments are separated by commas, so the parentheses there are optional.
    assert str(pattern) == "nn.relu(add(*, *) | subtract(*, *))"
    assert str(parse_pattern(str(pattern))) == str(pattern)
    grouped = parse_pattern("(nn.relu(*) | exp(*)).0")
    assert isinstance(grouped, TupleGetItemPattern) and isinstance(grouped.tuple, AltPattern)


def test_tuples_and_projections():
    pattern = parse_pattern("concatenate((*, *))")
    assert isinstance(pattern.args[0], TuplePattern) and len(pattern.args[0].fields) == 2
    one = parse_pattern("(*,)")
    assert isinstance(one, TuplePattern) and len(one.fields) == 1
    projection = parse_pattern("split(*).1")
    assert isinstance(projection, TupleGetItemPattern) and projection.index == 1
    assert projection.match(body("fn (%x: Tensor[(4), float32]) { %0 = split(%x, indices_or_sections=2); %0.1 }"))


def test_attribute_constraints_follow_an_operator_call():
    pattern = parse_pattern('nn.conv2d(*, *){data_layout="NCHW", strides=[1, 1], groups=1}')
    assert isinstance(pattern, AttrPattern)
    assert dict(pattern.attrs) == {"data_layout": "NCHW", "strides": (1, 1), "groups": 1}
    call = "fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {{ {} }}"
    assert pattern.match(body(call.format("nn.conv2d(%x, %w)")))
    assert not pattern.match(body(call.format("nn.conv2d(%x, %w, strides=[2, 2])")))


def test_attribute_values_of_every_kind_parse():
    pattern = parse_pattern("nn.leaky_relu(*){alpha=0.5}")
    assert dict(pattern.attrs) == {"alpha": 0.5}
    pattern = parse_pattern("nn.softmax(*){axis=-1}")
    assert dict(pattern.attrs) == {"axis": -1}


def error_at(text, name="<pattern p>"):
    with pytest.raises(ParseError) as info:
        parse_pattern(text, name)
    return info.value


def test_misspelled_operator_is_reported_at_its_column_with_a_suggestion():
    err = error_at("nn.relu(nn.bais_add(*, *))", "<pattern dense_bias_relu>")
    assert "unknown operator nn.bais_add; did you mean nn.bias_add?" in err.message
    assert (err.line, err.column) == (1, 9)
    assert err.span.source_name == "<pattern dense_bias_relu>"
    assert err.render().splitlines()[-1] == "          ^~~~~~~~~~~"


def test_unknown_attribute_is_reported_at_the_key():
    err = error_at('nn.conv2d(*, *){data_layot="NCHW"}')
    assert "has no attribute data_layot" in err.message
    assert err.column == 17


def test_bad_attribute_value_is_reported_at_the_value():
    err = error_at('nn.conv2d(*, *){strides="wide"}')
    assert "strides expects a list of integers" in err.message
    assert err.column == 25


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("", "empty pattern", 1),
        ("nn.relu", "expected `(` after operator nn.relu", 8),
        ("nn.relu(*", "expected `,` or `)`", 10),
        ("add(*)", "add takes 2 arguments, the pattern gives 1", 1),
        ("nn.relu(*) nn.relu(*)", "unexpected `nn.relu` after the pattern", 12),
        ("*{axis=1}", "must follow an operator call", 2),
        ("nn.relu(#)", "unexpected character '#'", 9),
        ("split(*).x", "expected a tuple index", 10),
        ("split(*).-1", "cannot be negative", 10),
        ("nn.relu(*) |", "expected a pattern", 13),
        ('nn.softmax(*){axis=1, axis=2}', "constrained twice", 23),
    ],
)
def test_malformed_patterns_give_located_parse_errors(text, message, column):
    err = error_at(text)
    assert message in err.message
    assert err.column == column


def test_errors_on_later_lines_report_the_line():
    err = error_at("nn.relu(\n  nn.rleu(*))")
    assert (err.line, err.column) == (2, 3)


def test_deeply_nested_text_is_a_parse_error_not_a_crash():
    text = "nn.relu(" * 5000 + "*" + ")" * 5000
    err = error_at(text)
    assert "nested more than" in err.message
