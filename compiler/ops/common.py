"""Helpers shared by the type relations of several op families."""

from __future__ import annotations

from collections.abc import Sequence

from compiler.ir.types import ANY, Dim, TensorType, Type
from compiler.ops.registry import TypeRelationError


def tensor_arg(types: Sequence[Type], index: int, op: str) -> TensorType:
    """Argument `index` as a TensorType, or a TypeRelationError naming the op and the type."""
    if index >= len(types):
        raise TypeRelationError(f"{op} expects at least {index + 1} arguments, got {len(types)}")
    ty = types[index]
    if not isinstance(ty, TensorType):
        raise TypeRelationError(f"{op} expects a tensor as argument {index}, got {ty}")
    return ty


def check_arity(types: Sequence[Type], n: int, op: str) -> None:
    if len(types) != n:
        raise TypeRelationError(f"{op} expects {n} arguments, got {len(types)}")


def same_dtype(a: TensorType, b: TensorType, op: str) -> str:
    if a.dtype != b.dtype:
        raise TypeRelationError(f"{op} needs operands of one dtype, got {a} and {b}")
    return a.dtype


def normalize_axis(axis: int, ndim: int, op: str) -> int:
    """A non-negative axis in [0, ndim), accepting Python-style negative values."""
    if not -ndim <= axis < ndim:
        raise TypeRelationError(f"{op}: axis {axis} is out of range for rank {ndim}")
    return axis + ndim if axis < 0 else axis


def dims_equal(a: Dim, b: Dim) -> bool:
    """Two dims that may be the same at run time (`?` unifies with anything)."""
    return a is ANY or b is ANY or a == b


def broadcast_shapes(a: TensorType, b: TensorType, op: str) -> tuple[Dim, ...]:
    """numpy broadcasting of two shapes; `?` against n gives n when n != 1, else `?`."""
    ra, rb = list(a.shape), list(b.shape)
    n = max(len(ra), len(rb))
    ra = [1] * (n - len(ra)) + ra
    rb = [1] * (n - len(rb)) + rb
    out: list[Dim] = []
    for da, db in zip(ra, rb):
        if da is ANY or db is ANY:
            other = db if da is ANY else da
            out.append(other if other is not ANY and other != 1 else ANY)
        elif da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            raise TypeRelationError(f"{op}: shapes of {a} and {b} do not broadcast")
    return tuple(out)


def product(dims: Sequence[Dim]) -> Dim:
    """Product of dims, `?` if any is unknown."""
    n = 1
    for d in dims:
        if d is ANY:
            return ANY
        assert isinstance(d, int)
        n *= d
    return n
