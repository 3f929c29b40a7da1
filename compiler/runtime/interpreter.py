"""The reference interpreter: evaluates a module's @main with numpy through the ops' references.

It is the oracle every compiled model is checked against, so it is written for obviousness, not
speed: each operator call runs the op's numpy reference. Evaluation is an explicit-stack machine
(no Python recursion over expression depth or call depth): each stack entry is a node to evaluate
in a frame; a frame maps the nodes it has evaluated (and the vars it binds) to values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from compiler import ops
from compiler.diagnostics import InputError, UnsupportedError
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
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType, TupleType, Type

Value = object  # np.ndarray | tuple[Value, ...] | Closure | ConstructorValue | Constructor


class Frame:
    """Values of the nodes evaluated in one function activation; parents are lexical scopes."""

    __slots__ = ("parent", "values")

    def __init__(self, parent: Frame | None, values: dict[Expr, Value] | None = None):
        self.parent = parent
        self.values: dict[Expr, Value] = values or {}

    def find(self, node: Expr) -> tuple[bool, Value]:
        # A node evaluated in an enclosing scope cannot depend on this activation's params,
        # so its value there is its value here.
        frame: Frame | None = self
        while frame is not None:
            if node in frame.values:
                return True, frame.values[node]
            frame = frame.parent
        return False, None


@dataclass(frozen=True, eq=False)
class Closure:
    func: Function
    frame: Frame | None


@dataclass(frozen=True, eq=False)
class ConstructorValue:
    """A value of an algebraic data type: the constructor that built it and its fields."""

    constructor: Constructor
    fields: tuple[Value, ...] = ()

    def __repr__(self) -> str:
        if not self.fields:
            return self.constructor.name
        return f"{self.constructor.name}({', '.join(map(repr, self.fields))})"


class RefValue:
    """A mutable cell made by `ref(v)`; compared by identity like TVM's references."""

    __slots__ = ("value",)

    def __init__(self, value: Value):
        self.value = value

    def __repr__(self) -> str:
        return f"ref({self.value!r})"


def match_pattern(pattern: Pattern, value: Value, bindings: dict[Expr, Value]) -> bool:
    """Whether `value` matches `pattern`; the variables it binds go into `bindings`."""
    stack = [(pattern, value)]
    while stack:
        p, v = stack.pop()
        if isinstance(p, PatternVar):
            bindings[p.var] = v
        elif isinstance(p, PatternConstructor):
            if not isinstance(v, ConstructorValue) or v.constructor.name != p.constructor.name:
                return False
            stack.extend(zip(p.patterns, v.fields))
        elif isinstance(p, PatternTuple):
            assert isinstance(v, tuple) and len(v) == len(p.patterns)
            stack.extend(zip(p.patterns, v))
    return True


class Interpreter:
    def __init__(self, mod: IRModule):
        self.mod = mod
        self.globals: dict[GlobalVar, Closure] = {}

    def global_closure(self, gv: GlobalVar) -> Closure:
        closure = self.globals.get(gv)
        if closure is None:
            definition = self.mod[gv.name_hint]
            if not isinstance(definition, Function):
                raise UnsupportedError(
                    f"the interpreter cannot run @{gv.name_hint}: it is not a Relay function", gv.span
                )
            closure = self.globals[gv] = Closure(definition, None)
        return closure

    def call(self, closure: Closure, args: list[Value]) -> Value:
        frame = self._enter(closure, args)
        return self.eval(closure.func.body, frame)

    def _apply(self, callee: Value, args: list[Value]) -> Value:
        """Run a function value for an op that calls one (vm.invoke_tvm_op, call_lowered)."""
        if not isinstance(callee, Closure):
            raise UnsupportedError(f"an operator called {callee!r}, which is not a function")
        return self.call(callee, args)

    def _enter(self, closure: Closure, args: list[Value]) -> Frame:
        params = closure.func.params
        if len(params) != len(args):
            raise InputError(f"function takes {len(params)} arguments, {len(args)} given")
        return Frame(closure.frame, dict(zip(params, args)))

    def eval(self, root: Expr, frame: Frame) -> Value:
        # Stack entries: [node, frame, state, aux]. States: 0 = children not yet scheduled,
        # 1 = children done, 2 = waiting for a callee body / chosen branch (aux holds it).
        stack: list[list[object]] = [[root, frame, 0, None]]
        while stack:
            entry = stack[-1]
            node, fr, state, aux = entry
            assert isinstance(node, Expr) and isinstance(fr, Frame)
            if state == 0:
                found, _ = fr.find(node)
                if found:
                    stack.pop()
                    continue
                if isinstance(node, (Constant, Op)):
                    stack.pop()
                    if isinstance(node, Constant):
                        fr.values[node] = node.data
                    continue
                if isinstance(node, Constructor):
                    # A constructor without fields is a value; one with fields is called.
                    stack.pop()
                    fr.values[node] = node if node.inputs else ConstructorValue(node)
                    continue
                if isinstance(node, GlobalVar):
                    stack.pop()
                    fr.values[node] = self.global_closure(node)
                    continue
                if isinstance(node, Var):
                    raise InputError(f"variable %{node.name_hint} has no value", node.span)
                if isinstance(node, Function):
                    stack.pop()
                    fr.values[node] = Closure(node, fr)
                    continue
                entry[2] = 1
                for child in reversed(self._strict_children(node)):
                    if not isinstance(child, Op) and not fr.find(child)[0]:
                        stack.append([child, fr, 0, None])
                continue
            if state == 1:
                if isinstance(node, Let):
                    # The value is ready: bind the var and evaluate the body in the same frame.
                    fr.values[node.var] = self._value(node.value, fr)
                    entry[2], entry[3] = 2, node.body
                    stack.append([node.body, fr, 0, None])
                    continue
                if isinstance(node, If):
                    cond = np.asarray(self._value(node.cond, fr))
                    branch = node.true_branch if bool(cond) else node.false_branch
                    entry[2], entry[3] = 2, (branch, fr)
                    stack.append([branch, fr, 0, None])
                    continue
                if isinstance(node, Match):
                    entry[2], entry[3] = 2, (self._choose_clause(node, fr), fr)
                    stack.append([entry[3][0], fr, 0, None])
                    continue
                if isinstance(node, Call) and not isinstance(node.op, Op):
                    callee = self._value(node.op, fr)
                    if isinstance(callee, Constructor):
                        stack.pop()
                        fr.values[node] = ConstructorValue(callee, tuple(self._value(a, fr) for a in node.args))
                        continue
                    if not isinstance(callee, Closure):
                        raise UnsupportedError("call of a non-function value", node.span)
                    args = [self._value(a, fr) for a in node.args]
                    inner = self._enter(callee, args)
                    entry[2], entry[3] = 2, (callee.func.body, inner)
                    stack.append([callee.func.body, inner, 0, None])
                    continue
                stack.pop()
                fr.values[node] = self._compute(node, fr)
                continue
            # state 2: the body or branch we waited for is evaluated.
            stack.pop()
            if isinstance(node, Let):
                fr.values[node] = self._value(node.body, fr)
            else:
                assert isinstance(aux, tuple)
                target, target_frame = aux
                fr.values[node] = self._value(target, target_frame)
        return self._value(root, frame)

    def _choose_clause(self, node: Match, frame: Frame) -> Expr:
        """Bind the variables of the first clause the matched value fits; returns its body."""
        value = self._value(node.data, frame)
        for clause in node.clauses:
            bindings: dict[Expr, Value] = {}
            if match_pattern(clause.lhs, value, bindings):
                frame.values.update(bindings)
                return clause.rhs
        raise InputError(f"no clause of the match handles the value {value!r}", node.span)

    @staticmethod
    def _strict_children(node: Expr) -> tuple[Expr, ...]:
        """Children evaluated before the node itself (branches and let bodies come later)."""
        if isinstance(node, Call):
            return node.args if isinstance(node.op, Op) else (node.op, *node.args)
        if isinstance(node, Tuple):
            return node.fields
        if isinstance(node, TupleGetItem):
            return (node.tuple_value,)
        if isinstance(node, Let):
            return (node.value,)
        if isinstance(node, If):
            return (node.cond,)
        if isinstance(node, Match):
            return (node.data,)
        if isinstance(node, RefCreate):
            return (node.value,)
        if isinstance(node, RefRead):
            return (node.ref,)
        if isinstance(node, RefWrite):
            return (node.ref, node.value)
        return ()

    def _value(self, node: Expr, frame: Frame) -> Value:
        found, value = frame.find(node)
        if not found:
            if isinstance(node, Var):
                raise InputError(f"variable %{node.name_hint} has no value", node.span)
            raise AssertionError(f"{node!r} was not evaluated")
        return value

    def _compute(self, node: Expr, frame: Frame) -> Value:
        if isinstance(node, Tuple):
            return tuple(self._value(f, frame) for f in node.fields)
        if isinstance(node, TupleGetItem):
            value = self._value(node.tuple_value, frame)
            assert isinstance(value, tuple)
            return value[node.index]
        if isinstance(node, RefCreate):
            return RefValue(self._value(node.value, frame))
        if isinstance(node, (RefRead, RefWrite)):
            cell = self._value(node.ref, frame)
            assert isinstance(cell, RefValue)
            if isinstance(node, RefRead):
                return cell.value
            cell.value = self._value(node.value, frame)
            return ()
        assert isinstance(node, Call) and isinstance(node.op, Op)
        opdef = ops.get(node.op.name)
        args = [self._value(a, frame) for a in node.args]
        evaluate = opdef.extras.get("evaluate")
        if evaluate is not None:
            return evaluate(args, node.attrs, self._apply)  # type: ignore[operator]  # see OpDef.extras
        result = opdef.reference(args, node.attrs)
        if isinstance(result, (list, tuple)):
            return tuple(np.asarray(r) for r in result)
        return np.asarray(result)


def _check_input(name: str, value: np.ndarray, ty: Type) -> np.ndarray:
    if not isinstance(ty, TensorType):
        raise InputError(f"input {name}: parameters of type {ty} are not supported")
    array = np.asarray(value)
    if str(array.dtype) != ty.dtype:
        raise InputError(f"input {name}: expected dtype {ty.dtype}, got {array.dtype}")
    if array.ndim != ty.ndim or any(
        isinstance(d, int) and d != n for d, n in zip(ty.shape, array.shape)
    ):
        shape = tuple(array.shape)
        raise InputError(f"input {name}: expected shape {ty}, got {shape}")
    return array


def bind_main_args(mod: IRModule, named: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """@main's arguments in parameter order from values keyed by parameter name (no `%`)."""
    main = mod.main
    names = [p.name_hint for p in main.params]
    unknown = sorted(set(named) - set(names))
    if unknown:
        raise InputError(f"unknown input {unknown[0]!r}; @main takes {', '.join(names) or 'no inputs'}")
    args = []
    for p in main.params:
        if p.name_hint not in named:
            raise InputError(f"missing input {p.name_hint!r} for @main")
        ty = p.type_annotation if p.type_annotation is not None else p.checked_type
        args.append(_check_input(p.name_hint, named[p.name_hint], ty))
    return args


def flatten(value: Value) -> list[np.ndarray]:
    """Tensors of a (nested) tuple value, left to right: the out0, out1, ... order."""
    if isinstance(value, tuple):
        out: list[np.ndarray] = []
        for v in value:
            out.extend(flatten(v))
        return out
    if isinstance(value, (Closure, Constructor)):
        raise UnsupportedError("@main returns a function; only tensors and tuples can be outputs")
    if isinstance(value, ConstructorValue):
        raise UnsupportedError(
            f"@main returns a value of type {value.constructor.type_name}; only tensors and tuples can be outputs"
        )
    return [np.asarray(value)]


def evaluate(mod: IRModule, args: list[Value], name: str = "main") -> Value:
    """Call global `name` with positional arguments; returns the (possibly tuple) result."""
    interp = Interpreter(mod)
    return interp.call(interp.global_closure(mod.get_global_var(name)), args)


def run_main(
    mod: IRModule,
    inputs: Mapping[str, np.ndarray],
    params: Mapping[str, np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Run @main with inputs (and params, both by parameter name); outputs flattened."""
    named = dict(inputs)
    for key, value in (params or {}).items():
        if key in named:
            raise InputError(f"{key!r} is given both as an input and as a parameter")
        named[key] = value
    result = evaluate(mod, list(bind_main_args(mod, named)))
    return flatten(result)


def result_types(ty: Type) -> list[TensorType]:
    """Flattened tensor types of a result type, matching `flatten`'s order."""
    if isinstance(ty, TupleType):
        out: list[TensorType] = []
        for f in ty.fields:
            out.extend(result_types(f))
        return out
    assert isinstance(ty, TensorType)
    return [ty]
