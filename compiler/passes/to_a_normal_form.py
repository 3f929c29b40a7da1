"""ToANormalForm: name every intermediate value with a `let`, in evaluation order.

Before: any well-typed module.
After (typed): in every Relay function (except `Primitive` and `Compiler` ones) each operand of
a call, tuple, projection, if or let is atomic (a Var, GlobalVar, Constant or Op) and each
non-atomic expression is the value of exactly one `let`, placed before its first use in
evaluation order. A node shared by several users gets one let, visible to all of them: it is
bound in the innermost scope that encloses every use. Scopes are function bodies and the two
branches of an `if`; a node used only inside a branch or a function literal is bound there.
A function literal is itself let-bound; its body is a new scope. Primitive functions are
let-bound as a whole and not entered (they are kernels, already in their final form).

An existing `let %v = e` keeps its var: `e` is bound to `%v` directly. Fresh vars are named
`x<n>`, numbered per function in binding order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from compiler.ir.expr import Constant, Expr, Function, GlobalVar, If, Let, Op, Var, children
from compiler.ir.module import IRModule
from compiler.ir.visitor import post_order, rebuild
from compiler.passes.fusion_graph import closed_function
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext

ATOMS = (Var, GlobalVar, Constant, Op)


@dataclass(eq=False)
class Scope:
    parent: Scope | None
    depth: int
    bindings: list[tuple[Var, Expr]] = field(default_factory=list)

    def child(self) -> Scope:
        return Scope(self, self.depth + 1)


def common_scope(a: Scope, b: Scope) -> Scope:
    while a is not b:
        if a.depth >= b.depth:
            assert a.parent is not None
            a = a.parent
        else:
            assert b.parent is not None
            b = b.parent
    return a


def typed(expr: Expr, like: Expr) -> Expr:
    """`expr` with the type of `like`, the node it stands for. Recording types as the program
    is rebuilt spares InferType a second walk over every binding."""
    if like.has_type and not expr.has_type:
        expr.set_checked_type(like.checked_type)
    return expr


def wrap(scope: Scope, result: Expr) -> Expr:
    """`result` under the scope's bindings: `let %a = ...; let %b = ...; result`."""
    out = result
    for var, value in reversed(scope.bindings):
        out = typed(Let(var, value, out), out)
    return out


# A scope opened by a node: (function literal, 0) for its body, (if, 1) and (if, 2) for its
# branches.
ScopeKey = tuple[Expr, int]


def _uses(node: Expr, scope: Scope, opened: dict[ScopeKey, Scope]) -> list[tuple[Expr, Scope]]:
    """The non-atomic children of `node`, each with the scope in which `node` uses it."""
    if isinstance(node, Function):
        if closed_function(node):
            return []
        uses = [(node.body, opened.setdefault((node, 0), scope.child()))]
    elif isinstance(node, If):
        uses = [
            (node.cond, scope),
            (node.true_branch, opened.setdefault((node, 1), scope.child())),
            (node.false_branch, opened.setdefault((node, 2), scope.child())),
        ]
    else:
        uses = [(c, scope) for c in children(node)]
    return [(c, s) for c, s in uses if not isinstance(c, ATOMS)]


def to_a_normal_form(func: Function) -> Function:
    """`func` with its body (and the bodies of its function literals) in A-normal form."""
    order = list(post_order(func.body, descend=lambda n: not closed_function(n)))
    root = Scope(None, 0)
    opened: dict[ScopeKey, Scope] = {}
    # In reverse post order every user comes before what it uses, so a node's scope (the
    # common scope of all its uses) is final by the time the node is reached.
    scope_of: dict[Expr, Scope] = {func.body: root}
    for node in reversed(order):
        if isinstance(node, ATOMS):
            continue
        for child, use_scope in _uses(node, scope_of[node], opened):
            known = scope_of.get(child)
            scope_of[child] = use_scope if known is None else common_scope(known, use_scope)

    lets_by_var = {n.var: n for n in order if isinstance(n, Let)}
    # A let's own var names its value (the first let, if one value has several).
    named_by: dict[Expr, Var] = {}
    for let in lets_by_var.values():
        if not isinstance(let.value, ATOMS):
            named_by.setdefault(let.value, let.var)

    atom: dict[Expr, Expr] = {}
    counter = 0
    for node in order:
        if isinstance(node, ATOMS):
            atom[node] = node
            let = lets_by_var.get(node) if isinstance(node, Var) else None
            # The binder of a let is reached after the value and before the body: the place for
            # the binding when the value was not bound to this var already.
            if let is not None and atom[let.value] is not node:
                scope_of[let].bindings.append((node, atom[let.value]))
            continue
        if isinstance(node, Let):
            atom[node] = atom[node.body]
            continue
        value: Expr
        if closed_function(node):
            value = node
        elif isinstance(node, Function):
            body = wrap(opened[(node, 0)], atom[node.body])
            value = Function(node.params, body, node.ret_type, node.attrs, node.span)
        elif isinstance(node, If):
            then_branch = wrap(opened[(node, 1)], atom[node.true_branch])
            else_branch = wrap(opened[(node, 2)], atom[node.false_branch])
            value = If(atom[node.cond], then_branch, else_branch, node.span)
        else:
            value = rebuild(node, atom.__getitem__)
        var = named_by.get(node)
        if var is None:
            var = Var(f"x{counter}")
            counter += 1
        scope_of[node].bindings.append((typed(var, node), typed(value, node)))
        atom[node] = var
    body = wrap(root, atom[func.body])
    new = Function(func.params, body, func.ret_type, func.attrs, func.span)
    return typed(new, func)


@dataclass(frozen=True)
class ToANormalForm(Pass):
    name: ClassVar[str] = "ToANormalForm"

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        mod = InferType().run(mod, ctx)
        out = mod.copy()
        for gv, func in mod.functions():
            if closed_function(func):
                continue
            out.add(gv, to_a_normal_form(func))
        return InferType().run(out, ctx)
