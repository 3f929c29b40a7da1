"""Unification of Relay types, for InferType.

An `IncompleteType` is a hole: a type not known yet (a parameter without annotation, a type
argument of a polymorphic call, the element type of `Nil`). `unify(a, b)` makes two types equal
by filling holes, and says False when they cannot be equal. Holes are solved with a union-find
map; `resolve` substitutes every solved hole in a type.

A `?` dimension unifies with any dimension, as InferType has always accepted a static shape
where a dynamic one is declared. Type variables (`A` of `def @f[A]`) are rigid: inside the
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
        self.solution: dict[IncompleteType, Type] = {}

    def find(self, ty: Type) -> Type:
        """`ty` with a solved hole at its top replaced by its solution (path compressed)."""
        path = []
        while isinstance(ty, IncompleteType) and ty in self.solution:
            path.append(ty)
            ty = self.solution[ty]
        for hole in path[:-1]:
            self.solution[hole] = ty
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
        a, b = self.find(a), self.find(b)
        if a is b:
            return True
        if isinstance(a, IncompleteType) or isinstance(b, IncompleteType):
            hole, other = (a, b) if isinstance(a, IncompleteType) else (b, a)
            assert isinstance(hole, IncompleteType)
            if self.occurs(hole, other):
                return False
            self.solution[hole] = other
            return True
        if isinstance(a, TensorType) and isinstance(b, TensorType):
            return (
                a.dtype == b.dtype
                and a.ndim == b.ndim
                and all(x is ANY or y is ANY or x == y for x, y in zip(a.shape, b.shape))
            )
        if isinstance(a, TupleType) and isinstance(b, TupleType):
            return len(a.fields) == len(b.fields) and self.unify_all(a.fields, b.fields)
        if isinstance(a, FuncType) and isinstance(b, FuncType):
            if len(a.arg_types) != len(b.arg_types) or a.type_params != b.type_params:
                return False
            return self.unify_all(a.arg_types, b.arg_types) and self.unify(a.ret_type, b.ret_type)
        if isinstance(a, TypeCall) and isinstance(b, TypeCall):
            return a.name == b.name and len(a.args) == len(b.args) and self.unify_all(a.args, b.args)
        if isinstance(a, RefType) and isinstance(b, RefType):
            return self.unify(a.value, b.value)
        return a == b

    def unify_all(self, xs: Sequence[Type], ys: Sequence[Type]) -> bool:
        return all(self.unify(x, y) for x, y in zip(xs, ys))

    def occurs(self, hole: IncompleteType, ty: Type) -> bool:
        stack = [ty]
        while stack:
            t = self.find(stack.pop())
            if t is hole:
                return True
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
