"""UnwrapCallLowered: turn `call_lowered` of a Relay function back into an ordinary call.

Before: any module. A module TVM printed after LowerTE calls its kernels through
`call_lowered(@f, (a, b), metadata={...})`; when `@f` is a Relay function of the module (a
`Primitive=1` or `Extern=1` def printed with its body) the call means `@f(a, b)`.
After: each such call is `@f(a, b)` (the metadata is dropped: LowerTE writes it anew). A
call_lowered of anything else (a PrimFunc, which Relay text never holds, or arguments that are
not a tuple literal) is left for CheckCompilable to report. A module without call_lowered is
returned as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from compiler.ir.attrs import EMPTY_ATTRS
from compiler.ir.expr import Call, Expr, Function, GlobalVar, Op, Tuple
from compiler.ir.module import IRModule
from compiler.ir.visitor import ExprMutator
from compiler.passes.pass_infra import Pass, PassContext


class _Unwrap(ExprMutator):
    def __init__(self, mod: IRModule):
        super().__init__()
        self.mod = mod

    def rewrite_call(self, pre: Call, post: Expr) -> Expr:
        assert isinstance(post, Call)
        if not (isinstance(post.op, Op) and post.op.name == "call_lowered" and len(post.args) == 2):
            return post
        callee, args = post.args
        if not (isinstance(callee, GlobalVar) and isinstance(args, Tuple) and callee.name_hint in self.mod):
            return post
        if not isinstance(self.mod[callee.name_hint], Function):
            return post
        return Call(callee, args.fields, EMPTY_ATTRS, post.span)


@dataclass(frozen=True)
class UnwrapCallLowered(Pass):
    name: ClassVar[str] = "UnwrapCallLowered"

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = mod.copy()
        changed = False
        for gv, func in mod.functions():
            new = _Unwrap(mod).visit(func)
            if new is not func:
                out.add(gv, new)
                changed = True
        return out if changed else mod
