"""The external codegens differential testing builds with: the built-in `cblas` and the test
codegens of tests/codegens/ (acme_npu: relay_to_tir with ConvertLayout and a C library;
acme_conv: function_at_a_time; toy_cg_thflow: dense layers in a C library), and the targets
that name them, alone and together."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from compiler.byoc.codegen_config import CodegenSpec
from compiler.ir.types import TensorType
from compiler.ops.registry import Sample

CODEGEN_DIR = Path(__file__).resolve().parents[1] / "codegens"
NAMES = ("acme_npu", "acme_conv", "toy_cg_thflow")
# Host code alone; each codegen alone; several in one build, where the first named takes a
# match first (acme_npu's conv2d+relu before cblas's conv2d).
TARGETS = (
    "c", "cblas, c", "acme_npu, c", "acme_conv, c", "toy_cg_thflow, c",
    "acme_npu, toy_cg_thflow, cblas, c",
)


@cache
def test_codegens() -> tuple[CodegenSpec, ...]:
    return tuple(CodegenSpec.from_json_file(CODEGEN_DIR / name / f"{name}.json") for name in NAMES)


test_codegens.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def library_accepts(codegen: str, op: str, sample: Sample) -> bool:
    """Whether the test library of `codegen` takes a call of `op` drawn as `sample`, as far as
    its patterns cannot say: their JSON patterns claim every `nn.relu(nn.conv2d(*, *))` or
    `nn.bias_add(nn.dense(*, *), *)`, the C libraries take float32 only, and
    * acme_npu: ungrouped convolutions (its kernel reads one weight channel per input channel);
    * toy_cg_thflow: 2-D data, with the bias along the last axis.
    The generator asks this of every call it draws of an op in the codegen's patterns when a
    model's target names the codegen: a call the library refuses fails the run, and a bias on
    the wrong axis of a square product would be added silently wrong."""
    if codegen == "acme_npu" and op == "nn.conv2d":
        return _all_f32(sample) and sample.attrs.get("groups", 1) == 1 and _f32_out(sample)
    if codegen == "toy_cg_thflow" and op == "nn.dense":
        return _all_f32(sample) and _rank(sample.inputs[0]) == 2 and _f32_out(sample)
    if codegen == "toy_cg_thflow" and op == "nn.bias_add":
        return _rank(sample.inputs[0]) != 2 or (_all_f32(sample) and sample.attrs.get("axis", 1) in (1, -1))
    return True


def _dtype(entry: object) -> str | None:
    if isinstance(entry, TensorType):
        return entry.dtype
    return str(entry.dtype) if isinstance(entry, np.ndarray) else None


def _rank(entry: object) -> int | None:
    if isinstance(entry, TensorType):
        return entry.ndim
    return entry.ndim if isinstance(entry, np.ndarray) else None


def _all_f32(sample: Sample) -> bool:
    return all(_dtype(e) == "float32" for e in sample.inputs)


def _f32_out(sample: Sample) -> bool:
    return sample.attrs.get("out_dtype") in (None, "", "float32")
