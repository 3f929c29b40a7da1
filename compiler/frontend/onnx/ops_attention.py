"""ONNX Attention (opset 23+): scaled dot-product attention over (batch, heads, seq, head) or
(batch, seq, hidden) inputs, with a key/value cache, grouped-query heads, a boolean or additive
mask, the causal mask, softcap and the optional QK output, written with our matmul, softmax
pieces and masks built at import time. Sliding windows and nonpad_kv_seqlen are refused."""

from __future__ import annotations

import math

import numpy as np

from compiler.frontend.onnx.context import Converted, NodeContext
from compiler.frontend.onnx.registry import converter
from compiler.ir.expr import Expr


def _heads(ctx: NodeContext, x: Expr, heads: int) -> Expr:
    """(batch, seq, hidden) → (batch, heads, seq, head)."""
    b, s, hidden = x.checked_type.shape  # type: ignore[attr-defined]  # a static tensor
    split = ctx.op("reshape", x, newshape=(b, s, heads, hidden // heads))
    return ctx.op("transpose", split, axes=(0, 2, 1, 3))


def _matmul(ctx: NodeContext, a: Expr, b: Expr) -> Expr:
    """(B, H, M, K) x (B, H, K, N) as one batch_matmul."""
    sa, sb = a.checked_type.shape, b.checked_type.shape  # type: ignore[attr-defined]  # static tensors
    a3 = ctx.op("reshape", a, newshape=(-1, sa[2], sa[3]))
    b3 = ctx.op("reshape", b, newshape=(-1, sb[2], sb[3]))
    out = ctx.op("nn.batch_matmul", a3, b3, transpose_a=False, transpose_b=False)
    return ctx.op("reshape", out, newshape=(sa[0], sa[1], sa[2], sb[3]))


@converter("Attention", (23, 24))
def _attention(ctx: NodeContext) -> Converted:
    if ctx.has_input(6):
        raise ctx.unsupported("nonpad_kv_seqlen")
    if ctx.int_attr("left_window_size", -1) >= 0 or ctx.int_attr("right_window_size", -1) >= 0:
        raise ctx.unsupported("sliding windows")
    if ctx.attr("softmax_precision") is not None:
        raise ctx.unsupported("softmax_precision")
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    for i in range(3):
        ctx.static_shape(i)
    dtype = ctx.dtype(0)
    rank = ctx.rank(0)
    if rank == 3:
        q_heads, kv_heads = ctx.int_attr("q_num_heads", 0), ctx.int_attr("kv_num_heads", 0)
        if not q_heads or not kv_heads:
            raise ctx.unsupported("3-D inputs need q_num_heads and kv_num_heads")
        q, k, v = _heads(ctx, q, q_heads), _heads(ctx, k, kv_heads), _heads(ctx, v, kv_heads)
    present_k, present_v = k, v
    past = 0
    if ctx.has_input(4):
        past = ctx.static_shape(4)[2]
        present_k = ctx.op("concatenate", ctx.tuple([ctx.input(4), k]), axis=2)
        present_v = ctx.op("concatenate", ctx.tuple([ctx.input(5), v]), axis=2)
    batch, q_heads, q_len, head = q.checked_type.shape  # type: ignore[attr-defined]
    kv_heads, kv_len = present_k.checked_type.shape[1], present_k.checked_type.shape[2]  # type: ignore[attr-defined]
    k_all, v_all = present_k, present_v
    if q_heads != kv_heads:
        reps = q_heads // kv_heads
        k_all = ctx.op("repeat", k_all, repeats=reps, axis=1)
        v_all = ctx.op("repeat", v_all, repeats=reps, axis=1)
    scale = ctx.attr("scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(head)  # type: ignore[arg-type]
    root = ctx.scalar(math.sqrt(scale), dtype)
    # Both sides scaled by sqrt(scale), as ONNX defines it (it matters in float16).
    scores = _matmul(ctx, ctx.op("multiply", q, root),
                     ctx.op("transpose", ctx.op("multiply", k_all, root), axes=(0, 1, 3, 2)))
    softcap = ctx.float_attr("softcap", 0.0)
    if softcap > 0:
        cap = ctx.scalar(softcap, dtype)
        scores = ctx.op("multiply", ctx.op("tanh", ctx.op("divide", scores, cap)), cap)
    mode = ctx.int_attr("qk_matmul_output_mode", 0)
    qk_out = scores
    bias = _bias(ctx, dtype, q_len, kv_len, past)
    with_bias = ctx.op("add", scores, bias) if bias is not None else scores
    if mode == 2:
        qk_out = with_bias
    probs = _safe_softmax(ctx, with_bias, dtype)
    if mode == 3:
        qk_out = probs
    out = _matmul(ctx, probs, v_all)
    if rank == 3:
        out = ctx.op("reshape", ctx.op("transpose", out, axes=(0, 2, 1, 3)), newshape=(batch, q_len, -1))
    return [out, present_k, present_v, qk_out][: max(ctx.num_outputs, 1)]


def _bias(ctx: NodeContext, dtype: str, q_len: int, kv_len: int, past: int) -> Expr | None:
    """The additive mask (0 or -inf, or the given values) of shape (..., q_len, kv_len)."""
    bias: Expr | None = None
    if ctx.has_input(3):
        mask = ctx.input(3)
        shape = ctx.static_shape(3)
        short = kv_len - shape[-1]
        if ctx.dtype(3) == "bool":
            mask = ctx.op("where", mask, ctx.scalar(0, dtype), ctx.scalar(-np.inf, dtype))
        if short > 0:
            width = tuple((0, 0) for _ in shape[:-1]) + ((0, short),)
            mask = ctx.op("nn.pad", mask, ctx.scalar(-np.inf, dtype), pad_width=width)
        bias = mask
    if ctx.int_attr("is_causal", 0):
        allowed = np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None] + past
        causal = ctx.const(np.where(allowed, 0, -np.inf).astype(dtype))
        bias = ctx.op("add", bias, causal) if bias is not None else causal
    return bias


def _safe_softmax(ctx: NodeContext, x: Expr, dtype: str) -> Expr:
    """Softmax over the last axis where a row masked everywhere gives zeros, not NaN."""
    peak = ctx.op("max", x, axis=(-1,), keepdims=True)
    masked_row = ctx.op("logical_and", ctx.op("isinf", peak), ctx.op("less", peak, ctx.scalar(0, dtype)))
    shift = ctx.op("where", masked_row, ctx.scalar(0, dtype), peak)
    e = ctx.op("exp", ctx.op("subtract", x, shift))
    total = ctx.op("sum", e, axis=(-1,), keepdims=True)
    total = ctx.op("where", ctx.op("equal", total, ctx.scalar(0, dtype)), ctx.scalar(1, dtype), total)
    return ctx.op("divide", e, total)


@converter("RotaryEmbedding", (23,))
def _rotary_embedding(ctx: NodeContext) -> Converted:
    shape = ctx.static_shape(0)
    x = ctx.input(0)
    if len(shape) == 4:
        x = ctx.op("transpose", x, axes=(0, 2, 1, 3))  # (batch, seq, heads, head)
    else:
        heads = ctx.int_attr("num_heads", 0)
        if not heads:
            raise ctx.unsupported("3-D input needs num_heads")
        x = ctx.op("reshape", x, newshape=(shape[0], shape[1], heads, shape[2] // heads))
    b, s, h, d = x.checked_type.shape  # type: ignore[attr-defined]  # static
    dim = ctx.int_attr("rotary_embedding_dim", 0) or d
    half = dim // 2
    cos, sin = ctx.input(1), ctx.input(2)
    if ctx.has_input(3):
        cos = ctx.op("take", cos, ctx.input(3), axis=0, mode="clip")
        sin = ctx.op("take", sin, ctx.input(3), axis=0, mode="clip")
    cos = ctx.op("expand_dims", cos, axis=len(cos.checked_type.shape) - 1)  # type: ignore[attr-defined]
    sin = ctx.op("expand_dims", sin, axis=len(sin.checked_type.shape) - 1)  # type: ignore[attr-defined]

    def part(begin: int, end: int, step: int = 1) -> Expr:
        return ctx.op("strided_slice", x, begin=(begin,), end=(end,), strides=(step,), axes=(3,))

    interleaved = bool(ctx.int_attr("interleaved", 0))
    x1, x2 = (part(0, dim, 2), part(1, dim, 2)) if interleaved else (part(0, half), part(half, dim))
    real = ctx.op("subtract", ctx.op("multiply", cos, x1), ctx.op("multiply", sin, x2))
    imag = ctx.op("add", ctx.op("multiply", sin, x1), ctx.op("multiply", cos, x2))
    if interleaved:
        pairs = ctx.op("stack", ctx.tuple([real, imag]), axis=4)
        rotated = ctx.op("reshape", pairs, newshape=(b, s, h, dim))
    else:
        rotated = ctx.op("concatenate", ctx.tuple([real, imag]), axis=3)
    if dim < d:
        rotated = ctx.op("concatenate", ctx.tuple([rotated, part(dim, d)]), axis=3)
    if len(shape) == 4:
        return ctx.op("transpose", rotated, axes=(0, 2, 1, 3))
    return ctx.op("reshape", rotated, newshape=shape)
