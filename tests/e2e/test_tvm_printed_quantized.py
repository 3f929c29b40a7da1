"""Quantized CNNs as TVM's TFLite (int8 per-channel, and uint8) and PyTorch (uint8) frontends print them
(tests/e2e/tvm_printed_quantized.py) parse, round-trip, type to their `ty=` comments, compile and
match the interpreter bit for bit; the TFLite block's first layer is checked against numpy
integer arithmetic written here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.ir.expr import Call, Constant, Function, Op
from compiler.ir.module import IRModule
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from tests.e2e.printed_checks import (assert_outputs_match, assert_round_trips_with_printed_types,
                                      compile_and_run, interpret)
from tests.e2e.tvm_printed import WEIGHT_FORMS
from tests.e2e.tvm_printed_quantized import BLAS_MODELS, MODELS

BUILDS = [(name, form, "c") for name in MODELS for form in WEIGHT_FORMS] + [
    (name, "constants", "cblas, c") for name in BLAS_MODELS]


@pytest.mark.parametrize("form", WEIGHT_FORMS)
@pytest.mark.parametrize("name", list(MODELS))
def test_quantized_model_parses_round_trips_and_types_as_printed(name: str, form: str) -> None:
    assert_round_trips_with_printed_types(MODELS[name](form))


@pytest.mark.parametrize(("name", "form", "target"), BUILDS)
def test_compiled_quantized_model_matches_the_interpreter_bit_for_bit(name: str, form: str, target: str,
                                                                       tmp_path: Path) -> None:
    printed = MODELS[name](form)
    want = interpret(printed, tmp_path, printed.make_inputs(seed=7))
    got = compile_and_run(tmp_path, target)
    assert want["out0"].dtype == np.dtype("int8" if name == "qmobilenet_v2_tflite" else "uint8")
    assert len(np.unique(want["out0"])) >= 8  # the logits are not saturated or constant
    np.testing.assert_array_equal(got["out0"], want["out0"])
    assert_outputs_match(got, want, rtol=0)


def _first_call(module: object, op: str) -> Call:
    return next(node for node in post_order(module.main.body)  # type: ignore[attr-defined]
                if isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == op)


def _value(expr: object) -> np.ndarray:
    assert isinstance(expr, Constant)
    return expr.data


def test_tflite_first_layer_is_tvms_integer_arithmetic() -> None:
    """quantize, per-channel int8 conv with TF "same" padding, int32 bias, requantize (UPWARD
    rounding, int64 fixed point) against numpy integer arithmetic written from TVM's QNN
    canonicalization."""
    printed = MODELS["qmobilenet_v2_tflite"]("params")
    inputs = printed.make_inputs(seed=7)
    module = parse(printed.text)
    requantize = _first_call(module, "qnn.requantize")
    scales_in, out_scale, zp = (_value(requantize.args[k]) for k in (1, 3, 4))
    # The model cut after that requantize: its first layer.
    (got,) = run_main(IRModule.from_expr(Function(module.main.params, requantize)), inputs)

    x = np.clip(np.round(inputs["input"] / np.float32(0.0235)) - 1, -128, 127).astype(np.int64)
    w = inputs["_param_1"].astype(np.int64)  # HWIO
    xp = np.pad(x + 1, ((0, 0), (0, 1), (0, 1), (0, 0)))  # zero point -1; TF "same" at stride 2
    acc = np.zeros((1, 8, 8, 8), np.int64)
    for dy in range(3):
        for dx in range(3):
            acc += np.einsum("nhwc,co->nhwo", xp[:, dy : dy + 16 : 2, dx : dx + 16 : 2], w[dy, dx])
    acc += inputs["_param_2"]
    want = np.empty_like(acc)
    for ch in range(8):
        m, e = np.frexp(float(scales_in[ch]) / float(out_scale))
        q = int(round(m * 2**31))
        left, right = max(int(e), 0), max(-int(e), 0)
        want[..., ch] = ((acc[..., ch] << left) * q + (1 << (30 + right))) >> (31 + right)
    want = np.clip(want + int(zp), -128, 127)
    assert 0.05 < float((want == -128).mean()) < 0.9
    np.testing.assert_array_equal(got, want.astype("int8"))
