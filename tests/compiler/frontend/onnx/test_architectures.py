"""Real architectures in ONNX form: small torch definitions (random weights, no download)
exported with torch.onnx, imported, compiled with target c and run, against onnxruntime on the
same model and inputs at rtol 1e-4. atol is 1e-5 on outputs of magnitude about one (sums of a
few hundred products in another order differ by a few 1e-6 there)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests.compiler.frontend.onnx import torch_cnns
from tests.compiler.frontend.onnx.onnx_models import compile_and_run, run_ort
from tests.compiler.frontend.onnx.torch_bert import BertEncoder
from tests.compiler.frontend.onnx.torch_export import export, randomize_norm_statistics

RTOL, ATOL = 1e-4, 1e-5


def _assert_compiled_matches_ort(m: object, feeds: dict[str, np.ndarray], outdir: Path) -> None:
    want = run_ort(m, feeds)  # type: ignore[arg-type]
    got = compile_and_run(m, feeds, outdir)  # type: ignore[arg-type]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


CNNS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "resnet": (torch_cnns.ResNet, (1, 3, 32, 32)),
    "densenet": (torch_cnns.DenseNet, (1, 3, 32, 32)),
    "inception": (torch_cnns.Inception, (1, 3, 48, 48)),
    "squeezenet": (torch_cnns.SqueezeNet, (1, 3, 32, 32)),
    "shufflenet": (torch_cnns.ShuffleNet, (1, 3, 32, 32)),
    "vgg": (torch_cnns.VGG, (2, 3, 16, 16)),
    "mobilenet_v2": (torch_cnns.MobileNetV2, (1, 3, 32, 32)),
}


@pytest.mark.parametrize("name", sorted(CNNS))
def test_cnn_architecture_exported_by_torch_compiles_and_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    make, shape = CNNS[name]
    torch.manual_seed(len(name))
    module = randomize_norm_statistics(make(), seed=len(name))
    x = torch.randn(shape)
    m = export(module, [x], ["input.1"], ["logits"])
    _assert_compiled_matches_ort(m, {"input.1": x.numpy()}, tmp_path)


def test_bert_style_encoder_compiles_and_matches_onnxruntime(tmp_path: Path) -> None:
    torch.manual_seed(7)
    module = BertEncoder()
    ids = torch.randint(0, 50, (2, 8))
    types = (torch.arange(8) >= 5).long().expand(2, 8).contiguous()
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    m = export(module, [ids, types, mask], ["input_ids", "token_type_ids", "attention_mask"],
               ["last_hidden_state", "pooled"])
    feeds = {"input_ids": ids.numpy(), "token_type_ids": types.numpy(), "attention_mask": mask.numpy()}
    _assert_compiled_matches_ort(m, feeds, tmp_path)
