import pytest

from compiler.byoc.regions import (
    CycleError,
    compiler_begin,
    compiler_end,
    dependency_order,
    find_regions,
    is_begin,
    is_end,
)
from compiler.diagnostics import CompileError
from compiler.ir.expr import Call, Op, Var
from compiler.parser import parse

HEADER = '#[version = "0.0.5"]\n'


def body_of(text):
    return parse(HEADER + text).main.body


TWO_REGIONS = """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="a");
  %1 = annotation.compiler_begin(%y, compiler="a");
  %2 = add(%0, %1);
  %3 = nn.relu(%2);
  %4 = annotation.compiler_end(%3, compiler="a");
  %5 = annotation.compiler_end(%2, compiler="a");
  %6 = exp(%4);
  %7 = annotation.compiler_begin(%6, compiler="b");
  %8 = annotation.compiler_begin(%5, compiler="b");
  %9 = subtract(%7, %8);
  annotation.compiler_end(%9, compiler="b")
}
"""


def test_regions_are_numbered_in_post_order_with_their_inputs_and_outputs():
    body = body_of(TWO_REGIONS)
    found = find_regions(body)
    first, second = found.regions
    assert (first.index, first.target, second.index, second.target) == (0, "a", 1, "b")
    assert [v.name_hint for v in first.producers] == ["x", "y"]
    assert [end.args[0].op.name for end in first.outputs] == ["nn.relu", "add"]
    assert [p.op.name for p in second.producers] == ["exp", "annotation.compiler_end"]
    assert [n.op.name for n in first.nodes if isinstance(n, Call) and not is_begin(n) and not is_end(n)] == [
        "add",
        "nn.relu",
    ]
    host = [n for n in found.order if isinstance(n, Call) and n not in found.region_of]
    assert [n.op.name for n in host] == ["exp"]


def test_constants_and_operators_inside_a_region_belong_to_no_region():
    body = body_of("""
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="a");
  %1 = add(%0, 1f);
  %2 = annotation.compiler_end(%1, compiler="a");
  %3 = annotation.compiler_begin(%x, compiler="a");
  %4 = add(%3, 1f);
  %5 = annotation.compiler_end(%4, compiler="a");
  (%2, %5)
}
""")
    found = find_regions(body)
    # The two adds share the interned operator and may share a constant, yet stay apart.
    assert len(found.regions) == 2


def test_value_leaving_a_region_without_an_end_is_an_error():
    with pytest.raises(CompileError, match="used outside it without a compiler_end"):
        find_regions(body_of("""
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="a");
  %1 = nn.relu(%0);
  %2 = annotation.compiler_end(%1, compiler="a");
  (%2, %1)
}
"""))


def test_begin_without_an_end_is_an_error():
    with pytest.raises(CompileError, match="not followed by a compiler_end"):
        find_regions(body_of("""
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="a");
  nn.relu(%0)
}
"""))


def test_end_directly_inside_another_region_is_an_error():
    with pytest.raises(CompileError, match="used inside a region without a compiler_begin"):
        find_regions(body_of("""
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="a");
  %1 = annotation.compiler_end(%0, compiler="a");
  %2 = nn.relu(%1);
  annotation.compiler_end(%2, compiler="b")
}
"""))


def test_region_with_two_targets_is_an_error_at_the_second_annotation():
    with pytest.raises(CompileError, match='mixes annotations for "a" and "b"') as info:
        find_regions(body_of("""
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="a");
  %1 = nn.relu(%0);
  annotation.compiler_end(%1, compiler="b")
}
"""))
    assert info.value.line == 6  # the compiler_end, after the header and the def line


def test_annotation_helpers_build_calls_of_the_annotation_ops():
    x = Var("x")
    begin = compiler_begin(x, "a")
    end = compiler_end(begin, "a")
    assert begin.op is Op.get("annotation.compiler_begin") and begin.attrs["compiler"] == "a"
    assert is_begin(begin) and is_end(end) and not is_end(begin)


def test_dependency_order_puts_dependencies_first_and_reports_cycles():
    deps = {"d": ["b", "c"], "b": ["a"], "c": ["a", "b"], "a": []}
    assert dependency_order(["d"], deps.__getitem__) == ["a", "b", "c", "d"]
    cyclic = {"a": ["b"], "b": ["c"], "c": ["a"]}
    with pytest.raises(CycleError):
        dependency_order(["a"], cyclic.__getitem__)


def test_dependency_order_handles_long_chains_without_recursion():
    n = 100_000
    order = dependency_order([n], lambda i: [i - 1] if i > 0 else [])
    assert order[0] == 0 and order[-1] == n
