"""all, any, variance and nn.l2_normalize (compiler/ops/statistics.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops import OpPattern, TypeRelationError
from tests.compiler.ops.domain_check import check_domain_draws
from tests.compiler.ops.relay_text import check_text_model

ALL = ["all", "any", "variance", "nn.l2_normalize"]


def run(name: str, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    result = op.reference(list(arrays), op.make_attrs(attrs))
    assert isinstance(result, np.ndarray)
    return result


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def test_patterns_follow_tvm() -> None:
    for name in ("all", "any", "variance"):
        assert ops.get(name).pattern == OpPattern.COMM_REDUCE
    # TVM declares no pattern for nn.l2_normalize, which FuseOps treats as opaque.
    assert ops.get("nn.l2_normalize").pattern == OpPattern.OPAQUE


def test_std_and_logsumexp_are_python_compositions_in_tvm_not_ops() -> None:
    assert ops.lookup("std") is None and ops.lookup("logsumexp") is None


# --- all / any ----------------------------------------------------------------------------------

DATA = np.array([[[True, True, True], [True, True, True], [False, True, False]],
                 [[True, False, False], [True, True, False], [False, True, True]]])


def test_all_and_any_reduce_like_numpy() -> None:
    np.testing.assert_array_equal(run("all", DATA, axis=[1]), np.all(DATA, axis=1))
    np.testing.assert_array_equal(run("any", DATA, axis=[0]), np.any(DATA, axis=0))
    assert run("all", DATA).shape == () and not run("all", DATA)
    assert run("any", DATA, axis=[0, 2], exclude=True, keepdims=True).shape == (2, 1, 3)


def test_all_and_any_keep_unknown_dims_and_drop_reduced_ones() -> None:
    assert infer("all", TensorType((ANY, 3), "bool"), axis=[1]) == TensorType((ANY,), "bool")
    assert infer("any", TensorType((ANY, 3), "bool"), axis=[-1], keepdims=True) == TensorType((ANY, 1), "bool")


def test_all_and_any_reject_non_bool_tensors_and_bad_axes() -> None:
    with pytest.raises(TypeRelationError, match="all expects a bool tensor"):
        infer("all", TensorType((2,), "float32"))
    with pytest.raises(TypeRelationError, match="any: axis 2 is out of range for rank 2"):
        infer("any", TensorType((2, 3), "bool"), axis=[2])


# --- variance -----------------------------------------------------------------------------------


def test_variance_divides_squared_differences_by_the_count_or_count_minus_one() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4) ** 2
    mean = x.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(run("variance", x, mean, axis=[1]), np.var(x, axis=1), rtol=1e-6)
    np.testing.assert_allclose(
        run("variance", x, mean, axis=[1], unbiased=True, keepdims=True),
        np.var(x, axis=1, ddof=1, keepdims=True), rtol=1e-6,
    )


def test_variance_uses_the_mean_it_is_given() -> None:
    x = np.array([[1.0, 3.0]], np.float64)
    assert run("variance", x, np.zeros((1, 1))).item() == 5.0


def test_variance_with_exclude_reduces_the_other_axes() -> None:
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    mean = x.mean(axis=(0, 2), keepdims=True)
    out = run("variance", x, mean, axis=[1], exclude=True)
    np.testing.assert_allclose(out, np.var(x, axis=(0, 2)), rtol=1e-5)


def test_variance_type_is_the_reduced_data_type() -> None:
    data = TensorType((ANY, 3, 4), "float16")
    mean = TensorType((ANY, 1, 4), "float16")
    assert infer("variance", data, mean, axis=[1]) == TensorType((ANY, 4), "float16")


def test_variance_accepts_a_mean_whose_unknown_dims_may_match() -> None:
    data, mean = TensorType((2, 5, ANY), "float64"), TensorType((2, ANY, 2), "float64")
    assert infer("variance", data, mean, axis=[1]) == TensorType((2, ANY), "float64")


def test_variance_rejects_bad_means_and_scalars() -> None:
    data = TensorType((2, 3), "float32")
    with pytest.raises(TypeRelationError, match="variance: mean .* must have the rank of data"):
        infer("variance", data, TensorType((3,), "float32"))
    with pytest.raises(TypeRelationError, match="variance: mean .* does not broadcast to data"):
        infer("variance", data, TensorType((2, 4), "float32"))
    with pytest.raises(TypeRelationError, match="variance: mean .* does not broadcast to data"):
        infer("variance", TensorType((2, 1), "float32"), TensorType((2, 3), "float32"))
    with pytest.raises(TypeRelationError, match="variance needs operands of one dtype"):
        infer("variance", data, TensorType((2, 1), "float64"))
    with pytest.raises(TypeRelationError, match="variance: data .* must have at least one dimension"):
        infer("variance", TensorType((), "float32"), TensorType((), "float32"))
    with pytest.raises(TypeRelationError, match="variance expects a float tensor"):
        infer("variance", TensorType((2,), "int32"), TensorType((1,), "int32"))


# --- nn.l2_normalize ----------------------------------------------------------------------------


def test_l2_normalize_divides_by_the_norm_over_the_axes() -> None:
    x = np.array([[3.0, 4.0], [0.0, 0.0]], np.float32)
    np.testing.assert_allclose(run("nn.l2_normalize", x, eps=1e-12, axis=[1]), [[0.6, 0.8], [0.0, 0.0]])
    y = np.random.default_rng(1).normal(size=(2, 3, 4))
    expected = y / np.sqrt(np.sum(y * y, axis=(0, 2), keepdims=True))
    np.testing.assert_allclose(run("nn.l2_normalize", y, eps=1e-12, axis=[0, -1]), expected)


def test_l2_normalize_eps_bounds_the_squared_norm_from_below() -> None:
    x = np.array([[0.1, 0.0]], np.float64)
    np.testing.assert_allclose(run("nn.l2_normalize", x, eps=4.0, axis=[1]), [[0.05, 0.0]])


def test_l2_normalize_needs_eps_and_axis_and_valid_axes() -> None:
    with pytest.raises(ops.AttrError, match="requires attribute eps"):
        ops.get("nn.l2_normalize").make_attrs({"axis": [1]})
    with pytest.raises(TypeRelationError, match="nn.l2_normalize: axis 3 is out of range for rank 2"):
        infer("nn.l2_normalize", TensorType((2, 3), "float32"), eps=1e-5, axis=[3])
    with pytest.raises(TypeRelationError, match="names the same axis twice"):
        infer("nn.l2_normalize", TensorType((2, 3), "float32"), eps=1e-5, axis=[1, -1])
    with pytest.raises(TypeRelationError, match="nn.l2_normalize expects a float tensor"):
        infer("nn.l2_normalize", TensorType((2, 3), "int8"), eps=1e-5, axis=[1])


@pytest.mark.parametrize("name", ALL)
def test_domain_draws_type_check(name: str) -> None:
    check_domain_draws(ops.get(name))


def test_variance_domain_draws_unbiased_only_with_more_than_one_element() -> None:
    drawn = check_domain_draws(ops.get("variance"), 100)
    assert any(sample.attrs["unbiased"] for sample in drawn)


MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32], %b: Tensor[(2, 3), bool]) {
  %0 = mean(%x, axis=[1], keepdims=True);
  %1 = variance(%x, %0, axis=[1], unbiased=True);
  %2 = sqrt(%1);
  %3 = nn.l2_normalize(%x, eps=1e-10f, axis=[0, 2]);
  %4 = all(%b, axis=[1]);
  %5 = any(%b, axis=[0], keepdims=True);
  (%2, %3, %4, %5)
}
"""


def test_text_model_of_statistics_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    b = np.array([[True, True, True], [False, True, False]])
    out = check_text_model(MODEL, {"x": x, "b": b}, tmp_path)
    np.testing.assert_allclose(out[0], np.std(x, axis=1, ddof=1), rtol=1e-5)
    assert out[2].tolist() == [True, False]
    assert out[3].tolist() == [[True, True, True]]
