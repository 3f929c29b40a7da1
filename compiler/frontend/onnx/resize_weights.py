"""ONNX Resize along one axis as a constant matrix: out = W · in (+ the extrapolation value where
tf_crop_and_resize maps outside the input), computed in float64 at import.

Every Resize mode is linear in the data and separable by axis, so a matrix per axis expresses
what our image.resize ops cannot: scales whose output size is rounded (ONNX keeps mapping
coordinates with the given scale, not with out/in), antialiased downscaling (a kernel widened by
1/scale), half_pixel_symmetric, keep_aspect_ratio_policy, any axis. The rules follow ONNX's
Resize specification (opset 19):

* x_original from the output index by coordinate_transformation_mode, with the axis's scale
  and its unrounded output length scale · in;
* the n taps nearest to x_original (ties to the smaller index, so an exact integer position
  is taken as the right end of its left interval: ratio 1), on the input edge-padded by
  ceil(n / 2), the window shifted to stay inside the padding;
* tap weights: nearest by nearest_mode, linear (1 - r, r), cubic (Keys with coefficient a),
  antialiased linear / cubic on a kernel stretched by 1 / scale when downscaling and
  normalized; exclude_outside zeroes taps outside the input and renormalizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

Coefficients = Callable[[float], np.ndarray]


def _nearest(mode: str) -> Coefficients:
    def coeffs(ratio: float) -> np.ndarray:
        if ratio == 1.0:
            return np.array([0.0, 1.0])
        right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": False, "ceil": True}[mode]
        return np.array([0.0, 1.0]) if right else np.array([1.0, 0.0])
    return coeffs


def _keys(a: float, t: float) -> float:
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return 0.0


def _linear(scale: float, antialias: bool) -> Coefficients:
    if not antialias:
        return lambda ratio: np.array([1.0 - ratio, ratio])
    shrink = min(scale, 1.0)
    start = math.floor(-1 / shrink) + 1
    taps = np.arange(start, start + 2 - 2 * start, dtype=np.float64)

    def coeffs(ratio: float) -> np.ndarray:
        w = np.clip(1 - np.abs((taps - ratio) * shrink), 0, 1)
        return w / w.sum()
    return coeffs


def _cubic(scale: float, a: float, antialias: bool) -> Coefficients:
    if not antialias:
        return lambda ratio: np.array([_keys(a, t) for t in (ratio + 1, ratio, 1 - ratio, 2 - ratio)])
    shrink = min(scale, 1.0)
    start = math.floor(-2 / shrink) + 1
    taps = range(start, 2 - start)

    def coeffs(ratio: float) -> np.ndarray:
        w = np.array([_keys(a, shrink * (i - ratio)) for i in taps])
        return w / w.sum()
    return coeffs


def _source(mode: str, x: int, scale: float, size_in: int, size_out: int, roi: tuple[float, float]) -> float:
    length = scale * size_in  # the unrounded output length
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = size_in / 2 * (1 - size_out / length)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if length != 1 else -0.5
    if mode == "align_corners":
        return x * (size_in - 1) / (length - 1) if length != 1 else 0.0
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if length == 1:
            return (end - start) * (size_in - 1) / 2 + start * (size_in - 1)
        return x * (end - start) * (size_in - 1) / (length - 1) + start * (size_in - 1)
    raise ValueError(f"coordinate_transformation_mode {mode!r}")


def axis_weights(
    size_in: int, size_out: int, scale: float, *, mode: str, transform: str, nearest_mode: str = "round_prefer_floor",
    cubic_a: float = -0.75, exclude_outside: bool = False, antialias: bool = False,
    roi: tuple[float, float] = (0.0, 1.0),
) -> tuple[np.ndarray, np.ndarray]:
    """W [size_out, size_in] and the rows (a bool [size_out]) that take the extrapolation value."""
    if mode == "nearest":
        coeffs = _nearest(nearest_mode)
    elif mode == "linear":
        coeffs = _linear(scale, antialias)
    elif mode == "cubic":
        coeffs = _cubic(scale, cubic_a, antialias)
    else:
        raise ValueError(f"mode {mode!r}")
    weights = np.zeros((size_out, size_in), dtype=np.float64)
    outside = np.zeros(size_out, dtype=bool)
    for x in range(size_out):
        source = _source(transform, x, scale, size_in, size_out, roi)
        if transform == "tf_crop_and_resize" and not 0 <= source <= size_in - 1:
            outside[x] = True
            continue
        ratio = 1.0 if float(source).is_integer() else source - math.floor(source)
        c = np.array(coeffs(ratio), dtype=np.float64)
        n = len(c)
        pad = math.ceil(n / 2)
        left = math.ceil(source + pad) - 1  # the tap left of the position, in padded coordinates
        first = min(max(left - n // 2 + 1, 0), size_in + 2 * pad - n)
        taps = np.arange(first, first + n) - pad
        if exclude_outside:
            c = np.where((taps < 0) | (taps >= size_in), 0.0, c)
            c = c / c.sum()
        np.add.at(weights[x], np.clip(taps, 0, size_in - 1), c)
    return weights, outside
