"""An RNN-T (recurrent neural network transducer) as TVM's PyTorch frontend prints it, with the
Builder of tests/e2e/tvm_printed.py.

`aten::lstm` is unrolled the way `relay.frontend.common.lstm_cell` writes it: the sequence
`unbind` into steps (`split` into T pieces, each `squeeze`d on axis 0), the initial state
`unbind` from (layers, batch, hidden); per step `add(add(add(nn.dense(x, W_ih), nn.dense(h,
W_hh)), b_ih), b_hh)`, `split` into the i, f, g, o gates, `sigmoid`/`tanh`, the new cell and
hidden states; the outputs `stack`ed on axis 0 and the final states `stack`ed per layer. Every
binding that one aten::lstm produces carries its span, `aten::lstm_<k>`.

* encoder: an LSTM over (T, batch, features) audio frames, then a linear projection to the
  joint dimension;
* prediction network: label tokens embedded with `cast` to int32 and `take(..., axis=0)`
  (aten::embedding), an LSTM, a linear projection;
* joint network: `expand_dims` of both sides, the broadcast `add` to (batch, T, U, joint),
  `tanh`, a linear layer to the vocabulary and `nn.log_softmax`.

Static shapes: T = 4 frames, U = 3 labels, 8 features, hidden 16, joint 16, vocabulary 12.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.tvm_printed import Builder, Printed, Value, add, linear

T, U, FEATURES, HIDDEN, JOINT, VOCAB = 4, 3, 8, 16, 16, 12


def _unbind(b: Builder, x: Value) -> list[Value]:
    steps, *rest = x.shape
    parts = b.call_tuple("split", [x], [Value("", (1, *rest))] * steps, f"indices_or_sections={steps}")
    return [b.call("squeeze", [b.get(parts, t)], tuple(rest), "axis=[0]") for t in range(steps)]


def lstm_layer(b: Builder, x: Value, h0: Value, c0: Value, name: str, states: bool) -> tuple[Value, ...]:
    """aten::lstm (one layer, batch_first=False) -> (output, h_n, c_n), or (output,) when the
    states are unused (TVM prints only what the result uses)."""
    features, hidden = x.shape[-1], h0.shape[-1]
    w_ih = b.weight(f"{name}.weight_ih_l0", (4 * hidden, features), scale=0.3)
    w_hh = b.weight(f"{name}.weight_hh_l0", (4 * hidden, hidden), scale=0.3)
    b_ih = b.weight(f"{name}.bias_ih_l0", (4 * hidden,))
    b_hh = b.weight(f"{name}.bias_hh_l0", (4 * hidden,))
    b.span_source = f"aten::lstm_{b.aten_counts['lstm']}"
    b.aten_counts["lstm"] += 1
    steps = _unbind(b, x)
    (h,), (c,) = _unbind(b, h0), _unbind(b, c0)
    batch = h.shape[0]
    outputs = []
    for step in steps:
        gates = add(b, b.call("nn.dense", [step, w_ih], (batch, 4 * hidden), "units=None"),
                    b.call("nn.dense", [h, w_hh], (batch, 4 * hidden), "units=None"))
        gates = add(b, add(b, gates, b_ih), b_hh)
        quarter = Value("", (batch, hidden))
        parts = b.call_tuple("split", [gates], [quarter] * 4, "indices_or_sections=4, axis=-1")
        i = b.call("sigmoid", [b.get(parts, 0)], quarter.shape)
        f = b.call("sigmoid", [b.get(parts, 1)], quarter.shape)
        g = b.call("tanh", [b.get(parts, 2)], quarter.shape)
        o = b.call("sigmoid", [b.get(parts, 3)], quarter.shape)
        c = add(b, b.call("multiply", [f, c], c.shape), b.call("multiply", [i, g], c.shape))
        h = b.call("multiply", [o, b.call("tanh", [c], c.shape)], h.shape)
        outputs.append(h)
    result = [b.call("stack", [b.tuple(outputs)], (len(outputs), batch, hidden))]
    if states:
        result += [b.call("stack", [b.tuple([v])], (1, batch, hidden)) for v in (h, c)]
    b.span_source = None
    return tuple(result)


def rnnt(weights: str = "constants") -> Printed:
    b = Builder("rnnt", weights, seed=41)
    frames = b.input("frames", (T, 1, FEATURES))
    tokens = b.input("tokens", (1, U), "int64", high=VOCAB)
    h0, c0 = b.input("h0", (1, 1, HIDDEN)), b.input("c0", (1, 1, HIDDEN))
    # encoder
    (enc,) = lstm_layer(b, frames, h0, c0, "encoder.lstm", states=False)
    enc = b.call("transpose", [enc], (1, T, HIDDEN), "axes=[1, 0, 2]")
    enc = linear(b, enc, "encoder.output_linear", JOINT)
    # prediction network
    embedding = b.weight("predictor.embedding.weight", (VOCAB, FEATURES), scale=0.5)
    ids = b.call("cast", [tokens], tokens.shape, 'dtype="int32"', dtype="int32")
    emb = b.call("take", [embedding, ids], (1, U, FEATURES), "axis=0")
    emb = b.call("transpose", [emb], (U, 1, FEATURES), "axes=[1, 0, 2]")
    pred, h_n, c_n = lstm_layer(b, emb, h0, c0, "predictor.lstm", states=True)
    pred = b.call("transpose", [pred], (1, U, HIDDEN), "axes=[1, 0, 2]")
    pred = linear(b, pred, "predictor.output_linear", JOINT)
    # joint network
    enc = b.call("expand_dims", [enc], (1, T, 1, JOINT), "axis=2")
    pred = b.call("expand_dims", [pred], (1, 1, U, JOINT), "axis=1")
    joint = b.call("tanh", [add(b, enc, pred)], (1, T, U, JOINT))
    logits = linear(b, joint, "joiner.linear", VOCAB)
    log_probs = b.call("nn.log_softmax", [logits], logits.shape)
    return b.finish(b.tuple([log_probs, h_n, c_n]))


MODELS: dict[str, Callable[[str], Printed]] = {"rnnt": rnnt}
