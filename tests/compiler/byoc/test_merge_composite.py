import numpy as np
import pytest

from compiler.byoc.merge_composite import CompositePattern, MergeComposite
from compiler.byoc.pattern import is_constant, is_op, wildcard
from compiler.byoc.pattern_text import parse_pattern
from compiler.ir.expr import Call, Function
from compiler.ir.structural import structural_equal
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.runtime.interpreter import run_main

HEADER = '#[version = "0.0.5"]\n'

MLP = HEADER + """
def @main(%x: Tensor[(4, 8), float32], %w1: Tensor[(6, 8), float32], %b1: Tensor[(6), float32],
          %w2: Tensor[(3, 6), float32], %b2: Tensor[(3), float32]) {
  %0 = nn.dense(%x, %w1, units=None);
  %1 = nn.bias_add(%0, %b1, axis=-1);
  %2 = nn.relu(%1);
  %3 = nn.dense(%2, %w2, units=None);
  nn.bias_add(%3, %b2, axis=-1)
}
"""

MLP_COMPOSITES = HEADER + """
def @main(%x: Tensor[(4, 8), float32], %w1: Tensor[(6, 8), float32], %b1: Tensor[(6), float32],
          %w2: Tensor[(3, 6), float32], %b2: Tensor[(3), float32]) {
  %0 = fn (%a: Tensor[(4, 8), float32], %b: Tensor[(6, 8), float32], %c: Tensor[(6), float32],
           PartitionedFromPattern="nn.dense_nn.bias_add_nn.relu_", Composite="acme.dense_bias_relu") {
    %1 = nn.dense(%a, %b, units=None);
    %2 = nn.bias_add(%1, %c, axis=-1);
    nn.relu(%2)
  };
  %3 = %0(%x, %w1, %b1);
  %4 = fn (%d: Tensor[(4, 6), float32], %e: Tensor[(3, 6), float32], %f: Tensor[(3), float32],
           PartitionedFromPattern="nn.dense_nn.bias_add_", Composite="acme.dense_bias") {
    %5 = nn.dense(%d, %e, units=None);
    nn.bias_add(%5, %f, axis=-1)
  };
  %4(%3, %w2, %b2)
}
"""

DENSE_BIAS_RELU = ("acme.dense_bias_relu", parse_pattern("nn.relu(nn.bias_add(nn.dense(*, *), *))"))
DENSE_BIAS = ("acme.dense_bias", parse_pattern("nn.bias_add(nn.dense(*, *), *)"))


def merge(text, patterns):
    return MergeComposite(patterns)(parse(text))


def composites(mod, name="main"):
    """The composite functions called in @name, in the order their calls are evaluated."""
    return [
        n.op
        for n in post_order(mod[name].body)
        if isinstance(n, Call) and isinstance(n.op, Function) and "Composite" in n.op.attrs
    ]


def assert_merges(before, patterns, expected):
    after = merge(before, patterns)
    assert structural_equal(after, parse(expected)), after.astext()
    return after


def test_mlp_layers_become_composites_in_priority_order():
    after = assert_merges(MLP, [DENSE_BIAS_RELU, DENSE_BIAS], MLP_COMPOSITES)
    first, second = composites(after)
    assert first.attrs["Composite"] == "acme.dense_bias_relu"
    assert [p.name_hint for p in first.params] == ["FunctionVar_0_0", "FunctionVar_0_1", "FunctionVar_0_2"]
    # The counter restarts for every pattern, so the second composite reuses the same names.
    assert [p.name_hint for p in second.params] == ["FunctionVar_0_0", "FunctionVar_0_1", "FunctionVar_0_2"]
    assert list(first.attrs) == ["PartitionedFromPattern", "Composite"]


def test_composites_compute_what_the_original_computed():
    before = parse(MLP)
    after = MergeComposite([DENSE_BIAS_RELU, DENSE_BIAS])(before)
    rng = np.random.default_rng(0)
    inputs = {p.name_hint: rng.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32")
              for p in before.main.params}
    np.testing.assert_allclose(run_main(after, inputs)[0], run_main(before, inputs)[0], rtol=1e-6)


def test_earlier_pattern_wins_when_patterns_overlap():
    after = merge(MLP, [DENSE_BIAS, DENSE_BIAS_RELU])
    names = [f.attrs["Composite"] for f in composites(after)]
    assert names == ["acme.dense_bias", "acme.dense_bias"]
    relus = [n for n in post_order(after.main.body) if isinstance(n, Call) and getattr(n.op, "name", None) == "nn.relu"]
    assert len(relus) == 1  # left between the two composites


CHAIN = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = add(%x, %y);
  %1 = nn.relu(%0);
  %2 = add(%1, %y);
  nn.relu(%2)
}
"""


def test_candidates_are_numbered_from_the_result_towards_the_inputs():
    after = merge(CHAIN, [("acme.add_relu", parse_pattern("nn.relu(add(*, *))"))])
    inner, outer = composites(after)
    assert [p.name_hint for p in outer.params] == ["FunctionVar_0_0", "FunctionVar_0_1"]
    assert [p.name_hint for p in inner.params] == ["FunctionVar_1_0", "FunctionVar_1_1"]


SHARED_INTERIOR = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = add(%x, %y);
  %1 = nn.relu(%0);
  (%1, %0)
}
"""


def test_match_whose_interior_value_is_used_outside_is_rejected():
    after = merge(SHARED_INTERIOR, [("acme.add_relu", parse_pattern("nn.relu(add(*, *))"))])
    assert structural_equal(after, parse(SHARED_INTERIOR))


def test_shared_root_and_shared_inputs_are_fine():
    expected = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = fn (%a: Tensor[(3), float32], %b: Tensor[(3), float32],
           PartitionedFromPattern="add_nn.relu_", Composite="acme.add_relu") {
    nn.relu(add(%a, %b))
  };
  %1 = %0(%x, %y);
  (%1, %1, %x)
}
"""
    before = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = nn.relu(add(%x, %y));
  (%0, %0, %x)
}
"""
    assert_merges(before, [("acme.add_relu", parse_pattern("nn.relu(add(*, *))"))], expected)


def test_rejected_candidates_still_take_a_number():
    before = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = add(%x, %y);
  %1 = nn.relu(%0);
  %2 = nn.relu(add(%1, %y));
  (%2, %0)
}
"""
    after = merge(before, [("acme.add_relu", parse_pattern("nn.relu(add(*, *))"))])
    (only,) = composites(after)
    # The candidate at %2 is accepted (number 0); the one at %1 is rejected (number 1, its add
    # is also a result); nothing takes number 2.
    assert [p.name_hint for p in only.params] == ["FunctionVar_0_0", "FunctionVar_0_1"]
    after = merge(before, [("acme.relu_add", parse_pattern("add(nn.relu(add(*, *)), *)"))])
    assert composites(after) == []


def test_input_used_by_several_leaves_is_one_param():
    expected = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = fn (%a: Tensor[(3), float32], PartitionedFromPattern="multiply_", Composite="acme.square") {
    multiply(%a, %a)
  };
  %0(%x)
}
"""
    before = HEADER + "def @main(%x: Tensor[(3), float32]) { multiply(%x, %x) }"
    after = assert_merges(before, [("acme.square", is_op("multiply")(wildcard(), wildcard()))], expected)
    assert [p.name_hint for p in composites(after)[0].params] == ["FunctionVar_0_0"]


def test_constants_matched_by_const_are_embedded_and_by_wildcard_are_params():
    before = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  nn.relu(add(%x, 2f))
}
"""
    embedded = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = fn (%a: Tensor[(3), float32], PartitionedFromPattern="add_nn.relu_", Composite="acme.add_const_relu") {
    nn.relu(add(%a, 2f))
  };
  %0(%x)
}
"""
    passed = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = fn (%a: Tensor[(3), float32], %b: float32, PartitionedFromPattern="add_nn.relu_", Composite="acme.add_relu") {
    nn.relu(add(%a, %b))
  };
  %0(%x, 2f)
}
"""
    assert_merges(before, [("acme.add_const_relu", is_op("nn.relu")(is_op("add")(wildcard(), is_constant())))], embedded)
    assert_merges(before, [("acme.add_relu", parse_pattern("nn.relu(add(*, *))"))], passed)


def test_commutative_match_keeps_the_pattern_leaf_order_for_params():
    before = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  add(nn.relu(%x), %y)
}
"""
    after = merge(before, [("acme.bias_relu", parse_pattern("add(*, nn.relu(*))"))])
    call = after.main.body
    # Leaves in pattern order: the `*` added (%y), then relu's operand (%x).
    assert [a.name_hint for a in call.args] == ["y", "x"]


def test_partitioned_from_pattern_names_tuples_and_projections():
    before = HEADER + """
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = split(%x, indices_or_sections=2);
  %1 = concatenate((%0.0, %y));
  nn.relu(%1)
}
"""
    after = merge(before, [("acme.cat", parse_pattern("nn.relu(concatenate((split(*).0, *)))"))])
    (composite,) = composites(after)
    assert composite.attrs["PartitionedFromPattern"] == "split_TupleGetItem0_Tuple_concatenate_nn.relu_"


def test_check_callback_vetoes_a_match_without_blocking_smaller_ones():
    before = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  nn.relu(add(%x, %y))
}
"""
    pattern = is_op("add")(wildcard(), wildcard()).optional(lambda p: is_op("nn.relu")(p))
    seen = []

    def only_plain_add(root):
        seen.append(root)
        return root.op.name == "add"

    after = merge(before, [CompositePattern("acme.add", pattern, only_plain_add)])
    (composite,) = composites(after)
    assert composite.attrs["PartitionedFromPattern"] == "add_"
    assert [r.op.name for r in seen] == ["nn.relu", "add"]
    assert after.main.body.op.name == "nn.relu"


def test_composite_bodies_are_not_matched_again():
    once = merge(MLP, [DENSE_BIAS_RELU, DENSE_BIAS])
    twice = MergeComposite([("acme.relu", parse_pattern("nn.relu(*)")), DENSE_BIAS])(once)
    assert structural_equal(twice, once)


def test_functions_owned_by_a_codegen_or_primitive_are_left_alone():
    before = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = @ext(%x);
  nn.relu(%0)
}
def @ext(%a: Tensor[(3), float32], Compiler="other", global_symbol="ext") {
  nn.relu(%a)
}
"""
    after = merge(before, [("acme.relu", parse_pattern("nn.relu(*)"))])
    assert structural_equal(after["ext"], parse(before)["ext"])
    assert len(composites(after)) == 1


def test_table_entries_are_validated():
    with pytest.raises(ValueError, match="non-empty name"):
        MergeComposite([("", wildcard())])(parse(MLP))
    with pytest.raises(ValueError, match="expected a Pattern"):
        MergeComposite([("acme.x", "nn.relu(*)")])(parse(MLP))
    with pytest.raises(ValueError, match=r"\(name, pattern\)"):
        MergeComposite([("acme.x",)])(parse(MLP))


def test_a_bare_wildcard_pattern_wraps_nothing():
    assert structural_equal(merge(MLP, [("acme.any", wildcard())]), parse(MLP))
