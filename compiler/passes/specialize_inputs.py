"""SpecializeInputs: fix the `?` dims of @main's parameters at build time (tvmc's
`--input-shapes`).

Before: a module whose @main has tensor parameters, some with `?` dims; `shapes` maps parameter
names (without `%`) to concrete shapes.
After (typed): each named parameter has the given shape (its dtype unchanged) and every use of
it sees the new parameter, so type inference makes the whole graph as static as the shapes
allow; a declared result type is dropped and inferred again. A model whose shapes become fully
static then compiles to the static executor.

Errors (InputError): a name that is not a parameter of @main, a shape of another rank, a
negative extent, or an extent that contradicts a static dim of the declared type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from compiler.diagnostics import InputError
from compiler.ir.expr import Expr, Function, Var
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, TensorType
from compiler.ir.visitor import ExprMutator
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext

_ENTRY = re.compile(r"^(?P<name>.+?):\[(?P<dims>[^\]]*)\]$")


def parse_input_shapes(text: str) -> dict[str, tuple[int, ...]]:
    """`'x:[1,3,224,224] y:[8]'` (tvmc's form; entries separated by spaces) as a mapping."""
    shapes: dict[str, tuple[int, ...]] = {}
    # A shape may be written with spaces after its commas: split only between entries.
    for entry in re.split(r"(?<=\])\s+", text.strip()):
        match = _ENTRY.match(entry.strip())
        if match is None:
            raise InputError(f"--input-shapes entry {entry!r} is not NAME:[D0,D1,...]")
        name, dims = match["name"].strip().lstrip("%"), match["dims"].strip()
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        except ValueError:
            raise InputError(f"--input-shapes entry {entry!r}: the dims must be integers") from None
        if name in shapes:
            raise InputError(f"--input-shapes names {name!r} twice")
        shapes[name] = shape
    return shapes


def specialized_type(param: Var, shape: Sequence[int]) -> TensorType:
    ty = param.type_annotation
    name = param.name_hint
    if not isinstance(ty, TensorType):
        raise InputError(f"input {name} has type {ty}; only a tensor's shape can be given")
    if len(shape) != ty.ndim:
        raise InputError(f"input {name}: shape {list(shape)} has {len(shape)} dims, the model declares {ty}")
    for declared, given in zip(ty.shape, shape):
        if given < 0 or (declared is not ANY and declared != given):
            raise InputError(f"input {name}: shape {list(shape)} does not conform to the declared {ty}")
    return TensorType(tuple(shape), ty.dtype)


class _Substitute(ExprMutator):
    def __init__(self, replaced: Mapping[Var, Var]):
        super().__init__()
        self.replaced = replaced

    def rewrite_var(self, pre: Var, post: Var) -> Expr:
        return self.replaced.get(pre, post)


def specialize(func: Function, shapes: Mapping[str, Sequence[int]]) -> Function:
    by_name = {p.name_hint: p for p in func.params}
    unknown = sorted(set(shapes) - set(by_name))
    if unknown:
        names = ", ".join(by_name) or "no parameters"
        raise InputError(f"--input-shapes names {unknown[0]!r}, which is not an input of @main (it takes {names})")
    replaced = {
        by_name[n]: Var(n, specialized_type(by_name[n], s), by_name[n].span, virtual_device=by_name[n].virtual_device)
        for n, s in shapes.items()
    }
    if not replaced:
        return func
    body = _Substitute(replaced).visit(func.body)
    params = tuple(replaced.get(p, p) for p in func.params)
    return Function(params, body, None, func.attrs, func.span, func.type_params)


@dataclass(frozen=True)
class SpecializeInputs(Pass):
    name: ClassVar[str] = "SpecializeInputs"
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        if not self.shapes:
            return mod
        new = specialize(mod.main, self.shapes)
        return InferType().run(mod.with_function(mod.get_global_var("main"), new), ctx)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.shapes.items())))
