"""Whole models in TVM's printed Relay style (tests/e2e/tvm_printed.py) parse, round-trip through
our printer, type-check to the types TVM wrote in their `ty=` comments, compile with `relaycc
compile` for target "c" (and "cblas, c" for the CNNs and transformers), and their outputs match
`relaycc interpret`; the ResNet block and the LSTM cell also match numpy written here."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from compiler.parser.printer import astext
from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from tests.e2e import tvm_printed
from tests.e2e.tvm_printed import BLAS_MODELS, MODELS, WEIGHT_FORMS, Printed
from tests.e2e.cli_runner import relaycc

# Models that do not parse yet, with the reason; their tests that parse are strict xfails.
NOT_YET: dict[str, str] = {}


def cases(*rows: tuple[str, ...]) -> list[object]:
    """Parametrize rows whose first field is a model name, marking those in NOT_YET."""
    return [pytest.param(*row, marks=pytest.mark.xfail(strict=True, reason=NOT_YET[row[0]]))
            if row[0] in NOT_YET else row for row in rows]


CASES = cases(*[(name, form) for name in MODELS for form in WEIGHT_FORMS])
# Weights as @main inputs compile through the same kernels as weights as constants; a model of
# each family is built in that form too (every model's params form is parsed and interpreted).
PARAMS_BUILDS = ("resnet_bottleneck", "mobilenet_v2", "unet", "lstm", "gru", "transformer_encoder", "gpt2_block_arange")
BUILDS = cases(*[(name, form, "c") for name in MODELS for form in WEIGHT_FORMS
                 if form == "constants" or name in PARAMS_BUILDS],
               *[(name, "constants", "cblas, c") for name in BLAS_MODELS])
NAMES = [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=NOT_YET[name])) if name in NOT_YET
         else name for name in MODELS]




def assert_close_to_scale(got: np.ndarray, want: np.ndarray, rtol: float = 1e-4) -> None:
    """float32 agreement relative to the scale of the output (its largest magnitude)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = max(float(np.abs(want).max()), 1e-6)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


def call_types(text: str) -> Counter[str]:
    """The `ty=` comments of the operator-call lines (not tuples or projections) of a text."""
    body = text.split("#[metadata]")[0]
    return Counter(re.findall(r"^  (?:%\d+ = )?[a-z][\w.]*\(.*/\* ty=(.*?)(?: span=\S+)? \*/;?$", body, re.M))


@pytest.mark.parametrize(("name", "form"), CASES)
def test_printed_model_parses_prints_and_parses_to_the_same_module(name: str, form: str) -> None:
    printed = MODELS[name](form)
    module = parse(printed.text, name)
    assert structural_equal(module, parse(astext(module), name))


@pytest.mark.parametrize("name", NAMES)
def test_inferred_types_are_the_ones_tvm_printed(name: str) -> None:
    printed = MODELS[name]("params")
    ours = astext(parse(printed.text, name), show_types=True)
    assert call_types(ours) == call_types(printed.text)


@pytest.mark.parametrize("name", list(MODELS))
def test_weight_forms_differ_only_in_where_weights_live(name: str) -> None:
    as_params, as_constants = MODELS[name]("params"), MODELS[name]("constants")
    assert "#[metadata]" in as_constants.text and "meta[relay.Constant][" in as_constants.text
    signature = as_params.text.splitlines()[1]
    assert all(f"%{weight}: " in signature for weight in as_params.weights)
    for a, b in zip(as_params.weights.values(), as_constants.weights.values()):
        np.testing.assert_array_equal(a, b)


def test_printed_text_has_tvm_printer_details() -> None:
    text = tvm_printed.resnet("constants").text
    assert text.startswith('#[version = "0.0.5"]\ndef @main(%input0: Tensor[(1, 3, 32, 32), float32] '
                           "/* ty=Tensor[(1, 3, 32, 32), float32] */) -> Tensor[(1, 10), float32] {")
    assert ("%0 = nn.conv2d(%input0, meta[relay.Constant][0] /* ty=Tensor[(8, 3, 7, 7), float32] */, "
            "strides=[2, 2], padding=[3, 3, 3, 3], channels=8, kernel_size=[7, 7]) "
            "/* ty=Tensor[(1, 8, 16, 16), float32] span=aten::_convolution_0:0:0 */;") in text
    assert "%2 = %1.0 /* ty=Tensor[(1, 8, 16, 16), float32] */;" in text
    assert "units=None) /* ty=Tensor[(1, 10), float32]" in text
    assert "\n  nn.softmax(" in text and "\n}\n\n#[metadata]\n{" in text


# ----------------------------------------------------------------------------------------------
# Compiled against the interpreter


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], tuple[Path, Printed]]:
    """Per (model, form): a directory with the model text, inputs and `relaycc interpret` outputs."""
    cache: dict[tuple[str, str], tuple[Path, Printed]] = {}

    def get(name: str, form: str) -> tuple[Path, Printed]:
        if (name, form) not in cache:
            printed = MODELS[name](form)
            d = tmp_path_factory.mktemp(f"{name}_{form}")
            (d / "model.relay").write_text(printed.text)
            np.savez(d / "in.npz", **printed.make_inputs(seed=7))
            result = relaycc("interpret", str(d / "model.relay"), "--inputs", str(d / "in.npz"),
                             "-o", str(d / "interpreted.npz"))
            assert result.returncode == 0, result.stderr
            cache[name, form] = d, printed
        return cache[name, form]

    return get


def compile_and_run(d: Path, target: str) -> dict[str, np.ndarray]:
    """The outputs of `d`'s model built for `target` and run on its inputs; a build another
    test of this worker already ran (the numpy checks reuse the interpreter checks' builds of
    the constants form) is not built and run again."""
    out = d / ("build_" + re.sub(r"\W+", "_", target))
    if (out / "outputs.npz").exists():
        return dict(np.load(out / "outputs.npz"))
    result = relaycc("compile", str(d / "model.relay"), "-o", str(out), "--target", target)
    assert result.returncode == 0, result.stderr
    result = relaycc("run", str(out), "--inputs", str(d / "in.npz"), "-o", str(out / "outputs.npz"))
    assert result.returncode == 0, result.stderr
    return dict(np.load(out / "outputs.npz"))


@pytest.mark.parametrize(("name", "form", "target"), BUILDS)
def test_compiled_printed_model_matches_the_interpreter(interpreted, name: str, form: str, target: str) -> None:
    d, _ = interpreted(name, form)
    got = compile_and_run(d, target)
    want = dict(np.load(d / "interpreted.npz"))
    assert sorted(got) == sorted(want)
    for key in want:
        assert_close_to_scale(got[key], want[key])


# ----------------------------------------------------------------------------------------------
# Against numpy


def _conv_nchw(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for dy in range(kh):
        for dx in range(kw):
            patch = xp[:, :, dy : dy + stride * oh : stride, dx : dx + stride * ow : stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, dy, dx])
    return out


def _bn(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    def channel(v: np.ndarray) -> np.ndarray:
        return v.reshape(1, -1, 1, 1).astype(np.float64)

    normalized = (x - channel(w[f"{name}.running_mean"])) / np.sqrt(channel(w[f"{name}.running_var"]) + 1e-5)
    return normalized * channel(w[f"{name}.weight"]) + channel(w[f"{name}.bias"])


def resnet_basic_block_numpy(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    y = np.maximum(_bn(_conv_nchw(x, w["layer1.0.1.conv.weight"], 2, 1), w, "layer1.0.1.bn"), 0)
    y = _bn(_conv_nchw(y, w["layer1.0.2.conv.weight"], 1, 1), w, "layer1.0.2.bn")
    shortcut = _bn(_conv_nchw(x, w["layer1.0.downsample.conv.weight"], 2, 0), w, "layer1.0.downsample.bn")
    return np.maximum(y + shortcut, 0).astype("float32")


def lstm_cell_numpy(x: np.ndarray, h: np.ndarray, c: np.ndarray, w: dict[str, np.ndarray]) -> list[np.ndarray]:
    def sigmoid(v: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-v))

    gates = (x.astype(np.float64) @ w["lstm.weight_ih_l0"].T + w["lstm.bias_ih_l0"]
             + h @ w["lstm.weight_hh_l0"].T + w["lstm.bias_hh_l0"])
    i, f, g, o = np.split(gates, 4, axis=1)
    c_new = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h_new = sigmoid(o) * np.tanh(c_new)
    return [h_new.astype("float32"), c_new.astype("float32")]


@pytest.mark.parametrize("form", WEIGHT_FORMS)
def test_compiled_resnet_basic_block_matches_numpy(interpreted, form: str) -> None:
    d, printed = interpreted("resnet_basic_block", form)
    inputs = dict(np.load(d / "in.npz"))
    got = compile_and_run(d, "c")
    assert_close_to_scale(got["out0"], resnet_basic_block_numpy(inputs["input0"], printed.weights))


@pytest.mark.parametrize("form", WEIGHT_FORMS)
def test_compiled_lstm_cell_matches_numpy(interpreted, form: str) -> None:
    d, printed = interpreted("lstm_cell", form)
    inputs = dict(np.load(d / "in.npz"))
    got = compile_and_run(d, "c")
    want = lstm_cell_numpy(inputs["input0"], inputs["h0"], inputs["c0"], printed.weights)
    assert_close_to_scale(got["out0"], want[0])
    assert_close_to_scale(got["out1"], want[1])


def test_gelu_forms_agree_with_their_formulas() -> None:
    """The erf and tanh gelu expansions printed here compute what their names say (interpreter)."""
    x = np.linspace(-4, 4, 8 * 64, dtype="float32").reshape(1, 8, 64)
    for gelu, formula in [
        (tvm_printed.gelu_erf, lambda v: 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))),
        (tvm_printed.gelu_tanh, lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))),
    ]:
        b = tvm_printed.Builder("gelu", "params")
        printed = b.finish(gelu(b, b.input("x", x.shape)))
        (got,) = run_main(parse(printed.text), {"x": x})
        assert_close_to_scale(got, formula(x.astype(np.float64)).astype("float32"), rtol=1e-5)


@pytest.mark.parametrize("name", ["resnet", "gpt2_block", "lstm"])
def test_params_form_with_weights_bound_at_compile_time_matches_the_interpreter(name: str, tmp_path: Path) -> None:
    """The from_pytorch workflow: the printed signature holds the weights (named like
    `layer1.0.1.conv.weight`), `--params` binds them, and the model then takes only its data."""
    printed = MODELS[name]("params")
    (tmp_path / "model.relay").write_text(printed.text)
    np.savez(tmp_path / "weights.npz", **printed.weights)
    data = {k: v for k, v in printed.make_inputs(seed=3).items() if k not in printed.weights}
    np.savez(tmp_path / "in.npz", **data)
    result = relaycc("compile", str(tmp_path / "model.relay"), "-o", str(tmp_path / "out"),
                     "--params", str(tmp_path / "weights.npz"))
    assert result.returncode == 0, result.stderr
    result = relaycc("run", str(tmp_path / "out"), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz"))
    assert result.returncode == 0, result.stderr
    got = np.load(tmp_path / "o.npz")
    want = run_main(parse(printed.text), data, printed.weights)
    assert len(got.files) == len(want)
    for i, expected in enumerate(want):
        assert_close_to_scale(got[f"out{i}"], expected)


def _blocked_channels(v: np.ndarray) -> np.ndarray:
    """A (1, C/8, 1, 1, 8) per-channel constant as (1, C, 1, 1)."""
    return v.transpose(0, 1, 4, 2, 3).reshape(1, -1, 1, 1).astype(np.float64)


def _depthwise_nchw(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    _, _, h, wd = x.shape
    _, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros_like(x, dtype=np.float64)
    for dy in range(kh):
        for dx in range(kw):
            out += xp[:, :, dy : dy + h, dx : dx + wd] * w[:, 0, dy, dx].reshape(1, -1, 1, 1)
    return out


def mobilenet_nchwc_numpy(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """The model in plain NCHW: the blocked layouts, packed weights and NCHWc ops must not change
    what it computes."""
    def bn_relu(v: np.ndarray, name: str) -> np.ndarray:
        return np.maximum(v * _blocked_channels(w[f"{name}_bn_scale"]) + _blocked_channels(w[f"{name}_bn_shift"]), 0)

    y = bn_relu(_conv_nchw(x, w["conv1_weight"], 2, 1), "conv1")
    y = bn_relu(_depthwise_nchw(y, w["dw1_weight"], 1), "dw1")
    y = bn_relu(_conv_nchw(y, w["pw1_weight"], 1, 0), "pw1")
    n, c, h, wd = y.shape
    y = y.reshape(n, c, h // 2, 2, wd // 2, 2).mean(axis=(3, 5)).mean(axis=(2, 3))
    logits = y @ w["fc.weight"].T.astype(np.float64) + w["fc.bias"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype("float32")


@pytest.mark.parametrize("form", WEIGHT_FORMS)
def test_compiled_mobilenet_nchwc_with_packed_dense_head_matches_numpy(interpreted, form: str) -> None:
    d, printed = interpreted("mobilenet_nchwc", form)
    inputs = dict(np.load(d / "in.npz"))
    got = compile_and_run(d, "c")
    assert_close_to_scale(got["out0"], mobilenet_nchwc_numpy(inputs["data"], printed.weights))
