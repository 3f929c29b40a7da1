"""Sliding-window geometry (compiler/ops/window.py)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.ir.types import ANY
from compiler.ops.registry import TypeRelationError
from compiler.ops.window import padding4, pair, positive_pair, window_extent, window_views


def test_padding_forms_expand_to_top_left_bottom_right() -> None:
    assert padding4([2], "op") == (2, 2, 2, 2)
    assert padding4([1, 3], "op") == (1, 3, 1, 3)
    assert padding4([1, 2, 3, 4], "op") == (1, 2, 3, 4)
    with pytest.raises(TypeRelationError, match=r"op: padding needs 1, 2 or 4 values, got \[1, 2, 3\]"):
        padding4([1, 2, 3], "op")
    with pytest.raises(TypeRelationError, match="must not be negative"):
        padding4([1, -1], "op")


def test_pairs_accept_one_or_two_values() -> None:
    assert pair([3], "strides", "op") == (3, 3)
    assert pair([1, 2], "strides", "op") == (1, 2)
    with pytest.raises(TypeRelationError, match="op: strides needs 1 or 2 values"):
        pair([1, 2, 3], "strides", "op")
    with pytest.raises(TypeRelationError, match="dilation must be positive"):
        positive_pair([1, 0], "dilation", "op")


def test_window_extent_floor_and_ceil() -> None:
    assert window_extent(6, 0, 3, 2, 1, False, "op", "height") == 2
    assert window_extent(6, 0, 3, 2, 1, True, "op", "height") == 3
    assert window_extent(7, 2, 3, 1, 2, False, "op", "height") == 5  # dilated span 5
    assert window_extent(ANY, 2, 3, 1, 1, False, "op", "height") is ANY
    with pytest.raises(
        TypeRelationError, match="op: the width window of 3 .* larger than the padded input 2"
    ):
        window_extent(2, 0, 3, 1, 1, False, "op", "width")


def test_window_views_read_each_tap_at_every_output_position() -> None:
    padded = np.arange(25).reshape(5, 5)
    views = {(kh, kw): v for kh, kw, v in window_views(padded, (2, 2), (2, 2), (1, 2), (2, 2))}
    assert set(views) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    # Output (1, 1) starts at row 2, col 2; tap (1, 1) is one row down and two columns right.
    assert views[(1, 1)][1, 1] == padded[3, 4]
    assert views[(0, 0)].shape == (2, 2)
