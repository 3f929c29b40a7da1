"""FoldConstant: evaluate at compile time what depends on constants only.

Before: a typed module.
After (typed):
* every operator call whose arguments are all constants (or tuples of constants, after folding
  their own arguments) is replaced by its value, computed with the reference interpreter: a
  Constant, or a Tuple of Constants for a tuple-valued operator; operators without arguments
  (`zeros`, `ones`, ...) fold too;
* `let %v = <constant>; body` becomes `body` with the constant in place of `%v`;
* a projection `(a, b, ...).i` of a tuple literal becomes the field itself (the language is pure,
  so the other fields need not be evaluated).

Not folded: anything inside functions marked `Primitive` or `Compiler` (they are finished
kernels or belong to an external compiler), calls of functions (only operators are evaluated),
and operators whose fusion pattern is OPAQUE. An opaque op is one whose meaning is more than a
computation on its argument values: `nn.dropout` is random when training, `call_lowered` runs
lowered code the interpreter cannot see, device and memory annotations place data. The one
exception is `nn.layer_norm`, opaque only because it has no fusion pattern (SimplifyInference
normally removes it), which is a plain computation and folds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from compiler import ops
from compiler.ir.expr import Call, Constant, Expr, Function, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType, TupleType, Type
from compiler.ir.visitor import post_order, rebuild
from compiler.passes.fusion_graph import closed_function
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import Pass, PassContext
from compiler.runtime.interpreter import Frame, Interpreter, Value

# Opaque operators that are still plain computations on their inputs.
FOLDABLE_OPAQUE = frozenset({"nn.layer_norm"})


def is_constant_value(expr: Expr) -> bool:
    """A Constant or a (nested) tuple of Constants."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Tuple):
            stack.extend(node.fields)
        elif not isinstance(node, Constant):
            return False
    return True


def foldable_op(name: str) -> bool:
    opdef = ops.lookup(name)
    if opdef is None:
        return False
    return opdef.pattern != ops.OpPattern.OPAQUE or name in FOLDABLE_OPAQUE


def value_to_expr(value: Value, ty: Type) -> Expr:
    """The interpreter's value of type `ty` as an expression of Constants and Tuples."""
    if isinstance(ty, TupleType):
        assert isinstance(value, tuple) and len(value) == len(ty.fields)
        return Tuple(tuple(value_to_expr(v, t) for v, t in zip(value, ty.fields)))
    assert isinstance(ty, TensorType) and isinstance(value, np.ndarray)
    array = value
    if str(array.dtype) != ty.dtype:
        array = array.astype(ty.dtype)
    expected = tuple(d if isinstance(d, int) else n for d, n in zip(ty.shape, array.shape))
    if tuple(array.shape) != expected:
        raise AssertionError(f"folded value has shape {array.shape}, its type says {ty}")
    return Constant(array)


def fold_expr(root: Expr) -> Expr:
    """`root` with its constant sub-computations folded; `root` itself if nothing folds."""
    interpreter = Interpreter(IRModule())
    memo: dict[Expr, Expr] = {}
    let_value: dict[Var, Expr] = {}

    def descend(node: Expr) -> bool:
        if isinstance(node, Let):
            let_value[node.var] = node.value
        return not closed_function(node)

    for node in post_order(root, descend=descend):
        if closed_function(node):
            memo[node] = node
        elif isinstance(node, Var):
            # Visited first as the let's binder, after its value: uses in the body see this.
            value = let_value.get(node)
            folded = memo.get(value) if value is not None else None
            memo[node] = folded if isinstance(folded, Constant) else node
        elif isinstance(node, Let):
            if isinstance(memo[node.value], Constant):
                memo[node] = memo[node.body]
            else:
                memo[node] = rebuild(node, memo.__getitem__)
        elif isinstance(node, TupleGetItem):
            tuple_value = memo[node.tuple_value]
            if isinstance(tuple_value, Tuple):
                memo[node] = tuple_value.fields[node.index]
            else:
                memo[node] = rebuild(node, memo.__getitem__)
        elif isinstance(node, Call):
            post = rebuild(node, memo.__getitem__)
            assert isinstance(post, Call)
            if (
                isinstance(post.op, Op)
                and foldable_op(post.op.name)
                and all(is_constant_value(a) for a in post.args)
            ):
                value = interpreter.eval(post, Frame(None))
                memo[node] = value_to_expr(value, node.checked_type)
            else:
                memo[node] = post
        else:
            memo[node] = rebuild(node, memo.__getitem__)
    return memo[root]


@dataclass(frozen=True)
class FoldConstant(Pass):
    name: ClassVar[str] = "FoldConstant"
    opt_level: ClassVar[int] = 2

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        mod = InferType().run(mod, ctx)
        out = mod.copy()
        changed = False
        for gv, func in mod.functions():
            if closed_function(func):
                continue
            new = fold_expr(func)
            if new is not func:
                out.add(gv, new)
                changed = True
        return InferType().run(out, ctx) if changed else mod


def rewrite_and_fold(mod: IRModule, ctx: PassContext, rewrite: Callable[[Function], Expr]) -> IRModule:
    """`rewrite` applied to each Relay function of `mod` outside Primitive and Compiler ones;
    the functions it changed are typed and their constant parts folded (a rewritten weight
    becomes one constant before fusion sees it). `mod` itself when nothing changed."""
    out = mod.copy()
    changed = []
    for gv, func in mod.functions():
        if not isinstance(func, Function) or closed_function(func):
            continue
        new = rewrite(func)
        if new is not func:
            out.add(gv, new)  # type: ignore[arg-type]  # a GlobalVar
            changed.append(gv)
    if not changed:
        return mod
    out = InferType().run(out, ctx)
    folded = out.copy()
    for gv in changed:
        folded.add(gv, fold_expr(out[gv]))  # type: ignore[arg-type]  # a GlobalVar
    return InferType().run(folded, ctx)
