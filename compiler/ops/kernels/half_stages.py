"""A vectorized store loop whose value rounds to float16, split into stages over small local
arrays so that each rounding is one call of a whole-row conversion helper
(compiler/backend/c_helpers.py: `relaycc_halfroundn_f32` and friends, F16C's vector
conversions where the build machine has them).

A float16 epilogue rounds where TVM's float16 program rounds: after a conv's sum, the scale's
product, the shift's sum, the residual add. In one loop, each rounding is the helper gcc
vectorizes from integer and float operations (about 15 per 8 lanes) and each float16 load or
store another; gcc 12 vectorizes no float16 conversion of its own. Staged, the loop

    for j: out[i(j)] = half(max(round(round(round(acc[j]) * s[j]) + b[j]) + float(r[i(j)])), 0))

becomes, with `W` the loop's extent,

    for j: s0[j] = acc[j];              roundn(s0, W)
    for j: s1[j] = s0[j] * s[j];        roundn(s1, W)
    for j: s2[j] = s1[j] + b[j];        roundn(s2, W)
    for j: h0[j] = r[i(j)];             widenn(f0, h0, W)    (a 16-bit copy, then 8 lanes at once)
    for j: s3[j] = max(s2[j] + f0[j], 0);   narrown(o, s3, W)
    for j: out[i(j)] = o[j]

The rounding before the relu is left out (compiler/tir/half_rounding.py): the narrowing after
it rounds the same value to the same bits.

Each array is W floats, which gcc keeps in vector registers: the residual convolution of
float16 ResNet-50 (1x1 64->256 + add) ran in 0.41x the time of the one-loop form (one thread,
minimum of interleaved profiles), bit for bit the same output, and every float16 convolution
of the model at its float32 speed. Values are the same as the one loop's: each stage computes
the same float32 operations in the same order, and the helpers round exactly as the scalar
ones do.

Only loops whose value has no select (a staged load would then be read where the loop's `?:`
skipped it) and no extern call are staged; any other loop is returned as it is, so a float32
kernel's loop nest does not change.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from compiler.tir import expr as te
from compiler.tir.analysis import expr_children, free_vars, post_order, rebuild_expr, substitute
from compiler.tir.compute import KernelContext
from compiler.tir.half_rounding import drop_clamped_roundings, rounded_value
from compiler.tir.stmt import Allocate, Evaluate, For, IfThenElse, Stmt, Store, seq

F32, F16 = "float32", "float16"
ROUND, WIDEN, NARROW = "relaycc_halfroundn_f32", "relaycc_halfwidenn_f32", "relaycc_halfnarrown_f32"
WIDEN_AT = "relaycc_halfwidenat_f32"  # a run of a buffer widened into another: (d, dk, s, sk, n)


def _half_load(e: te.PrimExpr) -> te.Load | None:
    if isinstance(e, te.Cast) and e.dtype == F32 and isinstance(e.value, te.Load) and e.value.dtype == F16:
        return e.value
    return None


def _parts(loop: For) -> tuple[Store, te.PrimExpr | None, int] | None:
    """(the store, the condition around it, the extent) of a loop this module stages."""
    begin, extent = te.as_expr(loop.begin), te.as_expr(loop.extent)
    if not (isinstance(begin, te.Const) and begin.value == 0 and isinstance(extent, te.Const) and extent.value > 0):
        return None
    body, cond = loop.body, None
    if isinstance(body, IfThenElse) and body.else_case is None:
        body, cond = body.then_case, body.cond
        if any(v is loop.var for v in free_vars(cond)):
            return None
    if not isinstance(body, Store):
        return None
    nodes = list(post_order(te.as_expr(body.value)))
    if any(isinstance(e, (te.Select, te.CallExtern)) for e in nodes):
        return None
    converts = any(rounded_value(e) is not None or _half_load(e) is not None for e in nodes)
    if not (converts or (body.buffer.dtype == F16 and _narrowed(body.value) is not None)):
        return None
    return body, cond, int(extent.value)


def _narrowed(value: te.PrimExpr) -> te.PrimExpr | None:
    if isinstance(value, te.Cast) and value.dtype == F16 and value.value.dtype == F32:
        return value.value
    return None


def stage_half_conversions(ctx: KernelContext, loop: For) -> Stmt:
    """`loop` (`for j: store`, or `for j: if (cond) store` with `cond` free of j) as the stages
    of the module docstring, or `loop` itself when it has no float16 conversion to stage."""
    parts = _parts(loop)
    if parts is None:
        return loop
    store, cond, width = parts
    staged = _Stages(ctx, loop, width)
    root = drop_clamped_roundings(te.as_expr(store.value))
    narrowed = _narrowed(root) if store.buffer.dtype == F16 else None
    value = staged.rewrite(narrowed if narrowed is not None else root)
    if narrowed is None:
        staged.loop(lambda j: Store(store.buffer, staged.at(store.indices, j), staged.at_expr(value, j)))
    else:
        source = staged.array(value)
        out = staged.local(F16)
        staged.stmts.append(Evaluate(te.CallExtern(NARROW, (out, source, te.const(width, "int64")), "void")))
        staged.loop(lambda j: Store(store.buffer, staged.at(store.indices, j), out[j]))
    body: Stmt = seq(*staged.stmts)
    for buffer in reversed(staged.buffers):
        body = Allocate(buffer, body)
    return IfThenElse(cond, body) if cond is not None else body


class _Stages:
    """The statements and local arrays of one staged loop, built while its value is rewritten."""

    def __init__(self, ctx: KernelContext, loop: For, width: int):
        self.ctx, self.var, self.kind, self.width = ctx, loop.var, loop.kind, width
        self.stmts: list[Stmt] = []
        self.buffers: list[te.Buffer] = []
        self.exact: set[te.Buffer] = set()  # arrays that hold float16 values

    def local(self, dtype: str) -> te.Buffer:
        name = self.ctx.fresh("half_row" if dtype == F16 else "row")
        buffer = te.Buffer(name, (self.width,), dtype, scope="local")
        self.buffers.append(buffer)
        return buffer

    def loop(self, body: Callable[[te.Var], Stmt]) -> None:
        j = te.Var(self.ctx.fresh("j"), self.var.dtype)
        zero, width = te.const(0, self.var.dtype), te.const(self.width, self.var.dtype)
        self.stmts.append(For(j, zero, width, body(j), self.kind))

    def at(self, indices: tuple[te.PrimExpr, ...], j: te.Var) -> tuple[te.PrimExpr, ...]:
        return tuple(self.at_expr(te.as_expr(i), j) for i in indices)

    def at_expr(self, e: te.PrimExpr, j: te.Var) -> te.PrimExpr:
        return substitute(e, {self.var: j})  # type: ignore[return-value]  # an expression in, one out

    def array(self, value: te.PrimExpr) -> te.Buffer:
        """A float32 array holding `value` (in terms of the loop's variable) at every j."""
        if isinstance(value, te.Load) and value.buffer in self.buffers and value.buffer.dtype == F32:
            return value.buffer  # already one
        row = self.local(F32)
        self.loop(lambda j: Store(row, (j,), self.at_expr(value, j)))
        return row

    def rewrite(self, root: te.PrimExpr) -> te.PrimExpr:
        """`root` with every float16 rounding and load replaced by a read of a staged array."""
        done: dict[int, te.PrimExpr] = {}
        size = te.const(self.width, "int64")
        for e in post_order(root):
            kids = tuple(done[id(k)] for k in expr_children(e))
            inner = rounded_value(e)
            if inner is not None:
                value = done[id(inner)]
                if self._exact(value):
                    done[id(e)] = value  # nothing to round, as the C emitter skips it too
                    continue
                row = self.array(value)
                self.stmts.append(Evaluate(te.CallExtern(ROUND, (row, size), "void")))
            elif _half_load(e) is not None:
                halves = self.local(F16)
                read = kids[0]  # the load, its indices rewritten
                self.loop(lambda j, read=read: Store(halves, (j,), self.at_expr(read, j)))
                row = self.local(F32)
                self.stmts.append(Evaluate(te.CallExtern(WIDEN, (row, halves, size), "void")))
            else:
                done[id(e)] = rebuild_expr(e, kids) if any(a is not b for a, b in zip(kids, expr_children(e))) else e
                continue
            self.exact.add(row)
            done[id(e)] = row[self.var]
        return done[id(root)]

    def _exact(self, e: te.PrimExpr) -> bool:
        """Whether float32 `e` certainly holds a float16 value: a staged rounding or load, a
        constant that is one, min/max of such (what compiler/backend/c_expr.py skips)."""
        if isinstance(e, te.Load):
            return e.buffer in self.exact
        if isinstance(e, te.Const):
            value = float(e.value)
            with np.errstate(over="ignore"):
                return value != value or float(np.float16(value)) == value
        if isinstance(e, te.Binary) and e.op in ("min", "max"):
            return self._exact(e.a) and self._exact(e.b)
        return False

