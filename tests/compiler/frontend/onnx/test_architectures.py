"""Real architectures in ONNX form: small torch definitions (random weights, no download)
exported with torch.onnx, imported, compiled with target c and run, against onnxruntime on the
same model and inputs at rtol 1e-4. atol is 1e-5 on outputs of magnitude about one (sums of a
few hundred products in another order differ by a few 1e-6 there)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from compiler.runtime.module import CompiledModule
from tests.compiler.frontend.onnx import torch_cnns
from tests.compiler.frontend.onnx.onnx_models import compile_and_run, relay_feeds, run_ort
from tests.compiler.frontend.onnx.torch_bert import BertEncoder
from tests.compiler.frontend.onnx.torch_export import export, randomize_norm_statistics

RTOL, ATOL = 1e-4, 1e-5


def _both(m: object, feeds: dict[str, np.ndarray], outdir: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """onnxruntime's outputs and ours (compiled with target c)."""
    return run_ort(m, feeds), compile_and_run(m, feeds, outdir)  # type: ignore[arg-type]


def _assert_compiled_matches_ort(m: object, feeds: dict[str, np.ndarray], outdir: Path) -> None:
    want, got = _both(m, feeds, outdir)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def _assert_uses(m: onnx.ModelProto, op_types: set[str]) -> None:
    """The export still has what makes the family (an exporter change could fold it away)."""
    assert op_types <= {n.op_type for n in m.graph.node}


# Model, input shape, and the ONNX ops its export must contain.
CNNS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], set[str]]] = {
    "resnet": (torch_cnns.ResNet, (1, 3, 32, 32), {"Conv", "MaxPool", "Add", "GlobalAveragePool", "Gemm"}),
    "densenet": (torch_cnns.DenseNet, (1, 3, 32, 32), {"BatchNormalization", "Concat", "AveragePool", "ReduceMean"}),
    "inception": (torch_cnns.Inception, (1, 3, 48, 48), {"Concat", "AveragePool", "MaxPool"}),
    "squeezenet": (torch_cnns.SqueezeNet, (1, 3, 32, 32), {"Concat", "MaxPool", "GlobalAveragePool"}),
    "vgg": (torch_cnns.VGG, (2, 3, 16, 16), {"MaxPool", "AveragePool", "Gemm"}),
    "mobilenet_v2": (torch_cnns.MobileNetV2, (1, 3, 32, 32), {"Clip", "Add", "Conv"}),
}


@pytest.mark.parametrize("name", sorted(CNNS))
def test_cnn_architecture_exported_by_torch_compiles_and_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    make, shape, op_types = CNNS[name]
    torch.manual_seed(len(name))
    module = randomize_norm_statistics(make(), seed=len(name))
    x = torch.randn(shape)
    m = export(module, [x], ["input.1"], ["logits"])
    _assert_uses(m, op_types)
    _assert_compiled_matches_ort(m, {"input.1": x.numpy()}, tmp_path)


def test_shufflenet_exported_with_a_dynamic_batch_runs_other_batch_sizes(tmp_path: Path) -> None:
    # ShuffleNet's test (not repeated with a static batch: this is the same model with more to
    # get right): the channel shuffle's view(n, groups, c // groups, h, w) and the chunk are
    # computed from the `?` batch.
    torch.manual_seed(5)
    module = randomize_norm_statistics(torch_cnns.ShuffleNet(), seed=5)
    m = export(module, [torch.randn(1, 3, 32, 32)], ["input.1"], ["logits"],
               dynamic_axes={"input.1": {0: "batch"}, "logits": {0: "batch"}})
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    _assert_uses(m, {"Reshape", "Transpose", "Slice", "Shape", "Concat"})
    groups = {a.i for n in m.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group"}
    assert {4, 16} <= groups  # the grouped 1x1 and a depthwise 3x3
    want, got = _both(m, {"input.1": torch.randn(3, 3, 32, 32).numpy()}, tmp_path)
    assert got[0].shape == (3, 10)
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)


def test_bert_style_encoder_compiles_and_matches_onnxruntime(tmp_path: Path) -> None:
    torch.manual_seed(7)
    ids = torch.randint(0, 50, (2, 8))
    types = (torch.arange(8) >= 5).long().expand(2, 8).contiguous()
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    m = export(BertEncoder(), [ids, types, mask], ["input_ids", "token_type_ids", "attention_mask"],
               ["last_hidden_state", "pooled"])
    _assert_uses(m, {"Gather", "MatMul", "Softmax", "LayerNormalization", "Erf", "Tanh"})
    feeds = {"input_ids": ids.numpy(), "token_type_ids": types.numpy(), "attention_mask": mask.numpy()}
    _assert_compiled_matches_ort(m, feeds, tmp_path)


def test_bert_style_encoder_with_dynamic_batch_and_sequence_compiles_and_runs_other_shapes(tmp_path: Path) -> None:
    # Exported at 2 x 8, run at 3 x 5 and 1 x 7: the heads' view(n, s, heads, head_dim), the
    # positions sliced to the sequence length, attention's batched MatMul, the GELU's dense
    # (its result read twice, so kept in a `?`-shaped temporary inside the fused function) and
    # the pooler's take of the first token all see `?` dims. One build runs both shapes.
    torch.manual_seed(7)
    names = ["input_ids", "token_type_ids", "attention_mask"]
    example = [torch.randint(0, 50, (2, 8)), torch.zeros(2, 8, dtype=torch.long), torch.ones(2, 8, dtype=torch.long)]
    m = export(BertEncoder(), example, names, ["last_hidden_state", "pooled"],
               dynamic_axes={k: {0: "batch", 1: "sequence"} for k in names})
    module = None
    for batch, sequence in ((3, 5), (1, 7)):
        ids = torch.randint(0, 50, (batch, sequence))
        types = (torch.arange(sequence) >= 3).long().expand(batch, sequence).contiguous()
        mask = torch.ones(batch, sequence, dtype=torch.long)
        mask[0, sequence - 1:] = 0
        feeds = dict(zip(names, (ids.numpy(), types.numpy(), mask.numpy())))
        want = run_ort(m, feeds)
        if module is None:
            got = compile_and_run(m, feeds, tmp_path)
            module = CompiledModule(tmp_path)
        else:
            got = module.run(relay_feeds(m, feeds)[1]).outputs
        assert got[0].shape == (batch, sequence, 16) and got[1].shape == (batch, 16)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
