"""Relay text printer (types only so far; expressions and modules follow)."""

from __future__ import annotations

from compiler.ir.types import ANY, FuncType, TensorType, TupleType, Type


def type_text(ty: Type) -> str:
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
