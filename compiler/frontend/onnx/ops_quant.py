"""ONNX QuantizeLinear / DequantizeLinear, per tensor or per axis, written with arithmetic:
y = saturate(round_half_even(x / scale) + zero_point), x = (y - zero_point) * scale."""

from __future__ import annotations

import numpy as np

from compiler.frontend.onnx.context import Converted, NodeContext, normalize_axis
from compiler.frontend.onnx.dtypes import dtype_of_code
from compiler.frontend.onnx.registry import converter
from compiler.ir.expr import Expr

_VERSIONS = (13, 19, 21, 23, 24, 25, 28)


def _along_axis(ctx: NodeContext, vector: Expr, rank: int) -> Expr:
    """A per-axis scale or zero point shaped to broadcast against the data."""
    shape = vector.checked_type.shape  # type: ignore[attr-defined]  # a tensor
    if len(shape) == 0 or rank <= 1:
        return vector
    if ctx.int_attr("block_size", 0):
        raise ctx.unsupported("blocked quantization (block_size)")
    axis = normalize_axis(ctx.int_attr("axis", 1), rank)
    trailing = rank - axis - 1
    return ctx.op("expand_dims", vector, axis=1, num_newaxis=trailing) if trailing else vector


def _round_half_even(ctx: NodeContext, x: Expr, dtype: str) -> Expr:
    up = ctx.op("floor", ctx.op("add", x, ctx.scalar(0.5, dtype)))
    tie = ctx.op("equal", ctx.op("subtract", up, x), ctx.scalar(0.5, dtype))
    odd = ctx.op("equal", ctx.op("floor_mod", up, ctx.scalar(2, dtype)), ctx.scalar(1, dtype))
    return ctx.op("where", ctx.op("logical_and", tie, odd), ctx.op("subtract", up, ctx.scalar(1, dtype)), up)


@converter("QuantizeLinear", _VERSIONS)
def _quantize(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    rank = ctx.rank(0)
    dtype = ctx.dtype(0)
    if ctx.has_input(2):
        out_dtype = ctx.dtype(2)
    elif ctx.int_attr("output_dtype", 0):
        out_dtype = dtype_of_code(ctx.int_attr("output_dtype", 0), f"QuantizeLinear node {ctx.name!r}")
    else:
        out_dtype = "uint8"
    if out_dtype not in ("uint8", "int8", "uint16", "int16"):
        raise ctx.unsupported(f"quantizing to {out_dtype}")
    scale = _along_axis(ctx, ctx.input(1), rank)
    if ctx.dtype(1) != dtype:
        scale = ctx.op("cast", scale, dtype=dtype)
    q = _round_half_even(ctx, ctx.op("divide", x, scale), dtype)
    if ctx.has_input(2):
        q = ctx.op("add", q, ctx.op("cast", _along_axis(ctx, ctx.input(2), rank), dtype=dtype))
    info = np.iinfo(out_dtype)
    return ctx.op("cast", ctx.op("clip", q, a_min=float(info.min), a_max=float(info.max)), dtype=out_dtype)


@converter("DequantizeLinear", _VERSIONS)
def _dequantize(ctx: NodeContext) -> Converted:
    rank = ctx.rank(0)
    out_dtype = ctx.dtype(1)
    x = ctx.op("cast", ctx.input(0), dtype=out_dtype)
    if ctx.has_input(2):
        x = ctx.op("subtract", x, ctx.op("cast", _along_axis(ctx, ctx.input(2), rank), dtype=out_dtype))
    return ctx.op("multiply", x, _along_axis(ctx, ctx.input(1), rank))


@converter("QLinearMatMul", (10, 21))
def _qlinear_matmul(ctx: NodeContext) -> Converted:
    # (a - a_zp) @ (b - b_zp) exactly in int32 (float32 holds the products of 8-bit values
    # and their sums for these sizes only approximately), then requantized as QuantizeLinear.
    def centered(value: int, zero: int) -> Expr:
        x = ctx.op("cast", ctx.input(value), dtype="int32")
        return ctx.op("subtract", x, ctx.op("cast", ctx.input(zero), dtype="int32"))

    a, b = centered(0, 2), centered(3, 5)
    if ctx.rank(0) == ctx.rank(3) == 2:
        acc = ctx.op("nn.dense", a, ctx.op("transpose", b, axes=(1, 0)), units=ctx.static_shape(3)[1],
                     out_dtype="int32")
    elif ctx.rank(0) == ctx.rank(3) == 3 and ctx.static_shape(0)[0] == ctx.static_shape(3)[0]:
        acc = ctx.op("nn.batch_matmul", a, b, transpose_a=False, transpose_b=False, out_dtype="int32")
    else:
        raise ctx.unsupported("QLinearMatMul of other than 2-D or equally batched 3-D operands")
    scale = ctx.op("divide", ctx.op("multiply", ctx.input(1), ctx.input(4)), ctx.input(6))
    real = ctx.op("multiply", ctx.op("cast", acc, dtype="float32"), ctx.op("cast", scale, dtype="float32"))
    out_dtype = ctx.dtype(7)
    q = ctx.op("add", _round_half_even(ctx, real, "float32"), ctx.op("cast", ctx.input(7), dtype="float32"))
    info = np.iinfo(out_dtype)
    return ctx.op("cast", ctx.op("clip", q, a_min=float(info.min), a_max=float(info.max)), dtype=out_dtype)
