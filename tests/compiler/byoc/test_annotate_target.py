import pytest

from compiler.byoc.annotate_target import AnnotateTarget
from compiler.byoc.merge_composite import MergeComposite
from compiler.byoc.pattern_text import parse_pattern
from compiler.diagnostics import CompileError
from compiler.ir.expr import Call
from compiler.ir.structural import structural_equal
from compiler.ir.visitor import post_order
from compiler.parser import parse

HEADER = '#[version = "0.0.5"]\n'


def ops_named(*names):
    return lambda call: call.op.name in names


def assert_annotates(before, expected, targets, predicates=None, patterns=None):
    mod = parse(before)
    if patterns:
        mod = MergeComposite(patterns)(mod)
    after = AnnotateTarget(targets, predicates)(mod)
    assert structural_equal(after, parse(expected)), after.astext()
    return after


def test_supported_operators_get_begins_on_inputs_and_ends_on_results():
    before = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = add(%x, %y);
  %1 = nn.relu(%0);
  exp(%1)
}
"""
    expected = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="acme");
  %1 = annotation.compiler_begin(%y, compiler="acme");
  %2 = add(%0, %1);
  %3 = annotation.compiler_end(%2, compiler="acme");
  %4 = annotation.compiler_begin(%3, compiler="acme");
  %5 = nn.relu(%4);
  %6 = annotation.compiler_end(%5, compiler="acme");
  exp(%6)
}
"""
    assert_annotates(before, expected, ["acme"], {"acme": ops_named("add", "nn.relu")})


def test_composite_calls_are_claimed_by_their_name_prefix():
    before = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  nn.relu(add(%x, %y))
}
"""
    expected = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = fn (%a: Tensor[(3), float32], %b: Tensor[(3), float32],
           PartitionedFromPattern="add_nn.relu_", Composite="acme.add_relu") {
    nn.relu(add(%a, %b))
  };
  %1 = annotation.compiler_begin(%x, compiler="acme");
  %2 = annotation.compiler_begin(%y, compiler="acme");
  %3 = %0(%1, %2);
  annotation.compiler_end(%3, compiler="acme")
}
"""
    patterns = [("acme.add_relu", parse_pattern("nn.relu(add(*, *))"))]
    assert_annotates(before, expected, ["acme"], patterns=patterns)
    untouched = MergeComposite(patterns)(parse(before))
    assert structural_equal(AnnotateTarget(["acm"])(untouched), untouched)
    assert structural_equal(AnnotateTarget(["acme.add_relu"])(untouched), untouched)


def test_the_first_target_that_accepts_a_call_takes_it():
    before = HEADER + "def @main(%x: Tensor[(3), float32]) { nn.relu(%x) }"
    both = {"first": ops_named("nn.relu"), "second": ops_named("nn.relu")}
    after = AnnotateTarget(["second", "first"], both)(parse(before))
    assert after.main.body.attrs["compiler"] == "second"
    after = AnnotateTarget(["first", "second"], {"second": ops_named("nn.relu")})(parse(before))
    assert after.main.body.attrs["compiler"] == "second"


def test_values_flowing_between_regions_pass_an_end_and_a_begin():
    before = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = nn.relu(%x);
  %1 = exp(%0);
  %2 = negative(%1);
  add(%0, %2)
}
"""
    expected = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="a");
  %1 = nn.relu(%0);
  %2 = annotation.compiler_end(%1, compiler="a");
  %3 = annotation.compiler_begin(%2, compiler="b");
  %4 = exp(%3);
  %5 = annotation.compiler_end(%4, compiler="b");
  %6 = negative(%5);
  %7 = annotation.compiler_begin(%2, compiler="a");
  %8 = annotation.compiler_begin(%6, compiler="a");
  %9 = add(%7, %8);
  annotation.compiler_end(%9, compiler="a")
}
"""
    after = assert_annotates(before, expected, ["a", "b"], {"a": ops_named("nn.relu", "add"), "b": ops_named("exp")})
    # One compiler_end per produced value (the relu's serves both of its consumers).
    ends = [n for n in post_order(after.main.body) if isinstance(n, Call) and n.op.name == "annotation.compiler_end"]
    assert len(ends) == 3 and len({id(e.args[0]) for e in ends}) == 3


def test_tuples_and_projections_follow_their_producers():
    before = HEADER + """
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = split(%x, indices_or_sections=2);
  %1 = %0.0;
  %2 = (%1, %y);
  %3 = (%1, %1);
  %4 = concatenate(%2);
  %5 = concatenate(%3);
  (%4, %5, %x)
}
"""
    expected = HEADER + """
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="acme");
  %1 = split(%0, indices_or_sections=2);
  %2 = annotation.compiler_end(%1, compiler="acme");
  %3 = annotation.compiler_begin(%2, compiler="acme");
  %4 = %3.0;
  %5 = annotation.compiler_end(%4, compiler="acme");
  %6 = (%5, %y);
  %7 = annotation.compiler_begin(%6, compiler="acme");
  %8 = concatenate(%7);
  %9 = annotation.compiler_end(%8, compiler="acme");
  %10 = annotation.compiler_begin(%5, compiler="acme");
  %11 = (%10, %10);
  %12 = annotation.compiler_end(%11, compiler="acme");
  %13 = annotation.compiler_begin(%12, compiler="acme");
  %14 = concatenate(%13);
  %15 = annotation.compiler_end(%14, compiler="acme");
  (%9, %15, %x)
}
"""
    assert_annotates(before, expected, ["acme"], {"acme": ops_named("split", "concatenate")})


def test_predicates_see_typed_calls():
    before = HEADER + """
def @main(%x: Tensor[(3), float32], %i: Tensor[(3), int32]) {
  %0 = nn.relu(%x);
  %1 = abs(%i);
  (%0, %1)
}
"""
    float_only = {"acme": lambda call: call.checked_type.dtype == "float32"}
    after = AnnotateTarget(["acme"], float_only)(parse(before))
    first, second = after.main.body.fields
    assert first.op.name == "annotation.compiler_end"
    assert second.op.name == "abs"


def test_calls_without_arguments_stay_on_the_host():
    before = HEADER + "def @main(%x: Tensor[(3), float32]) { add(%x, zeros(shape=[3], dtype=\"float32\")) }"
    after = AnnotateTarget(["acme"], {"acme": lambda call: True})(parse(before))
    add = after.main.body.args[0]
    assert add.args[1].op.name == "annotation.compiler_begin"
    assert add.args[1].args[0].op.name == "zeros"


def test_function_literals_and_other_functions_are_not_entered():
    before = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = fn (%a: Tensor[(3), float32]) { nn.relu(%a) };
  %1 = %0(%x);
  @helper(%1)
}
def @helper(%b: Tensor[(3), float32], Primitive=1) { nn.relu(%b) }
"""
    mod = parse(before)
    assert structural_equal(AnnotateTarget(["acme"], {"acme": ops_named("nn.relu")})(mod), mod)


def test_annotating_twice_is_an_error():
    before = HEADER + "def @main(%x: Tensor[(3), float32]) { nn.relu(%x) }"
    once = AnnotateTarget(["acme"], {"acme": ops_named("nn.relu")})(parse(before))
    with pytest.raises(CompileError, match="already carries region annotations"):
        AnnotateTarget(["acme"], {"acme": ops_named("nn.relu")})(once)


def test_target_names_are_validated():
    with pytest.raises(ValueError, match="invalid codegen name"):
        AnnotateTarget(["default"])
    with pytest.raises(ValueError, match="not among the targets"):
        AnnotateTarget(["acme"], {"other": ops_named("add")})
    assert AnnotateTarget("acme").targets == ("acme",)
