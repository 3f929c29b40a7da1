"""Reductions along a unit-stride axis as vector loops over partial accumulators.

A reduction kept in one accumulator is a chain gcc must not reorder (float addition is not
associative and we build without -ffast-math), so it runs one element at a time. Here the
accumulator is `width` partials: element k of the axis goes to partial k % width, inside a
`simd` loop over the partials that gcc turns into vector operations, and the partials are
folded into partial 0 at the end. That reassociates float sums (results move within rounding,
as any blocked sum does); integer sums (which wrap) and max/min come out exactly as in order
(max/min up to which of +0.0 and -0.0 wins a tie).

The caller decides when it pays: the axis must be contiguous in every load (`unit_stride`),
else each vector would be a gather.
"""

from __future__ import annotations

from collections.abc import Callable

from compiler.tir import expr as te
from compiler.tir.analysis import free_vars, post_order
from compiler.tir.compute import KernelContext
from compiler.tir.stmt import For, ForKind, Stmt, Store, seq

Combine = Callable[[te.PrimExpr, te.PrimExpr], te.PrimExpr]


def partial_width(ctx: KernelContext) -> int:
    """Two vectors of float32 lanes: a second chain of additions hides the first's latency."""
    return 2 * ctx.vector_lanes


def unit_stride(value: te.PrimExpr, var: te.Var) -> bool:
    """Whether every load in `value` that depends on `var` reads consecutive elements as `var`
    counts up (it appears in the last index only, with step 1)."""
    for node in post_order(value):
        if not isinstance(node, te.Load):
            continue
        *lead, last = node.indices or (te.const(0),)
        if any(_uses(i, var) for i in lead):
            return False
        if _uses(last, var) and _step(last, var) != 1:
            return False
    return True


def _step(e: te.PrimExpr, var: te.Var) -> int | None:
    """How much `e` grows when `var` grows by one, if `e` is linear in `var` (None if not)."""
    if e is var:
        return 1
    if not _uses(e, var):
        return 0
    if isinstance(e, te.Cast) and e.dtype.startswith("int"):
        return _step(e.value, var)
    if isinstance(e, te.Binary) and e.op in ("+", "-"):
        a, b = _step(e.a, var), _step(e.b, var)
        if a is None or b is None:
            return None
        return a + b if e.op == "+" else a - b
    if isinstance(e, te.Binary) and e.op == "*":
        for scaled, factor in ((e.a, e.b), (e.b, e.a)):
            if isinstance(factor, te.Const) and isinstance(factor.value, int):
                inner = _step(scaled, var)
                return None if inner is None else inner * factor.value
    return None


def _uses(e: te.PrimExpr, var: te.Var) -> bool:
    return any(v is var for v in free_vars(e))


def init_partials(ctx: KernelContext, acc: te.Buffer, width: int, init: te.PrimExpr) -> Stmt:
    j = ctx.var("j")
    return For(j, te.const(0), te.const(width), Store(acc, (j,), init), ForKind.VECTORIZED)


def accumulate(
    ctx: KernelContext, acc: te.Buffer, width: int, extent: int,
    value_at: Callable[[te.PrimExpr], te.PrimExpr], combine: Combine,
    before: Callable[[te.PrimExpr], Stmt] | None = None,
) -> Stmt:
    """Folds value_at(k) for k in [0, extent) into the partials acc[0..width): whole blocks of
    `width` in a simd loop, the remainder into acc[0]. `before(k)`, if given, runs first in
    each iteration (a store that value_at(k) may read back)."""
    blocks, rest = divmod(extent, width)
    kb, j, kr = ctx.var("kb"), ctx.var("j"), ctx.var("kr")
    parts: list[Stmt] = []

    def step(k: te.PrimExpr, slot: te.PrimExpr) -> Stmt:
        update = Store(acc, (slot,), combine(acc[slot], value_at(k)))
        return update if before is None else seq(before(k), update)

    if blocks:
        parts.append(For(kb, te.const(0), te.const(blocks),
                         For(j, te.const(0), te.const(width), step(kb * width + j, j), ForKind.VECTORIZED)))
    if rest:
        parts.append(For(kr, te.const(0), te.const(rest), step(kr + blocks * width, te.const(0))))
    return seq(*parts)


def fold_partials(ctx: KernelContext, acc: te.Buffer, width: int, combine: Combine) -> Stmt:
    """acc[0] = the combination of all partials."""
    j, zero = ctx.var("j"), te.const(0)
    return For(j, te.const(1), te.const(width - 1), Store(acc, (zero,), combine(acc[zero], acc[j])))
