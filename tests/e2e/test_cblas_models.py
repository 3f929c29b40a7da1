"""Whole models compiled with target "cblas, c": their dense, batch_matmul and conv2d layers run
in OpenBLAS's sgemm through the built-in cblas codegen, and the results still match the
reference interpreter and numpy."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from compiler.parser import parse_file
from compiler.runtime.build import compile_check
from compiler.runtime.interpreter import run_main
from tests.e2e import models
from tests.e2e.cli_runner import relaycc

TARGET = "cblas, c"
# The cblas kernels each model must call (a subset: the host may keep what the checks refuse).
# The CNN's classifier (1 row) and the attention block's dense layers (8 rows) are fewer rows
# than cblas takes: the host's dot kernel runs them.
EXPECTED_KERNELS = {
    "cnn": {"relaycc_cblas_conv2d", "relaycc_cblas_conv2d_bias_relu"},
    "attention": {"relaycc_cblas_batch_matmul"},
    "mlp_seed001": {"relaycc_cblas_dense_bias_relu", "relaycc_cblas_dense_bias"},
}




@pytest.fixture(scope="module", params=sorted(EXPECTED_KERNELS))
def compiled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    name = request.param
    out = tmp_path_factory.mktemp(f"cblas_{name}") / "out"
    result = relaycc("compile", str(models.path(name)), "-o", str(out), "--target", TARGET)
    assert result.returncode == 0, result.stderr
    return name, out


def called_kernels(out: Path) -> set[str]:
    """The cblas kernels the generated C calls (`status = relaycc_cblas_dense(&i0, ...)`)."""
    text = "\n".join(p.read_text() for p in (out / "src").rglob("*.c"))
    return set(re.findall(r"=\s*(relaycc_cblas_\w+)\(", text))


def test_cblas_build_matches_the_interpreter_and_numpy(compiled: tuple[str, Path], tmp_path: Path) -> None:
    name, out = compiled
    make_inputs, reference = models.CASES[name]
    inputs = make_inputs(seed=5)
    np.savez(tmp_path / "in.npz", **inputs)
    result = relaycc("run", str(out), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz"))
    assert result.returncode == 0, result.stderr
    got = np.load(tmp_path / "o.npz")
    interpreted = run_main(parse_file(models.path(name)), inputs)
    expected = reference(**inputs)
    assert got.files == [f"out{i}" for i in range(len(expected))]
    for i, (want_interp, want_np) in enumerate(zip(interpreted, expected)):
        np.testing.assert_allclose(got[f"out{i}"], want_interp, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[f"out{i}"], want_np, rtol=1e-4, atol=1e-5)


def test_model_library_calls_sgemm_from_openblas(compiled: tuple[str, Path]) -> None:
    _, out = compiled
    library = out / "libdefault.so"
    symbols = subprocess.run(["nm", "-D", str(library)], capture_output=True, text=True, check=True).stdout
    assert " U cblas_sgemm" in symbols
    needed = subprocess.run(["objdump", "-p", str(library)], capture_output=True, text=True, check=True).stdout
    assert "libopenblas" in needed


def test_generated_c_calls_the_fused_kernels(compiled: tuple[str, Path]) -> None:
    name, out = compiled
    assert EXPECTED_KERNELS[name] <= called_kernels(out)


def test_report_marks_the_offloaded_calls_as_cblas(compiled: tuple[str, Path]) -> None:
    _, out = compiled
    report = json.loads((out / "metadata.json").read_text())
    assert report["target"]["external"] == ["cblas"]
    cblas_functions = {name for name, f in report["functions"].items() if f.get("compiler") == "cblas"}
    assert cblas_functions
    offloaded = [c for c in report["calls"] if c["callee"] in cblas_functions]
    assert offloaded and all(c["kind"] == "extern" for c in offloaded)


def test_generated_c_compiles_without_warnings(compiled: tuple[str, Path]) -> None:
    _, out = compiled
    for source in sorted((out / "src").rglob("*.c")):
        assert compile_check(source.read_text(), ["-I", str(out / "include"), "-I", str(source.parent)]) == [], source


def test_a_dense_of_a_few_rows_stays_on_the_host(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = relaycc("compile", str(models.path("mlp")), "-o", str(out), "--target", TARGET)  # 8 rows
    assert result.returncode == 0, result.stderr
    assert not called_kernels(out)


def test_unsupported_layers_stay_on_the_host(tmp_path: Path) -> None:
    # A grouped convolution and a float64 dense are refused by the cblas checks.
    model = tmp_path / "m.relay"
    model.write_text("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4, 6, 6), float32], %w: Tensor[(4, 2, 3, 3), float32],
          %a: Tensor[(3, 5), float64], %b: Tensor[(2, 5), float64]) {
  (nn.conv2d(%x, %w, padding=[0, 0, 0, 0], groups=2), nn.dense(%a, %b, units=None))
}
""")
    out = tmp_path / "out"
    result = relaycc("compile", str(model), "-o", str(out), "--target", TARGET)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "metadata.json").read_text())
    assert not any(f.get("compiler") == "cblas" for f in report["functions"].values())
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((1, 4, 6, 6)).astype("float32"),
              "w": rng.standard_normal((4, 2, 3, 3)).astype("float32"),
              "a": rng.standard_normal((3, 5)), "b": rng.standard_normal((2, 5))}
    np.savez(tmp_path / "in.npz", **inputs)
    result = relaycc("run", str(out), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz"))
    assert result.returncode == 0, result.stderr
    got = np.load(tmp_path / "o.npz")
    want = run_main(parse_file(model), inputs)
    np.testing.assert_allclose(got["out0"], want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["out1"], want[1], rtol=1e-10)
