"""compiler.frontend.onnx.ops_attention: ONNX Attention against scaled dot-product attention
written in numpy."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx import from_onnx
from tests.compiler.frontend.onnx.onnx_models import interpret, single_node

RNG = np.random.default_rng(13)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray) -> np.ndarray:
    reps = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, reps, axis=1), np.repeat(v, reps, axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + bias
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def test_causal_grouped_query_attention_with_a_cache() -> None:
    q = RNG.standard_normal((2, 4, 3, 8)).astype("float32")
    k, v = (RNG.standard_normal((2, 2, 3, 8)).astype("float32") for _ in range(2))
    past_k, past_v = (RNG.standard_normal((2, 2, 5, 8)).astype("float32") for _ in range(2))
    feeds = {"q": q, "k": k, "v": v}
    init = {"past_k": past_k, "past_v": past_v}
    m = single_node("Attention", feeds, n_out=3, initializers=init, opset=23, is_causal=1,
                    input_names=["q", "k", "v", "", "past_k", "past_v"])
    y, present_k, present_v = interpret(m, feeds)
    all_k, all_v = np.concatenate([past_k, k], axis=2), np.concatenate([past_v, v], axis=2)
    allowed = np.arange(8)[None, :] <= np.arange(3)[:, None] + 5
    np.testing.assert_allclose(y, _attention(q, all_k, all_v, np.where(allowed, 0, -np.inf)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(present_k, all_k)
    np.testing.assert_array_equal(present_v, all_v)


def test_three_dimensional_inputs_with_a_boolean_mask() -> None:
    q, k, v = (RNG.standard_normal((1, 4, 6)).astype("float32") for _ in range(3))
    mask = RNG.random((4, 4)) > 0.3
    mask[:, 0] = True
    feeds = {"q": q, "k": k, "v": v, "mask": mask}
    (y,) = interpret(single_node("Attention", feeds, opset=23, q_num_heads=2, kv_num_heads=2), feeds)
    heads = [x.reshape(1, 4, 2, 3).transpose(0, 2, 1, 3) for x in (q, k, v)]
    want = _attention(*heads, np.where(mask, 0, -np.inf)).transpose(0, 2, 1, 3).reshape(1, 4, 6)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_a_row_masked_everywhere_gives_zeros() -> None:
    q, k, v = (RNG.standard_normal((1, 1, 2, 4)).astype("float32") for _ in range(3))
    mask = np.array([[True, True], [False, False]])
    feeds = {"q": q, "k": k, "v": v, "mask": mask}
    (y,) = interpret(single_node("Attention", feeds, opset=23), feeds)
    np.testing.assert_array_equal(y[0, 0, 1], np.zeros(4, dtype="float32"))


def test_nonpad_kv_seqlen_is_unsupported() -> None:
    q, k, v = (RNG.standard_normal((1, 1, 2, 4)).astype("float32") for _ in range(3))
    feeds = {"q": q, "k": k, "v": v, "n": np.array([2], dtype="int64")}
    m = single_node("Attention", feeds, opset=24, input_names=["q", "k", "v", "", "", "", "n"])
    with pytest.raises(UnsupportedError, match="nonpad_kv_seqlen"):
        from_onnx(m)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_rotates_pairs_by_the_cached_angles(interleaved: int) -> None:
    x = RNG.standard_normal((1, 2, 3, 4)).astype("float32")  # (batch, heads, seq, head)
    angles = RNG.uniform(0, 3, size=(3, 2)).astype("float32")
    init = {"cos": np.cos(angles), "sin": np.sin(angles)}
    (got,) = interpret(single_node("RotaryEmbedding", {"x": x}, initializers=init, opset=23, interleaved=interleaved),
                       {"x": x})
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:
        x1, x2 = x[..., :2], x[..., 2:]
    cos, sin = np.cos(angles), np.sin(angles)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    want = np.stack([real, imag], axis=-1).reshape(x.shape) if interleaved else np.concatenate([real, imag], axis=-1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
