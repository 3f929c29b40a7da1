"""InferType: give every expression of every Relay function its checked type.

Before: any module; parameters and lets may lack annotations (or say `_`).
After: every node reachable from a Relay function has `checked_type`, with no hole left;
functions' types are `FuncType`s. Errors are `TypeCheckError`s located at the offending
expression and naming the types that disagree.

Types are found by unification (compiler/passes/type_solver.py): a missing annotation is a hole
that the uses of the variable fill. Polymorphic functions (`def @id[A](%x: A) -> A`) and ADT
constructors (`Cons`, `Nil`) get fresh holes for their type parameters at each use. An op's type
relation needs concrete argument types, so a call whose arguments still have holes is deferred
and retried once more is known (as TVM defers relations); a hole nothing fills is an error at
the first expression whose type it leaves unknown.

Types are cached on the nodes. A node's type is a function of its structure, so a node already
typed (by an earlier run on another module sharing it) is not visited again; that keeps repeated
InferType runs between passes cheap. A failed run leaves no types behind.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

from compiler import ops
from compiler.diagnostics import Span, TypeCheckError
from compiler.ir.expr import (
    Call,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from compiler.ir.module import IRModule
from compiler.ir.types import (
    ANY,
    FuncType,
    IncompleteType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    TypeVar,
    substitute,
)
from compiler.ir.visitor import post_order
from compiler.passes.match_patterns import PatternTyper, missing_case
from compiler.passes.pass_infra import Pass, PassContext
from compiler.passes.type_solver import Solver, instantiate

BOOL = TensorType((), "bool")


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
        if isinstance(expr.op, Constructor):
            return f"call to constructor {expr.op.name}"
        return "call to a function literal"
    if isinstance(expr, Var):
        return f"%{expr.name_hint}"
    if isinstance(expr, GlobalVar):
        return f"@{expr.name_hint}"
    if isinstance(expr, Function):
        return "function"
    if isinstance(expr, TupleGetItem):
        return f"projection .{expr.index}"
    if isinstance(expr, Constructor):
        return f"constructor {expr.name}"
    return type(expr).__name__.lower()


def declared_type(func: Function) -> FuncType | None:
    """The function's type from its annotations alone, or None where one is missing."""
    if func.ret_type is None or not _complete(func.ret_type):
        return None
    params = []
    for p in func.params:
        if p.type_annotation is None or not _complete(p.type_annotation):
            return None
        params.append(p.type_annotation)
    return FuncType(tuple(params), func.ret_type, func.type_params)


def _complete(ty: Type) -> bool:
    return Solver().is_complete(ty)


class _Inferencer:
    def __init__(self, mod: IRModule):
        self.mod = mod
        self.solver = Solver()
        self.global_types: dict[str, FuncType] = {}
        # Return-type holes of globals being inferred, for recursive calls to them.
        self.in_progress: dict[str, FuncType] = {}
        self.recursive_holes: dict[IncompleteType, str] = {}
        self.typed: list[Expr] = []
        self.deferred: list[tuple[Expr, Callable[[], bool]]] = []
        self.let_value: dict[Var, Expr] = {}
        self.patterns = PatternTyper(mod, self.solver, self.value_type)
        # Whether finish() must look for holes: none made during the run, none written as `_`.
        self.holes_before = IncompleteType.created
        self.annotated_holes = False

    # -- globals and functions --

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
            pending = self.in_progress.get(name)
            if pending is not None:
                return pending
            ty = self.infer_function(definition, name)
            self.global_types[name] = ty
            return ty
        # Lowered definitions (PrimFuncs, externs) describe their own Relay-level type.
        ty = getattr(definition, "func_type", None)
        if not isinstance(ty, FuncType):
            raise TypeCheckError(f"global @{name} has no Relay type", span or gv.span)
        return ty

    def infer_function(self, func: Function, name: str | None = None) -> FuncType:
        if func.has_type:
            ty = func.checked_type
            assert isinstance(ty, FuncType)
            return ty
        if name is not None:
            # A recursive call sees the annotations and a hole for what is not written yet.
            params = tuple(p.type_annotation or IncompleteType() for p in func.params)
            ret = func.ret_type or IncompleteType()
            if isinstance(ret, IncompleteType):
                self.recursive_holes[ret] = name
            self.in_progress[name] = FuncType(params, ret, func.type_params)
        self.infer(func)
        ty = func.checked_type
        assert isinstance(ty, FuncType)
        if name is not None:
            pending = self.in_progress.pop(name)
            self.solver.unify_all(pending.arg_types, ty.arg_types)
            self.solver.unify(pending.ret_type, ty.ret_type)
            self.solve_deferred(final=False)
        return ty

    def infer(self, root: Expr) -> Type:
        let_value = self.let_value

        def descend(node: Expr) -> bool:
            # Called before a node's children are walked, so a let's binder is known by the
            # time the walk reaches the var.
            if isinstance(node, Let):
                let_value[node.var] = node.value
            elif isinstance(node, Match):
                self.patterns.owners(node)
            return not node.has_type

        for node in post_order(root, descend=descend):
            if node.has_type:
                continue
            ty = self.type_of(node)
            if ty is not None:
                node.set_checked_type(ty)
                self.typed.append(node)
        if isinstance(root, (Op, GlobalVar)):
            raise TypeCheckError(f"{describe(root)} cannot be used as a value here", root.span)
        return root.checked_type

    # -- finishing: deferred relations, then no hole may remain --

    def solve_deferred(self, final: bool) -> None:
        progress = True
        while progress and self.deferred:
            progress = False
            waiting = []
            for node, attempt in self.deferred:
                if attempt():
                    progress = True
                else:
                    waiting.append((node, attempt))
            self.deferred = waiting
        if final and self.deferred:
            node = self.deferred[0][0]
            raise TypeCheckError(
                f"cannot infer the argument types of {describe(node)}; annotate the values it uses",
                node.span,
            )

    def finish(self) -> None:
        self.solve_deferred(final=True)
        if IncompleteType.created == self.holes_before and not self.annotated_holes:
            return  # nothing was left open: every type is final already
        for node in self.typed:
            ty = node.checked_type
            if not self.solver.has_holes(ty):
                continue
            if not self.solver.is_complete(ty):
                raise TypeCheckError(self.unknown_message(node, ty), node.span)
            node.set_checked_type(self.solver.resolve(ty))

    def unknown_message(self, node: Expr, ty: Type) -> str:
        for hole, name in self.recursive_holes.items():
            if self.solver.find(hole) is hole and self.solver.occurs(hole, ty):
                return f"@{name} is recursive and needs a return type annotation (its return type cannot be inferred)"
        shown = self.solver.resolve(ty)
        return f"cannot infer the type of {describe(node)} (known so far: {shown}); annotate it"

    def forget(self) -> None:
        """Undo the types this run set, after an error."""
        for node in self.typed:
            node.__dict__.pop("_checked_type", None)
        self.typed.clear()

    # -- expressions --

    def unify_or_fail(self, expected: Type, actual: Type, message: Callable[[Type, Type], str], span: Span | None) -> None:
        if not self.solver.unify(expected, actual):
            raise TypeCheckError(message(self.solver.resolve(expected), self.solver.resolve(actual)), span)

    def join_or_fail(self, a: Type, b: Type, message: Callable[[Type, Type], str], span: Span | None) -> Type:
        """The type of a value that is `a` or `b` (if branches, match clauses): `?` where they differ."""
        joined = self.solver.join(a, b)
        if joined is None:
            raise TypeCheckError(message(self.solver.resolve(a), self.solver.resolve(b)), span)
        return a if isinstance(a, IncompleteType) else joined  # a hole's class holds the join

    def type_of(self, node: Expr) -> Type | None:
        if isinstance(node, Var):
            return self.var_type(node)
        if isinstance(node, Constant):
            return node.tensor_type
        if isinstance(node, (Op, GlobalVar, Constructor)):
            return None  # typed at their use: each use may instantiate them differently
        if isinstance(node, Call):
            return self.call_type(node)
        if isinstance(node, Function):
            return self.function_type(node)
        if isinstance(node, Tuple):
            return TupleType(tuple(self.value_type(f) for f in node.fields))
        if isinstance(node, TupleGetItem):
            return self.projection_type(node)
        if isinstance(node, Let):
            return self.let_type(node)
        if isinstance(node, If):
            cond = self.value_type(node.cond)
            self.unify_or_fail(
                BOOL, cond, lambda _, c: f"if condition must be a bool scalar, found {c}", node.cond.span or node.span
            )
            t, f = self.value_type(node.true_branch), self.value_type(node.false_branch)
            return self.join_or_fail(
                t, f, lambda a, b: f"if branches disagree: then-branch is {a}, else-branch is {b}", node.span
            )
        if isinstance(node, Match):
            return self.match_type(node)
        if isinstance(node, RefCreate):
            return RefType(self.value_type(node.value))
        if isinstance(node, (RefRead, RefWrite)):
            return self.reference_type(node)
        raise TypeCheckError(f"cannot type {node!r}", getattr(node, "span", None))

    def reference_type(self, node: RefRead | RefWrite) -> Type:
        """`ref_read(r)` has the type r holds; `ref_write(r, v)` needs v of that type and gives ()."""
        value = node.value if isinstance(node, RefWrite) else None
        content = self.value_type(value) if value is not None else IncompleteType()
        keyword = "ref_write" if value is not None else "ref_read"
        self.unify_or_fail(
            RefType(content),
            self.value_type(node.ref),
            lambda want, ref: f"{keyword} needs a reference{' to ' + str(want.value) if value is not None else ''}, "
            f"found {ref}",
            node.span,
        )
        return TupleType(()) if value is not None else content

    def var_type(self, var: Var) -> Type:
        pattern_type = self.patterns.var_type(var)
        if pattern_type is not None:
            return pattern_type
        value = self.let_value.get(var)
        if var.type_annotation is not None:
            if not isinstance(var.type_annotation, TensorType) and self.solver.has_holes(var.type_annotation):
                self.annotated_holes = True
            return var.type_annotation
        if value is not None and value.has_type:
            return value.checked_type
        # A parameter without annotation, or a let-bound function used inside its own body.
        return IncompleteType()

    def let_type(self, node: Let) -> Type:
        value_ty = self.value_type(node.value)
        var_ty = node.var.checked_type
        annotation = node.var.type_annotation
        self.unify_or_fail(
            var_ty,
            value_ty,
            lambda a, v: f"let %{node.var.name_hint} is annotated {annotation if annotation else a} "
            f"but its value has type {v}",
            node.span or node.var.span,
        )
        return self.value_type(node.body)

    def value_type(self, expr: Expr) -> Type:
        if isinstance(expr, GlobalVar):
            return instantiate(self.global_type(expr, expr.span))
        if isinstance(expr, Op):
            raise TypeCheckError(f"operator {expr.name} used as a value; call it instead", expr.span)
        if isinstance(expr, Constructor):
            return self.constructor_type(expr)
        return expr.checked_type

    def constructor_type(self, ctor: Constructor) -> Type:
        """`Cons` is `fn (A, List[A]) -> List[A]` with a fresh A; `Nil` is `List[A]`."""
        data = self.mod.type_definitions.get(ctor.type_name)
        if data is None or data.constructor(ctor.name) is None:
            raise TypeCheckError(f"constructor {ctor.name} is not defined in this module", ctor.span)
        fresh: dict[TypeVar, Type] = {p: IncompleteType() for p in data.type_params}
        result = TypeCall(data.name, tuple(fresh[p] for p in data.type_params))
        if not ctor.inputs:
            return result
        return FuncType(tuple(substitute(t, fresh) for t in ctor.inputs), result)

    def function_type(self, func: Function) -> FuncType:
        params = tuple(p.checked_type for p in func.params)
        body = self.value_type(func.body)
        ret = body
        if func.ret_type is not None:
            if self.solver.has_holes(func.ret_type):
                self.annotated_holes = True
            self.unify_or_fail(
                func.ret_type,
                body,
                lambda r, b: f"function is annotated to return {func.ret_type} but its body has type {b}",
                func.body.span or func.span,
            )
            ret = func.ret_type
        return FuncType(params, ret, func.type_params)

    def projection_type(self, node: TupleGetItem) -> Type:
        ty = self.solver.find(self.value_type(node.tuple_value))
        if isinstance(ty, IncompleteType):
            result = IncompleteType()

            def attempt() -> bool:
                known = self.solver.find(ty)
                if isinstance(known, IncompleteType):
                    return False
                self.unify_or_fail(result, self.field_type(node, known), _mismatch(node), node.span)
                return True

            self.deferred.append((node, attempt))
            return result
        return self.field_type(node, ty)

    def field_type(self, node: TupleGetItem, ty: Type) -> Type:
        if not isinstance(ty, TupleType):
            raise TypeCheckError(f"projection .{node.index} of a non-tuple of type {ty}", node.span)
        if not 0 <= node.index < len(ty.fields):
            raise TypeCheckError(f"projection .{node.index} out of range for {len(ty.fields)}-tuple {ty}", node.span)
        return ty.fields[node.index]

    def call_type(self, call: Call) -> Type:
        if isinstance(call.op, Op):
            return self.op_call_type(call, call.op)
        callee = self.solver.find(self.value_type(call.op))
        arg_types = [self.value_type(a) for a in call.args]
        if isinstance(callee, IncompleteType):
            result = IncompleteType()
            self.solver.unify(callee, FuncType(tuple(IncompleteType() for _ in arg_types), result))
            callee = self.solver.find(callee)
        if not isinstance(callee, FuncType):
            raise TypeCheckError(f"{describe(call)}: callee has type {callee}, not a function", call.span)
        callee = instantiate(callee)
        if len(callee.arg_types) != len(call.args):
            raise TypeCheckError(
                f"{describe(call)} passes {len(call.args)} arguments, the function takes {len(callee.arg_types)}",
                call.span,
            )
        for i, (expected, arg, actual) in enumerate(zip(callee.arg_types, call.args, arg_types)):
            self.unify_or_fail(
                expected,
                actual,
                lambda e, a, i=i: f"argument {i} of {describe(call)}: expected {e}, found {a}",
                arg.span or call.span,
            )
        return callee.ret_type

    def op_call_type(self, call: Call, op: Op) -> Type:
        opdef = ops.lookup(op.name)
        if opdef is None:
            raise TypeCheckError(f"unknown operator {op.name}", call.span)
        if opdef.num_inputs is not None and len(call.args) != opdef.num_inputs:
            raise TypeCheckError(f"{op.name} takes {opdef.num_inputs} arguments, {len(call.args)} given", call.span)
        arg_types = [self.value_type(a) for a in call.args]
        if all(isinstance(t, TensorType) or self.solver.is_complete(t) for t in arg_types):
            return self.relation(call, opdef, [self.solver.resolve(t) for t in arg_types])
        result = IncompleteType()

        def attempt() -> bool:
            if not all(self.solver.is_complete(t) for t in arg_types):
                return False
            ty = self.relation(call, opdef, [self.solver.resolve(t) for t in arg_types])
            self.unify_or_fail(result, ty, _mismatch(call), call.span)
            return True

        self.deferred.append((call, attempt))
        return result

    def relation(self, call: Call, opdef: ops.OpDef, arg_types: list[Type]) -> Type:
        try:
            if opdef.extras.get("constant_args"):
                # The result type depends on constant argument values (arange's length).
                values = [constant_data(a) for a in call.args]
                return opdef.type_rel(arg_types, call.attrs, values)  # type: ignore[call-arg]  # see OpDef.extras
            return opdef.type_rel(arg_types, call.attrs)
        except ops.TypeRelationError as err:
            raise TypeCheckError(f"in {describe(call)}: {err}", call.span) from None

    def match_type(self, node: Match) -> Type:
        data = self.value_type(node.data)
        self.patterns.check(node, data)
        if node.complete:
            missing = missing_case(node, self.mod)
            if missing is not None:
                raise TypeCheckError(f"match does not handle the case {missing}; add a clause or use match?", node.span)
        if not node.clauses:
            return IncompleteType()
        result = self.value_type(node.clauses[0].rhs)
        for i, clause in enumerate(node.clauses[1:], start=1):
            result = self.join_or_fail(
                result,
                self.value_type(clause.rhs),
                lambda a, b, i=i: f"match clauses disagree: clause 0 has type {a}, clause {i} has type {b}",
                clause.rhs.span or node.span,
            )
        return result


def _mismatch(node: Expr) -> Callable[[Type, Type], str]:
    return lambda a, b: f"{describe(node)} has type {b} where {a} is expected"


def constant_data(arg: Expr) -> object:
    """The value of a constant argument: a Constant's data, a tuple of them for a tuple of
    Constants (qnn.concatenate's scales), else None."""
    if isinstance(arg, Constant):
        return arg.data
    if isinstance(arg, Tuple) and arg.fields and all(isinstance(f, Constant) for f in arg.fields):
        return tuple(f.data for f in arg.fields)  # type: ignore[attr-defined]  # Constants, checked above
    return None


# Python frames type checking may use, beyond the caller's: types nested as deep as the parser
# allows (500 levels of tuple or function types, unified with as deep a type) take about 3,000.
_TYPE_FRAMES = 8_000


@contextmanager
def _room_for_deep_types() -> Iterator[None]:
    old_limit = sys.getrecursionlimit()
    wanted = old_limit + _TYPE_FRAMES
    sys.setrecursionlimit(wanted)
    try:
        yield
    finally:
        if sys.getrecursionlimit() == wanted:
            sys.setrecursionlimit(old_limit)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic GC while inferring: a module of 10^5 bindings allocates millions of short-lived
    types and solver entries, and the collector's passes over them took 40% of the time (the
    parser pauses it too); whatever cycles remain are collected once it runs again."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@dataclass(frozen=True)
class InferType(Pass):
    name: ClassVar[str] = "InferType"

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        with _collector_paused(), _room_for_deep_types():
            return self._run(mod)

    def _run(self, mod: IRModule) -> IRModule:
        inferencer = _Inferencer(mod)
        where: Function | None = None
        try:
            for gv, func in mod.functions():
                where = func
                # A fully annotated function's type is known without its body (see global_type).
                recursive_name = gv.name_hint if declared_type(func) is None else None
                ty = inferencer.infer_function(func, recursive_name)
                inferencer.global_types.setdefault(gv.name_hint, ty)
            inferencer.finish()
        except TypeCheckError:
            inferencer.forget()
            raise
        except RecursionError:
            # Unifying, joining and printing types recurse over their nesting, which the parser
            # bounds (MAX_NESTING) but expressions can deepen further: past the room given
            # below, a located error rather than Python's.
            inferencer.forget()
            span = where.span if where is not None else None
            raise TypeCheckError("types nest too deeply to check", span) from None
        return mod


def infer_expr(expr: Expr, mod: IRModule | None = None) -> Type:
    """Type a standalone expression (globals resolved in `mod`)."""
    inferencer = _Inferencer(mod or IRModule())
    try:
        inferencer.infer(expr)
        inferencer.finish()
    except TypeCheckError:
        inferencer.forget()
        raise
    return expr.checked_type
