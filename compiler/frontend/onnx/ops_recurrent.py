"""ONNX RNN, GRU and LSTM, unrolled over the sequence (its length must be static).

The input projection of every step is one product (X·Wᵀ over all steps at once, both biases
added); each step then adds H·Rᵀ and applies the gates, as ONNX's equations for the op write
them, in gate order RNN: i; GRU: z, r, h; LSTM: i, o, f, c. Directions run one after the
other; `reverse` walks the steps backwards and writes each output at its own step.
`sequence_lens` shorter than the sequence stop a row's state at its length and zero its outputs
after it (forward direction; a reverse direction needs every row at full length).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from compiler.frontend.onnx.context import Converted, NodeContext
from compiler.frontend.onnx.registry import CONVERTERS, converter
from compiler.ir.expr import Expr

# Activations that take parameters, with ONNX's defaults, in the order activation_alpha and
# activation_beta list them.
_PARAMS = {
    "Affine": ("alpha", "beta"), "LeakyRelu": ("alpha",), "ThresholdedRelu": ("alpha",),
    "ScaledTanh": ("alpha", "beta"), "HardSigmoid": ("alpha", "beta"), "Elu": ("alpha",),
}
_SIMPLE = {"Relu": "nn.relu", "Tanh": "tanh", "Sigmoid": "sigmoid"}
_CONVERTED = ("LeakyRelu", "ThresholdedRelu", "HardSigmoid", "Elu", "Softsign", "Softplus")

Activation = Callable[[Expr], Expr]


@dataclass
class _Cell:
    gates: int
    default_activations: tuple[str, ...]


_CELLS = {"RNN": _Cell(1, ("Tanh",)), "GRU": _Cell(3, ("Sigmoid", "Tanh")), "LSTM": _Cell(4, ("Sigmoid", "Tanh", "Tanh"))}


def _activations(ctx: NodeContext, directions: int) -> list[list[Activation]]:
    """Per direction, the cell's activation functions (f, g, h as the cell has them)."""
    cell = _CELLS[ctx.op_type]
    names = [str(n.decode() if isinstance(n, bytes) else n) for n in (ctx.attr("activations") or [])]
    if not names:
        names = list(cell.default_activations) * directions
    per = len(cell.default_activations)
    if len(names) != per * directions:
        raise ctx.unsupported(f"{len(names)} activations given; a {directions}-direction {ctx.op_type} needs "
                              f"{per * directions}")
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    fns = [_activation(ctx, name, alphas, betas) for name in names]
    return [fns[d * per:(d + 1) * per] for d in range(directions)]


def _activation(ctx: NodeContext, name: str, alphas: list[float], betas: list[float]) -> Activation:
    params = {}
    for param in _PARAMS.get(name, ()):
        given = alphas if param == "alpha" else betas
        if given:
            params[param] = float(given.pop(0))
    if name in _SIMPLE:
        return lambda x: ctx.op(_SIMPLE[name], x)
    if name == "Affine":
        alpha, beta = params.get("alpha", 1.0), params.get("beta", 0.0)
        return lambda x: ctx.op("add", ctx.op("multiply", x, ctx.scalar(alpha, _dtype(x))), ctx.scalar(beta, _dtype(x)))
    if name == "ScaledTanh":
        alpha, beta = params.get("alpha", 1.0), params.get("beta", 1.0)
        return lambda x: ctx.op("multiply", ctx.op("tanh", ctx.op("multiply", x, ctx.scalar(beta, _dtype(x)))),
                                ctx.scalar(alpha, _dtype(x)))
    if name in _CONVERTED:
        # The op's own converter, as if the model had the activation as a node of its own.
        def apply(x: Expr) -> Expr:
            node = NodeContext(op_type=name, name=ctx.name, opset=ctx.opset, since=ctx.since, attrs=params,
                               inputs=[x], values=[None], input_names=["x"], num_outputs=1)
            return CONVERTERS[name].convert(node)  # type: ignore[return-value]  # one output
        return apply
    raise ctx.unsupported(f"activation {name!r}")


def _dtype(x: Expr) -> str:
    return x.checked_type.dtype  # type: ignore[attr-defined]  # a tensor


def _direction_slice(ctx: NodeContext, x: Expr, d: int) -> Expr:
    """Direction d's part of a [num_directions, ...] input, without that axis."""
    return ctx.op("squeeze", ctx.op("strided_slice", x, begin=(d,), end=(d + 1,), strides=(1,), axes=(0,)), axis=(0,))


def _split(ctx: NodeContext, x: Expr, parts: int, axis: int) -> list[Expr]:
    if parts == 1:
        return [x]
    pieces = ctx.op("split", x, indices_or_sections=parts, axis=axis)
    return [ctx.item(pieces, k) for k in range(parts)]


def _recurrent(ctx: NodeContext) -> Converted:
    cell = _CELLS[ctx.op_type]
    hidden = ctx.int_attr("hidden_size", 0)
    direction = ctx.str_attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.unsupported(f"direction {direction!r}")
    if ctx.int_attr("input_forget", 0):
        raise ctx.unsupported("input_forget=1 (coupled input and forget gates)")
    batchwise = ctx.int_attr("layout", 0) == 1
    x = ctx.input(0)
    if batchwise:
        x = ctx.op("transpose", x, axes=(1, 0, 2))
    seq, batch, width = ctx.static_shape(0)[1], ctx.static_shape(0)[0], ctx.static_shape(0)[2]
    if not batchwise:
        seq, batch = batch, seq
    directions = 2 if direction == "bidirectional" else 1
    if hidden <= 0:
        hidden = ctx.static_shape(2)[2]
    dtype = ctx.dtype(0)
    lengths = _lengths(ctx, seq, direction)
    clip = ctx.attr("clip")
    fns = _activations(ctx, directions)

    ys, last_h, last_c = [], [], []
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        w, r = _direction_slice(ctx, ctx.input(1), d), _direction_slice(ctx, ctx.input(2), d)
        # Every step's input projection at once: [seq * batch, gates * hidden].
        flat = ctx.op("reshape", x, newshape=(seq * batch, width))
        projected = ctx.op("nn.dense", flat, w, units=cell.gates * hidden)
        recurrent_bias = None
        if ctx.has_input(3):
            w_bias, r_bias = _split(ctx, _direction_slice(ctx, ctx.input(3), d), 2, 0)
            if ctx.op_type == "GRU":
                # The h gate's recurrent bias sits inside r ⊙ (...) in one of GRU's forms.
                projected = ctx.op("add", projected, w_bias)
                recurrent_bias = r_bias
            else:
                projected = ctx.op("add", projected, ctx.op("add", w_bias, r_bias))
        steps = _split(ctx, ctx.op("reshape", projected, newshape=(seq, batch, cell.gates * hidden)), seq, 0)
        steps = [ctx.op("squeeze", s, axis=(0,)) for s in steps]
        h = _initial(ctx, 5, d, batch, hidden, dtype)
        c = _initial(ctx, 6, d, batch, hidden, dtype) if ctx.op_type == "LSTM" else None
        peep = _split(ctx, _direction_slice(ctx, ctx.input(7), d), 3, 0) if ctx.op_type == "LSTM" and ctx.has_input(7) else None
        outputs: list[Expr | None] = [None] * seq
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            gates_in = steps[t]
            new_h, new_c = _step(ctx, gates_in, h, c, r, recurrent_bias, peep, fns[d], hidden, clip)
            if lengths is not None:
                valid = ctx.op("less", ctx.const(np.full((batch, 1), t, dtype="int32")), lengths)
                new_h = ctx.op("where", valid, new_h, h)
                if c is not None and new_c is not None:
                    new_c = ctx.op("where", valid, new_c, c)
                outputs[t] = ctx.op("where", valid, new_h, ctx.op("zeros_like", new_h))
            else:
                outputs[t] = new_h
            h, c = new_h, new_c
        ys.append(ctx.op("stack", ctx.tuple([o for o in outputs if o is not None]), axis=0))  # [seq, batch, hidden]
        last_h.append(h)
        if c is not None:
            last_c.append(c)

    y = ctx.op("stack", ctx.tuple(ys), axis=1)  # [seq, dirs, batch, hidden]
    y_h = ctx.op("stack", ctx.tuple(last_h), axis=0)  # [dirs, batch, hidden]
    results = [y, y_h]
    if ctx.op_type == "LSTM":
        results.append(ctx.op("stack", ctx.tuple(last_c), axis=0))
    if batchwise:
        results = [ctx.op("transpose", results[0], axes=(2, 0, 1, 3))] + [
            ctx.op("transpose", state, axes=(1, 0, 2)) for state in results[1:]
        ]
    return results


def _lengths(ctx: NodeContext, seq: int, direction: str) -> Expr | None:
    """sequence_lens as a [batch, 1] int32 column, or None when every row runs the whole sequence."""
    if not ctx.has_input(4):
        return None
    known = ctx.value(4)
    if known is not None and bool(np.all(np.asarray(known) == seq)):
        return None
    if direction != "forward":
        raise ctx.unsupported("sequence_lens with a reverse direction (each row would start at its own end)")
    return ctx.op("expand_dims", ctx.op("cast", ctx.input(4), dtype="int32"), axis=1)


def _initial(ctx: NodeContext, index: int, d: int, batch: int, hidden: int, dtype: str) -> Expr:
    if ctx.has_input(index):
        return _direction_slice(ctx, ctx.input(index), d)
    return ctx.const(np.zeros((batch, hidden), dtype=dtype))


def _step(ctx: NodeContext, gates_in: Expr, h: Expr, c: Expr | None, r: Expr, recurrent_bias: Expr | None,
          peep: Sequence[Expr] | None, fns: Sequence[Activation], hidden: int,
          clip: object) -> tuple[Expr, Expr | None]:
    """One step of the cell: the new hidden state (and cell state for an LSTM)."""
    def clipped(v: Expr) -> Expr:
        return v if clip is None else ctx.op("clip", v, a_min=-float(clip), a_max=float(clip))  # type: ignore[arg-type]

    gates = _CELLS[ctx.op_type].gates
    if ctx.op_type == "GRU":
        x_z, x_r, x_h = _split(ctx, gates_in, 3, 1)
        r_z, r_r, r_h = _split(ctx, r, 3, 0)
        b_z = b_r = b_h = None
        if recurrent_bias is not None:
            b_z, b_r, b_h = _split(ctx, recurrent_bias, 3, 0)

        def recur(weight: Expr, bias: Expr | None, state: Expr) -> Expr:
            out = ctx.op("nn.dense", state, weight, units=hidden)
            return out if bias is None else ctx.op("add", out, bias)

        z = fns[0](clipped(ctx.op("add", x_z, recur(r_z, b_z, h))))
        reset = fns[0](clipped(ctx.op("add", x_r, recur(r_r, b_r, h))))
        if ctx.int_attr("linear_before_reset", 0):
            candidate = ctx.op("add", x_h, ctx.op("multiply", reset, recur(r_h, b_h, h)))
        else:
            candidate = ctx.op("add", x_h, recur(r_h, b_h, ctx.op("multiply", reset, h)))
        candidate = fns[1](clipped(candidate))
        one = ctx.scalar(1.0, _dtype(h))
        new_h = ctx.op("add", ctx.op("multiply", ctx.op("subtract", one, z), candidate), ctx.op("multiply", z, h))
        return new_h, None
    total = ctx.op("add", gates_in, ctx.op("nn.dense", h, r, units=gates * hidden))
    if ctx.op_type == "RNN":
        return fns[0](clipped(total)), None
    i_in, o_in, f_in, c_in = _split(ctx, total, 4, 1)
    assert c is not None
    if peep is not None:
        p_i, p_o, p_f = peep
        i_in = ctx.op("add", i_in, ctx.op("multiply", p_i, c))
        f_in = ctx.op("add", f_in, ctx.op("multiply", p_f, c))
    i_gate, f_gate = fns[0](clipped(i_in)), fns[0](clipped(f_in))
    new_c = ctx.op("add", ctx.op("multiply", f_gate, c), ctx.op("multiply", i_gate, fns[1](clipped(c_in))))
    if peep is not None:
        o_in = ctx.op("add", o_in, ctx.op("multiply", peep[1], new_c))
    o_gate = fns[0](clipped(o_in))
    return ctx.op("multiply", o_gate, fns[2](new_c)), new_c


for _op in ("RNN", "GRU", "LSTM"):
    converter(_op, (7, 14, 22))(_recurrent)
