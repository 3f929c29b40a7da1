"""Unification of Relay types, for InferType.

An `IncompleteType` is a hole: a type not known yet (a parameter without annotation, a type
argument of a polymorphic call, the element type of `Nil`). `unify(a, b)` makes two types equal
by filling holes, and says False when they cannot be equal. Holes are solved with a union-find
map; `resolve` substitutes every solved hole in a type.

A `?` dimension unifies with any dimension, and the unified type keeps the `?` (TVM's unifier
does the same): a hole that met `Tensor[(1, 3)]` and then `Tensor[(?, 3)]` is `Tensor[(?, 3)]`,
so `Cons(%static, %list_of_dynamic)` is a list of dynamic tensors, not of static ones the values
need not match. For that, the concrete type of a class of holes lives on one root hole, which
`join` widens. Type variables (`A` of `def @f[A]`) are rigid: inside the
function that binds them they equal only themselves; a polymorphic type is instantiated with
fresh holes at each use (`instantiate`).
"""

from __future__ import annotations

from collections.abc import Sequence

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


class Solver:
    def __init__(self) -> None:
        # A hole maps to another hole of its class (towards the root) or, for the root, to the
        # class's concrete type; an unsolved root has no entry.
        self.solution: dict[IncompleteType, Type] = {}

    def root(self, ty: Type) -> Type:
        """The root hole of `ty`'s class (`ty` itself when it is not a hole); path compressed."""
        path = []
        while isinstance(ty, IncompleteType):
            up = self.solution.get(ty)
            if not isinstance(up, IncompleteType):
                break
            path.append(ty)
            ty = up
        for hole in path[:-1]:
            self.solution[hole] = ty
        return ty

    def find(self, ty: Type) -> Type:
        """`ty` with a solved hole at its top replaced by its solution."""
        ty = self.root(ty)
        if isinstance(ty, IncompleteType):
            return self.solution.get(ty, ty)
        return ty

    def resolve(self, ty: Type) -> Type:
        """`ty` with every solved hole replaced, however deep."""
        ty = self.find(ty)
        if isinstance(ty, TupleType):
            return TupleType(tuple(self.resolve(f) for f in ty.fields))
        if isinstance(ty, FuncType):
            return FuncType(tuple(self.resolve(a) for a in ty.arg_types), self.resolve(ty.ret_type), ty.type_params)
        if isinstance(ty, TypeCall):
            return TypeCall(ty.name, tuple(self.resolve(a) for a in ty.args))
        if isinstance(ty, RefType):
            return RefType(self.resolve(ty.value))
        return ty

    def unify(self, a: Type, b: Type) -> bool:
        return self.join(a, b) is not None

    def join(self, a: Type, b: Type) -> Type | None:
        """Make `a` and `b` equal; their common type (`?` where their dims differ), or None."""
        ra, rb = self.root(a), self.root(b)
        if ra is rb:
            return self.find(ra)
        a, b = self.find(ra), self.find(rb)
        for hole, other in ((a, rb), (b, ra)):
            if isinstance(hole, IncompleteType):  # an unsolved class joins the other one
                if self.occurs(hole, other):
                    return None
                self.solution[hole] = other
                return self.find(other)
        joined = self.join_parts(a, b)
        if joined is None:
            return None
        holes = [h for h in (ra, rb) if isinstance(h, IncompleteType)]
        if any(self.occurs(h, joined) for h in holes):
            return None
        if len(holes) == 2:
            self.solution[ra] = rb  # one class now
        if holes:
            self.solution[holes[-1]] = joined
        return joined

    def join_parts(self, a: Type, b: Type) -> Type | None:
        """The join of two concrete types, part by part; `a` itself when nothing widens."""
        if isinstance(a, TensorType) and isinstance(b, TensorType):
            if a.dtype != b.dtype or a.ndim != b.ndim:
                return None
            dims = []
            for x, y in zip(a.shape, b.shape):
                if x is not ANY and y is not ANY and x != y:
                    return None
                dims.append(x if x == y else ANY)
            return a if tuple(dims) == tuple(a.shape) else TensorType(tuple(dims), a.dtype)
        if isinstance(a, TupleType) and isinstance(b, TupleType):
            if len(a.fields) != len(b.fields):
                return None
            fields = self.join_all(a.fields, b.fields)
            return None if fields is None else (a if fields == a.fields else TupleType(fields))
        if isinstance(a, FuncType) and isinstance(b, FuncType):
            if len(a.arg_types) != len(b.arg_types) or a.type_params != b.type_params:
                return None
            parts = self.join_all((*a.arg_types, a.ret_type), (*b.arg_types, b.ret_type))
            if parts is None:
                return None
            return a if parts == (*a.arg_types, a.ret_type) else FuncType(parts[:-1], parts[-1], a.type_params)
        if isinstance(a, TypeCall) and isinstance(b, TypeCall):
            if a.name != b.name or len(a.args) != len(b.args):
                return None
            args = self.join_all(a.args, b.args)
            return None if args is None else (a if args == a.args else TypeCall(a.name, args))
        if isinstance(a, RefType) and isinstance(b, RefType):
            value = self.join_all((a.value,), (b.value,))
            return None if value is None else (a if value == (a.value,) else RefType(value[0]))
        return a if a == b else None

    def join_all(self, xs: Sequence[Type], ys: Sequence[Type]) -> tuple[Type, ...] | None:
        """Part-wise joins; a part that is a hole stays that hole (its class holds the join)."""
        parts = []
        for x, y in zip(xs, ys):
            joined = self.join(x, y)
            if joined is None:
                return None
            parts.append(x if isinstance(x, IncompleteType) else joined)
        return tuple(parts)

    def unify_all(self, xs: Sequence[Type], ys: Sequence[Type]) -> bool:
        return all(self.unify(x, y) for x, y in zip(xs, ys))

    def occurs(self, hole: IncompleteType, ty: Type) -> bool:
        """True when `ty` mentions a hole of `hole`'s class (binding them would make a cycle)."""
        target = self.root(hole)
        stack, seen = [ty], set()
        while stack:
            t = stack.pop()
            if isinstance(t, IncompleteType):
                r = self.root(t)
                if r is target:
                    return True
                if r in seen:
                    continue
                seen.add(r)
                t = self.solution.get(r, r)
            stack.extend(_parts(t))
        return False

    def has_holes(self, ty: Type) -> bool:
        """True when `ty` mentions a hole, solved or not."""
        stack = [ty]
        while stack:
            t = stack.pop()
            if isinstance(t, IncompleteType):
                return True
            stack.extend(_parts(t))
        return False

    def is_complete(self, ty: Type) -> bool:
        """True when no unsolved hole is left anywhere in `ty`."""
        stack = [ty]
        while stack:
            t = self.find(stack.pop())
            if isinstance(t, IncompleteType):
                return False
            stack.extend(_parts(t))
        return True


def _parts(ty: Type) -> Sequence[Type]:
    if isinstance(ty, TupleType):
        return ty.fields
    if isinstance(ty, FuncType):
        return (*ty.arg_types, ty.ret_type)
    if isinstance(ty, TypeCall):
        return ty.args
    if isinstance(ty, RefType):
        return (ty.value,)
    return ()


def instantiate(ty: FuncType) -> FuncType:
    """A polymorphic function type with its type parameters replaced by fresh holes."""
    if not ty.type_params:
        return ty
    fresh: dict[TypeVar, Type] = {p: IncompleteType() for p in ty.type_params}
    return FuncType(tuple(substitute(a, fresh) for a in ty.arg_types), substitute(ty.ret_type, fresh))
