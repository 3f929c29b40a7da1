"""Losses (compiler/ops/loss.py): TVM's cross_entropy and nll_loss formulas, the reductions and
ignore_index, and the type errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import AttrError, OpPattern, TypeRelationError
from tests.compiler.ops.relay_models import assert_round_trips, compiled_matches_interpreter

F32 = "float32"


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(name: str, types: list[Type], **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(types, op.make_attrs(attrs))


def run(name: str, arrays: list[np.ndarray], **attrs: object) -> np.ndarray:
    op = ops.get(name)
    return op.reference(arrays, op.make_attrs(attrs))


def test_cross_entropy_is_minus_the_summed_log_likelihood_over_the_batch() -> None:
    p = np.array([[0.2, 0.8], [0.5, 0.5], [0.9, 0.1]], dtype=F32)
    y = np.array([[0, 1], [1, 0], [0.5, 0.5]], dtype=F32)
    want = -(np.log(0.8) + np.log(0.5) + 0.5 * np.log(0.9) + 0.5 * np.log(0.1)) / 3
    got = run("nn.cross_entropy", [p, y])
    assert got.shape == () and got.dtype == np.float32
    assert float(got) == pytest.approx(want, rel=1e-6)


def nll_by_hand(pred, target, weight, ignore):
    losses, weights = [], []
    for index in np.ndindex(target.shape):
        c = int(target[index])
        if c == ignore:
            losses.append(0.0)
            weights.append(0.0)
            continue
        losses.append(-float(pred[(index[0], c) + index[1:]]) * float(weight[c]))
        weights.append(float(weight[c]))
    return np.array(losses).reshape(target.shape), np.array(weights)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll_loss_picks_the_target_class_weights_it_and_skips_ignored(reduction: str) -> None:
    rng = np.random.default_rng(0)
    pred = rng.normal(size=(2, 4, 3)).astype(F32)
    target = np.array([[3, 1, 0], [1, 2, 1]], dtype="int64")
    weight = rng.uniform(0.5, 2, size=4).astype(F32)
    losses, weights = nll_by_hand(pred, target, weight, ignore=1)
    got = run("nn.nll_loss", [pred, target, weight], reduction=reduction, ignore_index=1)
    want = {"none": losses, "sum": losses.sum(), "mean": losses.sum() / weights.sum()}[reduction]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_nll_loss_mean_of_only_ignored_targets_is_nan() -> None:
    got = run("nn.nll_loss", [np.ones((2, 2), F32), np.array([1, 1], "int32"), np.ones(2, F32)], ignore_index=1)
    assert np.isnan(got)


def test_loss_types() -> None:
    assert infer("nn.cross_entropy", [t("?", 5), t(3, 5)]) == t()
    assert infer("nn.nll_loss", [t(2, 4, 3), t(2, 3, dtype="int64"), t(4)], ignore_index=-100) == t()
    assert infer("nn.nll_loss", [t("?", 4), t(2, dtype="int32"), t(4)], reduction="none", ignore_index=0) == t(
        2, dtype=F32)


def test_loss_errors_name_the_op_and_the_problem() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.cross_entropy expects 2-D"):
        infer("nn.cross_entropy", [t(5), t(5)])
    with pytest.raises(TypeRelationError, match=r"nn.cross_entropy: shapes of predictions .* differ"):
        infer("nn.cross_entropy", [t(2, 5), t(2, 4)])
    with pytest.raises(TypeRelationError, match=r"nn.cross_entropy expects a floating-point tensor"):
        infer("nn.cross_entropy", [t(2, 5, dtype="int32"), t(2, 5, dtype="int32")])
    with pytest.raises(TypeRelationError, match=r"nn.nll_loss: targets must be signed integers"):
        infer("nn.nll_loss", [t(2, 4), t(2), t(4)], ignore_index=0)
    with pytest.raises(TypeRelationError, match=r"nn.nll_loss: weights .* one weight per class"):
        infer("nn.nll_loss", [t(2, 4), t(2, dtype="int32"), t(3)], ignore_index=0)
    with pytest.raises(TypeRelationError, match=r"nn.nll_loss: targets .* do not match predictions"):
        infer("nn.nll_loss", [t(2, 4, 3), t(2, 4, dtype="int32"), t(4)], ignore_index=0)
    with pytest.raises(TypeRelationError, match=r"nn.nll_loss: unknown reduction 'avg'"):
        infer("nn.nll_loss", [t(2, 4), t(2, dtype="int32"), t(4)], reduction="avg", ignore_index=0)
    with pytest.raises(AttrError, match=r"requires attribute ignore_index"):
        ops.get("nn.nll_loss").make_attrs({})


def test_loss_patterns_follow_tvm() -> None:
    assert ops.get("nn.cross_entropy").pattern == OpPattern.OPAQUE
    assert ops.get("nn.nll_loss").pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    assert ops.get("nn.nll_loss").make_attrs({"ignore_index": -100})["reduction"] == "mean"


MODEL = """def @main(%p: Tensor[(3, 4), float32], %y: Tensor[(3, 4), float32], %t: Tensor[(3), int32],
          %w: Tensor[(4), float32]) {
  %0 = nn.softmax(%p);
  %1 = nn.cross_entropy(%0, %y);
  %2 = nn.log_softmax(%p);
  %3 = nn.nll_loss(%2, %t, %w, ignore_index=2);
  %4 = nn.nll_loss(%2, %t, %w, reduction="none", ignore_index=-100);
  (%1, %3, nn.relu(%4))
}
"""


def test_model_with_losses_compiles_and_matches_interpreter(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    inputs = {
        "p": rng.normal(size=(3, 4)).astype(F32),
        "y": rng.uniform(0, 1, size=(3, 4)).astype(F32),
        "t": np.array([2, 0, 3], dtype="int32"),
        "w": rng.uniform(0.5, 2, size=4).astype(F32),
    }
    compiled_matches_interpreter(MODEL, inputs, tmp_path)


@pytest.mark.parametrize("call", [
    "nn.cross_entropy(%p, %y)",
    'nn.nll_loss(%p, %t, %w, reduction="sum", ignore_index=-1)',
    "nn.nll_loss(%p, %t, %w, ignore_index=-100)",
])
def test_loss_attrs_round_trip_through_the_printer(call: str) -> None:
    assert_round_trips(
        "def @main(%p: Tensor[(3, 4), float32], %y: Tensor[(3, 4), float32], %t: Tensor[(3), int32], "
        f"%w: Tensor[(4), float32]) {{\n  {call}\n}}\n"
    )
