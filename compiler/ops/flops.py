"""Operations of a function's products, for GFLOP/s in profiles: each multiply-add of a
convolution, dense, matmul or batch_matmul (their packed, NCHWc and quantized forms too) counts
as 2. Elementwise work, reductions and data movement are not counted: next to the products
they are small, and "GFLOP/s" of a kernel reads as how well its product uses the FMA units.
A call whose shapes are not all static counts 0."""

from __future__ import annotations

import math

from compiler.ir.expr import Call, Expr
from compiler.ir.types import TensorType
from compiler.ir.visitor import post_order
from compiler.ops.layout import parse_layout
from compiler.ops.registry import TypeRelationError

_CONVS = {"nn.conv1d", "nn.conv2d", "nn.conv3d", "nn.contrib_conv2d_NCHWc", "nn.contrib_depthwise_conv2d_NCHWc",
          "qnn.conv2d"}
_TRANSPOSED = {"nn.conv1d_transpose", "nn.conv2d_transpose", "nn.conv3d_transpose", "qnn.conv2d_transpose"}
_DENSE = {"nn.dense", "nn.contrib_dense_pack", "qnn.dense"}
_MATMUL = {"nn.matmul", "nn.batch_matmul", "qnn.batch_matmul"}


def _static(expr: Expr) -> TensorType | None:
    ty = expr.checked_type if expr.has_type else None
    return ty if isinstance(ty, TensorType) and not ty.is_dynamic else None


def _elements(ty: TensorType) -> int:
    return math.prod(int(d) for d in ty.shape)  # type: ignore[arg-type]  # static


def _weight_axis_count(weight: TensorType, layout: str, letter: str) -> int:
    """The size of the kernel's `letter` axis, its blocks included (O of OHWI16o: O * 16)."""
    parsed = parse_layout(layout, "flops")
    return math.prod(int(d) for (name, _), d in zip(parsed.axes, weight.shape) if name.upper() == letter)  # type: ignore[arg-type]


def call_flops(call: Call) -> int:
    """2 x the multiply-adds of one product call, or 0 for anything else."""
    name = call.op_name
    if name not in _CONVS | _TRANSPOSED | _DENSE | _MATMUL or len(call.args) < 2:
        return 0
    data, weight, out = _static(call.args[0]), _static(call.args[1]), _static(call)
    if data is None or weight is None or out is None or data.ndim == 0:
        return 0
    try:
        if name in _CONVS:
            # Each output element sums over (input channels / groups) x the window: the
            # weight's elements per output channel, whatever its layout.
            per_output = _elements(weight) // max(1, _weight_axis_count(weight, call.attrs["kernel_layout"], "O"))
            return 2 * _elements(out) * per_output
        if name in _TRANSPOSED:
            per_input = _elements(weight) // max(1, _weight_axis_count(weight, call.attrs["kernel_layout"], "I"))
            return 2 * _elements(data) * per_input
    except TypeRelationError:
        return 0
    if name in _DENSE:
        return 2 * _elements(out) * int(data.shape[-1])  # type: ignore[arg-type]  # static
    transposed = bool(call.attrs["transpose_a"]) if "transpose_a" in call.attrs else False
    depth = data.shape[-2] if transposed else data.shape[-1]
    return 2 * _elements(out) * int(depth)  # type: ignore[arg-type]  # static


def expr_flops(expr: Expr) -> int:
    """The products' operations of every call inside `expr`."""
    return sum(call_flops(node) for node in post_order(expr) if isinstance(node, Call))
