"""ONNX QuantizeLinear / DequantizeLinear, per tensor or per axis, written with arithmetic:
y = saturate(round_half_even(x / scale) + zero_point), x = (y - zero_point) * scale; the
integer products (MatMulInteger, ConvInteger) and the quantized ones (QLinearMatMul,
QLinearConv) on zero-point-centered int32 values, and DynamicQuantizeLinear."""

from __future__ import annotations

import numpy as np

from compiler.frontend.onnx.context import Converted, NodeContext, normalize_axis
from compiler.frontend.onnx.dtypes import dtype_of_code
from compiler.frontend.onnx.ops_nn import convolution
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


def _centered(ctx: NodeContext, value: int, zero: int | None) -> Expr:
    """Input `value` less its zero point (input `zero`, absent meaning 0), in int32: the products
    of 8-bit values and their sums are exact there, not in float32."""
    x = ctx.op("cast", ctx.input(value), dtype="int32")
    if zero is None or not ctx.has_input(zero):
        return x
    return ctx.op("subtract", x, ctx.op("cast", ctx.input(zero), dtype="int32"))


def _int_matmul(ctx: NodeContext, a: Expr, b: Expr, b_index: int) -> Expr:
    if ctx.rank(0) == ctx.rank(b_index) == 2:
        return ctx.op("nn.dense", a, ctx.op("transpose", b, axes=(1, 0)), units=ctx.static_shape(b_index)[1],
                      out_dtype="int32")
    if ctx.rank(0) == ctx.rank(b_index) == 3 and ctx.static_shape(0)[0] == ctx.static_shape(b_index)[0]:
        return ctx.op("nn.batch_matmul", a, b, transpose_a=False, transpose_b=False, out_dtype="int32")
    raise ctx.unsupported(f"{ctx.op_type} of other than 2-D or equally batched 3-D operands")


def _requantize(ctx: NodeContext, acc: Expr, scale: Expr, zero: Expr) -> Expr:
    """An int32 accumulator times a float scale, rounded half to even, plus the zero point,
    saturated to the zero point's type (QuantizeLinear's arithmetic)."""
    real = ctx.op("multiply", ctx.op("cast", acc, dtype="float32"), ctx.op("cast", scale, dtype="float32"))
    out_dtype = zero.checked_type.dtype  # type: ignore[attr-defined]  # a tensor
    q = ctx.op("add", _round_half_even(ctx, real, "float32"), ctx.op("cast", zero, dtype="float32"))
    info = np.iinfo(out_dtype)
    return ctx.op("cast", ctx.op("clip", q, a_min=float(info.min), a_max=float(info.max)), dtype=out_dtype)


@converter("QLinearMatMul", (10, 21))
def _qlinear_matmul(ctx: NodeContext) -> Converted:
    acc = _int_matmul(ctx, _centered(ctx, 0, 2), _centered(ctx, 3, 5), 3)
    scale = ctx.op("divide", ctx.op("multiply", ctx.input(1), ctx.input(4)), ctx.input(6))
    return _requantize(ctx, acc, scale, ctx.input(7))


@converter("MatMulInteger", (10,))
def _matmul_integer(ctx: NodeContext) -> Converted:
    for zero, operand in ((2, 0), (3, 1)):
        if ctx.has_input(zero) and len(ctx.shape(zero)) > 0 and ctx.shape(zero) != (1,):
            raise ctx.unsupported(f"a zero point per row or column (input {zero}, shape {ctx.shape(zero)})")
    return _int_matmul(ctx, _centered(ctx, 0, 2), _centered(ctx, 1, 3), 1)


def _per_channel(ctx: NodeContext, index: int, trailing: int) -> Expr:
    """A scalar, or a vector along output channels followed by `trailing` axes, shaped to
    broadcast (a weight's channels lead, with rank - 1 axes after them; an output's have rank - 2)."""
    value = ctx.input(index)
    if len(ctx.shape(index)) == 1 and trailing:
        return ctx.op("expand_dims", value, axis=1, num_newaxis=trailing)
    return value


def _centered_weight(ctx: NodeContext, weight: int, zero: int) -> Expr:
    w = ctx.op("cast", ctx.input(weight), dtype="int32")
    if not ctx.has_input(zero):
        return w
    return ctx.op("subtract", w, ctx.op("cast", _per_channel(ctx, zero, ctx.rank(weight) - 1), dtype="int32"))


@converter("ConvInteger", (10,))
def _conv_integer(ctx: NodeContext) -> Converted:
    # Zero padding of the centered input is padding with the zero point, as ONNX pads.
    return convolution(ctx, _centered(ctx, 0, 2), _centered_weight(ctx, 1, 3), ctx.static_shape(1),
                       out_dtype="int32")


@converter("QLinearConv", (10,))
def _qlinear_conv(ctx: NodeContext) -> Converted:
    acc = convolution(ctx, _centered(ctx, 0, 2), _centered_weight(ctx, 3, 5), ctx.static_shape(3),
                      out_dtype="int32")
    if ctx.has_input(8):
        acc = ctx.op("nn.bias_add", acc, ctx.input(8), axis=1)
    w_scale = _per_channel(ctx, 4, ctx.rank(0) - 2)
    scale = ctx.op("divide", ctx.op("multiply", ctx.input(1), w_scale), ctx.input(6))
    return _requantize(ctx, acc, scale, ctx.input(7))


@converter("DynamicQuantizeLinear", (11,))
def _dynamic_quantize(ctx: NodeContext) -> Converted:
    # The range always takes in 0, so that 0 is exactly representable; uint8 over it.
    x = ctx.input(0)
    zero = ctx.scalar(0.0, "float32")
    low = ctx.op("minimum", ctx.op("min", x), zero)
    high = ctx.op("maximum", ctx.op("max", x), zero)
    scale = ctx.op("divide", ctx.op("subtract", high, low), ctx.scalar(255.0, "float32"))
    zero_point = ctx.op("clip", _round_half_even(ctx, ctx.op("negative", ctx.op("divide", low, scale)), "float32"),
                        a_min=0.0, a_max=255.0)
    q = ctx.op("add", _round_half_even(ctx, ctx.op("divide", x, scale), "float32"), zero_point)
    y = ctx.op("cast", ctx.op("clip", q, a_min=0.0, a_max=255.0), dtype="uint8")
    return [y, scale, ctx.op("cast", zero_point, dtype="uint8")]
