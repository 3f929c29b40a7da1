"""InlineGlobals: replace calls of ordinary global Relay functions by their bodies.

Before: @main may call helper globals (`@scale_shift(%a, 2f)`).
After: every call of a global that is not Primitive, Extern or Compiler-owned is replaced by a
copy of the callee's body with its parameters substituted by the arguments; bound variables in
the copy are fresh, so inlining one helper twice never binds one Var twice. Helpers that are
no longer referenced are dropped. Recursive helpers cannot be inlined and are an error: the AOT
executor runs straight-line code only.

The executor sees one function; fusion then also works across what were call boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from compiler.diagnostics import UnsupportedError
from compiler.ir.expr import Call, Expr, Function, GlobalVar, Let, Var
from compiler.ir.module import IRModule
from compiler.ir.visitor import ExprMutator, post_order
from compiler.passes.dead_code_elimination import reachable_globals
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext


def inlinable(func: object) -> bool:
    return isinstance(func, Function) and not (
        func.has_nonzero_attr("Primitive") or func.has_nonzero_attr("Extern") or "Compiler" in func.attrs
    )


class _Copy(ExprMutator):
    """A copy of a body with params replaced and every bound variable renewed."""

    def __init__(self, substitution: dict[Var, Expr]):
        super().__init__()
        self.memo.update(substitution)
        self.fresh: dict[Var, Var] = {}

    def descend(self, node: Expr) -> bool:
        # Closed functions (primitives, composites) keep their own params: copying them is
        # only needed for sharing-free rewriting, and they never see the caller's vars.
        return not (isinstance(node, Function) and not inlinable(node))

    def rewrite_var(self, pre: Var, post: Expr) -> Expr:
        renewed = self.fresh.get(pre)
        if renewed is None:
            return post
        return renewed

    def visit(self, root: Expr) -> Expr:
        # Bound vars (lets, nested fn params) are renewed before the walk reaches their uses.
        for node in post_order(root, descend=self.descend):
            if isinstance(node, Let) and node.var not in self.memo:
                self.fresh[node.var] = Var(node.var.name_hint, node.var.type_annotation, node.var.span)
            elif isinstance(node, Function) and self.descend(node):
                for p in node.params:
                    if p not in self.memo:
                        self.fresh[p] = Var(p.name_hint, p.type_annotation, p.span)
        return super().visit(root)


class _Inliner(ExprMutator):
    def __init__(self, mod: IRModule, stack: tuple[str, ...]):
        super().__init__()
        self.mod = mod
        self.stack = stack

    def rewrite_call(self, pre: Call, post: Call) -> Expr:
        callee = post.op
        if not isinstance(callee, GlobalVar) or callee not in self.mod:
            return post
        func = self.mod[callee]
        if not inlinable(func):
            return post
        assert isinstance(func, Function)
        name = callee.name_hint
        if name in self.stack:
            chain = " -> ".join(f"@{n}" for n in (*self.stack, name))
            raise UnsupportedError(f"recursive call {chain} cannot be compiled to straight-line code", pre.span)
        body = inline_calls(self.mod, func.body, (*self.stack, name))
        return _Copy(dict(zip(func.params, post.args))).visit(body)


def inline_calls(mod: IRModule, expr: Expr, stack: tuple[str, ...]) -> Expr:
    return _Inliner(mod, stack).visit(expr)


@dataclass(frozen=True)
class InlineGlobals(Pass):
    name: ClassVar[str] = "InlineGlobals"
    entry: str = "main"

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        if self.entry not in mod:
            return mod
        main = mod[self.entry]
        assert isinstance(main, Function)
        body = inline_calls(mod, main.body, (self.entry,))
        if body is main.body:
            return mod
        out = mod.copy()
        out.add(mod.get_global_var(self.entry),
                Function(main.params, body, main.ret_type, main.attrs, main.span))
        live = reachable_globals(out, [self.entry])
        for gv, func in mod.items():
            if gv.name_hint not in live and inlinable(func):
                out.remove(gv)
        return InferType().run(out, ctx)
