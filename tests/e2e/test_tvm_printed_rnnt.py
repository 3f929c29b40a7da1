"""The RNN-T as TVM's PyTorch frontend prints it (tests/e2e/tvm_printed_rnnt.py) parses,
round-trips, types to its `ty=` comments, compiles and matches the interpreter and a numpy
transducer written here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.e2e.printed_checks import (assert_outputs_match, assert_round_trips_with_printed_types,
                                      compile_and_run, interpret)
from tests.e2e.tvm_printed import WEIGHT_FORMS
from tests.e2e.tvm_printed_rnnt import rnnt


@pytest.mark.parametrize("form", WEIGHT_FORMS)
def test_rnnt_parses_round_trips_and_types_as_printed(form: str) -> None:
    printed = rnnt(form)
    assert_round_trips_with_printed_types(printed)
    assert "span=aten::lstm_0:0:0" in printed.text and "span=aten::lstm_1:0:0" in printed.text


def _lstm(x: np.ndarray, h: np.ndarray, c: np.ndarray, w: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, ...]:
    def sigmoid(v: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-v))

    outputs = []
    for step in x:
        gates = (step @ w[f"{name}.weight_ih_l0"].T + h @ w[f"{name}.weight_hh_l0"].T
                 + w[f"{name}.bias_ih_l0"] + w[f"{name}.bias_hh_l0"])
        i, f, g, o = np.split(gates, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs), h[None], c[None]


def rnnt_numpy(inputs: dict[str, np.ndarray], w: dict[str, np.ndarray]) -> list[np.ndarray]:
    h0, c0 = inputs["h0"][0].astype(np.float64), inputs["c0"][0].astype(np.float64)
    enc, _, _ = _lstm(inputs["frames"].astype(np.float64), h0, c0, w, "encoder.lstm")
    enc = enc.transpose(1, 0, 2) @ w["encoder.output_linear.weight"].T + w["encoder.output_linear.bias"]
    emb = w["predictor.embedding.weight"][inputs["tokens"]].astype(np.float64)
    pred, h_n, c_n = _lstm(emb.transpose(1, 0, 2), h0, c0, w, "predictor.lstm")
    pred = pred.transpose(1, 0, 2) @ w["predictor.output_linear.weight"].T + w["predictor.output_linear.bias"]
    joint = np.tanh(enc[:, :, None, :] + pred[:, None, :, :])
    logits = joint @ w["joiner.linear.weight"].T + w["joiner.linear.bias"]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return [a.astype("float32") for a in (log_probs, h_n, c_n)]


@pytest.mark.parametrize(("form", "target"), [("constants", "c"), ("params", "c"), ("constants", "cblas, c")])
def test_compiled_rnnt_matches_the_interpreter_and_numpy(form: str, target: str, tmp_path: Path) -> None:
    printed = rnnt(form)
    inputs = printed.make_inputs(seed=7)
    want = interpret(printed, tmp_path, inputs)
    got = compile_and_run(tmp_path, target)
    assert_outputs_match(got, want)
    expected = rnnt_numpy(inputs, printed.weights)
    for k, array in enumerate(expected):
        np.testing.assert_allclose(got[f"out{k}"], array, rtol=1e-4, atol=1e-5)
    # log-probabilities over the vocabulary at every (frame, label) pair
    np.testing.assert_allclose(np.exp(got["out0"]).sum(axis=-1), 1.0, rtol=1e-5)
