"""Loops of the 1-D and 3-D window pools and of the adaptive pools (any number of spatial dims).

The window semantics are those of kernels/pool.py (which keeps its tiled 2-D nest): positions
outside the input are skipped, max pooling starts from the dtype's lowest value, an average
divides by the covered input positions (or, with `count_include_pad`, the positions inside the
padded extent), never by less than 1, and integer averages accumulate in 64 bits and truncate.
An adaptive window along an axis of `size` inputs and `out` outputs is
[floor(i*size/out), ceil((i+1)*size/out)), TVM's rule, and is never empty.

Each output element is one iteration of a flat (parallel when large) loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compiler.ops.kernels.common import unflatten
from compiler.ops.kernels.pool import _kind_of_loop, accumulator_dtype, at, average_expr, merged_dims
from compiler.ops.layout import Layout
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext
from compiler.tir.stmt import Allocate, For, IfThenElse, LetStmt, Stmt, Store, seq


@dataclass(frozen=True)
class WindowND:
    """Layouts (N or C may be split into blocks); per spatial axis the window, stride, dilation
    and the padding before and after."""

    in_layout: Layout
    out_layout: Layout
    pool_size: tuple[int, ...]
    strides: tuple[int, ...]
    dilation: tuple[int, ...]
    pad_before: tuple[int, ...]
    pad_after: tuple[int, ...]


def _let_all(names: Sequence[te.Var], values: Sequence[te.PrimExpr], body: Stmt) -> Stmt:
    for var, value in reversed(list(zip(names, values))):
        body = LetStmt(var, value, body)
    return body


def _output_loop(
    ctx: KernelContext, out_dims: tuple[int, ...], work_per_output: int,
    body_of: Callable[[list[te.Var]], Stmt],
) -> Stmt:
    """A flat loop over every output element in canonical order; `body_of(coords)` builds the
    body from the bound coordinate variables (N, C, spatial...)."""
    total = 1
    for d in out_dims:
        total *= d
    t = ctx.var("o")
    coords = [ctx.var(name) for name in ["n", "c"] + [f"y{k}" for k in range(len(out_dims) - 2)]]
    body = body_of(coords)
    loop_kind = _kind_of_loop(ctx, total, total * work_per_output)
    return For(t, te.const(0), te.const(total), _let_all(coords, unflatten(t, out_dims), body), loop_kind)


def _store(out: te.Buffer, out_layout: Layout, epilogue: Epilogue, coords: Sequence[te.PrimExpr],
           value: te.PrimExpr) -> Stmt:
    idx = at(out_layout, tuple(coords))
    return Store(out, idx, te.cast(out.dtype, epilogue(te.cast(out.dtype, value), idx)))


def pool_nd_loops(
    ctx: KernelContext,
    data: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    window: WindowND,
    kind: str,
    lowest: float | int,
    count_include_pad: bool = False,
) -> Stmt:
    """Windowed max ("max", from `lowest`) or average ("avg") pooling."""
    in_dims = merged_dims(data, window.in_layout)
    out_dims = merged_dims(out, window.out_layout)
    spatial = len(window.pool_size)
    acc_dtype = accumulator_dtype(data.dtype, kind)
    zero = te.const(0)
    taps = 1
    for k in window.pool_size:
        taps *= k

    def body_of(coords: list[te.Var]) -> Stmt:
        acc = te.Buffer(ctx.fresh("acc"), (1,), acc_dtype, scope="local")
        inputs = [ctx.var(f"i{k}") for k in range(spatial)]
        value = te.cast(acc_dtype, data[at(window.in_layout, tuple(coords[:2]) + tuple(inputs))])
        combined = te.maximum(acc[zero], value) if kind == "max" else acc[zero] + value
        nest: Stmt = Store(acc, (zero,), combined)
        for k in reversed(range(spatial)):
            tap = ctx.var(f"k{k}")
            start = coords[2 + k] * window.strides[k] - window.pad_before[k] + tap * window.dilation[k]
            inside = te.logical_and(inputs[k] >= 0, inputs[k] < in_dims[2 + k])
            nest = For(tap, zero, te.const(window.pool_size[k]), LetStmt(inputs[k], start, IfThenElse(inside, nest)))
        init = Store(acc, (zero,), te.const(lowest if kind == "max" else 0, acc_dtype))
        if kind == "max":
            return Allocate(acc, seq(init, nest, _store(out, window.out_layout, epilogue, coords, acc[zero])))
        count = te.Buffer(ctx.fresh("count"), (spatial,), "int32", scope="local")
        counting: list[Stmt] = []
        divisor: te.PrimExpr = te.const(1)
        for k in range(spatial):
            lo, hi = (-window.pad_before[k], in_dims[2 + k] + window.pad_after[k]) if count_include_pad \
                else (0, in_dims[2 + k])
            tap = ctx.var(f"k{k}")
            pos = coords[2 + k] * window.strides[k] - window.pad_before[k] + tap * window.dilation[k]
            slot = te.const(k)
            counting += [
                Store(count, (slot,), zero),
                For(tap, zero, te.const(window.pool_size[k]), Store(count, (slot,), count[slot] + te.cast(
                    "int32", te.logical_and(pos >= lo, pos < hi)))),
            ]
            divisor = divisor * count[slot]
        result = average_expr(acc[zero], divisor, out.dtype)
        store = _store(out, window.out_layout, epilogue, coords, result)
        return Allocate(acc, Allocate(count, seq(*counting, init, nest, store)))

    return _output_loop(ctx, out_dims, taps, body_of)


def adaptive_pool_loops(
    ctx: KernelContext,
    data: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    in_layout: Layout,
    out_layout: Layout,
    kind: str,
    lowest: float | int,
) -> Stmt:
    """Adaptive max or average pooling over every spatial axis."""
    in_dims = merged_dims(data, in_layout)
    out_dims = merged_dims(out, out_layout)
    spatial = len(in_dims) - 2
    acc_dtype = accumulator_dtype(data.dtype, kind)
    zero = te.const(0)
    # The largest window along each axis bounds the work per output.
    work = 1
    for size, n_out in zip(in_dims[2:], out_dims[2:]):
        work *= -(-size // n_out) + 1

    def body_of(coords: list[te.Var]) -> Stmt:
        acc = te.Buffer(ctx.fresh("acc"), (1,), acc_dtype, scope="local")
        inputs = [ctx.var(f"i{k}") for k in range(spatial)]
        starts = [ctx.var(f"start{k}") for k in range(spatial)]
        ends = [ctx.var(f"end{k}") for k in range(spatial)]
        bounds: list[te.PrimExpr] = []
        for k in range(spatial):
            size, n_out, o = in_dims[2 + k], out_dims[2 + k], coords[2 + k]
            bounds += [(o * size) // n_out, ((o + 1) * size + (n_out - 1)) // n_out]
        value = te.cast(acc_dtype, data[at(in_layout, tuple(coords[:2]) + tuple(inputs))])
        combined = te.maximum(acc[zero], value) if kind == "max" else acc[zero] + value
        nest: Stmt = Store(acc, (zero,), combined)
        for k in reversed(range(spatial)):
            nest = For(inputs[k], starts[k], ends[k] - starts[k], nest)
        init = Store(acc, (zero,), te.const(lowest if kind == "max" else 0, acc_dtype))
        result: te.PrimExpr = acc[zero]
        if kind == "avg":
            count: te.PrimExpr = te.const(1)
            for k in range(spatial):
                count = count * (ends[k] - starts[k])
            result = average_expr(acc[zero], count, out.dtype)
        body = Allocate(acc, seq(init, nest, _store(out, out_layout, epilogue, coords, result)))
        names = [v for pair in zip(starts, ends) for v in pair]
        return _let_all(names, bounds, body)

    return _output_loop(ctx, out_dims, work, body_of)
