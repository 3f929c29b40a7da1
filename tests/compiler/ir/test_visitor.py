import sys

from compiler.ir.expr import Call, Function, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.types import TensorType
from compiler.ir.visitor import ExprMutator, ExprVisitor, free_vars, post_order

T = TensorType((2, 2), "float32")


def deep_call_chain(depth: int) -> tuple[Var, Call]:
    x = Var("x", T)
    node = x
    for _ in range(depth):
        node = Call(Op.get("negative"), (node,))
    return x, node


def deep_let_chain(depth: int) -> Let:
    x = Var("x", T)
    body = x
    vars_ = [Var(f"v{i}") for i in range(depth)]
    # Build innermost first so the outermost let binds v0.
    expr = vars_[-1]
    for i in reversed(range(depth)):
        value = x if i == 0 else vars_[i - 1]
        expr = Let(vars_[i], value, expr)
    del body
    return expr


def test_post_order_walks_a_50000_deep_call_chain_without_recursion():
    _, root = deep_call_chain(50_000)
    limit = sys.getrecursionlimit()
    nodes = list(post_order(root))
    assert sys.getrecursionlimit() == limit
    # 50,000 calls + the var + the interned op
    assert len(nodes) == 50_002
    assert nodes[-1] is root


def test_post_order_yields_children_before_parents():
    x = Var("x", T)
    a = Call(Op.get("negative"), (x,))
    b = Call(Op.get("add"), (a, x))
    order = list(post_order(b))
    assert order.index(x) < order.index(a) < order.index(b)


def test_post_order_visits_a_shared_node_once():
    x = Var("x", T)
    shared = Call(Op.get("negative"), (x,))
    root = Tuple((shared, shared, Call(Op.get("exp"), (shared,))))
    nodes = list(post_order(root))
    assert nodes.count(shared) == 1


def test_post_order_descend_false_keeps_node_as_leaf():
    x = Var("x", T)
    inner = Function((x,), Call(Op.get("negative"), (x,)))
    y = Var("y", T)
    root = Call(inner, (y,))
    nodes = list(post_order(root, descend=lambda n: not isinstance(n, Function)))
    assert inner in nodes and x not in nodes


def test_expr_visitor_dispatches_by_node_kind():
    seen = []

    class CountCalls(ExprVisitor):
        def visit_call(self, call):
            seen.append(call.op.name)

    x = Var("x", T)
    CountCalls().visit(Call(Op.get("exp"), (Call(Op.get("negative"), (x,)),)))
    assert seen == ["negative", "exp"]


def test_mutator_returns_same_object_when_nothing_changes():
    _, root = deep_call_chain(100)
    assert ExprMutator().visit(root) is root


def test_mutator_rewrites_a_50000_deep_let_chain():
    root = deep_let_chain(50_000)
    old_x = [n for n in post_order(root) if isinstance(n, Var) and n.name_hint == "x"][0]
    new_x = Var("x2", T)

    class Rename(ExprMutator):
        def rewrite_var(self, pre, post):
            return new_x if pre is old_x else post

    out = Rename().visit(root)
    assert out is not root
    assert new_x in set(post_order(out))


def test_mutator_preserves_sharing():
    x = Var("x", T)
    shared = Call(Op.get("negative"), (x,))
    root = Tuple((shared, shared))

    class ExpToLog(ExprMutator):
        def rewrite_call(self, pre, post):
            if post.op.name == "negative":
                return Call(Op.get("abs"), post.args)
            return post

    out = ExpToLog().visit(root)
    assert out.fields[0] is out.fields[1]
    assert out.fields[0].op.name == "abs"


def test_mutator_sees_rewritten_children_in_post():
    x = Var("x", T)
    root = Call(Op.get("exp"), (Call(Op.get("negative"), (x,)),))
    calls = []

    class Record(ExprMutator):
        def rewrite_call(self, pre, post):
            if post.op.name == "negative":
                return Call(Op.get("abs"), post.args)
            calls.append(post.args[0].op.name)
            return post

    Record().visit(root)
    assert calls == ["abs"]


def test_free_vars_excludes_bound_vars():
    x, y, z = Var("x", T), Var("y", T), Var("z", T)
    fn = Function((x,), Call(Op.get("add"), (x, y)))
    body = Let(z, Call(fn, (y,)), TupleGetItem(Tuple((z, y)), 0))
    assert free_vars(body) == [y]
