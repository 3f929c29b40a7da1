"""DynamicToStatic: a `dyn.*` call whose shape-like arguments are constants becomes its static op.

Before: a typed module that may call the dynamic operators of compiler/ops/dyn.py.
After (typed): every such call whose value arguments (newshape, begin/end/strides, k, ...) are
constants, once the computations that feed them are folded, is a call of the static op with those
values as attributes (`dyn.reshape(%x, [6, -1])` is `reshape(%x, newshape=[6, -1])`), in the
call's place and with its span; its type is then the static op's (static dims where the dyn
op had `?`). Calls with values known only at run time are left as they are.

What folds: the FoldConstant of compiler/passes/fold_constant.py, and, as TVM's FoldConstant does,
`shape_of` and `ndarray_size` of a tensor whose type is static. The pass repeats (as TVM's does)
until nothing changes: a call made static can make a later `shape_of` static, and with it the
next dyn call. Values that no static op accepts (a -2 in a dynamic newshape, begin and end of
different lengths) are a located type error naming the dyn call.

TVM runs it right after SimplifyInference in its default (graph/AOT) pipeline, at opt level 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from compiler import ops
from compiler.diagnostics import InputError, TypeCheckError
from compiler.ir.expr import Call, Constant, Expr, Function, Op
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.ir.visitor import ExprMutator, post_order
from compiler.ops.dyn import StaticForm, static_form
from compiler.passes.fold_constant import fold_expr
from compiler.passes.fusion_graph import closed_function
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext

# A bound on the rounds; each round that changes something makes at least one call static.
MAX_ROUNDS = 1000


def static_shape_value(call: Call) -> Constant | None:
    """The value of `shape_of(x)` or `ndarray_size(x)` when x's type is static, else None."""
    if call.op_name not in ("shape_of", "ndarray_size"):
        return None
    ty = call.args[0].checked_type
    if not isinstance(ty, TensorType) or ty.is_dynamic:
        return None
    dims = [int(d) for d in ty.shape]  # type: ignore[arg-type]  # static, checked above
    if call.op_name == "shape_of":
        return Constant(np.array(dims, dtype=call.attrs["dtype"]).reshape(len(dims)))
    return Constant(np.array(int(np.prod(dims, dtype=np.int64)), dtype=call.attrs["dtype"]))


class _StaticShapes(ExprMutator):
    """shape_of / ndarray_size of statically shaped tensors replaced by their values."""

    def descend(self, node: Expr) -> bool:
        return not closed_function(node)

    def rewrite_call(self, pre: Call, post: Call) -> Expr:
        value = static_shape_value(pre)
        return value if value is not None else post


def static_call(call: Call) -> Call | None:
    """The static op's call for a dyn call whose value arguments are constants, else None."""
    form = static_form_of(call)
    if form is None:
        return None
    values = [call.args[k] for k in form.value_args]
    if not all(isinstance(v, Constant) for v in values):
        return None
    try:
        attrs = form.static_attrs(call.op.name, [v.data for v in values], call.attrs)  # type: ignore[attr-defined]  # Constants
    except InputError as err:
        raise TypeCheckError(err.message, call.span) from None
    kept = tuple(call.args[k] for k in form.kept_args(len(call.args)))
    return Call(Op.get(form.static), kept, attrs, call.span)


class _ToStatic(ExprMutator):
    def descend(self, node: Expr) -> bool:
        return not closed_function(node)

    def rewrite_call(self, pre: Call, post: Call) -> Expr:
        static = static_call(post)
        return static if static is not None else post


@dataclass(frozen=True)
class DynamicToStatic(Pass):
    name: ClassVar[str] = "DynamicToStatic"
    opt_level: ClassVar[int] = 2

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        # Most models have no dyn call: they pay one walk, not a type inference.
        if not _has_dyn_calls(mod):
            return mod
        mod = InferType().run(mod, ctx)
        for _ in range(MAX_ROUNDS):
            rewritten = _one_round(mod, ctx)
            if rewritten is None:
                return mod
            mod = rewritten
        return mod


def _functions(mod: IRModule) -> list[tuple[object, Function]]:
    return [(gv, f) for gv, f in mod.functions() if isinstance(f, Function) and not closed_function(f)]


def _one_round(mod: IRModule, ctx: PassContext) -> IRModule | None:
    """Fold, then make static what became constant; None when no call became static."""
    shapes = mod.copy()
    for gv, func in _functions(mod):
        shapes.add(gv, _StaticShapes().visit(func))  # type: ignore[arg-type]  # a GlobalVar
    shapes = InferType().run(shapes, ctx)
    out = shapes.copy()
    changed = False
    for gv, func in _functions(shapes):
        folded = fold_expr(func)
        new = _ToStatic().visit(folded)
        if new is not folded:
            out.add(gv, new)  # type: ignore[arg-type]  # a GlobalVar
            changed = True
    return InferType().run(out, ctx) if changed else None


def _has_dyn_calls(mod: IRModule) -> bool:
    for _, func in _functions(mod):
        for node in post_order(func):
            if isinstance(node, Call) and isinstance(node.op, Op) and static_form_of(node) is not None:
                return True
    return False


def static_form_of(call: Call) -> StaticForm | None:
    if not isinstance(call.op, Op) or ops.lookup(call.op.name) is None:
        return None
    return static_form(call.op.name)
