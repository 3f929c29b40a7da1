"""Sliding-window geometry shared by nn.conv2d and the 2-D pools.

The attribute readers accept the forms TVM's text accepts and return fixed-size tuples, so the
type relations, the numpy references and the loop lowering all read windows the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from compiler.ir.types import ANY, Dim
from compiler.ops.registry import TypeRelationError
from compiler.tir import expr as te


def pair(values: Sequence[int], name: str, op: str) -> tuple[int, int]:
    """(height, width) from a 2-entry attribute; a single entry applies to both."""
    if len(values) == 1:
        return (values[0], values[0])
    if len(values) != 2:
        raise TypeRelationError(f"{op}: {name} needs 1 or 2 values, got {list(values)}")
    return (values[0], values[1])


def positive_pair(values: Sequence[int], name: str, op: str) -> tuple[int, int]:
    out = pair(values, name, op)
    if min(out) <= 0:
        raise TypeRelationError(f"{op}: {name} must be positive, got {list(values)}")
    return out


def padding4(values: Sequence[int], op: str) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from the 1-, 2- or 4-value padding forms."""
    if len(values) == 1:
        p = values[0]
        out = (p, p, p, p)
    elif len(values) == 2:
        out = (values[0], values[1], values[0], values[1])
    elif len(values) == 4:
        out = (values[0], values[1], values[2], values[3])
    else:
        raise TypeRelationError(f"{op}: padding needs 1, 2 or 4 values, got {list(values)}")
    if min(out) < 0:
        raise TypeRelationError(f"{op}: padding must not be negative, got {list(values)}")
    return out


def window_extent(
    size: Dim, pad_total: int, kernel: int, stride: int, dilation: int, ceil_mode: bool, op: str, axis: str
) -> Dim:
    """Number of window positions along one axis (TVM's formula, floor or ceil)."""
    if size is ANY:
        return ANY
    assert isinstance(size, int)
    span = (kernel - 1) * dilation + 1
    room = size + pad_total - span
    if room < 0:
        raise TypeRelationError(
            f"{op}: the {axis} window of {span} (kernel {kernel}, dilation {dilation}) is larger than "
            f"the padded input {size + pad_total}"
        )
    if ceil_mode:
        room += stride - 1
    return room // stride + 1


def window_views(
    padded: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int],
    out_hw: tuple[int, int],
) -> Iterator[tuple[int, int, np.ndarray]]:
    """For each kernel tap (kh, kw): the strided view of the last two axes that tap reads.

    `padded` must be large enough for every window (callers pad first); each view has
    `out_hw` as its last two dims.
    """
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    for kh in range(kernel[0]):
        for kw in range(kernel[1]):
            h0, w0 = kh * dh, kw * dw
            view = padded[..., h0 : h0 + (oh - 1) * sh + 1 : sh, w0 : w0 + (ow - 1) * sw + 1 : sw]
            yield kh, kw, view


def tap_or(value: Callable[[te.PrimExpr, te.PrimExpr], te.PrimExpr], iy: te.PrimExpr, ix: te.PrimExpr,
           hw: tuple[object, object], outside: te.PrimExpr) -> te.PrimExpr:
    """`value(iy, ix)` for a window tap inside the input's `hw` (ints or the kernel's `?` dim
    parameters), `outside` elsewhere: the loop form of a window over run-time spatial dims.
    The tap is read at indices clamped into the input, so no read leaves it; the selects are
    nested, not one on a conjunction, a form GCC 12 -O3 miscompiles (see lrn)."""
    h, w = (te.as_expr(d) for d in hw)
    read = value(te.maximum(te.minimum(iy, h - 1), 0), te.maximum(te.minimum(ix, w - 1), 0))
    for cond in (ix < w, ix >= 0, iy < h, iy >= 0):
        read = te.select(cond, read, outside)
    return read

