"""Float16 roundings that a later rounding makes redundant.

Float16ComputeInFloat32 rounds every operator's result, so a float16 relu after an add reads
`round(add)` and its own result is rounded again (or narrowed to float16 for the store):

    half(max(round(x), 0))

With R the rounding to the nearest float16 (ties to even, overflow to infinity), max with a
constant c that is a float16 value commutes with R: max(R(x), c) = R(max(x, c)) for every x,
infinities and NaN included, since R is monotone and R(c) = c. So R(max(R(x), c)) =
R(R(max(x, c))) = R(max(x, c)), and `half(...)` (which is R then the bit narrowing) likewise:
the inner rounding can go. The same holds for min and for chains of both (clip, relu6).

Signed zeros decide which constants qualify. The generated C's max(a, b) is `a > b || a != a ?
a : b` and min(a, b) is `a < b || a != a ? a : b`, so max(-0.0, +0.0) is +0.0 while
max(+0.0, -0.0) is -0.0. With c = +0.0, max(R(x), c) and R(max(x, c)) are both +0.0 for a
small negative x; with c = -0.0 they differ (-0.0 and +0.0 for a small positive x). So max
takes any float16 constant but -0.0 as its second operand, and min any but +0.0. NaN
constants and the constant as first operand are left alone.

Each dropped rounding is one float16 conversion round trip per element: in a float16
convolution's epilogue (ops/kernels/half_stages.py) the bias add and the relu took two roundings
and now take one.
"""

from __future__ import annotations

import math

import numpy as np

from compiler.tir import expr as te
from compiler.tir.analysis import expr_children, post_order, rebuild_expr

F32, F16 = "float32", "float16"


def rounded_value(e: te.PrimExpr) -> te.PrimExpr | None:
    """The float32 value that `float32(float16(x))` rounds, else None."""
    if isinstance(e, te.Cast) and e.dtype == F32 and isinstance(e.value, te.Cast) and e.value.dtype == F16:
        inner = e.value.value
        return inner if inner.dtype == F32 else None
    return None


def _narrowed_value(e: te.PrimExpr) -> te.PrimExpr | None:
    """The float32 value that `float16(x)` narrows, else None."""
    if isinstance(e, te.Cast) and e.dtype == F16 and e.value.dtype == F32:
        return e.value
    return None


def _commutes_with_rounding(op: str, c: te.PrimExpr) -> bool:
    """Whether `op(v, c)` commutes with the float16 rounding of v (see the module docstring)."""
    if op not in ("max", "min") or not isinstance(c, te.Const) or c.dtype != F32:
        return False
    value = float(c.value)
    if value != value:
        return False
    with np.errstate(over="ignore"):
        if float(np.float16(value)) != value:
            return False
    if value == 0.0:
        negative = math.copysign(1.0, value) < 0
        return negative if op == "min" else not negative
    return True


def _without_inner_rounding(e: te.PrimExpr) -> te.PrimExpr:
    """`e`, a chain of clamps over a rounding R(x), with x in R(x)'s place; `e` itself when it
    is no such chain."""
    if isinstance(e, te.Binary) and _commutes_with_rounding(e.op, e.b):
        inner = _without_inner_rounding(e.a)
        return e if inner is e.a else rebuild_expr(e, (inner, e.b))
    value = rounded_value(e)
    return value if value is not None else e


def drop_clamped_roundings(root: te.PrimExpr) -> te.PrimExpr:
    """`root` with every rounding that a rounding or narrowing after it (through max/min with a
    float16 constant) makes redundant left out. The value is the same, bit for bit."""
    done: dict[int, te.PrimExpr] = {}
    for e in post_order(root):
        kids = tuple(done[id(k)] for k in expr_children(e))
        new = rebuild_expr(e, kids) if any(a is not b for a, b in zip(kids, expr_children(e))) else e
        outer = rounded_value(new)
        if outer is not None:
            inner = _without_inner_rounding(outer)
            if inner is not outer:
                new = te.Cast(te.Cast(inner, F16), F32)
        else:
            narrowed = _narrowed_value(new)
            if narrowed is not None:
                inner = _without_inner_rounding(narrowed)
                if inner is not narrowed:
                    new = te.Cast(inner, F16)
        done[id(e)] = new
    return done[id(root)]
