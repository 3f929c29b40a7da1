"""compiler.frontend.onnx.ops_loss: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compiler.frontend.onnx.onnx_models import interpret, single_node

RNG = np.random.default_rng(10)
SCORES = RNG.standard_normal((4, 3)).astype("float32")
TARGET = np.array([0, 2, 1, 2], dtype="int64")
WEIGHT = np.array([0.5, 1.0, 2.0], dtype="float32")


def _nll(log_prob: np.ndarray, reduction: str, ignore: int | None) -> np.ndarray:
    keep = TARGET != ignore if ignore is not None else np.ones(4, dtype=bool)
    safe = np.where(keep, TARGET, 0)
    w = WEIGHT[safe] * keep
    loss = -log_prob[np.arange(4), safe] * w
    return {"none": loss, "sum": loss.sum(), "mean": loss.sum() / w.sum()}[reduction]


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("ignore", [None, 2])
def test_negative_log_likelihood_with_weights(reduction: str, ignore: int | None) -> None:
    attrs: dict[str, object] = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    feeds = {"x": SCORES, "t": TARGET, "w": WEIGHT}
    (got,) = interpret(single_node("NegativeLogLikelihoodLoss", feeds, **attrs), feeds)
    np.testing.assert_allclose(got, _nll(SCORES, reduction, ignore), rtol=1e-5)


def test_softmax_cross_entropy_returns_loss_and_log_prob() -> None:
    feeds = {"x": SCORES, "t": TARGET, "w": WEIGHT}
    loss, log_prob = interpret(single_node("SoftmaxCrossEntropyLoss", feeds, n_out=2), feeds)
    e = np.exp(SCORES - SCORES.max(axis=1, keepdims=True))
    want_log_prob = np.log(e / e.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(log_prob, want_log_prob, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, _nll(want_log_prob, "mean", None), rtol=1e-5)
