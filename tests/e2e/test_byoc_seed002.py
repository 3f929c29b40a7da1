"""Seed 002: passes that run only on the functions partitioned for one codegen.

A model with two convolutions (tests/models/seed002_two_convs.relay): the codegen acme_conv
(tests/codegens/acme_conv) takes the first one with its relu and asks for
`ConvertLayout(nn.conv2d=NHWC:OHWI)` and `FoldConstant`; the second convolution stays on the host.
Only the offloaded convolution changes layout, its weight becomes an OHWI constant, and the
results match numpy.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler.byoc.codegen_config import CodegenSpec
from compiler.driver import BuildOptions, lower
from compiler.ir.expr import Call, Constant, Function
from compiler.ir.visitor import post_order
from compiler.parser import parse_file
from compiler.tir.stmt import PrimFunc

TESTS = Path(__file__).resolve().parent.parent
MODEL = TESTS / "models" / "seed002_two_convs.relay"
ACME_JSON = TESTS / "codegens" / "acme_conv" / "acme_conv.json"
SYMBOL = "tvmgen_default_acme_conv_main_0"


def relaycc(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compiler", *map(str, args)], capture_output=True, text=True,
                          check=False)


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w1": (rng.standard_normal((4, 2, 3, 3)) * 0.5).astype("float32"),
            "w2": (rng.standard_normal((6, 4, 3, 3)) * 0.5).astype("float32")}


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 100)
    return {"x": rng.standard_normal((1, 2, 8, 8)).astype("float32"),
            "b2": rng.standard_normal(6).astype("float32")}


def conv2d_nchw_same(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """3x3 convolution with padding 1, written out plainly."""
    n, c, h, wd = x.shape
    o = w.shape[0]
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, o, h, wd), dtype=np.float64)
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, dy:dy + h, dx:dx + wd], w[:, :, dy, dx])
    return out.astype("float32")


def model_numpy(x, w1, w2, b2):
    hidden = np.maximum(conv2d_nchw_same(x, w1), 0.0)
    return conv2d_nchw_same(hidden, w2) + b2.reshape(1, -1, 1, 1)


def conv_layouts(func: Function) -> list[tuple[str, str]]:
    return [(n.attrs["data_layout"], n.attrs["kernel_layout"])
            for n in post_order(func.body) if isinstance(n, Call) and n.op_name == "nn.conv2d"]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    work = tmp_path_factory.mktemp("seed002")
    np.savez(work / "params.npz", **weights())
    result = relaycc("compile", MODEL, "-o", work / "out", "--target", "acme_conv, c", "--codegen", ACME_JSON,
                     "--params", work / "params.npz")
    assert result.returncode == 0, result.stderr
    return work


def test_offloaded_and_host_convolutions_together_match_numpy(compiled, tmp_path):
    np.savez(tmp_path / "inputs.npz", **inputs())
    result = relaycc("run", compiled / "out", "--inputs", tmp_path / "inputs.npz", "-o", tmp_path / "outputs.npz")
    assert result.returncode == 0, result.stderr
    got = np.load(tmp_path / "outputs.npz")["out0"]
    np.testing.assert_allclose(got, model_numpy(**inputs(), **weights()), rtol=1e-4, atol=1e-4)


def test_only_the_partitioned_convolution_changes_layout():
    spec = CodegenSpec.from_json_file(ACME_JSON)
    options = BuildOptions(target="acme_conv, c", codegens=(spec,))
    model = lower(parse_file(MODEL), options, weights(), executor=False)
    offloaded = model.lowered[SYMBOL]
    assert isinstance(offloaded, Function) and offloaded.has_nonzero_attr("Extern")
    assert conv_layouts(offloaded) == [("NHWC", "OHWI")]
    # The weight was transformed once, at compile time: an OHWI constant, no layout_transform of it.
    weight = next(n for n in post_order(offloaded.body) if isinstance(n, Constant) and n.data.ndim == 4)
    np.testing.assert_array_equal(weight.data, weights()["w1"].transpose(0, 2, 3, 1))
    transforms = [n for n in post_order(offloaded.body) if isinstance(n, Call) and n.op_name == "layout_transform"]
    assert [(t.attrs["src_layout"], t.attrs["dst_layout"]) for t in transforms] == [("NCHW", "NHWC"), ("NHWC", "NCHW")]
    # The host's convolution is still NCHW / OIHW and nothing on the host transforms layouts.
    host = [f for _, f in model.lowered.items() if isinstance(f, PrimFunc) and "conv2d" in f.name]
    assert [f.attrs["data_layout"] for f in host] == ["NCHW"]
    assert [f.attrs["kernel_layout"] for f in host] == ["OIHW"]
    assert not any("layout_transform" in c["callee"] for c in model.report["calls"])


def test_report_marks_the_offloaded_call(compiled):
    report = json.loads((compiled / "out" / "metadata.json").read_text())
    kinds = [(c["callee"], c["kind"], c["target"]) for c in report["calls"]]
    assert kinds[0] == (SYMBOL, "extern", "acme_conv")
    assert [k for _, k, _ in kinds[1:]] == ["prim_func"]
    assert report["functions"][SYMBOL]["compiler"] == "acme_conv"
    [module] = report["external_modules"]
    assert module["name"] == "acme_conv" and module["sources"] == [f"src/{SYMBOL}.c"]


def test_host_only_build_has_no_external_functions_and_two_nchw_convolutions():
    model = lower(parse_file(MODEL), BuildOptions(), weights(), executor=False)
    assert not any(isinstance(f, Function) and f.attrs.get("Extern") for _, f in model.lowered.items())
    convs = [f for _, f in model.lowered.items() if isinstance(f, PrimFunc) and "conv2d" in f.name]
    assert [(f.attrs["data_layout"], f.attrs["kernel_layout"]) for f in convs] == [("NCHW", "OIHW")] * 2


def test_a_library_that_wants_nhwc_ohwi_gets_converted_tensors_and_matches_numpy(tmp_path):
    # The story's own case: an extern-call codegen whose vendor library only does NHWC / OHWI.
    # The transforms of the data run as host loop kernels inside the partitioned function, the
    # weight arrives as an OHWI constant, and the host convolution is untouched.
    np.savez(tmp_path / "params.npz", **weights(seed=3))
    np.savez(tmp_path / "inputs.npz", **inputs(seed=3))
    npu = TESTS / "codegens" / "acme_npu" / "acme_npu.json"
    outdir = tmp_path / "out"
    result = relaycc("compile", MODEL, "-o", outdir, "--target", "acme_npu, c", "--codegen", npu,
                     "--params", tmp_path / "params.npz")
    assert result.returncode == 0, result.stderr
    result = relaycc("run", outdir, "--inputs", tmp_path / "inputs.npz", "-o", tmp_path / "outputs.npz")
    assert result.returncode == 0, result.stderr
    got = np.load(tmp_path / "outputs.npz")["out0"]
    np.testing.assert_allclose(got, model_numpy(**inputs(seed=3), **weights(seed=3)), rtol=1e-4, atol=1e-4)
    text = (outdir / "src" / "acme_npu_extern_calls.c").read_text()
    assert "int64_t i1_shape[4] = {4, 3, 3, 2};" in text  # the OHWI weight
    assert "acme_conv2d_relu_nhwc_ohwi(&buf0, &i1, &buf1, 1, 1, 1, 1, 1, 1, 1, 1);" in text
    report = json.loads((outdir / "metadata.json").read_text())
    host_calls = [c for c in report["calls"] if c["kind"] == "prim_func"]
    assert [c["metadata"]["relay_attrs"]["data_layout"] for c in host_calls] == ["NCHW"]
