"""Passes that keep functions owned by external codegens ("Compiler" functions) in a shape an
IRModule-at-a-time codegen (a RelayToTIR hook) can work on.

OutlineCompilerFunctionsWithExistingGlobalSymbols(compiler_filter="")
    Before: ordinary functions may call function literals carrying `Compiler="x"` in place
    (`fn (..., Compiler="x", global_symbol="s") {...}(args)`), possibly through a let
    (`let %f = fn (...) {...}; %f(args)`), as left by inlining partitioned globals.
    After (typed): each such call is a call of the global `@s` named by the literal's
    `global_symbol`, and `@s` is that literal, attributes unchanged. Structurally equal
    literals with one symbol are lifted once; a let binding such a literal is dropped, its
    variable now standing for the global. With a filter, only literals whose `Compiler` equals
    it are outlined. A literal without `global_symbol`, or a symbol already naming a different
    global definition, is a CompileError located at the literal. Primitive, extern and
    Compiler-owned functions are not looked into.

MarkCompilerFunctionsAsExtern(compiler_filter="")
    Before: global functions with `Compiler="x"` that a codegen has now compiled.
    After (typed): each of them (matching the filter, if given) keeps its params, body and type
    but its attributes are replaced by the single `Extern=1`; calls to it are unchanged (LowerTE
    turns them into call_lowered later).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from compiler.diagnostics import CompileError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Expr, Function, GlobalVar, Let, Var
from compiler.ir.module import IRModule
from compiler.ir.structural import structural_equal
from compiler.ir.visitor import post_order, rebuild
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext


def compiler_matches(func: object, compiler_filter: str) -> bool:
    """`func` is a Relay function owned by an external codegen the filter selects."""
    if not isinstance(func, Function):
        return False
    compiler = func.attrs.get("Compiler")
    return isinstance(compiler, str) and (not compiler_filter or compiler == compiler_filter)


def optimizable(func: object) -> bool:
    """Ordinary Relay functions: not primitive, extern, Compiler-owned or marked to skip."""
    return isinstance(func, Function) and not (
        func.has_nonzero_attr("Primitive")
        or func.has_nonzero_attr("Extern")
        or func.has_nonzero_attr("SkipOptimization")
        or "Compiler" in func.attrs
    )


@dataclass(frozen=True)
class OutlineCompilerFunctionsWithExistingGlobalSymbols(Pass):
    name: ClassVar[str] = "OutlineCompilerFunctionsWithExistingGlobalSymbols"
    compiler_filter: str = ""

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = mod.copy()
        changed = False
        for gv, func in mod.functions():
            if not optimizable(func):
                continue
            outliner = _Outliner(self.compiler_filter, out)
            body = outliner.visit(func.body)
            if body is not func.body:
                out.add(gv, Function(func.params, body, func.ret_type, func.attrs, func.span))
                changed = True
        return InferType().run(out, ctx) if changed else mod


class _Outliner:
    """Rewrites one function body; lifted literals are added to `mod` as they are found."""

    def __init__(self, compiler_filter: str, mod: IRModule):
        self.compiler_filter = compiler_filter
        self.mod = mod

    def descend(self, node: Expr) -> bool:
        return not (isinstance(node, Function) and not optimizable(node))

    def visit(self, root: Expr) -> Expr:
        # A let binding a literal to outline disappears; its variable stands for the global.
        # (ExprMutator cannot express this: it would rebuild the let with a global as binder.)
        let_bound: dict[Var, GlobalVar] = {}
        for node in post_order(root, descend=self.descend):
            if isinstance(node, Let) and compiler_matches(node.value, self.compiler_filter):
                assert isinstance(node.value, Function)
                let_bound[node.var] = self.lift(node.value)
        new: dict[Expr, Expr] = {}
        for node in post_order(root, descend=self.descend):
            if not self.descend(node):
                new[node] = node
            elif isinstance(node, Var) and node in let_bound:
                new[node] = let_bound[node]
            elif isinstance(node, Let) and node.var in let_bound:
                new[node] = new[node.body]
            else:
                post = rebuild(node, new.__getitem__)
                if isinstance(post, Call) and compiler_matches(post.op, self.compiler_filter):
                    assert isinstance(post.op, Function)
                    post = Call(self.lift(post.op), post.args, post.attrs, post.span)
                new[node] = post
        return new[root]

    def lift(self, func: Function) -> GlobalVar:
        symbol = func.attrs.get("global_symbol")
        compiler = func.attrs.get("Compiler")
        if not isinstance(symbol, str) or not symbol:
            raise CompileError(
                f'a function for Compiler="{compiler}" has no global_symbol, so it cannot be outlined', func.span
            )
        if symbol in self.mod:
            existing = self.mod[symbol]
            if existing is not func and not (
                isinstance(existing, Function) and structural_equal(existing, func)
            ):
                raise CompileError(
                    f'global_symbol "{symbol}" of a function for Compiler="{compiler}" already names '
                    "a different global definition",
                    func.span,
                )
            return self.mod.get_global_var(symbol)
        gv = GlobalVar(symbol)
        self.mod.add(gv, func)
        return gv


@dataclass(frozen=True)
class MarkCompilerFunctionsAsExtern(Pass):
    name: ClassVar[str] = "MarkCompilerFunctionsAsExtern"
    compiler_filter: str = ""

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = mod.copy()
        changed = False
        for gv, func in mod.functions():
            if compiler_matches(func, self.compiler_filter):
                out.add(gv, Function(func.params, func.body, func.ret_type, Attrs(Extern=1), func.span))
                changed = True
        return InferType().run(out, ctx) if changed else mod
