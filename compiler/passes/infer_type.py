"""InferType: give every expression of every Relay function its checked type.

Before: any module whose function parameters carry type annotations.
After: every node reachable from a Relay function has `checked_type`; functions' types are
`FuncType`s. Errors are `TypeCheckError`s located at the offending expression and naming the
types that disagree.

Types are cached on the nodes. A node's type is a function of its structure, so a node already
typed (by an earlier run on another module sharing it) is not visited again; that keeps repeated
InferType runs between passes cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from compiler import ops
from compiler.diagnostics import Span, TypeCheckError
from compiler.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
)
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, FuncType, TensorType, TupleType, Type
from compiler.ir.visitor import post_order
from compiler.passes.pass_infra import Pass, PassContext


def compatible(expected: Type, actual: Type) -> bool:
    """True when `actual` can stand where `expected` is declared; `?` matches any dim."""
    if isinstance(expected, TensorType) and isinstance(actual, TensorType):
        return (
            expected.dtype == actual.dtype
            and expected.ndim == actual.ndim
            and all(a is ANY or b is ANY or a == b for a, b in zip(expected.shape, actual.shape))
        )
    if isinstance(expected, TupleType) and isinstance(actual, TupleType):
        return len(expected.fields) == len(actual.fields) and all(
            compatible(e, a) for e, a in zip(expected.fields, actual.fields)
        )
    if isinstance(expected, FuncType) and isinstance(actual, FuncType):
        return (
            len(expected.arg_types) == len(actual.arg_types)
            and all(compatible(e, a) for e, a in zip(expected.arg_types, actual.arg_types))
            and compatible(expected.ret_type, actual.ret_type)
        )
    return expected == actual


def describe(expr: Expr) -> str:
    """A short human name for an expression, used in error messages."""
    if isinstance(expr, Call):
        if isinstance(expr.op, Op):
            return f"call to {expr.op.name}"
        if isinstance(expr.op, GlobalVar):
            return f"call to @{expr.op.name_hint}"
        if isinstance(expr.op, Var):
            return f"call to %{expr.op.name_hint}"
        return "call to a function literal"
    if isinstance(expr, Var):
        return f"%{expr.name_hint}"
    if isinstance(expr, GlobalVar):
        return f"@{expr.name_hint}"
    if isinstance(expr, Function):
        return "function"
    if isinstance(expr, TupleGetItem):
        return f"projection .{expr.index}"
    return type(expr).__name__.lower()


def declared_type(func: Function) -> FuncType | None:
    """The function's type from its annotations alone, or None without a return annotation."""
    if func.ret_type is None:
        return None
    params = []
    for p in func.params:
        if p.type_annotation is None:
            return None
        params.append(p.type_annotation)
    return FuncType(tuple(params), func.ret_type)


class _Inferencer:
    def __init__(self, mod: IRModule):
        self.mod = mod
        self.global_types: dict[str, FuncType] = {}
        self.in_progress: set[str] = set()

    def global_type(self, gv: GlobalVar, span: Span | None) -> FuncType:
        name = gv.name_hint
        if name in self.global_types:
            return self.global_types[name]
        if name not in self.mod:
            raise TypeCheckError(f"undefined global @{name}", span or gv.span)
        definition = self.mod[name]
        if isinstance(definition, Function):
            declared = declared_type(definition)
            if declared is not None:
                self.global_types[name] = declared
                return declared
            if name in self.in_progress:
                raise TypeCheckError(
                    f"@{name} is recursive and needs a return type annotation", span or gv.span
                )
            self.in_progress.add(name)
            ty = self.infer_function(definition)
            self.in_progress.discard(name)
            self.global_types[name] = ty
            return ty
        # Lowered definitions (PrimFuncs, externs) describe their own Relay-level type.
        ty = getattr(definition, "func_type", None)
        if not isinstance(ty, FuncType):
            raise TypeCheckError(f"global @{name} has no Relay type", span or gv.span)
        return ty

    def infer_function(self, func: Function) -> FuncType:
        if func.has_type:
            ty = func.checked_type
            assert isinstance(ty, FuncType)
            return ty
        self.infer(func)
        ty = func.checked_type
        assert isinstance(ty, FuncType)
        return ty

    def infer(self, root: Expr) -> Type:
        let_value: dict[Var, Expr] = {}

        def descend(node: Expr) -> bool:
            # Called before a node's children are walked, so a let's binder is known by the
            # time the walk reaches the var.
            if isinstance(node, Let):
                let_value[node.var] = node.value
            return not node.has_type

        for node in post_order(root, descend=descend):
            if node.has_type:
                continue
            ty = self.type_of(node, let_value)
            if ty is not None:
                node.set_checked_type(ty)
        if isinstance(root, (Op, GlobalVar)):
            raise TypeCheckError(f"{describe(root)} cannot be used as a value here", root.span)
        return root.checked_type

    def type_of(self, node: Expr, let_value: dict[Var, Expr]) -> Type | None:
        if isinstance(node, Var):
            if node.type_annotation is not None:
                return node.type_annotation
            # Let-bound without annotation: the walk typed the value first (see expr.children).
            value = let_value.get(node)
            if value is None:
                raise TypeCheckError(f"%{node.name_hint} needs a type annotation", node.span)
            return value.checked_type
        if isinstance(node, Constant):
            return node.tensor_type
        if isinstance(node, (Op, GlobalVar)):
            return None  # typed at their use: they are not first-class values here
        if isinstance(node, Call):
            return self.call_type(node)
        if isinstance(node, Function):
            return self.function_type(node)
        if isinstance(node, Tuple):
            return TupleType(tuple(self.value_type(f) for f in node.fields))
        if isinstance(node, TupleGetItem):
            ty = self.value_type(node.tuple_value)
            if not isinstance(ty, TupleType):
                raise TypeCheckError(f"projection .{node.index} of a non-tuple of type {ty}", node.span)
            if not 0 <= node.index < len(ty.fields):
                raise TypeCheckError(
                    f"projection .{node.index} out of range for {len(ty.fields)}-tuple {ty}", node.span
                )
            return ty.fields[node.index]
        if isinstance(node, Let):
            if node.var.type_annotation is not None:
                value_ty = self.value_type(node.value)
                if not compatible(node.var.type_annotation, value_ty):
                    raise TypeCheckError(
                        f"let %{node.var.name_hint} is annotated {node.var.type_annotation} "
                        f"but its value has type {value_ty}",
                        node.span or node.var.span,
                    )
            return self.value_type(node.body)
        if isinstance(node, If):
            cond = self.value_type(node.cond)
            if not (isinstance(cond, TensorType) and cond.ndim == 0 and cond.dtype == "bool"):
                raise TypeCheckError(f"if condition must be a bool scalar, found {cond}", node.cond.span or node.span)
            t, f = self.value_type(node.true_branch), self.value_type(node.false_branch)
            if not (compatible(t, f) or compatible(f, t)):
                raise TypeCheckError(f"if branches disagree: then-branch is {t}, else-branch is {f}", node.span)
            return t
        raise TypeCheckError(f"cannot type {node!r}", getattr(node, "span", None))

    def value_type(self, expr: Expr) -> Type:
        if isinstance(expr, GlobalVar):
            return self.global_type(expr, expr.span)
        if isinstance(expr, Op):
            raise TypeCheckError(f"operator {expr.name} used as a value; call it instead", expr.span)
        return expr.checked_type

    def function_type(self, func: Function) -> FuncType:
        params = []
        for p in func.params:
            if p.type_annotation is None:
                raise TypeCheckError(f"parameter %{p.name_hint} needs a type annotation", p.span or func.span)
            params.append(p.type_annotation)
        body = self.value_type(func.body)
        ret = body
        if func.ret_type is not None:
            if not compatible(func.ret_type, body):
                raise TypeCheckError(
                    f"function is annotated to return {func.ret_type} but its body has type {body}",
                    func.body.span or func.span,
                )
            ret = func.ret_type
        return FuncType(tuple(params), ret)

    def call_type(self, call: Call) -> Type:
        if isinstance(call.op, Op):
            return self.op_call_type(call, call.op)
        callee = self.value_type(call.op)
        if not isinstance(callee, FuncType):
            raise TypeCheckError(f"{describe(call)}: callee has type {callee}, not a function", call.span)
        if len(callee.arg_types) != len(call.args):
            raise TypeCheckError(
                f"{describe(call)} passes {len(call.args)} arguments, the function takes {len(callee.arg_types)}",
                call.span,
            )
        for i, (expected, arg) in enumerate(zip(callee.arg_types, call.args)):
            actual = self.value_type(arg)
            if not compatible(expected, actual):
                raise TypeCheckError(
                    f"argument {i} of {describe(call)}: expected {expected}, found {actual}",
                    arg.span or call.span,
                )
        return callee.ret_type

    def op_call_type(self, call: Call, op: Op) -> Type:
        opdef = ops.lookup(op.name)
        if opdef is None:
            raise TypeCheckError(f"unknown operator {op.name}", call.span)
        if opdef.num_inputs is not None and len(call.args) != opdef.num_inputs:
            raise TypeCheckError(
                f"{op.name} takes {opdef.num_inputs} arguments, {len(call.args)} given", call.span
            )
        arg_types: Sequence[Type] = [self.value_type(a) for a in call.args]
        try:
            if opdef.extras.get("constant_args"):
                # The result type depends on constant argument values (arange's length).
                values = [constant_data(a) for a in call.args]
                return opdef.type_rel(arg_types, call.attrs, values)  # type: ignore[call-arg]  # see OpDef.extras
            return opdef.type_rel(arg_types, call.attrs)
        except ops.TypeRelationError as err:
            raise TypeCheckError(f"in {describe(call)}: {err}", call.span) from None


def constant_data(arg: Expr) -> object:
    """The value of a constant argument: a Constant's data, a tuple of them for a tuple of
    Constants (qnn.concatenate's scales), else None."""
    if isinstance(arg, Constant):
        return arg.data
    if isinstance(arg, Tuple) and arg.fields and all(isinstance(f, Constant) for f in arg.fields):
        return tuple(f.data for f in arg.fields)  # type: ignore[attr-defined]  # Constants, checked above
    return None


@dataclass(frozen=True)
class InferType(Pass):
    name: ClassVar[str] = "InferType"

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        inferencer = _Inferencer(mod)
        for gv, func in mod.functions():
            ty = inferencer.infer_function(func)
            inferencer.global_types.setdefault(gv.name_hint, ty)
        return mod


def infer_expr(expr: Expr, mod: IRModule | None = None) -> Type:
    """Type a standalone expression (globals resolved in `mod`)."""
    return _Inferencer(mod or IRModule()).infer(expr)
