"""Index helpers shared by the kernels (compiler/ops/kernels/common.py)."""

from __future__ import annotations

import pytest

from compiler.ops.kernels.common import buffer_dims, canonical_dims, input_buffers, place, unflatten
from compiler.tir import expr as te
from compiler.tir.compute import TensorView
from compiler.tir.simplify import simplify_expr


def value(e: te.PrimExpr) -> int:
    folded = simplify_expr(e)
    assert isinstance(folded, te.Const)
    return int(folded.value)


def test_unflatten_inverts_row_major_flattening() -> None:
    dims = (2, 3, 4)
    for flat in range(24):
        index = tuple(value(e) for e in unflatten(te.const(flat), dims))
        assert index == (flat // 12, flat // 4 % 3, flat % 4)


def test_unflatten_of_no_dims_is_the_empty_index() -> None:
    assert unflatten(te.const(0), ()) == ()


def test_place_puts_canonical_coordinates_where_the_layout_keeps_them() -> None:
    # NHWC keeps N, C, H, W at positions 0, 3, 1, 2.
    n, c, h, w = (te.Var(x) for x in "nchw")
    assert place((n, c, h, w), (0, 3, 1, 2)) == (n, h, w, c)
    assert canonical_dims((1, 5, 6, 3), (0, 3, 1, 2)) == (1, 3, 5, 6)


def test_buffer_dims_rejects_a_dynamic_buffer() -> None:
    with pytest.raises(ValueError, match="dynamic"):
        buffer_dims(te.Buffer("x", (te.Var("n"), 3)))


def test_input_buffers_rejects_a_computed_input() -> None:
    view = TensorView((2,), "float32", lambda idx: te.const(1.0))
    with pytest.raises(ValueError, match="not materialized"):
        input_buffers([view], "nn.dense")
