"""Per-codegen passes: Relay passes that run only on the functions partitioned for one codegen.

TVM's pass manager skips every function that carries a `Compiler` attribute, so a backend
cannot, say, convert its convolutions to NHWC without converting the host's too (seed 002).
Here a codegen lists its passes as text, and `RunCodegenPasses(compiler, passes)` runs them on
each global function with `Compiler="<compiler>"`, one at a time, as the `@main` of a module of
its own without the attributes that would make the passes skip it. The attributes are put back
afterwards; host functions are never touched.

Pass texts: a pass name, optionally with `key=value` arguments in parentheses:

    FoldConstant
    SimplifyInference
    DeadCodeElimination
    ConvertLayout(nn.conv2d=NHWC:OHWI)      # data layout, then optionally ':' kernel layout

Before: a typed module whose compiler functions are globals (after outlining). After (typed):
the same module with those functions rewritten; their parameter and result types are
unchanged (a pass that changed them is an error).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from compiler.diagnostics import CompileError
from compiler.ir.expr import Function, GlobalVar
from compiler.ir.module import IRModule
from compiler.ir.types import FuncType
from compiler.passes.convert_layout import ConvertLayout
from compiler.passes.dead_code_elimination import DeadCodeElimination
from compiler.passes.fold_constant import FoldConstant
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext
from compiler.passes.simplify_inference import SimplifyInference

# Attributes that make Relay passes leave a function alone, or that only its caller needs.
_ISOLATING_ATTRS = ("Compiler", "Primitive", "Inline", "global_symbol")


class PassSpecError(ValueError):
    """A pass text that does not parse or names an unknown pass; the message has the column."""


@dataclass(frozen=True)
class PassSpec:
    name: str
    args: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in self.args)})"


def _no_args(factory: Callable[[], Pass]) -> Callable[[PassSpec], Pass]:
    def make(spec: PassSpec) -> Pass:
        if spec.args:
            raise PassSpecError(f"{spec.name} takes no arguments")
        return factory()

    return make


def _convert_layout(spec: PassSpec) -> Pass:
    if not spec.args:
        raise PassSpecError("ConvertLayout needs at least one op=layout argument, e.g. nn.conv2d=NHWC:OHWI")
    desired: dict[str, tuple[str, ...]] = {}
    for op, value in spec.args:
        desired[op] = tuple(value.split(":"))
    try:
        return ConvertLayout(desired)
    except ValueError as err:
        raise PassSpecError(str(err)) from None


PASSES: dict[str, Callable[[PassSpec], Pass]] = {
    "FoldConstant": _no_args(FoldConstant),
    "SimplifyInference": _no_args(SimplifyInference),
    "DeadCodeElimination": _no_args(DeadCodeElimination),
    "ConvertLayout": _convert_layout,
}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_VALUE = re.compile(r"[A-Za-z0-9_:.]+")


def parse_pass_spec(text: str) -> PassSpec:
    """`"ConvertLayout(nn.conv2d=NHWC:OHWI)"` → PassSpec; also checks that the pass exists and
    accepts the arguments. Columns in errors are 1-based."""
    scanner = _Scanner(text)
    name = scanner.expect(_NAME, "a pass name")
    if name not in PASSES:
        raise PassSpecError(f"unknown pass {name!r} (known: {', '.join(sorted(PASSES))})")
    args: list[tuple[str, str]] = []
    if scanner.accept("("):
        if not scanner.accept(")"):
            while True:
                key = scanner.expect(_KEY, "an argument name such as nn.conv2d")
                scanner.require("=")
                args.append((key, scanner.expect(_VALUE, "a value such as NHWC:OHWI")))
                if scanner.accept(")"):
                    break
                if not scanner.accept(","):
                    raise scanner.error("',' or ')'")
    scanner.end()
    spec = PassSpec(name, tuple(args))
    PASSES[name](spec)
    return spec


def make_pass(text: str) -> Pass:
    spec = parse_pass_spec(text)
    return PASSES[spec.name](spec)


class _Scanner:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def error(self, expected: str) -> PassSpecError:
        found = repr(self.text[self.pos]) if self.pos < len(self.text) else "the end"
        return PassSpecError(f"expected {expected} at column {self.pos + 1}, found {found}")

    def expect(self, pattern: re.Pattern[str], what: str) -> str:
        self.skip_space()
        match = pattern.match(self.text, self.pos)
        if match is None:
            raise self.error(what)
        self.pos = match.end()
        return match.group()

    def accept(self, token: str) -> bool:
        self.skip_space()
        if self.text.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def require(self, token: str) -> None:
        if not self.accept(token):
            raise self.error(repr(token))

    def end(self) -> None:
        self.skip_space()
        if self.pos != len(self.text):
            raise self.error("the end of the pass")


def is_compiler_function(func: object, compiler: str) -> bool:
    return isinstance(func, Function) and func.attrs.get("Compiler") == compiler


@dataclass(frozen=True)
class RunCodegenPasses(Pass):
    """Runs `passes` (pass texts) on the global functions with `Compiler="<compiler>"`."""

    name: ClassVar[str] = "RunCodegenPasses"
    compiler: str = ""
    passes: tuple[str, ...] = ()

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        if not self.passes:
            return mod
        pipeline = [make_pass(text) for text in self.passes]
        mod = InferType().run(mod, ctx)
        out = mod.copy()
        for gv, func in mod.functions():
            if is_compiler_function(func, self.compiler):
                out.add(gv, self.rewrite(gv, func, pipeline, ctx))
        return InferType().run(out, ctx)

    def rewrite(self, gv: GlobalVar, func: Function, pipeline: Sequence[Pass], ctx: PassContext) -> Function:
        # Alone in a module and stripped of Compiler/Primitive, the function is an ordinary
        # @main to every pass; each pass runs even below its opt level, since the codegen
        # asked for it by name.
        isolated = IRModule({GlobalVar("main"): Function(
            func.params, func.body, func.ret_type, func.attrs.without(*_ISOLATING_ATTRS), func.span)})
        for p in pipeline:
            isolated = p(isolated, ctx)
        result = InferType().run(isolated, ctx).main
        before, after = func.checked_type, result.checked_type
        if not _same_signature(before, after):
            raise CompileError(
                f"pass pipeline of codegen {self.compiler} changed the type of @{gv.name_hint} "
                f"from {before} to {after}", func.span)
        return Function(result.params, result.body, func.ret_type, func.attrs, func.span)


def _same_signature(a: object, b: object) -> bool:
    return isinstance(a, FuncType) and isinstance(b, FuncType) and a == b
