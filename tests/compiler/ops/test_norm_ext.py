"""group_norm, instance_norm and lrn (compiler/ops/norm_ext.py): which axes each normalises
over, TVM's LRN window and scaling, SimplifyInference's decomposition, and the type errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.expr import Call
from compiler.ir.types import ANY, TensorType, Type
from compiler.ir.visitor import post_order
from compiler.ops.registry import OpPattern, TypeRelationError
from compiler.parser import parse
from compiler.passes.pass_infra import PassContext
from compiler.passes.simplify_inference import SimplifyInference
from tests.compiler.ops.relay_models import HEADER, assert_round_trips, compiled_matches_interpreter

F32 = "float32"


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(name: str, types: list[Type], **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(types, op.make_attrs(attrs))


def run(name: str, arrays: list[np.ndarray], **attrs: object) -> np.ndarray:
    op = ops.get(name)
    return op.reference(arrays, op.make_attrs(attrs))


def standardize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


def test_group_norm_normalises_each_group_of_channels_with_the_spatial_axes() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 3, 2))
    gamma, beta = rng.normal(size=6), rng.normal(size=6)
    got = run("nn.group_norm", [x, gamma, beta], num_groups=3, epsilon=1e-3)
    for g in range(3):
        group = x[:, 2 * g : 2 * g + 2]
        want = standardize(group, (1, 2, 3), float(np.float32(1e-3)))
        want = want * gamma[2 * g : 2 * g + 2, None, None] + beta[2 * g : 2 * g + 2, None, None]
        np.testing.assert_allclose(got[:, 2 * g : 2 * g + 2], want, rtol=1e-10)


def test_group_norm_on_the_last_axis_does_not_mix_the_axes_before_it() -> None:
    x = np.random.default_rng(1).normal(size=(3, 2, 4))
    ones, zeros = np.ones(4), np.zeros(4)
    got = run("nn.group_norm", [x, ones, zeros], num_groups=2, axis=-1)
    want = standardize(x.reshape(3, 2, 2, 2), (3,), float(np.float32(1e-5))).reshape(3, 2, 4)
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_instance_norm_normalises_each_sample_and_channel_separately() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 5, 3, 4)).astype(F32)
    gamma, beta = rng.normal(size=4).astype(F32), rng.normal(size=4).astype(F32)
    got = run("nn.instance_norm", [x, gamma, beta], axis=3)
    want = standardize(x.astype("float64"), (1, 2), float(np.float32(1e-5))) * gamma + beta
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_instance_norm_scale_and_center_flags_drop_gamma_and_beta() -> None:
    x = np.random.default_rng(3).normal(size=(1, 2, 6))
    gamma, beta = np.full(2, 3.0), np.full(2, 5.0)
    plain = run("nn.instance_norm", [x, gamma, beta], scale=False, center=False)
    np.testing.assert_allclose(plain.mean(axis=2), 0, atol=1e-12)
    np.testing.assert_allclose(run("nn.instance_norm", [x, gamma, beta], center=False), 3 * plain)
    np.testing.assert_allclose(run("nn.instance_norm", [x, gamma, beta], scale=False), plain + 5)


def test_lrn_divides_alpha_by_size_and_sums_a_centred_window() -> None:
    x = np.arange(1, 6, dtype="float64").reshape(1, 5, 1, 1)
    got = run("nn.lrn", [x], size=3, alpha=0.3, beta=0.5, bias=1.0)[:, :, 0, 0]
    sq = (x[0, :, 0, 0] ** 2).tolist()
    window = [sq[0] + sq[1], sq[0] + sq[1] + sq[2], sq[1] + sq[2] + sq[3], sq[2] + sq[3] + sq[4], sq[3] + sq[4]]
    want = [v / (1.0 + 0.3 / 3 * s) ** 0.5 for v, s in zip(x[0, :, 0, 0], window)]
    np.testing.assert_allclose(got[0], want, rtol=1e-12)


def test_lrn_on_nhwc_equals_lrn_on_nchw() -> None:
    x = np.random.default_rng(4).normal(size=(2, 7, 3, 3)).astype(F32)
    nchw = run("nn.lrn", [x], size=5)
    nhwc = run("nn.lrn", [np.transpose(x, (0, 2, 3, 1))], size=5, axis=3)
    np.testing.assert_allclose(np.transpose(nhwc, (0, 3, 1, 2)), nchw, rtol=1e-6)


def test_norm_ext_types_propagate_unknown_dims() -> None:
    vec = t(6)
    assert infer("nn.group_norm", [t("?", 6, "?"), vec, vec], num_groups=2) == t("?", 6, "?")
    assert infer("nn.group_norm", [t(1, "?", 3), t("?"), t("?")], num_groups=4) == t(1, "?", 3)
    assert infer("nn.instance_norm", [t("?", 6, 2), vec, vec]) == t("?", 6, 2)
    assert infer("nn.lrn", [t("?", 3, "?", 2)]) == t("?", 3, "?", 2)


def test_norm_ext_errors_name_the_op_and_the_problem() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.group_norm: num_groups 4 does not divide the 6 channels"):
        infer("nn.group_norm", [t(2, 6, 3), t(6), t(6)], num_groups=4)
    with pytest.raises(TypeRelationError, match=r"nn.group_norm: num_groups must be positive"):
        infer("nn.group_norm", [t(2, 6, 3), t(6), t(6)])
    with pytest.raises(TypeRelationError, match=r"nn.group_norm: gamma .* must be 1-D with the length of axis 1"):
        infer("nn.group_norm", [t(2, 6, 3), t(3), t(6)], num_groups=2)
    with pytest.raises(TypeRelationError, match=r"nn.instance_norm: .* leaves no axis to normalise over"):
        infer("nn.instance_norm", [t(2, 6), t(6), t(6)])
    with pytest.raises(TypeRelationError, match=r"nn.instance_norm expects a floating-point tensor"):
        infer("nn.instance_norm", [t(2, 6, 3, dtype="int32"), t(6), t(6)])
    with pytest.raises(TypeRelationError, match=r"nn.lrn: size must be a positive odd number, got 4"):
        infer("nn.lrn", [t(1, 6, 2, 2)], size=4)
    with pytest.raises(TypeRelationError, match=r"nn.lrn: axis must be the channel axis 1 or 3, got 2"):
        infer("nn.lrn", [t(1, 6, 2, 2)], axis=2)
    with pytest.raises(TypeRelationError, match=r"nn.lrn expects 4-D data"):
        infer("nn.lrn", [t(6, 2)])


def test_norm_ext_attrs_and_patterns_follow_tvm() -> None:
    lrn = ops.get("nn.lrn").make_attrs({})
    assert (lrn["size"], lrn["axis"], lrn["bias"], lrn["alpha"], lrn["beta"]) == (5, 1, 2.0, 1e-4, 0.75)
    group = ops.get("nn.group_norm").make_attrs({})
    assert (group["num_groups"], group["axis"], group["epsilon"], group["center"], group["scale"]) == (
        0, 1, 1e-5, True, True)
    assert ops.get("nn.instance_norm").make_attrs({})["axis"] == 1
    for name in ("nn.group_norm", "nn.instance_norm", "nn.lrn"):
        assert ops.get(name).pattern == OpPattern.OPAQUE


MODEL = """def @main(%x: Tensor[(2, 6, 3, 3), float32], %g: Tensor[(6), float32], %b: Tensor[(6), float32]) {
  %0 = nn.group_norm(%x, %g, %b, num_groups=3, epsilon=0.001f);
  %1 = nn.relu(%0);
  %2 = nn.instance_norm(%1, %g, %b, center=False);
  %3 = nn.lrn(%2, size=3, alpha=0.5f, beta=0.5f, bias=1f);
  nn.instance_norm(%3, %g, %b, scale=False)
}
"""


def test_simplify_inference_removes_group_and_instance_norm() -> None:
    mod = SimplifyInference().run(parse(HEADER + MODEL), PassContext())
    names = {node.op_name for node in post_order(mod.main.body) if isinstance(node, Call)}
    assert "nn.group_norm" not in names and "nn.instance_norm" not in names
    assert {"reshape", "mean", "rsqrt", "nn.lrn"} <= names


def test_model_with_group_instance_norm_and_lrn_compiles_and_matches_interpreter(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    inputs = {
        "x": rng.normal(size=(2, 6, 3, 3)).astype(F32),
        "g": rng.uniform(0.5, 2, size=6).astype(F32),
        "b": rng.normal(size=6).astype(F32),
    }
    compiled_matches_interpreter(MODEL, inputs, tmp_path, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("call", [
    "nn.group_norm(%x, %g, %b, num_groups=2, axis=1, epsilon=0.001f, center=False)",
    "nn.instance_norm(%x, %g, %b, axis=-3, scale=False)",
    "nn.lrn(%x, size=3, axis=1, bias=1f, alpha=0.2f, beta=0.5f)",
])
def test_norm_ext_attrs_round_trip_through_the_printer(call: str) -> None:
    assert_round_trips(
        "def @main(%x: Tensor[(2, 6, 3, 3), float32], %g: Tensor[(6), float32], %b: Tensor[(6), float32]) {\n"
        f"  {call}\n}}\n"
    )
