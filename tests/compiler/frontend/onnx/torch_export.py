"""Exporting torch modules defined in the tests to ONNX, as a user of torch.onnx would.

The TorchScript-based exporter (`dynamo=False`) is the one used: it needs nothing beyond torch
and runs in about a second, where the torch.export-based one needs onnxscript and takes 6-11 s
per model here. Weights are random; batch-norm statistics are drawn too, so that a folded or
mis-imported normalization shows.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence

import onnx
import torch
from torch import nn


def randomize_norm_statistics(module: nn.Module, seed: int) -> nn.Module:
    generator = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=generator) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=generator) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=generator) + 0.5)
            m.bias.data.copy_(torch.randn(c, generator=generator) * 0.1)
    return module.eval()


def export(module: nn.Module, args: Sequence[torch.Tensor], input_names: Sequence[str],
           output_names: Sequence[str], opset: int = 17,
           dynamic_axes: Mapping[str, Mapping[int, str]] | None = None) -> onnx.ModelProto:
    """`dynamic_axes` as torch.onnx takes it ({input name: {axis: dim name}}): those dims are
    `?` in the model and its shape arithmetic is computed from them at run time."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        # The TorchScript exporter announces its deprecation on every call.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(module.eval(), tuple(args), buffer, dynamo=False, opset_version=opset,
                          input_names=list(input_names), output_names=list(output_names),
                          dynamic_axes=dict(dynamic_axes) if dynamic_axes else None)
    return onnx.load_from_string(buffer.getvalue())
