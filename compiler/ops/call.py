"""`call_lowered(@f, (args...), metadata={...})`: a call of a lowered or external function.

LowerTE rewrites every call of a primitive, extern or PrimFunc global into this form. The
callee is a GlobalVar, the arguments one tuple; `metadata` records what later stages need
(relay_attrs, all_prim_fn_vars, shape-function cross links). Its type is the callee's result.
The interpreter runs it as a call of the callee when the callee is a Relay function of the
module (a `Primitive=1` or `Extern=1` def printed with its body); a callee that is a PrimFunc
is never in Relay text, which the parser reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import FuncType, TupleType, Type
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, TypeRelationError, register


def _type_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    if len(types) != 2:
        raise TypeRelationError(f"call_lowered expects a callee and an argument tuple, got {len(types)} arguments")
    callee, args = types
    if not isinstance(callee, FuncType):
        raise TypeRelationError(f"call_lowered callee must be a function, got {callee}")
    if not isinstance(args, TupleType):
        raise TypeRelationError(f"call_lowered arguments must be a tuple, got {args}")
    if len(args.fields) != len(callee.arg_types):
        raise TypeRelationError(
            f"call_lowered passes {len(args.fields)} arguments to a function of {len(callee.arg_types)}"
        )
    from compiler.passes.infer_type import compatible

    for i, (want, got) in enumerate(zip(callee.arg_types, args.fields)):
        if not compatible(want, got):
            raise TypeRelationError(f"call_lowered argument {i}: expected {want}, found {got}")
    return callee.ret_type


def _no_reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    raise NotImplementedError("call_lowered runs through its `evaluate` hook")


def _evaluate(values: list[object], attrs: Attrs, apply: Callable[[object, list[object]], object]) -> object:
    callee, args = values
    assert isinstance(args, tuple)
    return apply(callee, list(args))


CALL_LOWERED = register(
    OpDef(
        "call_lowered",
        2,
        _type_rel,
        OpPattern.OPAQUE,
        _no_reference,
        attrs=(AttrSpec("metadata", "any", default=None, optional=True),),
        extras={"internal": True, "evaluate": _evaluate},
    )
)
