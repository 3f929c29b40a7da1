import numpy as np
import pytest

from compiler.byoc.annotate_target import AnnotateTarget
from compiler.byoc.merge_compiler_regions import MergeCompilerRegions
from compiler.byoc.partition_graph import PartitionGraph
from compiler.diagnostics import CompileError
from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.runtime.interpreter import run_main

HEADER = '#[version = "0.0.5"]\n'


def ops_named(*names):
    return lambda call: call.op.name in names


def annotate(text, predicates):
    return AnnotateTarget(list(predicates), predicates)(parse(text))


def assert_merges(before_annotated, expected):
    after = MergeCompilerRegions()(before_annotated)
    assert structural_equal(after, parse(expected)), after.astext()
    return after


def test_a_chain_of_one_target_becomes_one_region():
    before = annotate(
        HEADER
        + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = add(%x, %y);
  %1 = nn.relu(%0);
  exp(%1)
}
""",
        {"acme": ops_named("add", "nn.relu", "exp")},
    )
    expected = HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="acme");
  %1 = annotation.compiler_begin(%y, compiler="acme");
  %2 = add(%0, %1);
  %3 = nn.relu(%2);
  %4 = exp(%3);
  annotation.compiler_end(%4, compiler="acme")
}
"""
    assert_merges(before, expected)


DIAMOND_THROUGH_HOST = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = nn.relu(%x);
  %1 = exp(%0);
  add(%0, %1)
}
"""


def test_regions_joined_by_a_path_through_the_host_stay_apart():
    # relu -> exp (host) -> add and relu -> add: merging relu with add would make the merged
    # region both feed and consume the host's exp.
    before = annotate(DIAMOND_THROUGH_HOST, {"acme": ops_named("nn.relu", "add")})
    assert_merges(before, before.astext())
    partitioned = PartitionGraph()(MergeCompilerRegions()(before))
    assert sorted(gv.name_hint for gv in partitioned) == [
        "main",
        "tvmgen_default_acme_main_0",
        "tvmgen_default_acme_main_1",
    ]


def test_regions_joined_by_a_path_through_another_target_stay_apart():
    before = annotate(DIAMOND_THROUGH_HOST, {"a": ops_named("nn.relu", "add"), "b": ops_named("exp")})
    assert_merges(before, before.astext())


def test_a_diamond_of_one_target_merges_completely():
    before = annotate(DIAMOND_THROUGH_HOST, {"acme": ops_named("nn.relu", "exp", "add")})
    expected = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="acme");
  %1 = nn.relu(%0);
  %2 = exp(%1);
  %3 = add(%1, %2);
  annotation.compiler_end(%3, compiler="acme")
}
"""
    assert_merges(before, expected)


def test_merging_stops_where_a_merged_group_reaches_another_producer():
    before = annotate(
        HEADER
        + """
def @main(%x: Tensor[(3), float32]) {
  %0 = nn.relu(%x);
  %1 = exp(%0);
  %2 = add(%0, %x);
  %3 = negative(%1);
  multiply(%2, %3)
}
""",
        {"a": ops_named("nn.relu", "add", "multiply", "negative"), "b": ops_named("exp")},
    )
    # relu and add merge (a direct edge). negative's input comes from exp (target b), so it
    # starts a region of its own, which multiply joins; multiply may not also join relu+add:
    # that group reaches negative through exp.
    expected = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="a");
  %1 = nn.relu(%0);
  %2 = annotation.compiler_end(%1, compiler="a");
  %3 = annotation.compiler_begin(%2, compiler="b");
  %4 = exp(%3);
  %5 = annotation.compiler_end(%4, compiler="b");
  %6 = annotation.compiler_begin(%x, compiler="a");
  %7 = add(%1, %6);
  %8 = annotation.compiler_end(%7, compiler="a");
  %9 = annotation.compiler_begin(%8, compiler="a");
  %10 = annotation.compiler_begin(%5, compiler="a");
  %11 = negative(%10);
  %12 = multiply(%9, %11);
  annotation.compiler_end(%12, compiler="a")
}
"""
    assert_merges(before, expected)


def test_default_regions_written_by_tvm_are_never_merged():
    before = parse(HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="default");
  %1 = nn.relu(%0);
  %2 = annotation.compiler_end(%1, compiler="default");
  %3 = annotation.compiler_begin(%2, compiler="default");
  %4 = exp(%3);
  annotation.compiler_end(%4, compiler="default")
}
""")
    assert_merges(before, before.astext())


def test_modules_without_annotations_are_unchanged():
    mod = parse(DIAMOND_THROUGH_HOST)
    assert MergeCompilerRegions()(mod) is mod


def test_regions_that_depend_on_each_other_are_an_error():
    cyclic = parse(HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="a");
  %1 = nn.relu(%0);
  %2 = annotation.compiler_end(%1, compiler="a");
  %3 = exp(%2);
  %4 = annotation.compiler_begin(%3, compiler="a");
  %5 = add(%1, %4);
  annotation.compiler_end(%5, compiler="a")
}
""")
    with pytest.raises(CompileError, match="cycle"):
        MergeCompilerRegions()(cyclic)


BINARY = ["add", "multiply", "subtract", "maximum", "minimum"]
TARGETS = {"a": ops_named("add", "multiply"), "b": ops_named("subtract")}


def random_model(seed, size=24):
    rng = np.random.default_rng(seed)
    lines = []
    names = ["%x", "%y"]
    for i in range(size):
        op = BINARY[rng.integers(len(BINARY))]
        lhs, rhs = (names[j] for j in rng.integers(len(names), size=2))
        lines.append(f"  %{i} = {op}({lhs}, {rhs});")
        names.append(f"%{i}")
    used = " ,".join(names[-3:])
    return HEADER + "def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {\n" + "\n".join(lines) + f"\n  ({used})\n}}\n"


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_merge_without_cycles_and_keep_their_values(seed):
    text = random_model(seed)
    mod = parse(text)
    partitioned = PartitionGraph()(MergeCompilerRegions()(AnnotateTarget(list(TARGETS), TARGETS)(mod)))
    inputs = {"x": np.linspace(-1, 1, 4, dtype="float32"), "y": np.linspace(0.5, 2, 4, dtype="float32")}
    for got, want in zip(run_main(partitioned, inputs), run_main(mod, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
