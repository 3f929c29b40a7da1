"""BindParams: turn named parameters of @main into constants (`relay.build(mod, params=...)`).

Before: a module whose @main has typed parameters; `params` maps parameter names (without `%`)
to arrays.
After (typed): each named parameter is removed from @main's parameter list and every use of it
is the Constant holding its array; the other parameters keep their order.

Errors (InputError): a name that is not a parameter of @main, a name shared by two parameters,
or an array whose dtype or shape disagrees with the parameter's type (a `?` dimension accepts
any extent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from compiler.diagnostics import InputError
from compiler.ir.expr import Constant, Expr, Function, Var
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, TensorType
from compiler.ir.visitor import ExprMutator
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext


def checked_constant(param: Var, value: np.ndarray) -> Constant:
    array = np.asarray(value)
    ty = param.type_annotation
    name = param.name_hint
    if not isinstance(ty, TensorType):
        raise InputError(f"parameter {name} has type {ty}; only tensor parameters can be bound")
    if str(array.dtype) != ty.dtype:
        raise InputError(f"parameter {name}: expected dtype {ty.dtype}, got {array.dtype}")
    if array.ndim != ty.ndim or any(d is not ANY and d != n for d, n in zip(ty.shape, array.shape)):
        raise InputError(f"parameter {name}: expected shape {ty}, got {tuple(array.shape)}")
    return Constant(array)


class _Substitute(ExprMutator):
    def __init__(self, bound: Mapping[Var, Expr]):
        super().__init__()
        self.bound = bound

    def rewrite_var(self, pre: Var, post: Var) -> Expr:
        return self.bound.get(pre, post)


def bind_params(func: Function, params: Mapping[str, np.ndarray]) -> Function:
    """`func` with the parameters named in `params` replaced by constants."""
    by_name: dict[str, Var] = {}
    for p in func.params:
        if p.name_hint in by_name and p.name_hint in params:
            raise InputError(f"cannot bind {p.name_hint!r}: @main has two parameters of that name")
        by_name.setdefault(p.name_hint, p)
    unknown = sorted(set(params) - set(by_name))
    if unknown:
        names = ", ".join(by_name) or "no parameters"
        raise InputError(f"cannot bind {unknown[0]!r}: @main has no such parameter (it takes {names})")
    bound: dict[Var, Expr] = {by_name[n]: checked_constant(by_name[n], v) for n, v in params.items()}
    if not bound:
        return func
    body = _Substitute(bound).visit(func.body)
    kept = tuple(p for p in func.params if p not in bound)
    return Function(kept, body, func.ret_type, func.attrs, func.span)


@dataclass(frozen=True)
class BindParams(Pass):
    name: ClassVar[str] = "BindParams"
    params: Mapping[str, np.ndarray] = field(default_factory=dict)

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        if not self.params:
            return mod
        main = mod.main
        new = bind_params(main, self.params)
        return InferType().run(mod.with_function(mod.get_global_var("main"), new), ctx)
