"""`relaycc compile model.onnx` on a model as a PyTorch user brings it: a 20-layer CNN defined
in the tests (random weights), exported with torch.onnx, compiled and run through the command
line, its output compared with onnxruntime's on the same file (rtol 1e-4, atol 1e-5)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import torch

from tests.compiler.frontend.onnx.onnx_models import run_ort
from tests.compiler.frontend.onnx.torch_cnns import DeepCNN
from tests.compiler.frontend.onnx.torch_export import export, randomize_norm_statistics
from tests.e2e.cli_runner import relaycc


def test_compile_of_a_torch_exported_twenty_layer_cnn_matches_onnxruntime(tmp_path: Path) -> None:
    torch.manual_seed(20)
    module = randomize_norm_statistics(DeepCNN(), seed=20)
    m = export(module, [torch.randn(1, 3, 16, 16)], ["input.1"], ["logits"])
    weight_layers = [n for n in m.graph.node if n.op_type in ("Conv", "Gemm")]
    assert len(weight_layers) == 20
    model_path = tmp_path / "model.onnx"
    onnx.save(m, model_path)

    compiled = relaycc("compile", model_path, "-o", tmp_path / "out")
    assert compiled.returncode == 0, compiled.stderr
    interface = json.loads((tmp_path / "out" / "metadata.json").read_text())["interface"]
    assert [(i["name"], i["onnx_name"]) for i in interface["inputs"]] == [("input_1", "input.1")]

    x = np.random.default_rng(20).standard_normal((1, 3, 16, 16)).astype("float32")
    with open(tmp_path / "in.npz", "wb") as stream:
        np.savez(stream, **{"input.1": x})
    ran = relaycc("run", tmp_path / "out", "--inputs", tmp_path / "in.npz", "-o", tmp_path / "out.npz")
    assert ran.returncode == 0, ran.stderr
    got = np.load(tmp_path / "out.npz")["out0"]
    (want,) = run_ort(onnx.load(model_path), {"input.1": x})
    assert got.shape == want.shape == (1, 10)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
