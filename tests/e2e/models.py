"""The e2e models: their Relay text (tests/models/*.relay), inputs, and numpy versions.

The numpy functions are written independently of the compiler's op references, so they check
the whole stack: parser, type inference, op semantics, and later the generated C.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

MODELS = Path(__file__).resolve().parent.parent / "models"


def path(name: str) -> Path:
    return MODELS / f"{name}.relay"


def _rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype("float32")


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def conv2d_nchw(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, o, oh, ow), dtype=np.float64)
    for dy in range(kh):
        for dx in range(kw):
            patch = xp[:, :, dy : dy + oh, dx : dx + ow]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, dy, dx])
    return out.astype("float32")


def pool2x2(x: np.ndarray, how: str) -> np.ndarray:
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // 2, 2, w // 2, 2)
    return blocks.max(axis=(3, 5)) if how == "max" else blocks.mean(axis=(3, 5))


# --- MLP ---------------------------------------------------------------------------------


def mlp_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": _rand(rng, 8, 64),
        "w1": _rand(rng, 32, 64, scale=0.2),
        "b1": _rand(rng, 32),
        "w2": _rand(rng, 10, 32, scale=0.2),
        "b2": _rand(rng, 10),
    }


def mlp_numpy(x, w1, b1, w2, b2):
    h = np.maximum(x @ w1.T + b1, 0)
    return [softmax(h @ w2.T + b2)]


# --- CNN ---------------------------------------------------------------------------------


def cnn_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "data": _rand(rng, 2, 3, 16, 16),
        "c1_w": _rand(rng, 8, 3, 3, 3, scale=0.3),
        "bn_gamma": _rand(rng, 8),
        "bn_beta": _rand(rng, 8),
        "bn_mean": _rand(rng, 8, scale=0.1),
        "bn_var": np.abs(_rand(rng, 8)) + 0.5,
        "c2_w": _rand(rng, 16, 8, 3, 3, scale=0.2),
        "c2_b": _rand(rng, 16),
        "fc_w": _rand(rng, 10, 16, scale=0.3),
        "fc_b": _rand(rng, 10),
    }


def cnn_numpy(data, c1_w, bn_gamma, bn_beta, bn_mean, bn_var, c2_w, c2_b, fc_w, fc_b):
    def per_channel(v):
        return v.reshape(1, -1, 1, 1)

    y = conv2d_nchw(data, c1_w, pad=1)
    y = (y - per_channel(bn_mean)) / np.sqrt(per_channel(bn_var) + 0.001) * per_channel(bn_gamma)
    y = y + per_channel(bn_beta)
    y = pool2x2(np.maximum(y, 0), "max")
    y = np.maximum(conv2d_nchw(y, c2_w, pad=1) + per_channel(c2_b), 0)
    y = pool2x2(y, "avg").mean(axis=(2, 3))
    return [softmax(y @ fc_w.T + fc_b, axis=1)]


# --- attention block ---------------------------------------------------------------------


def attention_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": _rand(rng, 1, 8, 16),
        "ln_g": _rand(rng, 16),
        "ln_b": _rand(rng, 16),
        "wq": _rand(rng, 16, 16, scale=0.25),
        "wk": _rand(rng, 16, 16, scale=0.25),
        "wv": _rand(rng, 16, 16, scale=0.25),
        "wo": _rand(rng, 16, 16, scale=0.25),
        "w_ff": _rand(rng, 32, 16, scale=0.25),
        "b_ff": _rand(rng, 32),
        "w_out": _rand(rng, 16, 32, scale=0.25),
    }


def attention_numpy(x, ln_g, ln_b, wq, wk, wv, wo, w_ff, b_ff, w_out):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    h = (x - mu) / np.sqrt(var + 1e-5) * ln_g + ln_b

    def heads(m):  # (1, 8, 16) -> (2, 8, 8): split the hidden dim into two heads
        return m.reshape(8, 2, 8).transpose(1, 0, 2)

    q, k, v = heads(h @ wq.T), heads(h @ wk.T), heads(h @ wv.T)
    p = softmax(q @ k.transpose(0, 2, 1) * 0.353553)
    ctx = (p @ v).transpose(1, 0, 2).reshape(1, 8, 16)
    r = x + ctx @ wo.T
    f = r @ w_ff.T + b_ff
    erf = np.vectorize(math.erf)
    gelu = (f * (erf(f * 0.707107) + 1) * 0.5).astype("float32")
    return [r + gelu @ w_out.T]


# --- tuples, lets, a helper function called twice, several outputs ------------------------


def tuples_lets_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"a": _rand(rng, 4, 6), "b": _rand(rng, 4, 6)}


def tuples_lets_numpy(a, b):
    first, second = a * 2, a * 2 + 1
    total = first + b
    return [total, total[:, 3:], first.sum(axis=1), second - (b * 0.5 + 1)]


# --- control flow (interpreter only) ------------------------------------------------------


def control_flow_inputs(seed: int = 0, flag: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"a": _rand(rng, 4, 6), "b": _rand(rng, 4, 6), "flag": np.array(flag)}


def control_flow_numpy(a, b, flag):
    return [a * 2 + b if bool(flag) else a * 2 - b]


# --- two identical primitives -------------------------------------------------------------


def shared_primitives_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": _rand(rng, 4, 16), "y": _rand(rng, 4, 16), "w": _rand(rng, 8, 16, scale=0.3)}


def shared_primitives_numpy(x, y, w):
    return [np.maximum(x @ w.T, 0), np.maximum(y @ w.T, 0)]


# --- the seed-001 MLP (64 x 800 -> 500 -> 10) ----------------------------------------------


def mlp_seed001_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": _rand(rng, 64, 800),
        "w1": _rand(rng, 500, 800, scale=0.05),
        "b1": _rand(rng, 500),
        "w2": _rand(rng, 10, 500, scale=0.05),
        "b2": _rand(rng, 10),
    }


def mlp_seed001_numpy(x, w1, b1, w2, b2):
    return [np.maximum(x @ w1.T + b1, 0) @ w2.T + b2]


CASES = {
    "mlp": (mlp_inputs, mlp_numpy),
    "cnn": (cnn_inputs, cnn_numpy),
    "attention": (attention_inputs, attention_numpy),
    "tuples_lets": (tuples_lets_inputs, tuples_lets_numpy),
    "control_flow": (control_flow_inputs, control_flow_numpy),
    "shared_primitives": (shared_primitives_inputs, shared_primitives_numpy),
    "mlp_seed001": (mlp_seed001_inputs, mlp_seed001_numpy),
}
# Models the AOT executor compiles (control flow needs the interpreter).
COMPILED = ("mlp", "cnn", "attention", "tuples_lets", "shared_primitives", "mlp_seed001")
