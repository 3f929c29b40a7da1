"""Relay expressions.

Nodes are frozen dataclasses compared by identity (`eq=False`): two separately built `add`
calls are different nodes, and a node used twice is the same object (dataflow sharing).
Structural equality and hashing live in `structural.py`.

After type inference every node knows its type: `expr.checked_type`. The type is cached on the
node (it is a function of the node's structure, so caching it does not break immutability).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from compiler.diagnostics import Span
from compiler.ir.attrs import EMPTY_ATTRS, Attrs
from compiler.ir.device import VirtualDevice
from compiler.ir.types import TensorType, Type, TypeVar, dtype_of

_var_ids = itertools.count()


class Expr:
    """Base class of Relay expressions."""

    span: Span | None

    @property
    def checked_type(self) -> Type:
        ty = self.__dict__.get("_checked_type")
        if ty is None:
            raise ValueError(f"type of {type(self).__name__} is not inferred yet; run InferType")
        return ty

    @property
    def has_type(self) -> bool:
        return self.__dict__.get("_checked_type") is not None

    def set_checked_type(self, ty: Type) -> None:
        self.__dict__["_checked_type"] = ty


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A local variable: a function parameter or a let-bound name. Identity is the binding."""

    name_hint: str
    type_annotation: Type | None = None
    span: Span | None = None
    uid: int = field(default_factory=lambda: next(_var_ids), repr=False)
    # `%x {virtual_device=meta[VirtualDevice][0]}`: where a parameter lives (see ir/device.py).
    virtual_device: VirtualDevice | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Var(%{self.name_hint})"


@dataclass(frozen=True, eq=False)
class GlobalVar(Expr):
    """A name of a global definition; an IRModule keeps exactly one GlobalVar per name."""

    name_hint: str
    span: Span | None = None

    def __repr__(self) -> str:
        return f"GlobalVar(@{self.name_hint})"


@dataclass(frozen=True, eq=False)
class Constant(Expr):
    """A constant tensor. The array is copied (in C order) and made read-only."""

    data: np.ndarray
    span: Span | None = None

    def __post_init__(self) -> None:
        # C order: a folded transpose (AlterOpLayout's packed weights) would otherwise keep its
        # strides, and every consumer of the bytes (constant pool, metadata, archive) would copy
        # it again (a GPT-2's packed weights: 0.5 GB more held while the executor is generated).
        array = np.array(self.data, copy=True, order="C")
        array.setflags(write=False)
        object.__setattr__(self, "data", array)

    @property
    def tensor_type(self) -> TensorType:
        return TensorType(tuple(int(d) for d in self.data.shape), dtype_of(self.data))

    def __repr__(self) -> str:
        return f"Constant({self.data.dtype}{list(self.data.shape)})"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


# The default of an attribute field a call must always give (TVM: a field without a default).
REQUIRED_ATTR: object = _Required()


@dataclass(frozen=True, eq=False)
class Op(Expr):
    """A reference to a registered operator. Interned: `Op.get("add") is Op.get("add")`.

    `attr_fields` lists the operator's attribute fields in declaration order as (name, default)
    pairs, the default being REQUIRED_ATTR for fields without one. The operator registry
    (compiler.ops) declares them when it registers the op, so the printer and structural
    equality learn an op's defaults from the node without importing the registry; it is None
    for an op nobody declared.
    """

    name: str
    span: Span | None = None
    attr_fields: tuple[tuple[str, object], ...] | None = field(default=None, repr=False)

    @staticmethod
    def get(name: str) -> Op:
        op = _OP_TABLE.get(name)
        if op is None:
            op = _OP_TABLE[name] = Op(name)
        return op

    def declare_attr_fields(self, fields: Sequence[tuple[str, object]]) -> None:
        """Record the op's attribute fields (called once, by the registry)."""
        object.__setattr__(self, "attr_fields", tuple(fields))

    def printed_attrs(self, attrs: Mapping[str, object]) -> list[tuple[str, object]]:
        """The attrs TVM's printer shows: fields without a default, and fields that differ."""
        if self.attr_fields is None:
            return list(attrs.items())
        out = []
        for name, default in self.attr_fields:
            if name not in attrs:
                continue
            value = attrs[name]
            if default is REQUIRED_ATTR or value != default:
                out.append((name, value))
        return out

    def attrs_with_defaults(self, attrs: Attrs) -> Attrs:
        """`attrs` with every defaulted field the op declares filled in (as TVM's attrs hold)."""
        if self.attr_fields is None:
            return attrs
        missing = {n: d for n, d in self.attr_fields if d is not REQUIRED_ATTR and n not in attrs}
        if not missing:
            return attrs
        return Attrs({**missing, **attrs})

    def __repr__(self) -> str:
        return f"Op({self.name})"


_OP_TABLE: dict[str, Op] = {}


@dataclass(frozen=True, eq=False)
class Call(Expr):
    op: Expr
    args: tuple[Expr, ...]
    attrs: Attrs = EMPTY_ATTRS
    span: Span | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))

    @property
    def op_name(self) -> str | None:
        """The operator's name when the callee is an operator, else None."""
        return self.op.name if isinstance(self.op, Op) else None

    def __repr__(self) -> str:
        return f"Call({self.op!r}, {len(self.args)} args)"


@dataclass(frozen=True, eq=False)
class Function(Expr):
    params: tuple[Var, ...]
    body: Expr
    ret_type: Type | None = None
    attrs: Attrs = EMPTY_ATTRS
    span: Span | None = None
    # `def @id[A](%x: A) -> A`: type variables the signature is polymorphic in.
    type_params: tuple[TypeVar, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "type_params", tuple(self.type_params))
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))

    @property
    def result_type(self) -> Type:
        """The declared return type, or the inferred one when none was written."""
        if self.ret_type is not None:
            return self.ret_type
        from compiler.ir.types import FuncType

        ty = self.checked_type
        assert isinstance(ty, FuncType)
        return ty.ret_type

    def attr(self, key: str, default: object = None) -> object:
        return self.attrs.get(key, default)

    def has_nonzero_attr(self, key: str) -> bool:
        value = self.attrs.get(key)
        return value is not None and value != 0 and value is not False

    def with_attrs(self, **updates: object) -> Function:
        attrs = dict(self.attrs)
        for k, v in updates.items():
            if v is None:
                attrs.pop(k, None)
            else:
                attrs[k] = v
        return Function(self.params, self.body, self.ret_type, Attrs(attrs), self.span, self.type_params)

    def __repr__(self) -> str:
        return f"Function({len(self.params)} params)"


@dataclass(frozen=True, eq=False)
class Tuple(Expr):
    fields: tuple[Expr, ...]
    span: Span | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))

    def __repr__(self) -> str:
        return f"Tuple({len(self.fields)} fields)"


@dataclass(frozen=True, eq=False)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int
    span: Span | None = None

    def __repr__(self) -> str:
        return f"TupleGetItem(.{self.index})"


@dataclass(frozen=True, eq=False)
class Let(Expr):
    var: Var
    value: Expr
    body: Expr
    span: Span | None = None

    def __repr__(self) -> str:
        return f"Let(%{self.var.name_hint})"


@dataclass(frozen=True, eq=False)
class If(Expr):
    cond: Expr
    true_branch: Expr
    false_branch: Expr
    span: Span | None = None

    def __repr__(self) -> str:
        return "If(...)"


@dataclass(frozen=True, eq=False)
class Constructor(Expr):
    """A constructor of an algebraic data type (`Cons`), a value or a callee.

    `inputs` are its field types, in terms of the type parameters of `type_name`'s definition;
    `tag` is its position there. A module holds one Constructor object per constructor.
    """

    name: str
    inputs: tuple[Type, ...]
    type_name: str
    tag: int = 0
    span: Span | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))

    def __repr__(self) -> str:
        return f"Constructor({self.name})"


@dataclass(frozen=True, eq=False)
class TypeData:
    """`type List[A] { Cons(A, List[A]), Nil }`: an algebraic data type definition.

    `extern` marks `extern type Storage`: a type with no constructors whose values only
    operators make (memory.alloc_storage's storage). TVM keeps no such flag (an extern type is a
    type without constructors); it is kept here so the text prints back as it was written.
    """

    name: str
    type_params: tuple[TypeVar, ...]
    constructors: tuple[Constructor, ...]
    span: Span | None = None
    extern: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "type_params", tuple(self.type_params))
        object.__setattr__(self, "constructors", tuple(self.constructors))

    def constructor(self, name: str) -> Constructor | None:
        return next((c for c in self.constructors if c.name == name), None)


class Pattern:
    """Base class of match patterns."""

    __slots__ = ()


@dataclass(frozen=True, eq=False)
class PatternWildcard(Pattern):
    """`_`: matches anything, binds nothing."""

    span: Span | None = None


@dataclass(frozen=True, eq=False)
class PatternVar(Pattern):
    """`%x`: matches anything and binds it to `var`."""

    var: Var
    span: Span | None = None


@dataclass(frozen=True, eq=False)
class PatternConstructor(Pattern):
    """`Cons(p, q)`: matches values built by `constructor` whose fields match the sub-patterns."""

    constructor: Constructor
    patterns: tuple[Pattern, ...] = ()
    span: Span | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", tuple(self.patterns))


@dataclass(frozen=True, eq=False)
class PatternTuple(Pattern):
    """`(p, q)`: matches a tuple whose fields match the sub-patterns."""

    patterns: tuple[Pattern, ...]
    span: Span | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", tuple(self.patterns))


def pattern_vars(pattern: Pattern) -> list[Var]:
    """The variables a pattern binds, left to right."""
    out: list[Var] = []
    stack = [pattern]
    while stack:
        p = stack.pop()
        if isinstance(p, PatternVar):
            out.append(p.var)
        elif isinstance(p, (PatternConstructor, PatternTuple)):
            stack.extend(reversed(p.patterns))
    return out


@dataclass(frozen=True, eq=False)
class Clause:
    """`pattern => rhs` in a match."""

    lhs: Pattern
    rhs: Expr


@dataclass(frozen=True, eq=False)
class Match(Expr):
    """`match (data) { clauses }`; `complete=False` is `match?` (a value may match no clause)."""

    data: Expr
    clauses: tuple[Clause, ...]
    complete: bool = True
    span: Span | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "clauses", tuple(self.clauses))

    def __repr__(self) -> str:
        return f"Match({len(self.clauses)} clauses)"


@dataclass(frozen=True, eq=False)
class RefCreate(Expr):
    """`ref(v)`: a new mutable cell holding v."""

    value: Expr
    span: Span | None = None


@dataclass(frozen=True, eq=False)
class RefRead(Expr):
    """`ref_read(r)`: the value a cell holds now."""

    ref: Expr
    span: Span | None = None


@dataclass(frozen=True, eq=False)
class RefWrite(Expr):
    """`ref_write(r, v)`: store v in cell r; the result is the empty tuple."""

    ref: Expr
    value: Expr
    span: Span | None = None


def children(expr: Expr) -> Sequence[Expr]:
    """The direct sub-expressions of `expr`, in evaluation order."""
    if isinstance(expr, Call):
        return (expr.op, *expr.args)
    if isinstance(expr, Function):
        return (*expr.params, expr.body)
    if isinstance(expr, Tuple):
        return expr.fields
    if isinstance(expr, TupleGetItem):
        return (expr.tuple_value,)
    if isinstance(expr, Let):
        # The value comes before its binder so a walk types/evaluates it before the var is seen.
        return (expr.value, expr.var, expr.body)
    if isinstance(expr, If):
        return (expr.cond, expr.true_branch, expr.false_branch)
    if isinstance(expr, RefCreate):
        return (expr.value,)
    if isinstance(expr, RefRead):
        return (expr.ref,)
    if isinstance(expr, RefWrite):
        return (expr.ref, expr.value)
    if isinstance(expr, Match):
        # Like a let's var, each clause's pattern variables come before the clause's body.
        out: list[Expr] = [expr.data]
        for clause in expr.clauses:
            out += pattern_vars(clause.lhs)
            out.append(clause.rhs)
        return out
    return ()


def const(value: object, dtype: str | None = None) -> Constant:
    """A Constant from a Python scalar or array-like, float32 by default for floats."""
    array = np.asarray(value)
    if dtype is not None:
        array = array.astype(dtype)
    elif array.dtype == np.float64:
        array = array.astype("float32")
    elif array.dtype == np.int64 and array.ndim == 0:
        array = array.astype("int32")
    return Constant(array)
