import numpy as np

from compiler.ir.expr import Call, Constant, Function, Op, Tuple, Var, const
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.ops import OpPattern
from compiler.parser import parse
from compiler.passes.fusion_graph import build_graph, post_dominator_tree
from compiler.passes.infer_type import InferType


def graph_of(text):
    mod = parse(text)
    return mod.main, build_graph(mod.main)


def describe(node):
    expr = node.expr
    if isinstance(expr, Call):
        return expr.op.name if isinstance(expr.op, Op) else "call"
    if isinstance(expr, Var):
        return "%" + expr.name_hint
    if isinstance(expr, Constant):
        return "const"
    return type(expr).__name__.lower()


def test_nodes_are_numbered_operands_first_with_their_patterns():
    _, graph = graph_of("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) {
  %0 = nn.dense(%x, %w, units=4);
  %1 = add(%0, 1f);
  %2 = (%1, %x);
  %2.0
}""")
    assert [(describe(n), n.pattern) for n in graph.nodes] == [
        ("%x", OpPattern.OPAQUE),
        ("%w", OpPattern.OPAQUE),
        ("nn.dense", OpPattern.OUT_ELEMWISE_FUSABLE),
        ("const", OpPattern.ELEMWISE),
        ("add", OpPattern.BROADCAST),
        ("tuple", OpPattern.TUPLE),
        ("tuplegetitem", OpPattern.INJECTIVE),
    ]
    assert [n.index for n in graph.nodes] == list(range(7))


def test_edges_carry_the_users_pattern_and_same_shape_broadcast_is_elementwise():
    _, graph = graph_of("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32], %b: Tensor[(3), float32]) {
  %0 = add(%x, %y);
  %1 = add(%0, %b);
  (%1,)
}""")
    by_name = {describe(n): n for n in graph.nodes if isinstance(n.expr, Var)}
    first_add, second_add = [n for n in graph.nodes if describe(n) == "add"]
    assert by_name["%x"].outputs == [(first_add, OpPattern.ELEMWISE)]
    assert by_name["%b"].outputs == [(second_add, OpPattern.BROADCAST)]
    assert first_add.outputs == [(second_add, OpPattern.ELEMWISE)]
    tuple_node = graph.nodes[-1]
    assert second_add.outputs == [(tuple_node, OpPattern.INJECTIVE)]


def test_parameters_results_and_let_parts_are_external():
    _, graph = graph_of("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  let %y = exp(%x);
  negative(%y)
}""")
    external = {describe(n) for n in graph.nodes if n.external}
    assert external == {"%x", "%y", "exp", "negative", "let"}


def test_scalar_constants_of_other_dtypes_are_opaque():
    _, graph = graph_of("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), int16], %y: Tensor[(2), float16]) {
  %0 = add(%x, 1i16);
  %1 = add(%y, 1f16);
  (%0, %1)
}""")
    constants = [n for n in graph.nodes if isinstance(n.expr, Constant)]
    assert [c.pattern for c in constants] == [OpPattern.OPAQUE, OpPattern.OPAQUE]


def test_tensor_constants_are_opaque():
    x = Var("x", TensorType((3,), "float32"))
    func = Function((x,), Call(Op.get("add"), (x, const(np.ones(3, dtype="float32")))))
    InferType()(IRModule.from_expr(func))
    graph = build_graph(func)
    assert [n.pattern for n in graph.nodes if isinstance(n.expr, Constant)] == [OpPattern.OPAQUE]


def test_primitive_function_bodies_are_not_part_of_the_graph():
    main, graph = graph_of("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  %0 = fn (%p0: Tensor[(2), float32], Primitive=1) { exp(%p0) };
  %0(%x)
}""")
    assert [describe(n) for n in graph.nodes] == ["%x", "call"]
    call = graph.nodes[-1]
    assert call.pattern == OpPattern.OPAQUE and call.expr is main.body


def test_post_dominator_of_a_diamond_is_where_the_branches_meet():
    _, graph = graph_of("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %b: Tensor[(3), float32]) {
  %0 = abs(%x);
  %1 = exp(%0);
  %2 = add(%0, %b);
  %3 = add(%1, %2);
  negative(%3)
}""")
    tree = post_dominator_tree(graph)
    names = [describe(n) for n in graph.nodes]
    abs_index = names.index("abs")
    dom = tree[abs_index]
    assert dom.parent.node is graph.nodes[-2]  # the add joining both branches
    # The path through the broadcast add of %b is still elementwise for abs's output.
    assert dom.pattern == OpPattern.ELEMWISE
    assert tree[-2].parent.node is graph.nodes[-1]
    assert tree[-1].parent is None and tree[names.index("%x")].parent is None


def test_post_dominator_path_pattern_is_the_largest_edge_on_the_way():
    _, graph = graph_of("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = abs(%x);
  %1 = exp(%0);
  %2 = sum(%0, axis=[1], keepdims=True);
  %3 = add(%1, %2);
  negative(%3)
}""")
    tree = post_dominator_tree(graph)
    dom = tree[[describe(n) for n in graph.nodes].index("abs")]
    assert describe(dom.parent.node) == "add"
    assert dom.pattern == OpPattern.COMM_REDUCE


def test_branches_meeting_in_the_result_tuple_are_post_dominated_by_it():
    _, graph = graph_of("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = abs(%x);
  (exp(%0), negative(%0))
}""")
    tree = post_dominator_tree(graph)
    dom = tree[[describe(n) for n in graph.nodes].index("abs")]
    assert isinstance(dom.parent.node.expr, Tuple) and dom.parent.parent is None


def test_value_whose_paths_end_in_different_external_values_has_no_post_dominator():
    _, graph = graph_of("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = abs(%x);
  let %y = exp(%0);
  add(%y, %0)
}""")
    tree = post_dominator_tree(graph)
    assert tree[[describe(n) for n in graph.nodes].index("abs")].parent is None
