"""The operators of the benchmark models written with numpy: the reference every peer's output is
checked against, and the numpy peer itself. Matrix products go through `@`, so numpy's BLAS
(OpenBLAS) does the heavy work; convolutions are im2col followed by one matmul."""

from __future__ import annotations

import numpy as np

from bench.flops import conv_out


def dense(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = x @ w.T
    return y + b if b is not None else y


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


def conv2d(x: np.ndarray, w: np.ndarray, stride: int = 1, pad: int = 0) -> np.ndarray:
    n, c, h, width = x.shape
    out_c, _, kh, kw = w.shape
    if pad:
        x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = conv_out(h, kh, stride, pad), conv_out(width, kw, stride, pad)
    if kh == kw == 1:
        cols = x[:, :, ::stride, ::stride][:, :, :oh, :ow].reshape(n, c, oh * ow)
    else:
        windows = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
        windows = windows[:, :, ::stride, ::stride][:, :, :oh, :ow]  # n, c, oh, ow, kh, kw
        cols = windows.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, oh * ow)
    return (w.reshape(out_c, -1) @ cols).reshape(n, out_c, oh, ow)


def bias_nchw(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    return x + b[:, None, None]


def batch_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray,
               eps: float = 1e-5) -> np.ndarray:
    scale = gamma / np.sqrt(var + eps)
    return x * scale[:, None, None] + (beta - mean * scale)[:, None, None]


def max_pool2d(x: np.ndarray, size: int, stride: int, pad: int = 0) -> np.ndarray:
    if pad:
        x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(x, (size, size), axis=(2, 3))
    return windows[:, :, ::stride, ::stride].max(axis=(4, 5))


def global_avg_pool2d(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=(2, 3), keepdims=True)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7): numpy has no erf, and
    math.erf element by element would make the numpy peer's gelu its slowest part."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x * np.float32(0.7071067811865476)))
