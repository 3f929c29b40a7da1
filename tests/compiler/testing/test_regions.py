"""Motifs: codegen patterns read as chains of calls, and the draws a codegen's library takes."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.byoc.codegen_config import CodegenSpec, builtin
from compiler.ir.types import TensorType
from compiler.ops.registry import Sample
from compiler.testing.regions import RegionDraw, motifs, region_friendly

F32 = "float32"


def _spec(*patterns: str, mode: str = "relay_to_tir", attrs: tuple[str, ...] = ()) -> CodegenSpec:
    doc = {"name": "acme", "mode": mode,
           "patterns": [{"name": f"p{k}", "pattern": p, "attrs": list(attrs)} for k, p in enumerate(patterns)]}
    return CodegenSpec.from_document(doc)


def test_a_nested_pattern_is_a_chain_innermost_first() -> None:
    cblas = builtin("cblas")
    assert cblas is not None
    chains = {m.pattern: [link.op for link in m.chain] for m in motifs(cblas)}
    assert chains["dense_bias_relu"] == ["nn.dense", "nn.bias_add", "nn.relu"]
    conv = next(m for m in motifs(cblas) if m.pattern == "conv2d")
    assert dict(conv.chain[0].required) == {"data_layout": "NCHW", "kernel_layout": "OIHW", "groups": 1}
    assert ("nn.conv2d", "strides") in conv.passed_attrs
    relu = next(m for m in motifs(cblas) if m.pattern == "dense_bias_relu").chain[-1]
    assert relu.inner_at == 0 and relu.required == ()


def test_each_alternative_is_a_motif_and_a_tree_is_none() -> None:
    found = motifs(_spec("nn.relu(nn.conv2d(*, *)) | nn.dense(*, *)", "add(nn.relu(*), nn.relu(*))"))
    assert [[link.op for link in m.chain] for m in found] == [["nn.conv2d", "nn.relu"], ["nn.dense"]]


def test_a_const_argument_is_recorded() -> None:
    (motif,) = motifs(_spec("nn.conv2d(*, const)"))
    assert motif.chain[0].constants == frozenset({1})


def _conv(dtype: str = F32, **attrs: object) -> Sample:
    return Sample((TensorType((1, 3, 6, 6), dtype), TensorType((4, 3, 3, 3), dtype)), dict(attrs))


def test_a_library_call_is_float32_with_the_other_attributes_at_their_defaults() -> None:
    (motif,) = motifs(_spec("nn.relu(nn.conv2d(*, *))", attrs=("nn.conv2d.strides",)))
    conv = motif.chain[0]
    assert region_friendly(motif, conv, _conv(strides=[2, 2], channels=4), None)
    assert not region_friendly(motif, conv, _conv("float16"), None)
    assert not region_friendly(motif, conv, _conv(padding=[1, 1]), None)  # not passed to the library
    assert not region_friendly(motif, conv, _conv(out_dtype="float64"), None)


def test_a_function_at_a_time_codegen_takes_any_attributes_and_dtypes() -> None:
    (motif,) = motifs(_spec("nn.relu(nn.conv2d(*, *))", mode="function_at_a_time"))
    assert region_friendly(motif, motif.chain[0], _conv(padding=[1], strides=[2]), None)
    assert region_friendly(motif, motif.chain[0], _conv("float64"), None)


def test_a_required_attribute_value_must_be_drawn() -> None:
    (motif,) = motifs(_spec('nn.conv2d(*, *){groups=1, data_layout="NCHW"}'))
    assert region_friendly(motif, motif.chain[0], _conv(), None)
    assert not region_friendly(motif, motif.chain[0], _conv(groups=3), None)


def test_the_call_above_must_read_the_one_below() -> None:
    (motif,) = motifs(_spec("nn.relu(nn.conv2d(*, *))"))
    relu = motif.chain[1]
    below = TensorType((1, 4, 4, 4), F32)
    assert region_friendly(motif, relu, Sample((below,)), below)
    assert not region_friendly(motif, relu, Sample((TensorType((1, 4, 4, 3), F32),)), below)


@pytest.mark.parametrize("seed", range(3))
def test_a_region_draw_keeps_the_shape_below_and_leans_to_float32_and_first_choices(seed: int) -> None:
    below = TensorType((2, 9, 7), F32)
    draw = RegionDraw(np.random.default_rng(seed), below)
    assert draw.shape(1, 4, 1, 5) == (2, 9, 7)  # even past max_dim: the chain decides
    assert draw.shape(4, 4) != (2, 9, 7)
    assert draw.dtype(("int8", "float32")) == F32
    firsts = sum(draw.choice(("a", "b", "c", "d")) == "a" for _ in range(200))
    assert firsts > 120
