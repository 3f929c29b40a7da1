"""ONNX reductions: ReduceSum/Mean/Max/Min/Prod and the composed ones (L1, L2, LogSum,
LogSumExp, SumSquare), ArgMax/ArgMin.

Axes are an attribute before opset 18 (ReduceSum: 13) and an optional input after; no axes
reduce everything unless `noop_with_empty_axes` says to pass the data through."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from compiler.frontend.onnx.context import Converted, NodeContext, normalize_axis
from compiler.frontend.onnx.registry import converter
from compiler.ir.expr import Expr


def _axes(ctx: NodeContext) -> list[int] | None:
    """The axes to reduce (normalized), or None for all of them; [] means pass through."""
    if ctx.has_input(1):
        values = [int(v) for v in np.asarray(ctx.const_input(1, "axes")).reshape(-1)]
    else:
        values = ctx.ints_attr("axes") or []
    if not values:
        return [] if ctx.int_attr("noop_with_empty_axes", 0) else None
    rank = ctx.rank(0)
    return sorted(normalize_axis(a, rank) for a in values)


def _reduction(op_type: str, since: tuple[int, ...], our_op: str,
               before: Callable[[NodeContext, Expr], Expr] | None = None,
               after: Callable[[NodeContext, Expr], Expr] | None = None) -> None:
    def convert(ctx: NodeContext) -> Converted:
        x = ctx.input(0)
        if before is not None:
            x = before(ctx, x)
        axes = _axes(ctx)
        if axes == []:
            return x
        keepdims = bool(ctx.int_attr("keepdims", 1))
        out = ctx.op(our_op, x, axis=None if axes is None else tuple(axes), keepdims=keepdims)
        return after(ctx, out) if after is not None else out

    converter(op_type, since)(convert)


def _square(ctx: NodeContext, x: Expr) -> Expr:
    return ctx.op("multiply", x, x)


_reduction("ReduceSum", (13,), "sum")
_reduction("ReduceMean", (13, 18), "mean")
_reduction("ReduceMax", (13, 18, 20), "max")
_reduction("ReduceMin", (13, 18, 20), "min")
_reduction("ReduceProd", (13, 18), "prod")
_reduction("ReduceSumSquare", (13, 18), "sum", before=_square)
_reduction("ReduceL1", (13, 18), "sum", before=lambda ctx, x: ctx.op("abs", x))
_reduction("ReduceL2", (13, 18), "sum", before=_square, after=lambda ctx, x: ctx.op("sqrt", x))
_reduction("ReduceLogSum", (13, 18, 28), "sum", after=lambda ctx, x: ctx.op("log", x))


@converter("ReduceLogSumExp", (13, 18, 28))
def _reduce_log_sum_exp(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    axes = _axes(ctx)
    if axes == []:
        return x
    keepdims = bool(ctx.int_attr("keepdims", 1))
    axis = None if axes is None else tuple(axes)
    # Shifted by the maximum so exp does not overflow; an all -inf slice stays -inf.
    peak = ctx.op("max", x, axis=axis, keepdims=True)
    finite = ctx.op("where", ctx.op("isinf", peak), ctx.op("zeros_like", peak), peak)
    total = ctx.op("sum", ctx.op("exp", ctx.op("subtract", x, finite)), axis=axis, keepdims=True)
    out = ctx.op("add", ctx.op("log", total), finite)
    if not keepdims:
        out = ctx.op("squeeze", out, axis=axis if axis is not None else tuple(range(ctx.rank(0))))
    return out


def _arg(op_type: str, our_op: str) -> None:
    def convert(ctx: NodeContext) -> Converted:
        axis = normalize_axis(ctx.int_attr("axis", 0), ctx.rank(0))
        out = ctx.op(our_op, ctx.input(0), axis=(axis,), keepdims=bool(ctx.int_attr("keepdims", 1)),
                     select_last_index=bool(ctx.int_attr("select_last_index", 0)))
        return ctx.op("cast", out, dtype="int64")

    converter(op_type, (13,))(convert)


_arg("ArgMax", "argmax")
_arg("ArgMin", "argmin")


@converter("TopK", (11, 24))
def _topk(ctx: NodeContext) -> Converted:
    k = int(np.asarray(ctx.const_input(1, "k")).reshape(-1)[0])
    axis = normalize_axis(ctx.int_attr("axis", -1), ctx.rank(0))
    out = ctx.op("topk", ctx.input(0), k=k, axis=axis, ret_type="both",
                 is_ascend=not ctx.int_attr("largest", 1), dtype="int64")
    return [ctx.item(out, 0), ctx.item(out, 1)]


@converter("Hardmax", (13,))
def _hardmax(ctx: NodeContext) -> Converted:
    axis = normalize_axis(ctx.int_attr("axis", -1), ctx.rank(0))
    depth = ctx.static_shape(0)[axis]
    dtype = ctx.dtype(0)
    index = ctx.op("argmax", ctx.input(0), axis=(axis,), keepdims=False)
    return ctx.op("one_hot", index, ctx.scalar(1, dtype), ctx.scalar(0, dtype), depth=depth, axis=axis, dtype=dtype)


@converter("CumProd", (26,))
def _cumprod(ctx: NodeContext) -> Converted:
    axis = normalize_axis(int(np.asarray(ctx.const_input(1, "axis")).reshape(-1)[0]), ctx.rank(0))
    x = ctx.input(0)
    reverse = bool(ctx.int_attr("reverse", 0))
    if reverse:
        x = ctx.op("reverse", x, axis=axis)
    out = ctx.op("cumprod", x, axis=axis, exclusive=bool(ctx.int_attr("exclusive", 0)))
    return ctx.op("reverse", out, axis=axis) if reverse else out
