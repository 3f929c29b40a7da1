"""Operations counted for GFLOP/s in profiles (compiler/ops/flops.py)."""

from __future__ import annotations

import pytest

from compiler.ir.expr import Function
from compiler.ops.flops import expr_flops
from compiler.parser import parse_expr
from compiler.passes.infer_type import infer_expr


def flops_of(params: str, body: str) -> int:
    func = parse_expr(f"fn ({params}) {{ {body} }}")
    assert isinstance(func, Function)
    infer_expr(func)
    return expr_flops(func.body)


@pytest.mark.parametrize(("params", "body", "expected"), [
    ("%x: Tensor[(4, 6), float32], %w: Tensor[(5, 6), float32]", "nn.relu(nn.dense(%x, %w, units=None))", 2 * 4 * 5 * 6),
    ("%a: Tensor[(2, 3, 4), float32], %b: Tensor[(2, 5, 4), float32]",
     "nn.batch_matmul(%a, %b, transpose_b=True)", 2 * 2 * 3 * 5 * 4),
    ("%a: Tensor[(2, 4, 3), float32], %b: Tensor[(2, 4, 5), float32]",
     "nn.batch_matmul(%a, %b, transpose_a=True, transpose_b=False)", 2 * 2 * 3 * 5 * 4),
    ("%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]",
     "nn.conv2d(%x, %w, padding=[1, 1, 1, 1])", 2 * 4 * 8 * 8 * 3 * 3 * 3),
    # Depthwise: each output sums one channel's 3x3 window.
    ("%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 1, 3, 3), float32]",
     "nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=4)", 2 * 4 * 8 * 8 * 3 * 3),
    # The packed weight of AlterOpLayout: OHWI16o, 32 output channels in two blocks.
    ("%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(2, 3, 3, 3, 16), float32]",
     "nn.contrib_conv2d_NCHWc(%x, %w, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3], data_layout=\"NCHW\", "
     "kernel_layout=\"OHWI16o\", out_layout=\"NCHW\")", 2 * 32 * 8 * 8 * 3 * 3 * 3),
    ("%x: Tensor[(1, 4, 5, 5), float32], %w: Tensor[(4, 2, 3, 3), float32]",
     "nn.conv2d_transpose(%x, %w, channels=2, kernel_size=[3, 3])", 2 * 4 * 5 * 5 * 2 * 3 * 3),
])
def test_products_count_two_operations_per_multiply_add(params: str, body: str, expected: int) -> None:
    assert flops_of(params, body) == expected


def test_elementwise_work_and_dynamic_shapes_count_nothing() -> None:
    assert flops_of("%x: Tensor[(4, 6), float32]", "exp(add(%x, %x))") == 0
    assert flops_of("%x: Tensor[(?, 6), float32], %w: Tensor[(5, 6), float32]", "nn.dense(%x, %w, units=None)") == 0
