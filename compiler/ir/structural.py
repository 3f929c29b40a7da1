"""Structural equality and hashing of expressions, types, attrs and modules.

Two expressions are structurally equal when they compute the same thing written the same way:
same node kinds, operators, attributes, constants, type annotations and tuple indices. How
nodes are shared does not matter (a DAG equals its tree-unfolded copy), and variables bound by
functions and lets are compared by binding position, not by name (alpha-equivalence). Free
variables are equal only to themselves unless `map_free_vars` allows a one-to-one renaming.
GlobalVars compare by name. Attributes an operator call leaves out take the operator's
defaults. A function's return type is compared only when both sides know it (declared or
inferred): it is derived information, and passes often rebuild functions without it.

Both walks are iterative and memoized by node identity, so chains 50,000 deep work and shared
graphs cost time linear in their number of nodes.

The hash is consistent with equality (equal values hash the same) and, unlike Python's `hash`
of strings, the same in every process, so it can name things in generated output.
"""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Union

import blake3
import numpy as np

from compiler.ir.attrs import Attrs
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
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    TypeData,
    Var,
    children,
    pattern_vars,
)
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, FuncType, RefType, TensorType, TupleType, Type, TypeCall, TypeVar
from compiler.ir.visitor import post_order

Structural = Union[IRModule, Expr, Type, Attrs]


def structural_equal(a: Structural, b: Structural, map_free_vars: bool = False) -> bool:
    if isinstance(a, IRModule) or isinstance(b, IRModule):
        return isinstance(a, IRModule) and isinstance(b, IRModule) and _modules_equal(a, b, map_free_vars)
    if isinstance(a, Expr) or isinstance(b, Expr):
        return isinstance(a, Expr) and isinstance(b, Expr) and _ExprEqual(map_free_vars).run(a, b)
    return _values_equal(a, b)


def structural_hash(x: Structural, map_free_vars: bool = False) -> int:
    """A 64-bit hash; `map_free_vars` must match the equality the hash is used with."""
    if isinstance(x, IRModule):
        h = _tag("module")
        for data in x.type_definitions.values():
            h = _mix(h, _type_data_hash(data))
        for gv, definition in x.items():
            h = _mix(h, _str_hash(gv.name_hint))
            if isinstance(definition, Function):
                h = _mix(h, _ExprHash(map_free_vars).run(definition))
            else:
                h = _mix(h, _str_hash(type(definition).__name__))
        return h
    if isinstance(x, Expr):
        return _ExprHash(map_free_vars).run(x)
    return _value_hash(x)


# ----------------------------------------------------------------------------------------------
# Equality


def _modules_equal(a: IRModule, b: IRModule, map_free_vars: bool) -> bool:
    if sorted(a.type_definitions) != sorted(b.type_definitions):
        return False
    if not all(_type_data_equal(a.type_definitions[n], b.type_definitions[n]) for n in a.type_definitions):
        return False
    names_a = [gv.name_hint for gv in a]
    if names_a != [gv.name_hint for gv in b]:
        return False
    for name in names_a:
        fa, fb = a[name], b[name]
        if isinstance(fa, Function) and isinstance(fb, Function):
            if not _ExprEqual(map_free_vars).run(fa, fb):
                return False
        elif not (fa is fb or fa == fb):
            return False
    return True


def _type_data_equal(a: TypeData, b: TypeData) -> bool:
    return (
        a.name == b.name
        and a.type_params == b.type_params
        and len(a.constructors) == len(b.constructors)
        and all(_constructors_equal(x, y) and x.inputs == y.inputs for x, y in zip(a.constructors, b.constructors))
    )


def _constructors_equal(a: Constructor, b: Constructor) -> bool:
    return a is b or (a.name == b.name and a.type_name == b.type_name and a.tag == b.tag)


def _type_data_hash(data: TypeData) -> int:
    h = _mix(_tag("type data"), _str_hash(data.name))
    for p in data.type_params:
        h = _mix(h, _str_hash(p.name))
    for c in data.constructors:
        h = _mix(h, _str_hash(c.name))
        for t in c.inputs:
            h = _mix(h, _type_hash(t))
    return h


class _ExprEqual:
    """One comparison. Bound variables are matched through the binders paired so far."""

    def __init__(self, map_free_vars: bool):
        self.map_free_vars = map_free_vars
        # Pairs of variables bound at the same position of paired binders. A pair set rather
        # than a map: a binder shared on one side may be paired with several copies on the other.
        self.bound_pairs: set[tuple[Var, Var]] = set()
        self.bound_left: set[Var] = set()
        self.bound_right: set[Var] = set()
        self.free_left: dict[Var, Var] = {}
        self.free_right: dict[Var, Var] = {}

    def run(self, a: Expr, b: Expr) -> bool:
        done: set[tuple[Expr, Expr]] = set()
        stack = [(a, b)]
        # A binder is always expanded before the uses of its variables, since every path to a
        # use passes through it; so bound_pairs is complete whenever a variable pair is checked.
        while stack:
            pair = stack.pop()
            if pair in done:
                continue
            done.add(pair)
            x, y = pair
            if type(x) is not type(y):
                return False
            if not self._node_equal(x, y, stack):
                return False
        return True

    def _node_equal(self, x: Expr, y: Expr, stack: list[tuple[Expr, Expr]]) -> bool:
        """Compare what `x` and `y` hold themselves and push their operand pairs."""
        if isinstance(x, Var):
            assert isinstance(y, Var)
            return self._vars_equal(x, y)
        if isinstance(x, Call):
            assert isinstance(y, Call)
            if len(x.args) != len(y.args) or not _attrs_equal(_call_attrs(x), _call_attrs(y)):
                return False
            stack.append((x.op, y.op))
            stack.extend(zip(x.args, y.args))
            return True
        if isinstance(x, Tuple):
            assert isinstance(y, Tuple)
            if len(x.fields) != len(y.fields):
                return False
            stack.extend(zip(x.fields, y.fields))
            return True
        if isinstance(x, TupleGetItem):
            assert isinstance(y, TupleGetItem)
            if x.index != y.index:
                return False
            stack.append((x.tuple_value, y.tuple_value))
            return True
        if isinstance(x, Function):
            assert isinstance(y, Function)
            if len(x.params) != len(y.params) or not _attrs_equal(x.attrs, y.attrs):
                return False
            rx, ry = _known_ret_type(x), _known_ret_type(y)
            if rx is not None and ry is not None and rx != ry:
                return False
            for p, q in zip(x.params, y.params):
                if not self._bind(p, q):
                    return False
            stack.append((x.body, y.body))
            return True
        if isinstance(x, Let):
            assert isinstance(y, Let)
            if not self._bind(x.var, y.var):
                return False
            stack.append((x.body, y.body))
            stack.append((x.value, y.value))
            return True
        if isinstance(x, If):
            assert isinstance(y, If)
            stack.append((x.false_branch, y.false_branch))
            stack.append((x.true_branch, y.true_branch))
            stack.append((x.cond, y.cond))
            return True
        if isinstance(x, Match):
            assert isinstance(y, Match)
            if x.complete != y.complete or len(x.clauses) != len(y.clauses):
                return False
            for cx, cy in zip(x.clauses, y.clauses):
                if not self._patterns_equal(cx.lhs, cy.lhs):
                    return False
            for cx, cy in reversed(list(zip(x.clauses, y.clauses))):
                stack.append((cx.rhs, cy.rhs))
            stack.append((x.data, y.data))
            return True
        if isinstance(x, Constructor):
            assert isinstance(y, Constructor)
            return _constructors_equal(x, y)
        if isinstance(x, (RefCreate, RefRead, RefWrite)):
            stack.extend(zip(children(x), children(y)))
            return True
        if isinstance(x, Constant):
            assert isinstance(y, Constant)
            return _arrays_equal(x.data, y.data)
        if isinstance(x, GlobalVar):
            assert isinstance(y, GlobalVar)
            return x.name_hint == y.name_hint
        if isinstance(x, Op):
            assert isinstance(y, Op)
            return x is y or x.name == y.name
        raise TypeError(f"cannot compare {x!r}")

    def _patterns_equal(self, a: Pattern, b: Pattern) -> bool:
        """Same pattern shape; the variables they bind are paired like a function's params."""
        stack = [(a, b)]
        while stack:
            x, y = stack.pop()
            if type(x) is not type(y):
                return False
            if isinstance(x, PatternVar):
                assert isinstance(y, PatternVar)
                if not self._bind(x.var, y.var):
                    return False
            elif isinstance(x, (PatternConstructor, PatternTuple)):
                assert isinstance(y, (PatternConstructor, PatternTuple))
                if len(x.patterns) != len(y.patterns):
                    return False
                if isinstance(x, PatternConstructor):
                    assert isinstance(y, PatternConstructor)
                    if not _constructors_equal(x.constructor, y.constructor):
                        return False
                stack.extend(zip(x.patterns, y.patterns))
            else:
                assert isinstance(x, PatternWildcard)
        return True

    def _bind(self, p: Var, q: Var) -> bool:
        if p.type_annotation != q.type_annotation or p.virtual_device != q.virtual_device:
            return False
        self.bound_pairs.add((p, q))
        self.bound_left.add(p)
        self.bound_right.add(q)
        return True

    def _vars_equal(self, p: Var, q: Var) -> bool:
        if p in self.bound_left or q in self.bound_right:
            return (p, q) in self.bound_pairs
        if not self.map_free_vars:
            return p is q
        if p.type_annotation != q.type_annotation:
            return False
        mapped, back = self.free_left.get(p), self.free_right.get(q)
        if mapped is None and back is None:
            self.free_left[p] = q
            self.free_right[q] = p
            return True
        return mapped is q


def _known_ret_type(func: Function) -> Type | None:
    if func.ret_type is not None:
        return func.ret_type
    if func.has_type and isinstance(func.checked_type, FuncType):
        return func.checked_type.ret_type
    return None


def _call_attrs(call: Call) -> Attrs:
    """An operator call's attrs with every field the operator declares, defaults filled in.

    TVM's attrs objects always hold every field, so a call built with `{"units": None}` and
    one parsed from text (which fills `out_dtype=""`) are the same call.
    """
    if not isinstance(call.op, Op):
        return call.attrs
    return call.op.attrs_with_defaults(call.attrs)


def _arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _attrs_equal(a: Attrs, b: Attrs) -> bool:
    if len(a) != len(b):
        return False
    return all(k in b and _values_equal(v, b[k]) for k, v in a.items())


def _values_equal(a: object, b: object) -> bool:
    """Attribute values and types. Kinds must match: `1`, `1.0` and `True` are all different."""
    if isinstance(a, (bool, np.bool_)) or isinstance(b, (bool, np.bool_)):
        return isinstance(a, (bool, np.bool_)) and isinstance(b, (bool, np.bool_)) and bool(a) == bool(b)
    if isinstance(a, (int, np.integer)) or isinstance(b, (int, np.integer)):
        return isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)) and int(a) == int(b)
    if isinstance(a, (float, np.floating)) or isinstance(b, (float, np.floating)):
        if not (isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating))):
            return False
        return float(a) == float(b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        if not (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b)):
            return False
        return all(_values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, Attrs) or isinstance(b, Attrs):
        return isinstance(a, Attrs) and isinstance(b, Attrs) and _attrs_equal(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and _arrays_equal(a, b)
    if isinstance(a, Expr) or isinstance(b, Expr):
        return isinstance(a, Expr) and isinstance(b, Expr) and _ExprEqual(False).run(a, b)
    return type(a) is type(b) and a == b


# ----------------------------------------------------------------------------------------------
# Hashing

_MASK = (1 << 64) - 1
_STR_HASHES: dict[str, int] = {}


def _mix(h: int, v: int) -> int:
    h ^= (v + 0x9E3779B97F4A7C15 + ((h << 6) & _MASK) + (h >> 2)) & _MASK
    return (h * 0xBF58476D1CE4E5B9) & _MASK


def _bytes_hash(data: bytes | memoryview) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _str_hash(s: str) -> int:
    h = _STR_HASHES.get(s)
    if h is None:
        h = _STR_HASHES[s] = _bytes_hash(s.encode())
    return h


def _tag(name: str) -> int:
    h = _TAGS.get(name)
    if h is None:
        h = _TAGS[name] = _bytes_hash(("relaycc." + name).encode())
    return h


_TAGS: dict[str, int] = {}


def _value_hash(v: object) -> int:
    if v is None:
        return _tag("none")
    if isinstance(v, (bool, np.bool_)):
        return _mix(_tag("bool"), int(bool(v)))
    if isinstance(v, (int, np.integer)):
        return _mix(_tag("int"), _str_hash(str(int(v))))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return _tag("nan")
        # 0.0 == -0.0, so both must hash alike.
        return _mix(_tag("float"), _bytes_hash(struct.pack("<d", f + 0.0)))
    if isinstance(v, str):
        return _mix(_tag("str"), _str_hash(v))
    if isinstance(v, (tuple, list)):
        h = _mix(_tag("list"), len(v))
        for item in v:
            h = _mix(h, _value_hash(item))
        return h
    if isinstance(v, Attrs):
        return _attrs_hash(v)
    if isinstance(v, np.ndarray):
        return _array_hash(v)
    if isinstance(v, Type):
        return _type_hash(v)
    if isinstance(v, Expr):
        return _ExprHash(False).run(v)
    return _mix(_tag("object"), _str_hash(type(v).__name__))


def _attrs_hash(attrs: Attrs) -> int:
    # Key order does not matter for equality, so hash the items sorted by key.
    h = _tag("attrs")
    for key in sorted(attrs):
        h = _mix(_mix(h, _str_hash(key)), _value_hash(attrs[key]))
    return h


def _array_hash(a: np.ndarray) -> int:
    h = _mix(_tag("array"), _str_hash(str(a.dtype)))
    for d in a.shape:
        h = _mix(h, d)
    # The bytes as they lie, not a copy, and with BLAKE3 (five times blake2b's speed here): a
    # model's weights are hashed this way by LabelOps and again by LowerTE's cache.
    data = memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
    return _mix(h, int.from_bytes(blake3.blake3(data).digest(8), "little"))


def _type_hash(ty: Type | None) -> int:
    if ty is None:
        return _tag("no type")
    if isinstance(ty, TensorType):
        h = _mix(_tag("tensor"), _str_hash(ty.dtype))
        for d in ty.shape:
            h = _mix(h, _tag("any") if d is ANY else _value_hash(d))
        return h
    if isinstance(ty, TupleType):
        h = _mix(_tag("tuple type"), len(ty.fields))
        for f in ty.fields:
            h = _mix(h, _type_hash(f))
        return h
    if isinstance(ty, FuncType):
        h = _mix(_mix(_tag("func type"), len(ty.arg_types)), len(ty.type_params))
        for t in ty.arg_types:
            h = _mix(h, _type_hash(t))
        return _mix(h, _type_hash(ty.ret_type))
    if isinstance(ty, TypeVar):
        return _mix(_tag("type var"), _str_hash(ty.name))
    if isinstance(ty, TypeCall):
        h = _mix(_tag("type call"), _str_hash(ty.name))
        for a in ty.args:
            h = _mix(h, _type_hash(a))
        return h
    if isinstance(ty, RefType):
        return _mix(_tag("ref type"), _type_hash(ty.value))
    return _mix(_tag("type"), _str_hash(type(ty).__name__))


def _pattern_hash(pattern: Pattern) -> int:
    if isinstance(pattern, PatternVar):
        return _mix(_tag("pattern var"), _type_hash(pattern.var.type_annotation))
    if isinstance(pattern, (PatternConstructor, PatternTuple)):
        h = _tag("pattern tuple")
        if isinstance(pattern, PatternConstructor):
            h = _mix(_tag("pattern constructor"), _str_hash(pattern.constructor.name))
        for p in pattern.patterns:
            h = _mix(h, _pattern_hash(p))
        return h
    return _tag("wildcard")


class _ExprHash:
    """Hashes nodes after their operands, memoized by identity.

    A bound variable hashes by where it is bound: a parameter by its position and its
    function's arity, a let variable by the hash of the value it names. Both are found in a
    pre-pass and are the same for every sharing of the graph, so a DAG and its unfolded tree
    hash alike. Nothing depends on names, so alpha-equivalent expressions hash alike.
    """

    def __init__(self, map_free_vars: bool):
        self.map_free_vars = map_free_vars
        self.memo: dict[Expr, int] = {}
        self.params: dict[Var, tuple[int, int]] = {}
        self.let_values: dict[Var, Expr] = {}
        self.pattern_positions: dict[Var, int] = {}

    def run(self, root: Expr) -> int:
        nodes = list(post_order(root))
        for node in nodes:
            if isinstance(node, Function):
                for i, p in enumerate(node.params):
                    self.params[p] = (i, len(node.params))
            elif isinstance(node, Let):
                self.let_values[node.var] = node.value
            elif isinstance(node, Match):
                for clause in node.clauses:
                    for i, v in enumerate(pattern_vars(clause.lhs)):
                        self.pattern_positions[v] = i
        memo = self.memo
        for node in nodes:
            # Variables are hashed when used: a let variable needs its value's hash, which is
            # ready by then (a let's value is walked before its body) but not when the walk
            # meets the variable as the let's first child.
            if not isinstance(node, Var):
                memo[node] = self._node_hash(node)
        return self._get(root)

    def _get(self, node: Expr) -> int:
        if isinstance(node, Var):
            return self._var_hash(node)
        return self.memo[node]

    def _var_hash(self, var: Var) -> int:
        h = self.memo.get(var)
        if h is not None:
            return h
        # `let %b = %a; let %c = %b; ...` chains may be long: follow them without recursing.
        chain = [var]
        value = self.let_values.get(var)
        while isinstance(value, Var) and value not in self.memo and value in self.let_values:
            chain.append(value)
            value = self.let_values[value]
        for v in reversed(chain):
            ann = _type_hash(v.type_annotation)
            position = self.params.get(v)
            bound_to = self.let_values.get(v)
            in_pattern = self.pattern_positions.get(v)
            if in_pattern is not None:
                h = _mix(_mix(_tag("pattern var"), in_pattern), ann)
            elif isinstance(bound_to, Function):
                # Not by the value's hash: a let-bound function may call itself, so its body
                # uses the variable before the value's hash exists.
                h = _mix(_mix(_tag("fn let var"), len(bound_to.params)), ann)
            elif position is not None:
                h = _mix(_mix(_mix(_tag("param"), position[0]), position[1]), ann)
            elif bound_to is not None:
                h = _mix(_mix(_tag("let var"), self._get(bound_to)), ann)
            elif self.map_free_vars:
                h = _mix(_tag("free var"), ann)
            else:
                h = _mix(_mix(_tag("free var"), ann), _str_hash(v.name_hint))
            self.memo[v] = h
        assert h is not None
        return h

    def _node_hash(self, node: Expr) -> int:
        get = self._get
        if isinstance(node, Call):
            h = _mix(_mix(_tag("call"), get(node.op)), _attrs_hash(_call_attrs(node)))
            for a in node.args:
                h = _mix(h, get(a))
            return h
        if isinstance(node, Tuple):
            h = _mix(_tag("tuple"), len(node.fields))
            for f in node.fields:
                h = _mix(h, get(f))
            return h
        if isinstance(node, TupleGetItem):
            return _mix(_mix(_tag("get item"), node.index), get(node.tuple_value))
        if isinstance(node, Function):
            # The return type is left out: equality ignores it when one side does not know it.
            h = _mix(_mix(_tag("function"), len(node.params)), _attrs_hash(node.attrs))
            for p in node.params:
                h = _mix(h, _type_hash(p.type_annotation))
            return _mix(h, get(node.body))
        if isinstance(node, Let):
            h = _mix(_tag("let"), _type_hash(node.var.type_annotation))
            return _mix(_mix(h, get(node.value)), get(node.body))
        if isinstance(node, If):
            h = _mix(_tag("if"), get(node.cond))
            return _mix(_mix(h, get(node.true_branch)), get(node.false_branch))
        if isinstance(node, Match):
            h = _mix(_mix(_tag("match"), int(node.complete)), get(node.data))
            for clause in node.clauses:
                h = _mix(_mix(h, _pattern_hash(clause.lhs)), get(clause.rhs))
            return h
        if isinstance(node, Constructor):
            return _mix(_tag("constructor"), _str_hash(node.name))
        if isinstance(node, (RefCreate, RefRead, RefWrite)):
            h = _tag(type(node).__name__)
            for child in children(node):
                h = _mix(h, get(child))
            return h
        if isinstance(node, Constant):
            return _mix(_tag("constant"), _array_hash(node.data))
        if isinstance(node, GlobalVar):
            return _mix(_tag("global"), _str_hash(node.name_hint))
        if isinstance(node, Op):
            return _mix(_tag("op"), _str_hash(node.name))
        raise TypeError(f"cannot hash {node!r}")
