import time

import numpy as np
import pytest

from compiler.byoc.partition import partition_for, qualified_table
from compiler.byoc.pattern_text import parse_pattern
from compiler.ir.expr import Call, Function, Op, Var
from compiler.ir.module import IRModule
from compiler.ir.structural import structural_equal
from compiler.ir.types import TensorType
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.runtime.interpreter import run_main

HEADER = '#[version = "0.0.5"]\n'

MLP = HEADER + """
def @main(%x: Tensor[(8, 16), float32], %w1: Tensor[(12, 16), float32], %b1: Tensor[(12), float32],
          %w2: Tensor[(4, 12), float32], %b2: Tensor[(4), float32]) {
  %0 = nn.dense(%x, %w1, units=None);
  %1 = nn.bias_add(%0, %b1, axis=-1);
  %2 = nn.relu(%1);
  %3 = nn.dense(%2, %w2, units=None);
  nn.bias_add(%3, %b2, axis=-1)
}
"""

PARTITIONED = HEADER + """
def @main(%x: Tensor[(8, 16), float32], %w1: Tensor[(12, 16), float32], %b1: Tensor[(12), float32],
          %w2: Tensor[(4, 12), float32], %b2: Tensor[(4), float32]) {
  @tvmgen_default_toy_main_0(%x, %w1, %b1, %w2, %b2)
}
def @tvmgen_default_toy_main_0(%i0: Tensor[(8, 16), float32], %i1: Tensor[(12, 16), float32],
    %i2: Tensor[(12), float32], %i3: Tensor[(4, 12), float32], %i4: Tensor[(4), float32],
    Compiler="toy", Primitive=1, Inline=1, global_symbol="tvmgen_default_toy_main_0") {
  %0 = fn (%a: Tensor[(8, 16), float32], %b: Tensor[(12, 16), float32], %c: Tensor[(12), float32],
           PartitionedFromPattern="nn.dense_nn.bias_add_nn.relu_", Composite="toy.dense_bias_relu") {
    nn.relu(nn.bias_add(nn.dense(%a, %b, units=None), %c, axis=-1))
  };
  %1 = fn (%d: Tensor[(8, 12), float32], %e: Tensor[(4, 12), float32], %f: Tensor[(4), float32],
           PartitionedFromPattern="nn.dense_nn.bias_add_", Composite="toy.dense_bias") {
    nn.bias_add(nn.dense(%d, %e, units=None), %f, axis=-1)
  };
  %1(%0(%i0, %i1, %i2), %i3, %i4)
}
"""

PATTERNS = [
    ("dense_bias_relu", parse_pattern("nn.relu(nn.bias_add(nn.dense(*, *), *))")),
    ("dense_bias", parse_pattern("nn.bias_add(nn.dense(*, *), *)")),
]


def outside_functions(node):
    return not isinstance(node, Function)


def random_inputs(mod, seed=0):
    rng = np.random.default_rng(seed)
    return {p.name_hint: rng.standard_normal([int(d) for d in p.type_annotation.shape]).astype("float32")
            for p in mod.main.params}


def test_partition_for_runs_the_standard_sequence():
    after = partition_for(parse(MLP), "toy", PATTERNS)
    assert structural_equal(after, parse(PARTITIONED)), after.astext()
    before = parse(MLP)
    inputs = random_inputs(before)
    np.testing.assert_allclose(run_main(after, inputs)[0], run_main(before, inputs)[0], rtol=1e-5)


def test_without_merging_each_composite_is_its_own_partition():
    after = partition_for(parse(MLP), "toy", PATTERNS, merge_regions=False, mod_name="net")
    assert sorted(gv.name_hint for gv in after) == ["main", "tvmgen_net_toy_main_0", "tvmgen_net_toy_main_1"]


def test_operator_predicate_offloads_calls_outside_composites():
    after = partition_for(parse(MLP), "toy", PATTERNS[1:], op_predicate=lambda call: call.op.name == "nn.relu")
    partition = after["tvmgen_default_toy_main_0"]
    called = [n.op.attrs["Composite"] if isinstance(n.op, Function) else n.op.name
              for n in post_order(partition.body, descend=outside_functions) if isinstance(n, Call)]
    assert called == ["toy.dense_bias", "nn.relu", "toy.dense_bias"]


def test_composite_names_are_qualified_by_the_codegen():
    table = qualified_table("toy", [("toy.a", PATTERNS[0][1]), ("b", PATTERNS[1][1])])
    assert [e.name for e in table] == ["toy.a", "toy.b"]
    with pytest.raises(ValueError, match="does not belong to codegen toy"):
        qualified_table("toy", [("other.a", PATTERNS[0][1])])


def test_partitioning_for_two_codegens_one_after_the_other():
    mod = partition_for(parse(MLP), "first", PATTERNS[:1])
    mod = partition_for(mod, "second", PATTERNS[1:])
    assert sorted(gv.name_hint for gv in mod) == [
        "main",
        "tvmgen_default_first_main_0",
        "tvmgen_default_second_main_0",
    ]
    inputs = random_inputs(mod)
    np.testing.assert_allclose(run_main(mod, inputs)[0], run_main(parse(MLP), inputs)[0], rtol=1e-5)


def test_a_ten_thousand_op_chain_partitions_without_recursion():
    ty = TensorType((4,), "float32")
    x, b = Var("x", ty), Var("b", ty)
    value = x
    for _ in range(5_000):
        value = Call(Op.get("nn.relu"), (Call(Op.get("add"), (value, b)),))
    mod = IRModule.from_expr(Function((x, b), value))
    start = time.perf_counter()
    after = partition_for(mod, "toy", [("add_relu", parse_pattern("nn.relu(add(*, *))"))])
    elapsed = time.perf_counter() - start
    assert sorted(gv.name_hint for gv in after) == ["main", "tvmgen_default_toy_main_0"]
    partition = after["tvmgen_default_toy_main_0"]
    calls = [n for n in post_order(partition.body, descend=outside_functions) if isinstance(n, Call)]
    assert len(calls) == 5_000 and all(c.op.attrs["Composite"] == "toy.add_relu" for c in calls)
    assert [p.name_hint for p in partition.params] == ["toy_0_i0", "toy_0_i1"]
    assert elapsed < 60
