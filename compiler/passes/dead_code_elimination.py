"""DeadCodeElimination: drop let bindings nobody reads and globals nobody calls.

Before: any module.
After (typed):
* in every Relay function, `let %v = value; body` is `body` when `%v` is not used by the
  live part of the program. The language is pure, so an unused value need not be computed.
  Liveness is transitive: a binding used only by dead bindings is dead too.
* globals that cannot be reached from @main are removed (references are GlobalVars in function
  bodies and in call attributes, e.g. call_lowered metadata naming shape functions). @main is
  always kept; `keep_globals=True` keeps every global. A module without @main keeps all globals.

Functions marked `Primitive` or `Compiler` are left as they are inside; they are still searched
for references to globals.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Expr, Function, GlobalVar, Let, Var, children
from compiler.ir.module import IRModule
from compiler.ir.visitor import ExprMutator, post_order
from compiler.passes.fusion_graph import closed_function
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext


def live_let_vars(root: Expr) -> set[Var]:
    """Let-bound vars whose value the result of `root` may need.

    A walk from the root that postpones each let's value until its var is found used: values
    of vars never found are never walked, so what only they use stays unused too.
    """
    used: set[Var] = set()
    pending: dict[Var, Expr] = {}
    seen: set[Expr] = set()
    stack: list[Expr] = [root]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, Let):
            pending[node.var] = node.value
            if node.var in used:
                stack.append(node.value)
            stack.append(node.body)
        elif isinstance(node, Var):
            used.add(node)
            if node in pending:
                stack.append(pending[node])
        elif not closed_function(node):
            stack.extend(children(node))
    return used


class _DropDeadLets(ExprMutator):
    def __init__(self, live: set[Var]):
        super().__init__()
        self.live = live

    def descend(self, node: Expr) -> bool:
        return not closed_function(node)

    def rewrite_let(self, pre: Let, post: Let) -> Expr:
        return post if pre.var in self.live else post.body


def remove_dead_lets(func: Function) -> Function:
    new = _DropDeadLets(live_let_vars(func)).visit(func)
    assert isinstance(new, Function)
    return new


def _attr_globals(value: object, out: list[GlobalVar]) -> None:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, GlobalVar):
            out.append(v)
        elif isinstance(v, Attrs):
            stack.extend(v.values())
        elif isinstance(v, tuple):
            stack.extend(v)


def referenced_globals(expr: Expr) -> list[str]:
    """Names of the globals `expr` mentions, directly or in call attributes."""
    found: list[GlobalVar] = []
    for node in post_order(expr):
        if isinstance(node, GlobalVar):
            found.append(node)
        elif isinstance(node, Call):
            _attr_globals(node.attrs, found)
    return [gv.name_hint for gv in found]


def reachable_globals(mod: IRModule, roots: Iterable[str]) -> set[str]:
    reached: set[str] = set()
    stack = [name for name in roots if name in mod]
    while stack:
        name = stack.pop()
        if name in reached:
            continue
        reached.add(name)
        definition = mod[name]
        if isinstance(definition, Function):
            stack.extend(n for n in referenced_globals(definition) if n in mod)
    return reached


@dataclass(frozen=True)
class DeadCodeElimination(Pass):
    name: ClassVar[str] = "DeadCodeElimination"
    opt_level: ClassVar[int] = 1
    keep_globals: bool = False

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = mod.copy()
        changed = False
        if not self.keep_globals and "main" in mod:
            live = reachable_globals(mod, ["main"])
            for gv, _ in mod.items():
                if gv.name_hint not in live:
                    out.remove(gv)
                    changed = True
        for gv, func in out.functions():
            if closed_function(func):
                continue
            new = remove_dead_lets(func)
            if new is not func:
                out.add(gv, new)
                changed = True
        return InferType().run(out, ctx) if changed else mod
