"""Relay types: tensors (with possibly dynamic dims), tuples and functions.

Types are small values, so unlike expressions they compare and hash by value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Union

import numpy as np

# The most dimensions a tensor may have: numpy's limit (NPY_MAXDIMS), which the interpreter and
# the runtime's arrays share. The parser and the type relations refuse more with a located
# error, so that `expand_dims(%x, axis=0, num_newaxis=9223372036854775807)` cannot ask for a
# shape tuple of 2^63 entries.
MAX_RANK = 64
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


# Spellings TVM's String2DLDataType reads: a kind, optional bits, optional `x<lanes>`.
_TVM_DTYPE = re.compile(r"(?:(?:u?int|float|bfloat)(\d+)?|bool|handle)(?:x(\d+))?")


def is_valid_dtype(dtype: str) -> bool:
    """True for the dtypes relaycc computes with (those numpy has)."""
    return dtype in DTYPES or dtype in EXTRA_DTYPES


def unsupported_dtype_reason(dtype: str) -> str | None:
    """Why a dtype TVM would accept is not one of ours, or None when TVM would not accept it."""
    match = _TVM_DTYPE.fullmatch(dtype)
    if match is None:
        return None
    if match.group(2) is not None:
        return f"vector dtype `{dtype}` (lanes) is not supported; use a scalar dtype and one more dimension"
    if dtype == "handle":
        return "dtype `handle` (an opaque pointer) cannot be the type of a Relay value"
    if dtype.startswith("bfloat"):
        return f"dtype `{dtype}` is not supported (no numpy equivalent); use float16 or float32"
    return f"dtype `{dtype}` is not supported; bit widths are 8, 16, 32 and 64 (float: 16, 32, 64; bool)"


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
class TypeVar(Type):
    """A type parameter (`A` in `def @id[A](%x: A) -> A` or `type List[A]`), equal by name."""

    name: str


@dataclass(frozen=True)
class FuncType(Type):
    """`fn [A, B](A) -> B`: `type_params` are bound here and instantiated afresh at each use."""

    arg_types: tuple[Type, ...]
    ret_type: Type
    type_params: tuple[TypeVar, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "arg_types", tuple(self.arg_types))
        object.__setattr__(self, "type_params", tuple(self.type_params))


@dataclass(frozen=True)
class TypeCall(Type):
    """An algebraic data type applied to its arguments: `List[float32]`, or `Nat[]` without any
    (printed with the brackets, as TVM does; the parser reads `Nat` too)."""

    name: str
    args: tuple[Type, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))


@dataclass(frozen=True)
class RefType(Type):
    """`ref(T)`: a mutable cell holding a value of type T."""

    value: Type


class IncompleteType(Type):
    """A type not known yet (`_` in text, or a missing annotation), solved by InferType.

    Each one is distinct (compared by identity), unlike the other types.
    """

    __slots__ = ("uid",)
    created = 0  # how many were ever made; InferType compares counts to skip needless work

    def __init__(self) -> None:
        IncompleteType.created += 1
        self.uid = IncompleteType.created

    def __repr__(self) -> str:
        return f"?{self.uid}"


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
        params = ", ".join(p.name for p in ty.type_params)
        head = f"fn [{params}](" if params else "fn ("
        return f"{head}{args}) -> {type_text(ty.ret_type)}"
    if isinstance(ty, TypeVar):
        return ty.name
    if isinstance(ty, TypeCall):
        # Brackets even without arguments (`tensor_float32_t[]`), as TVM prints a type call.
        return f"{ty.name}[{', '.join(type_text(a) for a in ty.args)}]"
    if isinstance(ty, RefType):
        return f"ref({type_text(ty.value)})"
    if isinstance(ty, IncompleteType):
        return "_"
    raise TypeError(f"not a type: {ty!r}")


def substitute(ty: Type, mapping: Mapping[TypeVar, Type]) -> Type:
    """`ty` with the free type variables in `mapping` replaced."""
    if not mapping:
        return ty
    if isinstance(ty, TypeVar):
        return mapping.get(ty, ty)
    if isinstance(ty, TupleType):
        return TupleType(tuple(substitute(f, mapping) for f in ty.fields))
    if isinstance(ty, TypeCall):
        return TypeCall(ty.name, tuple(substitute(a, mapping) for a in ty.args))
    if isinstance(ty, RefType):
        return RefType(substitute(ty.value, mapping))
    if isinstance(ty, FuncType):
        inner = {k: v for k, v in mapping.items() if k not in ty.type_params}
        args = tuple(substitute(a, inner) for a in ty.arg_types)
        return FuncType(args, substitute(ty.ret_type, inner), ty.type_params)
    return ty


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
