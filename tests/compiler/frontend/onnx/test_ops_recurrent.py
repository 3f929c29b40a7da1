"""compiler.frontend.onnx.ops_recurrent: RNN, GRU and LSTM unrolled, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx import from_onnx
from tests.compiler.frontend.onnx.onnx_models import assert_matches_ort, single_node

RNG = np.random.default_rng(23)
SEQ, BATCH, WIDTH, HIDDEN = 4, 3, 5, 6


def _weights(gates: int, directions: int = 1) -> dict[str, np.ndarray]:
    def draw(*shape: int) -> np.ndarray:
        return (RNG.standard_normal(shape) * 0.5).astype("float32")
    return {"W": draw(directions, gates * HIDDEN, WIDTH), "R": draw(directions, gates * HIDDEN, HIDDEN),
            "B": draw(directions, 2 * gates * HIDDEN)}


X = RNG.standard_normal((SEQ, BATCH, WIDTH)).astype("float32")


def test_gru_with_linear_before_reset_bias_and_initial_state_matches_onnxruntime() -> None:
    init = {**_weights(3), "lens": np.full(BATCH, SEQ, dtype="int32"),
            "h0": RNG.standard_normal((1, BATCH, HIDDEN)).astype("float32")}
    m = single_node("GRU", {"X": X}, n_out=2, initializers=init, hidden_size=HIDDEN, linear_before_reset=1)
    assert_matches_ort(m, {"X": X}, rtol=1e-5, atol=1e-6)


def test_bidirectional_lstm_with_peepholes_matches_onnxruntime() -> None:
    init = {**_weights(4, 2), "lens": np.full(BATCH, SEQ, dtype="int32"),
            "h0": np.zeros((2, BATCH, HIDDEN), "float32"), "c0": RNG.standard_normal((2, BATCH, HIDDEN)).astype("float32"),
            "P": RNG.standard_normal((2, 3 * HIDDEN)).astype("float32")}
    m = single_node("LSTM", {"X": X}, n_out=3, initializers=init, hidden_size=HIDDEN, direction="bidirectional")
    assert_matches_ort(m, {"X": X}, rtol=1e-5, atol=1e-6)


def test_rows_shorter_than_the_sequence_keep_their_last_state_and_zero_their_outputs() -> None:
    lens = np.array([4, 2, 1], dtype="int32")
    m = single_node("LSTM", {"X": X, "lens": lens}, n_out=3, initializers=_weights(4),
                    input_names=["X", "W", "R", "B", "lens"], hidden_size=HIDDEN)
    assert_matches_ort(m, {"X": X, "lens": lens}, rtol=1e-5, atol=1e-6)


def test_rnn_with_clip_and_chosen_activations_matches_onnxruntime() -> None:
    m = single_node("RNN", {"X": X}, n_out=2, initializers=_weights(1, 2), hidden_size=HIDDEN,
                    direction="bidirectional", clip=0.7, activations=["LeakyRelu", "Tanh"], activation_alpha=[0.2])
    assert_matches_ort(m, {"X": X}, rtol=1e-5, atol=1e-6)


def test_reverse_direction_with_shorter_rows_is_unsupported() -> None:
    lens = np.array([4, 2, 1], dtype="int32")
    m = single_node("GRU", {"X": X, "lens": lens}, n_out=2, initializers=_weights(3),
                    input_names=["X", "W", "R", "B", "lens"], hidden_size=HIDDEN, direction="reverse")
    with pytest.raises(UnsupportedError, match="GRU .*sequence_lens with a reverse direction"):
        from_onnx(m)
