"""ONNX normalizations: BatchNormalization (inference), LayerNormalization, InstanceNormalization,
GroupNormalization, RMSNormalization, MeanVarianceNormalization, LpNormalization, LRN.

Where ours has the op (batch, layer, instance, group norm, lrn) it is used; the others are
their ONNX definitions written with reductions."""

from __future__ import annotations

from compiler.frontend.onnx.context import Converted, NodeContext, normalize_axis
from compiler.frontend.onnx.registry import converter


@converter("BatchNormalization", (9, 14, 15))
def _batch_norm(ctx: NodeContext) -> Converted:
    if ctx.int_attr("training_mode", 0) or ctx.num_outputs > 1:
        raise ctx.unsupported("training mode (running statistics as outputs) is not supported")
    out = ctx.op("nn.batch_norm", *(ctx.input(i) for i in range(5)), axis=1,
                 epsilon=ctx.float_attr("epsilon", 1e-5))
    return ctx.item(out, 0)


@converter("InstanceNormalization", (6, 22))
def _instance_norm(ctx: NodeContext) -> Converted:
    return ctx.op("nn.instance_norm", ctx.input(0), ctx.input(1), ctx.input(2), axis=1,
                  epsilon=ctx.float_attr("epsilon", 1e-5))


@converter("LayerNormalization", (17,))
def _layer_norm(ctx: NodeContext) -> Converted:
    rank = ctx.rank(0)
    axis = normalize_axis(ctx.int_attr("axis", -1), rank)
    epsilon = ctx.float_attr("epsilon", 1e-5)
    x, scale = ctx.input(0), ctx.input(1)
    dtype = ctx.dtype(0)
    if axis == rank - 1 and ctx.num_outputs == 1 and ctx.rank(1) == 1:
        bias = ctx.input(2) if ctx.has_input(2) else ctx.op("zeros_like", scale)
        return ctx.op("nn.layer_norm", x, scale, bias, axis=-1, epsilon=epsilon, center=ctx.has_input(2))
    # Over several trailing axes (or with the statistics as outputs): the definition.
    axes = tuple(range(axis, rank))
    mean = ctx.op("mean", x, axis=axes, keepdims=True)
    centered = ctx.op("subtract", x, mean)
    variance = ctx.op("mean", ctx.op("multiply", centered, centered), axis=axes, keepdims=True)
    inv_std = ctx.op("rsqrt", ctx.op("add", variance, ctx.scalar(epsilon, dtype)))
    out = ctx.op("multiply", ctx.op("multiply", centered, inv_std), scale)
    if ctx.has_input(2):
        out = ctx.op("add", out, ctx.input(2))
    return [out, mean, inv_std][: max(ctx.num_outputs, 1)]


@converter("LRN", (13,))
def _lrn(ctx: NodeContext) -> Converted:
    return ctx.op("nn.lrn", ctx.input(0), size=ctx.int_attr("size", 5), axis=1,
                  alpha=ctx.float_attr("alpha", 1e-4), beta=ctx.float_attr("beta", 0.75),
                  bias=ctx.float_attr("bias", 1.0))


@converter("GroupNormalization", (18, 21))
def _group_norm(ctx: NodeContext) -> Converted:
    groups = ctx.int_attr("num_groups", 1)
    channels = ctx.static_shape(0)[1]
    scale, bias = ctx.input(1), ctx.input(2)
    if ctx.since == 18 and groups != channels:
        # Opset 18 gives one scale and bias per group; ours are per channel.
        scale = ctx.op("repeat", scale, repeats=channels // groups, axis=0)
        bias = ctx.op("repeat", bias, repeats=channels // groups, axis=0)
    return ctx.op("nn.group_norm", ctx.input(0), scale, bias, num_groups=groups, axis=1,
                  epsilon=ctx.float_attr("epsilon", 1e-5))


@converter("RMSNormalization", (23,))
def _rms_norm(ctx: NodeContext) -> Converted:
    rank = ctx.rank(0)
    axes = tuple(range(normalize_axis(ctx.int_attr("axis", -1), rank), rank))
    x = ctx.input(0)
    dtype = ctx.dtype(0)
    mean_square = ctx.op("mean", ctx.op("multiply", x, x), axis=axes, keepdims=True)
    inv = ctx.op("rsqrt", ctx.op("add", mean_square, ctx.scalar(ctx.float_attr("epsilon", 1e-5), dtype)))
    return ctx.op("multiply", ctx.op("multiply", x, inv), ctx.input(1))


@converter("MeanVarianceNormalization", (13,))
def _mean_variance_norm(ctx: NodeContext) -> Converted:
    rank = ctx.rank(0)
    axes = tuple(sorted(normalize_axis(a, rank) for a in (ctx.ints_attr("axes") or [0, 2, 3])))
    x = ctx.input(0)
    dtype = ctx.dtype(0)
    mean = ctx.op("mean", x, axis=axes, keepdims=True)
    variance = ctx.op("subtract", ctx.op("mean", ctx.op("multiply", x, x), axis=axes, keepdims=True),
                      ctx.op("multiply", mean, mean))
    std = ctx.op("add", ctx.op("sqrt", variance), ctx.scalar(1e-9, dtype))
    return ctx.op("divide", ctx.op("subtract", x, mean), std)


@converter("LpNormalization", (1, 22))
def _lp_norm(ctx: NodeContext) -> Converted:
    axis = normalize_axis(ctx.int_attr("axis", -1), ctx.rank(0))
    p = ctx.int_attr("p", 2)
    x = ctx.input(0)
    dtype = ctx.dtype(0)
    if p == 1:
        norm = ctx.op("sum", ctx.op("abs", x), axis=(axis,), keepdims=True)
    elif p == 2:
        norm = ctx.op("sqrt", ctx.op("sum", ctx.op("multiply", x, x), axis=(axis,), keepdims=True))
    else:
        raise ctx.unsupported(f"p={p} (1 or 2)")
    zero = ctx.scalar(0, dtype)
    # A zero norm gives 0, not NaN.
    safe = ctx.op("where", ctx.op("equal", norm, zero), ctx.scalar(1, dtype), norm)
    return ctx.op("where", ctx.op("equal", norm, zero), zero, ctx.op("divide", x, safe))
