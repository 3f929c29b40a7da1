import pytest

from compiler.byoc.pattern import (
    MAX_PATTERN_DEPTH,
    AltPattern,
    PatternError,
    WildcardPattern,
    find_match,
    is_constant,
    is_expr,
    is_op,
    is_tuple,
    is_tuple_get_item,
    is_var,
    pattern_post_order,
    wildcard,
)
from compiler.ir.expr import Call, Function, Op, Var
from compiler.parser import parse_expr


def body(text):
    """The body of a function literal written in Relay text."""
    func = parse_expr(text)
    assert isinstance(func, Function)
    return func.body


DENSE_BIAS_RELU = """fn (%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32], %b: Tensor[(4), float32]) {
  %0 = nn.dense(%x, %w, units=None);
  %1 = nn.bias_add(%0, %b);
  nn.relu(%1)
}"""


def dense_bias_relu_pattern():
    dense = is_op("nn.dense")(wildcard(), wildcard())
    return is_op("nn.relu")(is_op("nn.bias_add")(dense, wildcard()))


def test_call_pattern_matches_nested_operator_calls_and_binds_inputs():
    expr = body(DENSE_BIAS_RELU)
    x, w, b = parse_vars(expr)
    pattern = dense_bias_relu_pattern()
    match = find_match(pattern, expr)
    assert match is not None and match.root is expr
    wildcards = [p for p in pattern_post_order(pattern) if isinstance(p, WildcardPattern)]
    assert [match.bindings[p] for p in wildcards] == [x, w, b]


def parse_vars(expr):
    """The params x, w, b of the dense-bias-relu body, found from the calls."""
    bias_add = expr.args[0]
    dense = bias_add.args[0]
    return dense.args[0], dense.args[1], bias_add.args[1]


def test_call_pattern_rejects_other_operator_and_wrong_arity():
    expr = body(DENSE_BIAS_RELU)
    assert not is_op("sigmoid")(wildcard()).match(expr)
    assert not is_op("nn.relu")(is_op("nn.dense")(wildcard(), wildcard())).match(expr)


def test_operator_names_are_checked_against_the_registry():
    with pytest.raises(PatternError, match=r"unknown operator nn\.rleu; did you mean nn\.relu\?"):
        is_op("nn.rleu")
    with pytest.raises(PatternError, match="add takes 2 arguments, the pattern gives 1"):
        is_op("add")(wildcard())


def test_add_and_multiply_match_with_swapped_arguments():
    expr = body("fn (%x: Tensor[(3), float32]) { add(%x, 1f) }")
    assert is_op("add")(is_constant(), is_var()).match(expr)
    assert is_op("add")(is_var(), is_constant()).match(expr)
    sub = body("fn (%x: Tensor[(3), float32]) { subtract(%x, 1f) }")
    assert is_op("subtract")(is_var(), is_constant()).match(sub)
    assert not is_op("subtract")(is_constant(), is_var()).match(sub)


def test_one_pattern_node_must_match_one_expression():
    w = wildcard()
    twice = is_op("add")(w, w)
    assert twice.match(body("fn (%x: Tensor[(3), float32]) { add(%x, %x) }"))
    assert not twice.match(body("fn (%x: Tensor[(3), float32], %y: Tensor[(3), float32]) { add(%x, %y) }"))


def test_alternative_tries_left_then_right_and_forgets_failed_bindings():
    expr = body("fn (%x: Tensor[(3), float32]) { nn.relu(%x) }")
    w = wildcard()
    pattern = is_op("nn.relu")(is_op("exp")(w) | w)
    match = find_match(pattern, expr)
    assert match is not None
    assert match.bindings[w] is expr.args[0]


def test_optional_matches_with_and_without_the_wrapper():
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    pattern = conv.optional(lambda p: is_op("nn.relu")(p))
    assert isinstance(pattern, AltPattern)
    text = """fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {{
      {}
    }}"""
    assert pattern.match(body(text.format("nn.relu(nn.conv2d(%x, %w))")))
    assert pattern.match(body(text.format("nn.conv2d(%x, %w)")))
    assert not pattern.match(body(text.format("nn.relu(nn.relu(%x))")))


def test_has_attr_compares_call_attributes_with_defaults_filled_in():
    text = "fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {{ {} }}"
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    nchw = conv.has_attr({"data_layout": "NCHW", "strides": [1, 1]})
    assert nchw.match(body(text.format("nn.conv2d(%x, %w)")))
    assert not nchw.match(body(text.format("nn.conv2d(%x, %w, strides=[2, 2])")))
    built = Call(Op.get("nn.conv2d"), body(text.format("nn.conv2d(%x, %w)")).args)
    assert nchw.match(built)  # attrs left out take the operator's defaults


def test_has_attr_rejects_unknown_attribute_and_bad_value():
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    with pytest.raises(PatternError, match="has no attribute data_layot"):
        conv.has_attr({"data_layot": "NCHW"})
    with pytest.raises(PatternError, match="strides expects a list of integers"):
        conv.has_attr({"strides": "wide"})
    with pytest.raises(PatternError, match="attributes constrain calls"):
        is_op("nn.conv2d").has_attr({"strides": [1, 1]})


def test_has_attr_on_function_patterns_reads_function_attributes():
    func = parse_expr('fn (%x: Tensor[(3), float32], Composite="acme.relu") { nn.relu(%x) }')
    call = Call(func, (Var("y"),))
    composite = wildcard().has_attr({"Composite": "acme.relu"})
    assert composite(wildcard()).match(call)
    assert not wildcard().has_attr({"Composite": "acme.other"})(wildcard()).match(call)


def test_var_constant_and_expr_patterns():
    expr = body("fn (%x: Tensor[(3), float32]) { add(%x, 2f) }")
    assert is_op("add")(is_var("x"), is_constant()).match(expr)
    assert not is_op("add")(is_var("y"), is_constant()).match(expr)
    two = parse_expr("2f")
    assert is_op("add")(wildcard(), is_expr(two)).match(expr)
    assert not is_op("add")(wildcard(), is_expr(parse_expr("3f"))).match(expr)


def test_tuple_and_projection_patterns():
    split = body("fn (%x: Tensor[(4), float32]) { %0 = split(%x, indices_or_sections=2); %0.1 }")
    assert is_tuple_get_item(is_op("split")(wildcard()), 1).match(split)
    assert is_tuple_get_item(is_op("split")(wildcard())).match(split)
    assert not is_tuple_get_item(is_op("split")(wildcard()), 0).match(split)
    concat = body("fn (%x: Tensor[(4), float32], %y: Tensor[(4), float32]) { concatenate((%x, %y)) }")
    assert is_op("concatenate")(is_tuple([wildcard(), wildcard()])).match(concat)
    assert not is_op("concatenate")(is_tuple([wildcard()])).match(concat)


def test_arithmetic_sugar_builds_operator_calls():
    pattern = wildcard() * wildcard() + wildcard()
    expr = body("fn (%a: Tensor[(3), float32], %b: Tensor[(3), float32]) { add(multiply(%a, %b), %b) }")
    assert pattern.match(expr)
    assert str(pattern) == "add(multiply(*, *), *)"


def test_patterns_have_bounded_depth():
    pattern = wildcard()
    for _ in range(MAX_PATTERN_DEPTH - 2):
        pattern = is_op("nn.relu")(pattern)
    with pytest.raises(PatternError, match="nested more than"):
        is_op("nn.relu")(is_op("nn.relu")(pattern))


def test_matching_a_deep_expression_follows_only_the_pattern():
    x = Var("x")
    expr = x
    for _ in range(50_000):
        expr = Call(Op.get("nn.relu"), (expr,))
    assert is_op("nn.relu")(is_op("nn.relu")(wildcard())).match(expr)
