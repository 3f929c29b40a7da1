from compiler.ir.expr import Call, Op, Tuple
from compiler.ops import OpPattern
from compiler.parser import parse
from compiler.passes.fusion_graph import build_graph
from compiler.passes.fusion_groups import Group, Partitioner, partition


def grouped(text, opt_level=3, max_depth=256):
    main = parse(text).main
    graph = build_graph(main)
    groups = partition(graph, opt_level, max_depth)
    return graph, [g.find_root() for g in groups]


def op_groups(graph, roots):
    """Operator names per final group, in node order."""
    by_root = {}
    for node, root in zip(graph.nodes, roots):
        if isinstance(node.expr, Call) and isinstance(node.expr.op, Op):
            by_root.setdefault(id(root), []).append(node.expr.op.name)
    return sorted(by_root.values())


CONV = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32]) {
  %0 = nn.conv2d(%x, %w);
  %1 = nn.bias_add(%0, %b);
  nn.relu(%1)
}"""


def test_find_root_compresses_the_path():
    a, b, c = (Group(OpPattern.ELEMWISE, Tuple(())) for _ in range(3))
    a.parent, b.parent = b, c
    assert a.find_root() is c
    assert a.parent is c and b.parent is c


def test_merge_moves_the_anchor_and_its_pattern_to_the_root():
    conv = Group(OpPattern.OUT_ELEMWISE_FUSABLE, Tuple(()), anchor_ref=Tuple(()))
    relu = Group(OpPattern.ELEMWISE, Tuple(()))
    Partitioner.merge(conv, relu)
    assert conv.find_root() is relu
    assert relu.anchor_ref is conv.anchor_ref and relu.pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    assert relu.num_nodes == 2


def test_conv_group_is_rooted_at_the_last_op_and_anchored_at_the_conv():
    graph, roots = grouped(CONV)
    assert op_groups(graph, roots) == [["nn.conv2d", "nn.bias_add", "nn.relu"]]
    root = roots[-1]
    assert root.root_ref is graph.nodes[-1].expr
    assert root.anchor_ref.op.name == "nn.conv2d"
    assert root.pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    assert root.num_nodes == 3


def test_variables_stay_in_groups_of_their_own():
    graph, roots = grouped(CONV)
    var_roots = [r for n, r in zip(graph.nodes, roots) if n.expr.__class__.__name__ == "Var"]
    assert len({id(r) for r in var_roots}) == 3
    assert all(r.num_nodes == 1 for r in var_roots)


def test_opt_level_zero_keeps_every_node_alone():
    graph, roots = grouped(CONV, opt_level=0)
    assert len({id(r) for r in roots}) == len(graph.nodes)


def test_fields_of_a_result_tuple_are_not_fused_into_it():
    graph, roots = grouped("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  %0 = exp(%x);
  %1 = negative(%0);
  (%1, %x)
}""")
    assert op_groups(graph, roots) == [["exp", "negative"]]
    assert roots[-1].num_nodes == 1 and roots[-1].pattern == OpPattern.TUPLE


def test_max_depth_counts_the_nodes_of_the_merged_group():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  %0 = exp(%x);
  %1 = exp(%0);
  %2 = exp(%1);
  %3 = exp(%2);
  %4 = exp(%3);
  %5 = exp(%4);
  exp(%5)
}"""
    graph, roots = grouped(text, max_depth=3)
    assert [len(g) for g in op_groups(graph, roots)] == [1, 3, 3]
    graph, roots = grouped(text)
    assert [len(g) for g in op_groups(graph, roots)] == [7]


def test_reduction_takes_producers_but_not_consumers():
    graph, roots = grouped("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = exp(%x);
  %1 = max(%0, axis=[1]);
  %2 = negative(%1);
  sqrt(%2)
}""")
    assert op_groups(graph, roots) == [["exp", "max"], ["negative", "sqrt"]]


def test_injective_op_joins_a_following_elementwise_op_but_not_a_heavy_one():
    graph, roots = grouped("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 6), float32]) {
  %0 = reshape(%x, newshape=[1, 6]);
  %1 = nn.dense(%0, %w, units=4);
  %2 = transpose(%1, axes=[1, 0]);
  exp(%2)
}""")
    assert op_groups(graph, roots) == [["nn.dense"], ["reshape"], ["transpose", "exp"]]
