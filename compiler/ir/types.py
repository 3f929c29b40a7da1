"""Relay types: tensors (with possibly dynamic dims), tuples and functions.

Types are small values, so unlike expressions they compare and hash by value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

DTYPES = ("float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
# Accepted in text but rarely used; they still map onto numpy.
EXTRA_DTYPES = ("uint16", "uint32", "uint64")


class AnyDim:
    """A dimension unknown until run time, printed `?`."""

    _instance: AnyDim | None = None

    def __new__(cls) -> AnyDim:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "?"

    def __reduce__(self) -> str:
        return "ANY"


ANY = AnyDim()
Dim = Union[int, AnyDim]


def is_valid_dtype(dtype: str) -> bool:
    return dtype in DTYPES or dtype in EXTRA_DTYPES


def np_dtype(dtype: str) -> np.dtype:
    return np.dtype(dtype)


def dtype_of(array: np.ndarray) -> str:
    name = str(array.dtype)
    if name == "bool":
        return "bool"
    if not is_valid_dtype(name):
        raise ValueError(f"unsupported numpy dtype {name}")
    return name


class Type:
    """Base class of all Relay types. `str(ty)` is the type as Relay text writes it."""

    __slots__ = ()

    def __str__(self) -> str:
        return type_text(self)


@dataclass(frozen=True)
class TensorType(Type):
    shape: tuple[Dim, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_dynamic(self) -> bool:
        return any(d is ANY for d in self.shape)

    @property
    def num_elements(self) -> int:
        if self.is_dynamic:
            raise ValueError(f"{self} has dynamic dims")
        n = 1
        for d in self.shape:
            assert isinstance(d, int)
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.num_elements * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class TupleType(Type):
    fields: tuple[Type, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))


@dataclass(frozen=True)
class FuncType(Type):
    arg_types: tuple[Type, ...]
    ret_type: Type

    def __post_init__(self) -> None:
        object.__setattr__(self, "arg_types", tuple(self.arg_types))


def type_text(ty: Type) -> str:
    """A type in Relay text: `float32`, `Tensor[(1, ?), int8]`, `(T,)`, `fn (A) -> B`."""
    if isinstance(ty, TensorType):
        if not ty.shape:
            return ty.dtype
        dims = ", ".join("?" if d is ANY else str(d) for d in ty.shape)
        return f"Tensor[({dims}), {ty.dtype}]"
    if isinstance(ty, TupleType):
        inner = ", ".join(type_text(f) for f in ty.fields)
        return f"({inner},)" if len(ty.fields) == 1 else f"({inner})"
    if isinstance(ty, FuncType):
        args = ", ".join(type_text(a) for a in ty.arg_types)
        return f"fn ({args}) -> {type_text(ty.ret_type)}"
    raise TypeError(f"not a type: {ty!r}")


def scalar_type(dtype: str) -> TensorType:
    return TensorType((), dtype)


def is_dynamic(ty: Type) -> bool:
    """True when a tensor anywhere inside `ty` has a `?` dimension."""
    if isinstance(ty, TensorType):
        return ty.is_dynamic
    if isinstance(ty, TupleType):
        return any(is_dynamic(f) for f in ty.fields)
    if isinstance(ty, FuncType):
        return is_dynamic(ty.ret_type)
    return False


def flatten_tensor_types(ty: Type) -> list[TensorType]:
    """The tensors of a (possibly nested) tuple type, left to right."""
    if isinstance(ty, TensorType):
        return [ty]
    if isinstance(ty, TupleType):
        out: list[TensorType] = []
        for f in ty.fields:
            out.extend(flatten_tensor_types(f))
        return out
    raise TypeError(f"{ty} is not a tensor or tuple type")
