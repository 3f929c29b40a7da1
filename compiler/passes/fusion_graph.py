"""The dataflow graph FuseOps partitions, and its post-dominator tree.

One graph covers a function body, including the bodies of the (non-primitive, non-external)
function literals inside it. Its nodes are the Vars, Constants, calls, tuples, projections,
lets and ifs of the body, numbered in post order (operands first). Each node knows its fusion
pattern and its users; an edge to a user carries the pattern of that use:

* a call's operands are used with the operator's pattern, except that a BROADCAST operand whose
  shape is exactly the result's is used ELEMWISE (nothing is broadcast along that edge);
* tuples use their tensor fields INJECTIVE; a projection uses its tuple INJECTIVE, unless the
  tuple holds non-tensors, in which case the projection is OPAQUE and the tuple external;
* scalar constants of int32/int64/float32/float64/bool are ELEMWISE (code generation can
  inline them), other constants OPAQUE; Vars, lets, ifs and calls of functions are OPAQUE;
  a call whose result shape depends on its input *data* and is dynamic is OPAQUE.

Values that something outside the dataflow sees are "external": function parameters, function
results, let-bound values and bodies, if conditions and branches, callees. Lets and ifs are
barriers this way: nothing fuses across them.

The post-dominator of a node is the nearest node that every path from it to the output passes
through. On a DAG it is the least common ancestor, in the post-dominator tree, of the node's
users, so one sweep from the last node to the first builds the tree. Each tree node also
records the largest edge pattern met on the paths to its post-dominator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler import ops
from compiler.ir.expr import Call, Constant, Expr, Function, If, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.types import TensorType, TupleType, is_dynamic
from compiler.ir.visitor import post_order
from compiler.ops import OpPattern

# Constants of these dtypes can be inlined into generated code as scalars.
INLINE_SCALAR_DTYPES = frozenset({"int32", "int64", "float32", "float64", "bool"})


@dataclass(eq=False)
class Node:
    expr: Expr
    index: int = -1
    pattern: OpPattern = OpPattern.OPAQUE
    external: bool = False
    # (user, pattern of the use), in the order the uses were found.
    outputs: list[tuple[Node, OpPattern]] = field(default_factory=list)


@dataclass
class DataflowGraph:
    nodes: list[Node]  # in post order: operands before their users
    node_of: dict[Expr, Node]


DATAFLOW_KINDS = (Var, Constant, Call, Tuple, TupleGetItem, Let, If)


def tensor_type(expr: Expr) -> TensorType | None:
    """The expression's type when it is a tensor (globals and operators have no type here)."""
    if not expr.has_type:
        return None
    ty = expr.checked_type
    return ty if isinstance(ty, TensorType) else None


def closed_function(expr: Expr) -> bool:
    """Functions the Relay passes do not enter: finished kernels (`Primitive`) and functions
    that belong to an external compiler (`Compiler`)."""
    return isinstance(expr, Function) and (
        expr.has_nonzero_attr("Primitive") or expr.attr("Compiler") is not None
    )


def call_pattern(call: Call) -> OpPattern:
    if not isinstance(call.op, Op):
        return OpPattern.OPAQUE
    opdef = ops.get(call.op.name)
    if opdef.shape_data_dependent and is_dynamic(call.checked_type):
        # Its shape function needs input data, which a fused kernel's shape function lacks.
        return OpPattern.OPAQUE
    return opdef.pattern


def _constant_pattern(const: Constant) -> OpPattern:
    if const.data.ndim == 0 and str(const.data.dtype) in INLINE_SCALAR_DTYPES:
        return OpPattern.ELEMWISE
    return OpPattern.OPAQUE


def build_graph(func: Function) -> DataflowGraph:
    node_of: dict[Expr, Node] = {}
    nodes: list[Node] = []

    def entry(expr: Expr) -> Node | None:
        if not isinstance(expr, DATAFLOW_KINDS):
            return None  # operators, globals and function literals are not dataflow values
        node = node_of.get(expr)
        if node is None:
            node = node_of[expr] = Node(expr)
        return node

    def use(expr: Expr, user: Node | None, pattern: OpPattern = OpPattern.OPAQUE) -> None:
        node = entry(expr)
        if node is None:
            return
        if user is None:
            node.external = True
        else:
            node.outputs.append((user, pattern))

    use(func.body, None)
    for expr in post_order(func, descend=lambda e: not closed_function(e)):
        if isinstance(expr, Function):
            if closed_function(expr):
                continue
            for p in expr.params:
                use(p, None)
            use(expr.body, None)
            continue
        node = entry(expr)
        if node is None:
            continue
        if isinstance(expr, Constant):
            node.pattern = _constant_pattern(expr)
        elif isinstance(expr, Call):
            node.pattern = call_pattern(expr)
            if not isinstance(expr.op, Op):
                use(expr.op, node, OpPattern.OPAQUE)
            use(expr.op, None)
            result = expr.checked_type
            for arg in expr.args:
                edge = node.pattern
                arg_type = tensor_type(arg)
                if (
                    edge == OpPattern.BROADCAST
                    and arg_type is not None
                    and isinstance(result, TensorType)
                    and arg_type.shape == result.shape
                ):
                    edge = OpPattern.ELEMWISE
                use(arg, node, edge)
        elif isinstance(expr, Tuple):
            node.pattern = OpPattern.TUPLE
            for f in expr.fields:
                if tensor_type(f) is not None:
                    use(f, node, OpPattern.INJECTIVE)
                else:
                    use(f, None)
        elif isinstance(expr, TupleGetItem):
            tuple_type = expr.tuple_value.checked_type
            assert isinstance(tuple_type, TupleType)
            if all(isinstance(t, TensorType) for t in tuple_type.fields):
                node.pattern = OpPattern.INJECTIVE
                use(expr.tuple_value, node, OpPattern.INJECTIVE)
            else:
                use(expr.tuple_value, None)
        elif isinstance(expr, Let):
            use(expr.var, None)
            use(expr.value, None)
            use(expr.body, None)
        elif isinstance(expr, If):
            use(expr.cond, None)
            use(expr.true_branch, None)
            use(expr.false_branch, None)
        node.index = len(nodes)
        nodes.append(node)
    return DataflowGraph(nodes, node_of)


@dataclass(eq=False)
class DomNode:
    """A node of the post-dominator tree; `pattern` is the largest edge pattern on the way to
    `parent`. External nodes and nodes whose paths meet nowhere have no parent."""

    node: Node
    parent: DomNode | None
    depth: int
    pattern: OpPattern


def _common_ancestor(
    lhs: DomNode | None, rhs: DomNode | None, pattern: OpPattern
) -> tuple[DomNode | None, OpPattern]:
    """The nearest common ancestor of two tree nodes, and `pattern` raised by the patterns of
    the tree nodes passed on the way up to it."""
    while lhs is not rhs:
        if lhs is None or rhs is None:
            return None, pattern
        if lhs.depth < rhs.depth:
            pattern = max(pattern, rhs.pattern)
            rhs = rhs.parent
        elif rhs.depth < lhs.depth:
            pattern = max(pattern, lhs.pattern)
            lhs = lhs.parent
        else:
            pattern = max(pattern, lhs.pattern, rhs.pattern)
            lhs, rhs = lhs.parent, rhs.parent
    return lhs, pattern


def post_dominator_tree(graph: DataflowGraph) -> list[DomNode]:
    """One tree node per graph node, indexed like `graph.nodes`."""
    tree: list[DomNode | None] = [None] * len(graph.nodes)
    for node in reversed(graph.nodes):
        if node.external or not node.outputs:
            pattern = OpPattern.OPAQUE if node.external else OpPattern.ELEMWISE
            tree[node.index] = DomNode(node, None, 1, pattern)
            continue
        pattern = OpPattern.ELEMWISE
        parent: DomNode | None = None
        for i, (user, edge) in enumerate(node.outputs):
            user_dom = tree[user.index]
            assert user_dom is not None, "users come after what they use"
            if i == 0:
                parent = user_dom
            else:
                parent, pattern = _common_ancestor(parent, user_dom, pattern)
            pattern = max(pattern, edge)
        tree[node.index] = DomNode(node, parent, parent.depth + 1 if parent else 1, OpPattern(pattern))
    return [d for d in tree if d is not None]
