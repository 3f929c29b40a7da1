"""A relay_to_tir codegen behind a `?` batch (issue 10): models whose partitioned functions take
a batch known only at run time compile once and run at any batch.

acme_npu (tests/codegens/acme_npu) offloads conv2d+relu in NHWC/OHWI: the partitioned function
transforms layouts with host loop kernels that take the batch as a scalar, describes each tensor
to the library by a DLTensor whose shape holds the batch, and allocates its batch-sized
intermediates at run time; the executor runs the call's shape function first to size the result.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule
from compiler.parser import parse
from tests.e2e.cli_runner import relaycc

TESTS = Path(__file__).resolve().parent.parent
NPU_JSON = TESTS / "codegens" / "acme_npu" / "acme_npu.json"
TOY_JSON = TESTS / "codegens" / "toy_cg_thflow" / "toy_cg_thflow.json"
SYMBOL = "tvmgen_default_acme_npu_main_0"

CONV_RELU = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  nn.relu(%0)
}
"""

# Two offloaded convolutions (the second strided, 1x1) in one partitioned function, a host pool
# after it and an intermediate of the function as a second result.
TWO_CONVS = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 3, 8, 8), float32], %w1: Tensor[(4, 3, 3, 3), float32],
          %w2: Tensor[(5, 4, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, strides=[2, 2], padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, channels=5, kernel_size=[1, 1]);
  %3 = nn.relu(%2);
  %4 = nn.max_pool2d(%3, pool_size=[2, 2], strides=[2, 2]);
  (%4, %1)
}
"""

MLP = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 6), float32], %w1: Tensor[(5, 6), float32], %b1: Tensor[(5), float32],
          %w2: Tensor[(3, 5), float32], %b2: Tensor[(3), float32]) {
  %0 = nn.dense(%x, %w1, units=5);
  %1 = nn.relu(nn.bias_add(%0, %b1));
  %2 = nn.dense(%1, %w2, units=3);
  nn.bias_add(%2, %b2)
}
"""




def compile_model(text: str, outdir: Path, target: str, codegen: Path, params: dict | None = None) -> Path:
    model = outdir.with_suffix(".relay")
    model.write_text(text)
    extra: list[object] = []
    if params:
        np.savez(outdir.with_suffix(".npz"), **params)
        extra = ["--params", outdir.with_suffix(".npz")]
    result = relaycc("compile", model, "-o", outdir, "--target", target, "--codegen", codegen, *extra)
    assert result.returncode == 0, result.stderr
    return outdir


def conv2d_nchw(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """A convolution written out plainly, in float64."""
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    padded = np.pad(x.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for dy in range(kh):
        for dx in range(kw):
            window = padded[:, :, dy : dy + stride * (oh - 1) + 1 : stride, dx : dx + stride * (ow - 1) + 1 : stride]
            out += np.einsum("nchw,oc->nohw", window, w[:, :, dy, dx])
    return out


@pytest.fixture(scope="module")
def conv_relu(tmp_path_factory) -> Path:
    return compile_model(CONV_RELU, tmp_path_factory.mktemp("npu") / "conv_relu", "acme_npu, c", NPU_JSON)


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_one_build_runs_every_batch_and_matches_the_interpreter_and_numpy(conv_relu, batch):
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 3, 8, 8)).astype("float32")
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    (got,) = CompiledModule(conv_relu).run({"x": x, "w": w}).outputs
    assert got.shape == (batch, 4, 8, 8)
    (expected,) = run_main(parse(CONV_RELU), {"x": x, "w": w})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, np.maximum(conv2d_nchw(x, w, 1, 1), 0), rtol=1e-4, atol=1e-4)


def test_the_extern_call_carries_its_shape_function(conv_relu):
    report = json.loads((conv_relu / "metadata.json").read_text())
    [call] = report["calls"]
    assert (call["callee"], call["kind"], call["target"]) == (SYMBOL, "extern", "acme_npu")
    meta = call["metadata"]
    shape_fn = meta["prim_shape_fn_var"]
    assert meta["all_prim_shape_fn_vars"] == [shape_fn]
    assert meta["prim_shape_fn_states"] == [2, 2] and meta["prim_shape_fn_num_outputs"] == 1
    assert report["functions"][shape_fn]["kind"] == "shape_func"
    source = (conv_relu / "src" / "acme_npu_extern_calls.c").read_text()
    assert "int64_t acme_npu_0_i0_dim0" in source and "malloc" in source


def test_weights_bound_at_compile_time_and_a_host_convolution_after_it(tmp_path):
    # The seed-002 model with a `?` batch: the offloaded conv's OHWI weight is a lifted constant,
    # an argument the shape function does not read.
    text = (TESTS / "models" / "seed002_two_convs.relay").read_text()
    text = text.replace("(1, 2, 8, 8)", "(?, 2, 8, 8)").replace("(1, 6, 8, 8)", "(?, 6, 8, 8)")
    rng = np.random.default_rng(7)
    params = {"w1": rng.standard_normal((4, 2, 3, 3)).astype("float32"),
              "w2": rng.standard_normal((6, 4, 3, 3)).astype("float32")}
    outdir = compile_model(text, tmp_path / "seed002", "acme_npu, c", NPU_JSON, params)
    module = CompiledModule(outdir)
    for batch in (1, 3, 8):
        x = rng.standard_normal((batch, 2, 8, 8)).astype("float32")
        b2 = rng.standard_normal(6).astype("float32")
        (got,) = module.run({"x": x, "b2": b2}).outputs
        hidden = np.maximum(conv2d_nchw(x, params["w1"], 1, 1), 0)
        expected = conv2d_nchw(hidden, params["w2"], 1, 1) + b2.reshape(1, -1, 1, 1)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    [extern] = [c for c in json.loads((outdir / "metadata.json").read_text())["calls"] if c["kind"] == "extern"]
    assert extern["args"] == ["%x", "const0"] and extern["metadata"]["prim_shape_fn_states"] == [2, 0]


def test_two_offloaded_convolutions_with_a_host_pool_and_two_results(tmp_path):
    outdir = compile_model(TWO_CONVS, tmp_path / "two_convs", "acme_npu, c", NPU_JSON)
    module = CompiledModule(outdir)
    rng = np.random.default_rng(11)
    w1 = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    w2 = rng.standard_normal((5, 4, 1, 1)).astype("float32")
    for batch in (1, 3, 8):
        x = rng.standard_normal((batch, 3, 8, 8)).astype("float32")
        got = module.run({"x": x, "w1": w1, "w2": w2}).outputs
        expected = run_main(parse(TWO_CONVS), {"x": x, "w1": w1, "w2": w2})
        assert [g.shape for g in got] == [(batch, 5, 2, 2), (batch, 4, 4, 4)]
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_a_dense_library_takes_a_question_mark_batch_too(tmp_path):
    outdir = compile_model(MLP, tmp_path / "mlp", "toy_cg_thflow, c", TOY_JSON)
    module = CompiledModule(outdir)
    rng = np.random.default_rng(5)
    weights = {"w1": rng.standard_normal((5, 6)), "b1": rng.standard_normal(5),
               "w2": rng.standard_normal((3, 5)), "b2": rng.standard_normal(3)}
    weights = {k: v.astype("float32") for k, v in weights.items()}
    for batch in (1, 3, 8):
        x = rng.standard_normal((batch, 6)).astype("float32")
        (got,) = module.run({"x": x, **weights}).outputs
        hidden = np.maximum(x @ weights["w1"].T + weights["b1"], 0)
        np.testing.assert_allclose(got, hidden @ weights["w2"].T + weights["b2"], rtol=1e-4, atol=1e-4)
    report = json.loads((outdir / "metadata.json").read_text())
    assert [c["kind"] for c in report["calls"]] == ["extern"]
    assert "prim_shape_fn_var" in report["calls"][0]["metadata"]


def test_question_mark_height_and_width_reach_the_library_through_the_conv_shape_rule(tmp_path):
    # The output's height and width are floor divisions of the input's: the function computes
    # them with the host's numpy-exact helpers, for the DLTensors, the malloc and the kernels.
    text = CONV_RELU.replace("(?, 3, 8, 8)", "(?, 3, ?, ?)").replace("padding=", "strides=[2, 2], padding=")
    outdir = compile_model(text, tmp_path / "spatial", "acme_npu, c", NPU_JSON)
    assert "relaycc_floordiv_i64(" in (outdir / "src" / "acme_npu_extern_calls.c").read_text()
    module = CompiledModule(outdir)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    for shape in [(1, 3, 8, 8), (2, 3, 5, 9), (3, 3, 1, 2)]:
        x = rng.standard_normal(shape).astype("float32")
        (got,) = module.run({"x": x, "w": w}).outputs
        np.testing.assert_allclose(got, np.maximum(conv2d_nchw(x, w, 2, 1), 0), rtol=1e-4, atol=1e-4)


def test_an_already_partitioned_module_with_a_let_bound_composite(tmp_path):
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 3, 8, 8), float32], %w: Tensor[(4, 8, 8, 3), float32]) { @f(%x, %w) }
def @f(%p: Tensor[(?, 3, 8, 8), float32], %q: Tensor[(4, 8, 8, 3), float32], Compiler="acme_npu", Primitive=1,
       global_symbol="f") {
  %0 = layout_transform(%p, src_layout="NCHW", dst_layout="NHWC");
  let %c = fn (%a: Tensor[(?, 8, 8, 3), float32], %b: Tensor[(4, 8, 8, 3), float32],
               Composite="acme_npu.conv2d_relu") {
    nn.relu(nn.conv2d(%a, %b, channels=4, kernel_size=[8, 8], data_layout="NHWC", kernel_layout="OHWI"))
  };
  let %y = %c(%0, %q);
  layout_transform(%y, src_layout="NHWC", dst_layout="NCHW")
}
"""
    outdir = compile_model(text, tmp_path / "partitioned", "acme_npu, c", NPU_JSON)
    [call] = json.loads((outdir / "metadata.json").read_text())["calls"]
    assert call["callee"] == "f" and "prim_shape_fn_var" in call["metadata"]
    module = CompiledModule(outdir)
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 8, 8, 3)).astype("float32")
    for batch in (1, 3, 8):
        x = rng.standard_normal((batch, 3, 8, 8)).astype("float32")
        (got,) = module.run({"x": x, "w": w}).outputs
        (expected,) = run_main(parse(text), {"x": x, "w": w})
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        # An 8x8 kernel over an 8x8 image: one output pixel per filter.
        np.testing.assert_allclose(got[:, :, 0, 0], np.maximum(np.einsum("nchw,ohwc->no", x, w), 0), rtol=1e-4,
                                   atol=1e-4)
