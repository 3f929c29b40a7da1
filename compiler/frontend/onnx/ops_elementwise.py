"""Elementwise and broadcasting ONNX ops: arithmetic, comparisons, logic, math functions,
activations, Cast, Clip, Where, and the ops that pass a value through (Identity, Dropout).

ONNX broadcasting is numpy's, as our broadcast ops are, so binary ops map one to one."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from compiler.frontend.onnx.context import Converted, NodeContext
from compiler.frontend.onnx.dtypes import dtype_of_code
from compiler.frontend.onnx.registry import converter
from compiler.ir.expr import Expr

_UNARY = {
    # op type: (our op, schema versions)
    "Relu": ("nn.relu", (13, 14)),
    "Sigmoid": ("sigmoid", (13,)),
    "Tanh": ("tanh", (13,)),
    "Erf": ("erf", (13,)),
    "Sqrt": ("sqrt", (13,)),
    "Exp": ("exp", (13,)),
    "Log": ("log", (13,)),
    "Neg": ("negative", (13,)),
    "Abs": ("abs", (13,)),
    "Floor": ("floor", (13,)),
    "Ceil": ("ceil", (13,)),
    "Sign": ("sign", (13,)),
    "Not": ("logical_not", (1,)),
    "Sin": ("sin", (7, 22)),
    "Cos": ("cos", (7, 22)),
    "Tan": ("tan", (7, 22)),
    "Asin": ("asin", (7, 22)),
    "Acos": ("acos", (7, 22)),
    "Atan": ("atan", (7, 22)),
    "Sinh": ("sinh", (9, 22)),
    "Cosh": ("cosh", (9, 22)),
    "Asinh": ("asinh", (9, 22)),
    "Acosh": ("acosh", (9, 22)),
    "Atanh": ("atanh", (9, 22)),
    "IsNaN": ("isnan", (13, 20)),
}

_BINARY = {
    "Add": ("add", (13, 14)),
    "Sub": ("subtract", (13, 14)),
    "Mul": ("multiply", (13, 14)),
    "Div": ("divide", (13, 14)),
    "Equal": ("equal", (13, 19)),
    "Less": ("less", (13,)),
    "Greater": ("greater", (13,)),
    "LessOrEqual": ("less_equal", (12, 16)),
    "GreaterOrEqual": ("greater_equal", (12, 16)),
    "And": ("logical_and", (7,)),
    "Or": ("logical_or", (7,)),
    "Xor": ("logical_xor", (7,)),
}


def _unary(op_type: str, our_op: str, since: tuple[int, ...]) -> None:
    converter(op_type, since)(lambda ctx: ctx.op(our_op, ctx.input(0)))


def _binary(op_type: str, our_op: str, since: tuple[int, ...]) -> None:
    converter(op_type, since)(lambda ctx: ctx.op(our_op, ctx.input(0), ctx.input(1)))


for _op_type, (_ours, _since) in _UNARY.items():
    _unary(_op_type, _ours, _since)
for _op_type, (_ours, _since) in _BINARY.items():
    _binary(_op_type, _ours, _since)


def _variadic(op_type: str, our_op: str, finish: Callable[[NodeContext, Expr], Expr] | None = None) -> None:
    def convert(ctx: NodeContext) -> Converted:
        result = ctx.input(0)
        for index in range(1, len(ctx.inputs)):
            result = ctx.op(our_op, result, ctx.input(index))
        return finish(ctx, result) if finish is not None else result

    converter(op_type, (13,))(convert)


_variadic("Min", "minimum")
_variadic("Max", "maximum")
_variadic("Sum", "add")
_variadic("Mean", "add", lambda ctx, total: ctx.op("divide", total, ctx.scalar(len(ctx.inputs), ctx.type(0).dtype)))


@converter("Pow", (13, 15))
def _pow(ctx: NodeContext) -> Converted:
    base, exponent = ctx.input(0), ctx.input(1)
    # ONNX lets the exponent's type differ from the base's; the result has the base's.
    if ctx.dtype(1) != ctx.dtype(0):
        exponent = ctx.op("cast", exponent, dtype=ctx.dtype(0))
    return ctx.op("power", base, exponent)


@converter("Reciprocal", (13,))
def _reciprocal(ctx: NodeContext) -> Converted:
    return ctx.op("divide", ctx.scalar(1, ctx.dtype(0)), ctx.input(0))


@converter("IsInf", (10, 20))
def _isinf(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    pos, neg = ctx.int_attr("detect_positive", 1), ctx.int_attr("detect_negative", 1)
    if pos and neg:
        return ctx.op("isinf", x)
    inf = ctx.scalar(math.inf if pos else -math.inf, ctx.dtype(0))
    if pos or neg:
        return ctx.op("equal", x, inf)
    # Neither sign asked for: false everywhere (no value is both infinite and NaN).
    return ctx.op("logical_and", ctx.op("isinf", x), ctx.op("isnan", x))


@converter("Identity", (13, 14, 16, 19, 21, 23, 24, 25))
def _identity(ctx: NodeContext) -> Converted:
    return ctx.input(0)


@converter("Dropout", (13, 22))
def _dropout(ctx: NodeContext) -> Converted:
    # Inference: the data passes through and the mask (if asked for) is all true. A training
    # mode input that is not a constant false is refused, not ignored, unless the ratio is a
    # constant 0, where training drops nothing either.
    if ctx.has_input(2):
        training = ctx.const_input(2, "training_mode")
        ratio = ctx.value(1) if ctx.has_input(1) else None
        drops_nothing = ratio is not None and float(np.asarray(ratio).reshape(-1)[0]) == 0.0
        if bool(np.asarray(training).reshape(-1)[0]) and not drops_nothing:
            raise ctx.unsupported("training mode (random dropout) is not supported")
    x = ctx.input(0)
    if ctx.num_outputs < 2:
        return x
    mask = ctx.op("ones", shape=ctx.static_shape(0), dtype="bool")
    return [x, mask]


@converter("Cast", (13, 19, 21, 23, 24, 25, 28))
def _cast(ctx: NodeContext) -> Converted:
    dtype = dtype_of_code(ctx.int_attr("to", 1), f"Cast node {ctx.name!r}")
    return ctx.op("cast", ctx.input(0), dtype=dtype)


@converter("BitCast", (26,))
def _bit_cast(ctx: NodeContext) -> Converted:
    dtype = dtype_of_code(ctx.int_attr("to", 1), f"BitCast node {ctx.name!r}")
    source = ctx.dtype(0)
    if "bool" in (source, dtype) and source != dtype:
        # An ONNX bool is one byte holding 0 or 1, so its bits read as an 8-bit integer are its
        # value; ours is 1 bit wide, which reinterpret would refuse.
        if dtype not in ("int8", "uint8") and source not in ("int8", "uint8"):
            raise ctx.unsupported(f"bit cast between {source} and {dtype}: the widths differ")
        if dtype == "bool":
            raise ctx.unsupported("bit cast of an 8-bit integer to bool (only bytes 0 and 1 are bools)")
        return ctx.op("cast", ctx.input(0), dtype=dtype)
    source_bits, target_bits = (np.dtype(t).itemsize * 8 for t in (source, dtype))
    if source_bits != target_bits:
        raise ctx.unsupported(f"bit cast of {source_bits}-bit elements ({source}) to {target_bits}-bit ones ({dtype})")
    return ctx.op("reinterpret", ctx.input(0), dtype=dtype)


@converter("CastLike", (15, 19, 21, 23, 24, 25))
def _cast_like(ctx: NodeContext) -> Converted:
    return ctx.op("cast", ctx.input(0), dtype=ctx.dtype(1))


@converter("Clip", (13,))
def _clip(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    dtype = ctx.dtype(0)
    low = ctx.value(1) if ctx.has_input(1) else None
    high = ctx.value(2) if ctx.has_input(2) else None
    if dtype.startswith("float") and (low is not None or not ctx.has_input(1)) and (
        high is not None or not ctx.has_input(2)
    ):
        a_min = float(low) if low is not None else -math.inf
        a_max = float(high) if high is not None else math.inf
        if a_min <= a_max:
            return ctx.op("clip", x, a_min=a_min, a_max=a_max)
    # Bounds computed at run time, integer data, or min > max (ONNX then gives max
    # everywhere): ONNX's definition, min(max(x, low), high), with broadcasting ops.
    if ctx.has_input(1):
        x = ctx.op("maximum", x, ctx.input(1))
    if ctx.has_input(2):
        x = ctx.op("minimum", x, ctx.input(2))
    return x


@converter("Round", (11, 22))
def _round(ctx: NodeContext) -> Converted:
    # ONNX rounds halves to even (as numpy); our `round` rounds them away from zero.
    x = ctx.input(0)
    dtype = ctx.dtype(0)
    up = ctx.op("floor", ctx.op("add", x, ctx.scalar(0.5, dtype)))
    tie = ctx.op("equal", ctx.op("subtract", up, x), ctx.scalar(0.5, dtype))
    odd = ctx.op("equal", ctx.op("floor_mod", up, ctx.scalar(2, dtype)), ctx.scalar(1, dtype))
    return ctx.op("where", ctx.op("logical_and", tie, odd), ctx.op("subtract", up, ctx.scalar(1, dtype)), up)


@converter("Where", (9, 16))
def _where(ctx: NodeContext) -> Converted:
    return ctx.op("where", ctx.input(0), ctx.input(1), ctx.input(2))


@converter("Mod", (13, 28))
def _mod(ctx: NodeContext) -> Converted:
    # fmod=1 keeps the dividend's sign (C's fmod/%); fmod=0 (integers only) the divisor's.
    op = "trunc_mod" if ctx.int_attr("fmod", 0) else "floor_mod"
    return ctx.op(op, ctx.input(0), ctx.input(1))


# -- activations --

def _const_like(ctx: NodeContext, value: float) -> Expr:
    return ctx.scalar(value, ctx.dtype(0))


@converter("LeakyRelu", (6, 16))
def _leaky_relu(ctx: NodeContext) -> Converted:
    return ctx.op("nn.leaky_relu", ctx.input(0), alpha=ctx.float_attr("alpha", 0.01))


@converter("PRelu", (9, 16))
def _prelu(ctx: NodeContext) -> Converted:
    x, slope = ctx.input(0), ctx.input(1)
    # Slope broadcasts (unidirectionally) to x: where(x < 0, slope * x, x).
    zero = _const_like(ctx, 0.0)
    return ctx.op("where", ctx.op("less", x, zero), ctx.op("multiply", x, slope), x)


@converter("Elu", (6, 22))
def _elu(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    alpha = _const_like(ctx, ctx.float_attr("alpha", 1.0))
    negative = ctx.op("multiply", alpha, ctx.op("subtract", ctx.op("exp", x), _const_like(ctx, 1.0)))
    return ctx.op("where", ctx.op("less", x, _const_like(ctx, 0.0)), negative, x)


@converter("Selu", (6, 22))
def _selu(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    alpha = ctx.float_attr("alpha", 1.67326319217681884765625)
    gamma = ctx.float_attr("gamma", 1.05070102214813232421875)
    negative = ctx.op("multiply", _const_like(ctx, alpha), ctx.op("subtract", ctx.op("exp", x), _const_like(ctx, 1.0)))
    inner = ctx.op("where", ctx.op("less_equal", x, _const_like(ctx, 0.0)), negative, x)
    return ctx.op("multiply", _const_like(ctx, gamma), inner)


@converter("Celu", (12, 28))
def _celu(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    alpha = ctx.float_attr("alpha", 1.0)
    # max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    scaled = ctx.op("exp", ctx.op("divide", x, _const_like(ctx, alpha)))
    negative = ctx.op("multiply", _const_like(ctx, alpha), ctx.op("subtract", scaled, _const_like(ctx, 1.0)))
    return ctx.op("add", ctx.op("maximum", x, _const_like(ctx, 0.0)), ctx.op("minimum", negative, _const_like(ctx, 0.0)))


@converter("ThresholdedRelu", (10, 22))
def _thresholded_relu(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    alpha = _const_like(ctx, ctx.float_attr("alpha", 1.0))
    return ctx.op("where", ctx.op("greater", x, alpha), x, _const_like(ctx, 0.0))


@converter("HardSigmoid", (6, 22))
def _hard_sigmoid(ctx: NodeContext) -> Converted:
    alpha, beta = ctx.float_attr("alpha", 0.2), ctx.float_attr("beta", 0.5)
    linear = ctx.op("add", ctx.op("multiply", ctx.input(0), _const_like(ctx, alpha)), _const_like(ctx, beta))
    return ctx.op("clip", linear, a_min=0.0, a_max=1.0)


@converter("HardSwish", (14, 22))
def _hard_swish(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    linear = ctx.op("add", ctx.op("multiply", x, _const_like(ctx, 1.0 / 6.0)), _const_like(ctx, 0.5))
    return ctx.op("multiply", x, ctx.op("clip", linear, a_min=0.0, a_max=1.0))


@converter("Softplus", (1, 22))
def _softplus(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    return ctx.op("log", ctx.op("add", ctx.op("exp", x), _const_like(ctx, 1.0)))


@converter("Softsign", (1, 22))
def _softsign(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    return ctx.op("divide", x, ctx.op("add", ctx.op("abs", x), _const_like(ctx, 1.0)))


@converter("Mish", (18, 22))
def _mish(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    softplus = ctx.op("log", ctx.op("add", ctx.op("exp", x), _const_like(ctx, 1.0)))
    return ctx.op("multiply", x, ctx.op("tanh", softplus))


@converter("Gelu", (20,))
def _gelu(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    half, one = _const_like(ctx, 0.5), _const_like(ctx, 1.0)
    if ctx.str_attr("approximate", "none") == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = ctx.op("multiply", ctx.op("multiply", x, x), x)
        inner = ctx.op("add", x, ctx.op("multiply", _const_like(ctx, 0.044715), cube))
        t = ctx.op("tanh", ctx.op("multiply", _const_like(ctx, math.sqrt(2.0 / math.pi)), inner))
        return ctx.op("multiply", ctx.op("multiply", half, x), ctx.op("add", one, t))
    erf = ctx.op("erf", ctx.op("multiply", x, _const_like(ctx, 1.0 / math.sqrt(2.0))))
    return ctx.op("multiply", ctx.op("multiply", half, x), ctx.op("add", one, erf))


@converter("Shrink", (9,))
def _shrink(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    bias, lambd = ctx.float_attr("bias", 0.0), ctx.float_attr("lambd", 0.5)
    dtype = ctx.dtype(0)
    low = ctx.op("add", x, ctx.scalar(bias, dtype))
    high = ctx.op("subtract", x, ctx.scalar(bias, dtype))
    zero = ctx.scalar(0, dtype)
    below = ctx.op("less", x, ctx.scalar(-lambd, dtype))
    above = ctx.op("greater", x, ctx.scalar(lambd, dtype))
    return ctx.op("where", below, low, ctx.op("where", above, high, zero))


@converter("BitShift", (11, 28))
def _bit_shift(ctx: NodeContext) -> Converted:
    right = ctx.str_attr("direction", "") != "LEFT"
    x, amount = ctx.input(0), ctx.input(1)
    dtype = ctx.dtype(0)
    bits = np.iinfo(dtype).bits
    zero = ctx.scalar(0, ctx.dtype(1))
    # A shift by a negative amount or by the width or more (undefined in C) gives what the
    # sign extension alone gives, as ONNX defines it: -1 for a negative value shifted right,
    # else 0.
    too_far = ctx.op("greater_equal", amount, ctx.scalar(bits, ctx.dtype(1)))
    outside = ctx.op("logical_or", ctx.op("less", amount, zero), too_far)
    shifted = ctx.op("right_shift" if right else "left_shift", x, ctx.op("where", outside, zero, amount))
    fill: Expr = ctx.scalar(0, dtype)
    if right and dtype.startswith("int"):
        fill = ctx.op("where", ctx.op("less", x, ctx.scalar(0, dtype)), ctx.scalar(-1, dtype), fill)
    return ctx.op("where", outside, fill, shifted)


for _op_type, _ours in (("BitwiseAnd", "bitwise_and"), ("BitwiseOr", "bitwise_or"), ("BitwiseXor", "bitwise_xor")):
    _binary(_op_type, _ours, (18,))
_unary("BitwiseNot", "bitwise_not", (18,))


@converter("Swish", (24,))
def _swish(ctx: NodeContext) -> Converted:
    x = ctx.input(0)
    return ctx.op("multiply", x, ctx.op("sigmoid", ctx.op("multiply", x, _const_like(ctx, ctx.float_attr("alpha", 1.0)))))


@converter("SwiGLU", (28,))
def _swiglu(ctx: NodeContext) -> Converted:
    a = ctx.input(0)
    gate = ctx.op("multiply", a, ctx.op("sigmoid", ctx.op("multiply", a, _const_like(ctx, ctx.float_attr("alpha", 1.0)))))
    return ctx.op("multiply", gate, ctx.input(1))


# Optional values: a present one is its tensor (graph inputs of optional type are taken as
# tensors), an absent one is only known by a node given no input.
@converter("OptionalHasElement", (15, 18, 28))
def _optional_has_element(ctx: NodeContext) -> Converted:
    return ctx.const(np.array(ctx.has_input(0)))


@converter("OptionalGetElement", (15, 18, 28))
def _optional_get_element(ctx: NodeContext) -> Converted:
    return ctx.input(0)
