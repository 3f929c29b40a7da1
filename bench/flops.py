"""Floating-point work of the heavy operators, from their shapes: one multiply-add counts as two
operations, as vendors' peak figures and ONNX Runtime's and torch's profilers count them.
Element-wise work (bias, activations, norms, softmax, pooling) is left out: it is a few percent
of these models and no peer is credited with it either."""

from __future__ import annotations


def dense(rows: int, in_features: int, out_features: int) -> int:
    return 2 * rows * in_features * out_features


def batch_matmul(batch: int, m: int, k: int, n: int) -> int:
    return 2 * batch * m * k * n


def conv2d(
    batch: int, in_channels: int, out_channels: int, out_hw: tuple[int, int], kernel: tuple[int, int],
    groups: int = 1,
) -> int:
    if in_channels % groups or out_channels % groups:
        raise ValueError(f"{in_channels} and {out_channels} channels are not divisible into {groups} groups")
    return 2 * batch * out_channels * out_hw[0] * out_hw[1] * (in_channels // groups) * kernel[0] * kernel[1]


def conv_out(size: int, kernel: int, stride: int, pad: int) -> int:
    """Output length of a convolution or pool along one axis (floor mode)."""
    return (size + 2 * pad - kernel) // stride + 1
