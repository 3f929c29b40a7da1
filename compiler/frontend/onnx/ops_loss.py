"""ONNX losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (the log-softmax followed
by the former), with class weights, ignore_index and the three reductions."""

from __future__ import annotations

from compiler.frontend.onnx.context import Converted, NodeContext
from compiler.frontend.onnx.registry import converter
from compiler.ir.expr import Expr


def _nll(ctx: NodeContext, log_prob: Expr, target: Expr, weight: Expr | None) -> Expr:
    dtype = log_prob.checked_type.dtype  # type: ignore[attr-defined]  # a tensor
    tdtype = target.checked_type.dtype  # type: ignore[attr-defined]
    reduction = ctx.str_attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ctx.unsupported(f"reduction {reduction!r}")
    ignore = ctx.attr("ignore_index")
    keep = None
    safe = target
    if ignore is not None:
        keep = ctx.op("not_equal", target, ctx.scalar(int(ignore), tdtype))  # type: ignore[call-overload]
        # An ignored target may be out of range: read class 0 there, then weigh it 0.
        safe = ctx.op("where", keep, target, ctx.scalar(0, tdtype))
    picked = ctx.op("squeeze", ctx.op("gather", log_prob, ctx.op("expand_dims", safe, axis=1), axis=1), axis=(1,))
    loss = ctx.op("negative", picked)
    w = ctx.op("take", weight, safe, axis=0, mode="clip") if weight is not None else None
    if keep is not None:
        mask = ctx.op("cast", keep, dtype=dtype)
        w = ctx.op("multiply", w, mask) if w is not None else mask
    if w is not None:
        loss = ctx.op("multiply", loss, w)
    if reduction == "none":
        return loss
    total = ctx.op("sum", loss, axis=None, keepdims=False)
    if reduction == "sum":
        return total
    if w is None:
        return ctx.op("mean", loss, axis=None, keepdims=False)
    return ctx.op("divide", total, ctx.op("sum", w, axis=None, keepdims=False))


@converter("NegativeLogLikelihoodLoss", (13, 22))
def _negative_log_likelihood(ctx: NodeContext) -> Converted:
    weight = ctx.input(2) if ctx.has_input(2) else None
    return _nll(ctx, ctx.input(0), ctx.input(1), weight)


@converter("SoftmaxCrossEntropyLoss", (13,))
def _softmax_cross_entropy(ctx: NodeContext) -> Converted:
    log_prob = ctx.op("nn.log_softmax", ctx.input(0), axis=1)
    weight = ctx.input(2) if ctx.has_input(2) else None
    loss = _nll(ctx, log_prob, ctx.input(1), weight)
    return [loss, log_prob] if ctx.num_outputs > 1 else loss
