"""Test helper: evaluate an op's shape rule on concrete run-time shapes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from compiler import ops
from compiler.ir.types import Type
from compiler.ops.shape_rules import ShapeRule
from compiler.tir import expr as te
from compiler.tir.simplify import simplify_expr


def rule_dims(name: str, shapes: Sequence[Sequence[int]], out_type: Type, **attrs: object) -> list[list[int]]:
    """The dims the shape rule of op `name` computes for inputs of `shapes` (the dims it would
    load at run time), folded to ints; `out_type` is what the type relation inferred."""
    op = ops.get(name)
    assert op.shape_func is not None, f"{name} declares no shape rule"
    rule = cast(ShapeRule, op.shape_func)  # OpDef stores rules untyped
    inputs = [tuple(te.const(d, "int64") for d in s) for s in shapes]
    out = []
    for dims in rule(inputs, op.make_attrs(attrs), out_type):
        folded = [simplify_expr(te.as_expr(d)) for d in dims]
        consts = [d for d in folded if isinstance(d, te.Const)]
        assert len(consts) == len(folded), f"{name}: the rule's dims do not fold to constants"
        out.append([int(d.value) for d in consts])
    return out
