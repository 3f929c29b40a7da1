"""Layout strings (compiler/ops/layout.py)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.ir.types import ANY
from compiler.ops.layout import (
    from_canonical,
    parse_layout,
    plain_positions,
    to_canonical,
    transform_array,
    transform_shape,
)
from compiler.ops.registry import TypeRelationError


def test_parse_layout_reads_primal_and_sub_axes() -> None:
    layout = parse_layout("NCHW16c", "op")
    assert layout.axes == (("N", None), ("C", None), ("H", None), ("W", None), ("c", 16))
    assert layout.primal == "NCHW" and layout.factor("C") == 16 and layout.factor("H") is None
    assert layout.index("c") == 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("NCHWc", "needs a positive factor before sub-axis c"),
        ("NCHW4", "dangling factor"),
        ("NCC", "exactly once"),
        ("NHW4c", "splits axis C, which it does not contain"),
        ("N-CHW", "unexpected character"),
        ("", "exactly once"),
        ("N4CHW", "gives a factor to primal axis C"),
    ],
)
def test_parse_layout_rejects_malformed_layouts(text: str, message: str) -> None:
    with pytest.raises(TypeRelationError, match=f"my.op: layout '{text}'.*{message}"):
        parse_layout(text, "my.op")


def test_plain_positions_map_between_layout_and_canonical_order() -> None:
    positions = plain_positions("NHWC", "NCHW", "op", "layout")
    assert positions == (0, 3, 1, 2)
    shape = (1, 8, 9, 3)  # NHWC
    canonical = to_canonical(shape, positions)
    assert canonical == (1, 3, 8, 9)
    assert from_canonical(canonical, positions) == shape
    with pytest.raises(TypeRelationError, match="unsupported kernel_layout 'OIHW4o'"):
        plain_positions("OIHW4o", "OIHW", "op", "kernel_layout")


def test_transform_shape_splits_and_merges_sub_axes() -> None:
    nchw, blocked = parse_layout("NCHW", "op"), parse_layout("NCHW4c", "op")
    assert transform_shape((2, 8, 5, 5), nchw, blocked, "op") == (2, 2, 5, 5, 4)
    assert transform_shape((2, 2, 5, 5, 4), blocked, nchw, "op") == (2, 8, 5, 5)
    assert transform_shape((ANY, 2, 5, 5, 4), blocked, parse_layout("NHWC", "op"), "op") == (ANY, 5, 5, 8)
    with pytest.raises(TypeRelationError, match="axis c of layout NCHW4c has size 3, expected 4"):
        transform_shape((2, 2, 5, 5, 3), blocked, nchw, "op")


def test_transform_array_places_every_element_by_its_full_index() -> None:
    x = np.arange(2 * 6 * 2).reshape(2, 6, 2)  # layout "NCW"
    out = transform_array(x, parse_layout("NCW", "op"), parse_layout("CNW3c", "op"))
    assert out.shape == (2, 2, 2, 3)
    for n in range(2):
        for c in range(6):
            for w in range(2):
                assert out[c // 3, n, w, c % 3] == x[n, c, w]
