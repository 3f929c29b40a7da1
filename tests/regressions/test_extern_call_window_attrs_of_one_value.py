"""fuzz-diff seeds 1000004 and 1000015 (reduced): conv2d attrs written with one value for both
axes (`strides=[2]`, `dilation=[2]`), offloaded to a JSON codegen whose library reads
(stride_h, stride_w, 4 paddings, dilation_h, dilation_w).

The extern-call codegen expanded `padding` to its four values but passed strides and dilation
as written: one int64_t instead of two, so every later argument was shifted. The library
rejected the shapes (the run failed), two calls written differently made the build fail with
"called with (..., int64_t x 10) and with (..., int64_t x 11)", and a shift the shapes happen
to allow would have been a silently wrong convolution.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from compiler.byoc.codegen_config import CodegenSpec
from compiler.driver import BuildOptions, export, lower
from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

ACME_NPU = Path(__file__).resolve().parents[1] / "codegens" / "acme_npu" / "acme_npu.json"

MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 9, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, strides=[2], padding=[1]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%x, %w, strides=[1, 2], dilation=[2]);
  %3 = nn.relu(%2);
  (%1, %3)
}
"""


def test_one_value_strides_and_dilation_reach_the_library_as_two(tmp_path: Path) -> None:
    mod = parse(MODEL)
    spec = CodegenSpec.from_json_file(ACME_NPU)
    model = lower(mod, BuildOptions(target="acme_npu, c", codegens=(spec,)))
    assert sum(c["kind"] == "extern" for c in model.report["calls"]) == 2
    export(model, tmp_path, MODEL)
    rng = np.random.default_rng(1000004)
    inputs = {"x": rng.uniform(-1, 1, (1, 3, 9, 8)).astype("float32"),
              "w": rng.uniform(-1, 1, (4, 3, 3, 3)).astype("float32")}
    outputs = CompiledModule(tmp_path).run(inputs).outputs
    expected = run_main(mod, inputs)
    assert [o.shape for o in outputs] == [(1, 4, 5, 4), (1, 4, 5, 2)]
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-5)


def test_cblas_takes_one_value_strides_and_dilation_and_computes_them(tmp_path: Path) -> None:
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 9, 8), float32], %w: Tensor[(4, 3, 3, 2), float32]) {
  nn.conv2d(%x, %w, strides=[2], padding=[1, 0], dilation=[2])
}
"""
    mod = parse(text)
    model = lower(mod, BuildOptions(target="cblas, c"))
    assert [c["kind"] for c in model.report["calls"]] == ["extern"]
    export(model, tmp_path, text)
    rng = np.random.default_rng(1000015)
    inputs = {"x": rng.uniform(-1, 1, (2, 3, 9, 8)).astype("float32"),
              "w": rng.uniform(-1, 1, (4, 3, 3, 2)).astype("float32")}
    (out,) = CompiledModule(tmp_path).run(inputs).outputs
    (expected,) = run_main(mod, inputs)
    np.testing.assert_allclose(out, np.asarray(expected), rtol=1e-5, atol=1e-5)
