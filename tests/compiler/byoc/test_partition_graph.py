import numpy as np
import pytest

from compiler.byoc.annotate_target import AnnotateTarget
from compiler.byoc.merge_compiler_regions import MergeCompilerRegions
from compiler.byoc.merge_composite import MergeComposite
from compiler.byoc.partition_graph import PartitionGraph, mangled_name
from compiler.byoc.pattern_text import parse_pattern
from compiler.diagnostics import CompileError
from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.runtime.interpreter import run_main

HEADER = '#[version = "0.0.5"]\n'

# A two-layer MLP as a PyTorch import gives it (bias_add on the last axis).
MLP = HEADER + """
def @main(%x: Tensor[(64, 800), float32], %w1: Tensor[(500, 800), float32], %b1: Tensor[(500), float32],
          %w2: Tensor[(10, 500), float32], %b2: Tensor[(10), float32]) {
  %0 = nn.dense(%x, %w1, units=None);
  %1 = nn.bias_add(%0, %b1, axis=-1);
  %2 = nn.relu(%1);
  %3 = nn.dense(%2, %w2, units=None);
  nn.bias_add(%3, %b2, axis=-1)
}
"""

# The partitioned MLP of the forum question this project started from: one partition holding
# both composites, its five inputs numbered in the order the composites use them.
MLP_PARTITIONED = HEADER + """
def @main(%x: Tensor[(64, 800), float32], %w1: Tensor[(500, 800), float32], %b1: Tensor[(500), float32],
          %w2: Tensor[(10, 500), float32], %b2: Tensor[(10), float32]) -> Tensor[(64, 10), float32] {
  @tvmgen_default_toy_cg_thflow_main_0(%x, %w1, %b1, %w2, %b2)
}

def @tvmgen_default_toy_cg_thflow_main_0(%toy_cg_thflow_0_i0: Tensor[(64, 800), float32],
    %toy_cg_thflow_0_i1: Tensor[(500, 800), float32], %toy_cg_thflow_0_i2: Tensor[(500), float32],
    %toy_cg_thflow_0_i3: Tensor[(10, 500), float32], %toy_cg_thflow_0_i4: Tensor[(10), float32],
    Compiler="toy_cg_thflow", Primitive=1, Inline=1,
    global_symbol="tvmgen_default_toy_cg_thflow_main_0") -> Tensor[(64, 10), float32] {
  %13 = fn (%FunctionVar_0_01: Tensor[(64, 800), float32], %FunctionVar_0_11: Tensor[(500, 800), float32],
            %FunctionVar_0_21: Tensor[(500), float32], PartitionedFromPattern="nn.dense_nn.bias_add_nn.relu_",
            Composite="toy_cg_thflow.dense_bias_relu") -> Tensor[(64, 500), float32] {
    %11 = nn.dense(%FunctionVar_0_01, %FunctionVar_0_11, units=None);
    %12 = nn.bias_add(%11, %FunctionVar_0_21, axis=-1);
    nn.relu(%12)
  };
  %14 = %13(%toy_cg_thflow_0_i0, %toy_cg_thflow_0_i1, %toy_cg_thflow_0_i2);
  %15 = fn (%FunctionVar_0_0: Tensor[(64, 500), float32], %FunctionVar_0_1: Tensor[(10, 500), float32],
            %FunctionVar_0_2: Tensor[(10), float32], PartitionedFromPattern="nn.dense_nn.bias_add_",
            Composite="toy_cg_thflow.dense_bias") -> Tensor[(64, 10), float32] {
    %10 = nn.dense(%FunctionVar_0_0, %FunctionVar_0_1, units=None);
    nn.bias_add(%10, %FunctionVar_0_2, axis=-1)
  };
  %15(%14, %toy_cg_thflow_0_i3, %toy_cg_thflow_0_i4)
}
"""

PATTERNS = [
    ("toy_cg_thflow.dense_bias_relu", parse_pattern("nn.relu(nn.bias_add(nn.dense(*, *), *))")),
    ("toy_cg_thflow.dense_bias", parse_pattern("nn.bias_add(nn.dense(*, *), *)")),
]


def annotated(text, patterns=PATTERNS, targets=("toy_cg_thflow",), predicates=None):
    mod = MergeComposite(patterns)(parse(text))
    return AnnotateTarget(targets, predicates)(mod)


def assert_main(after, main_text):
    """@main of `after` equals `main_text`, whose globals are declared from `after`'s signatures."""
    stubs = [f"def @{gv.name_hint}({', '.join(f'%p{i}: {p.type_annotation}' for i, p in enumerate(f.params))})"
             f" -> {f.checked_type.ret_type} {{ %p0 }}" for gv, f in after.functions() if gv.name_hint != "main"]
    expected = parse(main_text + "\n".join(stubs), infer_types=False)
    assert structural_equal(after.main, expected.main), after.astext()


def param_names(func):
    return [p.name_hint for p in func.params]


def test_merged_mlp_partitions_like_the_seed_module():
    after = PartitionGraph()(MergeCompilerRegions()(annotated(MLP)))
    assert structural_equal(after, parse(MLP_PARTITIONED)), after.astext()
    partition = after["tvmgen_default_toy_cg_thflow_main_0"]
    assert param_names(partition) == [f"toy_cg_thflow_0_i{k}" for k in range(5)]
    assert dict(partition.attrs) == {
        "Compiler": "toy_cg_thflow",
        "Primitive": 1,
        "Inline": 1,
        "global_symbol": "tvmgen_default_toy_cg_thflow_main_0",
    }


def test_unmerged_regions_become_one_partition_each_numbered_in_order():
    after = PartitionGraph()(annotated(MLP))
    first, second = after["tvmgen_default_toy_cg_thflow_main_0"], after["tvmgen_default_toy_cg_thflow_main_1"]
    assert param_names(first) == ["toy_cg_thflow_0_i0", "toy_cg_thflow_0_i1", "toy_cg_thflow_0_i2"]
    assert param_names(second) == ["toy_cg_thflow_1_i0", "toy_cg_thflow_1_i1", "toy_cg_thflow_1_i2"]
    assert first.body.op.attrs["Composite"] == "toy_cg_thflow.dense_bias_relu"
    expected_main = HEADER + """
def @main(%x: Tensor[(64, 800), float32], %w1: Tensor[(500, 800), float32], %b1: Tensor[(500), float32],
          %w2: Tensor[(10, 500), float32], %b2: Tensor[(10), float32]) {
  %0 = @tvmgen_default_toy_cg_thflow_main_0(%x, %w1, %b1);
  @tvmgen_default_toy_cg_thflow_main_1(%0, %w2, %b2)
}
"""
    assert_main(after, expected_main)


def test_partitioning_keeps_the_values():
    before = parse(MLP)
    after = PartitionGraph()(MergeCompilerRegions()(annotated(MLP)))
    rng = np.random.default_rng(1)
    inputs = {p.name_hint: rng.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32")
              for p in before.main.params}
    np.testing.assert_allclose(run_main(after, inputs)[0], run_main(before, inputs)[0], rtol=1e-5)


TWO_OUTPUTS = HEADER + """
def @main(%data: Tensor[(10, 10), float32]) {
  %0 = annotation.compiler_begin(%data, compiler="test_target");
  %1 = abs(%0);
  %2 = annotation.compiler_end(%1, compiler="test_target");
  %3 = nn.relu(%1);
  %4 = annotation.compiler_end(%3, compiler="test_target");
  %5 = tanh(%2);
  %6 = annotation.compiler_begin(%4, compiler="test_target");
  %7 = annotation.compiler_begin(%5, compiler="test_target");
  %8 = add(%6, %7);
  annotation.compiler_end(%8, compiler="test_target")
}
"""


def test_region_with_two_outputs_returns_a_tuple_read_by_projections():
    # The outputs are ordered as their compiler_ends are evaluated: relu's end feeds the add's
    # first input, so it comes before abs's, which is only reached through tanh.
    expected = HEADER + """
def @main(%data: Tensor[(10, 10), float32]) {
  %0 = @tvmgen_default_test_target_main_0(%data);
  %1 = %0.0;
  %2 = %0.1;
  %3 = tanh(%2);
  @tvmgen_default_test_target_main_1(%1, %3)
}
def @tvmgen_default_test_target_main_0(%test_target_0_i0: Tensor[(10, 10), float32], Compiler="test_target",
    Primitive=1, Inline=1, global_symbol="tvmgen_default_test_target_main_0") {
  %4 = abs(%test_target_0_i0);
  (nn.relu(%4), %4)
}
def @tvmgen_default_test_target_main_1(%test_target_1_i0: Tensor[(10, 10), float32],
    %test_target_1_i1: Tensor[(10, 10), float32], Compiler="test_target", Primitive=1, Inline=1,
    global_symbol="tvmgen_default_test_target_main_1") {
  add(%test_target_1_i0, %test_target_1_i1)
}
"""
    after = PartitionGraph()(parse(TWO_OUTPUTS))
    assert structural_equal(after, parse(expected)), after.astext()


CONSTANT_INPUT = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(2f, compiler="acme");
  %1 = annotation.compiler_begin(%x, compiler="acme");
  %2 = annotation.compiler_begin(%x, compiler="acme");
  %3 = add(%0, %1);
  %4 = multiply(%3, %2);
  annotation.compiler_end(%4, compiler="acme")
}
"""


def test_constant_inputs_are_bound_into_the_body_and_keep_their_number():
    after = PartitionGraph()(parse(CONSTANT_INPUT))
    partition = after["tvmgen_default_acme_main_0"]
    # i0 was the constant; %x enters through two begins but is one param.
    assert param_names(partition) == ["acme_0_i1"]
    expected = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  @tvmgen_default_acme_main_0(%x)
}
def @tvmgen_default_acme_main_0(%p: Tensor[(3), float32], Compiler="acme", Primitive=1, Inline=1,
    global_symbol="tvmgen_default_acme_main_0") {
  multiply(add(2f, %p), %p)
}
"""
    assert structural_equal(after, parse(expected)), after.astext()


def test_constant_inputs_are_passed_when_not_binding_constants():
    after = PartitionGraph(bind_constants=False)(parse(CONSTANT_INPUT))
    partition = after["tvmgen_default_acme_main_0"]
    assert param_names(partition) == ["acme_0_i0", "acme_0_i1"]
    assert float(after.main.body.args[0].data) == 2.0


def test_tvm_default_annotations_are_dropped():
    before = parse(HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="default");
  %1 = exp(%0);
  %2 = annotation.compiler_end(%1, compiler="default");
  %3 = annotation.compiler_begin(%2, compiler="acme");
  %4 = nn.relu(%3);
  annotation.compiler_end(%4, compiler="acme")
}
""")
    expected = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = exp(%x);
  @tvmgen_default_acme_main_0(%0)
}
def @tvmgen_default_acme_main_0(%acme_0_i0: Tensor[(3), float32], Compiler="acme", Primitive=1, Inline=1,
    global_symbol="tvmgen_default_acme_main_0") {
  nn.relu(%acme_0_i0)
}
"""
    after = PartitionGraph()(before)
    assert structural_equal(after, parse(expected)), after.astext()


def test_tuple_results_leave_the_region_field_by_field():
    before = parse(HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="acme");
  %1 = (nn.relu(%0), exp(%0));
  %2 = annotation.compiler_end(%1, compiler="acme");
  %2.1
}
""")
    after = PartitionGraph()(before)
    partition = after["tvmgen_default_acme_main_0"]
    assert [f.op.name for f in partition.body.fields] == ["nn.relu", "exp"]
    expected_main = HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = @tvmgen_default_acme_main_0(%x);
  (%0.0, %0.1).1
}
"""
    assert_main(after, expected_main)


def test_names_carry_module_function_and_sanitised_codegen():
    assert mangled_name("default", "cmsis-nn_main_0") == "tvmgen_default_cmsis_nn_main_0"
    assert mangled_name(None, "acme_main_0") == "tvmgen_acme_main_0"
    before = parse(HEADER + """
def @main(%x: Tensor[(3), float32]) { @body(%x) }
def @body(%y: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%y, compiler="my-npu");
  %1 = nn.relu(%0);
  annotation.compiler_end(%1, compiler="my-npu")
}
""")
    after = PartitionGraph(mod_name="net")(before)
    partition = after["tvmgen_net_my_npu_body_0"]
    assert partition.attrs["global_symbol"] == "tvmgen_net_my_npu_body_0"
    assert partition.attrs["Compiler"] == "my-npu"


def test_outlining_onto_an_existing_name_is_an_error():
    once = PartitionGraph()(parse(CONSTANT_INPUT))
    clash = once.copy()
    clash.add(clash.get_global_var("main"), parse(CONSTANT_INPUT).main)
    with pytest.raises(CompileError, match="already defines it"):
        PartitionGraph()(clash)


def test_region_using_a_variable_without_a_begin_is_an_error():
    before = parse(HEADER + """
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="acme");
  %1 = add(%0, %y);
  annotation.compiler_end(%1, compiler="acme")
}
""")
    with pytest.raises(CompileError, match="uses %y, which does not enter it through a compiler_begin"):
        PartitionGraph()(before)


def test_modules_without_annotations_only_get_typed():
    mod = parse(MLP)
    assert structural_equal(PartitionGraph()(mod), mod)


def test_regions_that_depend_on_each_other_are_an_error():
    cyclic = parse(HEADER + """
def @main(%x: Tensor[(3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="acme");
  %1 = nn.relu(%0);
  %2 = annotation.compiler_end(%1, compiler="acme");
  %3 = exp(%2);
  %4 = annotation.compiler_begin(%3, compiler="acme");
  %5 = add(%1, %4);
  annotation.compiler_end(%5, compiler="acme")
}
""")
    with pytest.raises(CompileError, match="cycle"):
        PartitionGraph()(cyclic)
