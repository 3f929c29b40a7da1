"""ONNX DFT as products with constant cosine and sine matrices along the signal axis.

The input's last axis holds the real part (size 1) or the real and imaginary parts (size 2).
With W = e^(∓2πi·kn/N) (divided by N for the inverse), the result's parts are
re = Wr·xr − Wi·xi and im = Wr·xi + Wi·xr. `dft_length` zero-pads or truncates the signal;
`onesided` keeps the first N/2 + 1 frequencies of a forward transform, and makes an inverse one
read such a half spectrum (Hermitian symmetry: the other frequencies count twice) and give a
real signal. The products run in float64 (a float32 sum of N terms leaves ~1e-6 where the exact
result is 0, and ONNX's tests ask for 1e-7 there), and the result is cast back.
"""

from __future__ import annotations

import numpy as np

from compiler.frontend.onnx.context import Converted, NodeContext, normalize_axis
from compiler.frontend.onnx.registry import converter
from compiler.ir.expr import Expr


def _matrices(n: int, given: int, inverse: bool, onesided: bool) -> tuple[np.ndarray, np.ndarray, bool]:
    """Wr, Wi [outputs, given inputs] and whether the result is real only."""
    if inverse and onesided:
        # A half spectrum of `given` frequencies in, n real samples out.
        k = np.arange(given)
        t = np.arange(n)[:, None]
        weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0) / n
        angle = 2 * np.pi * t * k / n
        wr, wi = np.cos(angle) * weight, np.sin(angle) * weight
        wr[:, k >= n // 2 + 1] = 0.0  # frequencies past the half spectrum's end are not read
        wi[:, k >= n // 2 + 1] = 0.0
        return wr, wi, True
    outputs = n // 2 + 1 if onesided else n
    angle = 2 * np.pi * np.arange(outputs)[:, None] * np.arange(n) / n
    sign = 1.0 if inverse else -1.0
    scale = 1.0 / n if inverse else 1.0
    wr, wi = np.cos(angle) * scale, sign * np.sin(angle) * scale
    # Fewer samples than n: the rest are zeros (no columns); more: the extra ones are cut.
    pad = np.zeros((outputs, max(given - n, 0)))
    return np.hstack([wr[:, :given], pad]), np.hstack([wi[:, :given], pad]), False


def _along(ctx: NodeContext, x: Expr, shape: list[int], axis: int, matrix: np.ndarray) -> Expr:
    """x (without the complex axis) times matrix along `axis`: [.., L, ..] -> [.., K, ..]."""
    rank = len(shape)
    order = [a for a in range(rank) if a != axis] + [axis]
    moved = ctx.op("transpose", x, axes=tuple(order)) if axis != rank - 1 else x
    rows = int(np.prod([shape[a] for a in order[:-1]]))
    out = ctx.op("nn.dense", ctx.op("reshape", moved, newshape=(rows, shape[axis])), ctx.const(matrix),
                 units=matrix.shape[0])
    out = ctx.op("reshape", out, newshape=(*[shape[a] for a in order[:-1]], matrix.shape[0]))
    return ctx.op("transpose", out, axes=tuple(int(i) for i in np.argsort(order))) if axis != rank - 1 else out


@converter("DFT", (17, 20))
def _dft(ctx: NodeContext) -> Converted:
    shape = list(ctx.static_shape(0))
    dtype = ctx.dtype(0)
    if not dtype.startswith("float"):
        raise ctx.unsupported(f"a DFT of {dtype} data")
    rank = len(shape)
    if ctx.since >= 20:
        axis = int(np.asarray(ctx.const_input(2, "axis")).reshape(())) if ctx.has_input(2) else -2
    else:
        axis = ctx.int_attr("axis", 1)
    axis = normalize_axis(axis, rank)
    if not 0 <= axis < rank - 1:
        raise ctx.unsupported(f"axis {axis} (the last axis holds the real and imaginary parts)")
    if shape[-1] not in (1, 2):
        raise ctx.unsupported(f"a last axis of {shape[-1]} (1 for real, 2 for complex input)")
    inverse, onesided = bool(ctx.int_attr("inverse", 0)), bool(ctx.int_attr("onesided", 0))
    given = shape[axis]
    if ctx.has_input(1):
        n = int(np.asarray(ctx.const_input(1, "dft_length")).reshape(()))
    else:
        n = 2 * (given - 1) if inverse and onesided else given
    wr, wi, real_only = _matrices(n, given, inverse, onesided)

    parts = shape[:-1]
    x = ctx.op("cast", ctx.input(0), dtype="float64") if dtype != "float64" else ctx.input(0)
    if shape[-1] == 1:
        xr, xi = ctx.op("squeeze", x, axis=(rank - 1,)), None
    else:
        pieces = ctx.op("split", x, indices_or_sections=2, axis=rank - 1)
        xr, xi = (ctx.op("squeeze", ctx.item(pieces, k), axis=(rank - 1,)) for k in range(2))
    re = _along(ctx, xr, parts, axis, wr)
    im = _along(ctx, xr, parts, axis, wi) if not real_only else None
    if xi is not None:
        re = ctx.op("subtract", re, _along(ctx, xi, parts, axis, wi))
        if im is not None:
            im = ctx.op("add", im, _along(ctx, xi, parts, axis, wr))
    if im is None:
        out = ctx.op("expand_dims", re, axis=rank - 1)
    else:
        out = ctx.op("stack", ctx.tuple([re, im]), axis=rank - 1)
    return ctx.op("cast", out, dtype=dtype) if dtype != "float64" else out
