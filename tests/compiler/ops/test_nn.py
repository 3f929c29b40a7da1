"""nn operators of compiler/ops/nn.py: type relations (shapes, `?`, errors) and numpy references
checked against values computed independently here."""

from __future__ import annotations

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, TupleType, Type
from compiler.ops.registry import AttrError, OpPattern, TypeRelationError

F32 = "float32"


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def run(name: str, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    """The reference result, after checking it has the inferred type."""
    op = ops.get(name)
    attrs_ = op.make_attrs(attrs)
    ty = op.type_rel([TensorType(a.shape, str(a.dtype)) for a in arrays], attrs_)
    result = op.reference(list(arrays), attrs_)
    assert isinstance(ty, TensorType)
    assert result.shape == ty.shape and str(result.dtype) == ty.dtype
    return result


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


# --- activations and bias -----------------------------------------------------------------------


def test_relu_zeroes_negatives_and_keeps_the_type() -> None:
    x = np.array([-1.5, 0.0, 2.0], dtype=F32)
    np.testing.assert_array_equal(run("nn.relu", x), [0.0, 0.0, 2.0])
    assert infer("nn.relu", t("?", 3)) == t("?", 3)


def test_relu_of_a_scalar_returns_a_0d_array() -> None:
    # Found by the domain draws: np.maximum of 0-d arrays is a numpy scalar.
    out = run("nn.relu", np.array(-5, dtype="int8"))
    assert isinstance(out, np.ndarray) and out.shape == () and out == 0


def test_leaky_relu_scales_negatives_by_alpha() -> None:
    x = np.array([-4.0, -1.0, 3.0], dtype=F32)
    np.testing.assert_allclose(run("nn.leaky_relu", x), [-1.0, -0.25, 3.0])
    np.testing.assert_allclose(run("nn.leaky_relu", x, alpha=0.5), [-2.0, -0.5, 3.0])


def test_bias_add_adds_along_channel_axis_and_last_axis() -> None:
    x = np.zeros((2, 3, 2), dtype=F32)
    b = np.array([1, 2, 3], dtype=F32)
    out = run("nn.bias_add", x, b)
    assert out[1, 2, 1] == 3.0 and out[0, 0, 0] == 1.0
    out = run("nn.bias_add", np.zeros((2, 2), F32), np.array([5, 7], F32), axis=-1)
    np.testing.assert_array_equal(out, [[5, 7], [5, 7]])


def test_bias_add_rejects_a_bias_of_the_wrong_length() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.bias_add: bias Tensor\[\(4\), float32\]"):
        infer("nn.bias_add", t(2, 3, 5), t(4))


def test_bias_add_accepts_unknown_channel_count() -> None:
    assert infer("nn.bias_add", t(1, "?", 4), t(8)) == t(1, "?", 4)


# --- dense / matmul / batch_matmul ------------------------------------------------------------------


def test_dense_multiplies_by_the_transposed_weight() -> None:
    x, w = rand(4, 5), rand(3, 5, seed=1)
    expected = np.array([[sum(x[i, k] * w[j, k] for k in range(5)) for j in range(3)] for i in range(4)])
    np.testing.assert_allclose(run("nn.dense", x, w, units=None), expected, rtol=1e-5)


def test_dense_propagates_unknown_batch_and_checks_units() -> None:
    assert infer("nn.dense", t("?", 8), t(16, 8), units=None) == t("?", 16)
    assert infer("nn.dense", t(2, "?", 8), t(16, 8), units=16) == t(2, "?", 16)
    assert infer("nn.dense", t(2, 8), t("?", 8), units=16) == t(2, 16)
    with pytest.raises(TypeRelationError, match="units=10 does not match weight"):
        infer("nn.dense", t(2, 8), t(16, 8), units=10)


def test_dense_reports_mismatched_reduction_dims() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.dense: reduction dims differ.*\(2, 8\).*\(16, 7\)"):
        infer("nn.dense", t(2, 8), t(16, 7), units=None)


def test_dense_requires_units_attribute_like_tvm() -> None:
    with pytest.raises(AttrError, match="requires attribute units"):
        ops.get("nn.dense").make_attrs({})


def test_dense_out_dtype_widens_int8_products() -> None:
    x = np.full((1, 4), 100, dtype="int8")
    w = np.full((2, 4), 100, dtype="int8")
    out = run("nn.dense", x, w, units=None, out_dtype="int32")
    np.testing.assert_array_equal(out, [[40000, 40000]])


def test_dense_rejects_an_unknown_out_dtype() -> None:
    with pytest.raises(TypeRelationError, match="unknown out_dtype 'float7'"):
        infer("nn.dense", t(2, 8), t(3, 8), units=None, out_dtype="float7")


def test_matmul_honours_both_transpose_flags() -> None:
    a, b = rand(3, 4), rand(5, 3, seed=2)
    out = run("nn.matmul", a, b, units=None, transpose_a=True, transpose_b=True)
    np.testing.assert_allclose(out, a.T @ b.T, rtol=1e-5)
    assert infer("nn.matmul", t("?", 4), t(4, 6), units=None) == t("?", 6)


def test_batch_matmul_broadcasts_a_batch_of_one() -> None:
    x, y = rand(1, 2, 3), rand(4, 5, 3, seed=3)
    out = run("nn.batch_matmul", x, y, transpose_b=True)
    for b in range(4):
        np.testing.assert_allclose(out[b], x[0] @ y[b].T, rtol=1e-5)
    assert infer("nn.batch_matmul", t("?", 2, 3), t(1, 3, 5)) == t("?", 2, 5)
    assert infer("nn.batch_matmul", t("?", 2, 3), t(4, 3, 5)) == t(4, 2, 5)


def test_batch_matmul_rejects_incompatible_batches_and_ranks() -> None:
    with pytest.raises(TypeRelationError, match="batch dims"):
        infer("nn.batch_matmul", t(2, 2, 3), t(3, 3, 5))
    with pytest.raises(TypeRelationError, match="two 3-D tensors"):
        infer("nn.batch_matmul", t(2, 3), t(3, 3, 5))


# --- softmax ---------------------------------------------------------------------------------------


def test_softmax_rows_match_exponential_ratio() -> None:
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=F32)
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(run("nn.softmax", x)[0], e / e.sum(), rtol=1e-6)
    np.testing.assert_allclose(run("nn.softmax", x)[1], [1 / 3] * 3, rtol=1e-6)
    np.testing.assert_allclose(
        run("nn.softmax", x, axis=0)[:, 0], np.exp([1, 0]) / np.exp([1, 0]).sum(), rtol=1e-6
    )


def test_log_softmax_is_log_of_softmax_even_for_large_inputs() -> None:
    x = np.array([1000.0, 1001.0], dtype=F32)
    np.testing.assert_allclose(
        run("nn.log_softmax", x), np.log([1 / (1 + np.e), np.e / (1 + np.e)]), rtol=1e-6
    )


def test_softmax_rejects_integer_tensors_and_bad_axes() -> None:
    with pytest.raises(
        TypeRelationError, match=r"nn.softmax expects a floating-point tensor, got Tensor\[\(3\), int32\]"
    ):
        infer("nn.softmax", t(3, dtype="int32"))
    with pytest.raises(TypeRelationError, match="axis 2 is out of range for rank 2"):
        infer("nn.log_softmax", t(2, 3), axis=2)


# --- batch_flatten, pad, dropout -------------------------------------------------------------------


def test_batch_flatten_keeps_batch_and_multiplies_the_rest() -> None:
    assert infer("nn.batch_flatten", t(2, 3, 4)) == t(2, 12)
    assert infer("nn.batch_flatten", t("?", 3, 4)) == t("?", 12)
    assert infer("nn.batch_flatten", t(2, "?", 4)) == t(2, "?")
    x = np.arange(24, dtype=F32).reshape(2, 3, 4)
    np.testing.assert_array_equal(run("nn.batch_flatten", x)[1], np.arange(12, 24))
    assert ops.get("nn.batch_flatten").reshape_only


def test_batch_flatten_of_an_empty_batch() -> None:
    # Found by the domain draws: reshape(0, -1) cannot infer the -1.
    assert run("nn.batch_flatten", np.zeros((0,), F32)).shape == (0, 1)
    assert run("nn.batch_flatten", np.zeros((0, 3, 2), "int8")).shape == (0, 6)


def test_pad_of_a_scalar_is_the_scalar() -> None:
    # Found by the domain draws: the type relation accepts pad_width [] but np.pad did not.
    for mode in ("constant", "edge", "reflect"):
        out = run("nn.pad", np.array(1.5, F32), np.array(0.0, F32), pad_width=[], pad_mode=mode)
        assert out.shape == () and out == 1.5


def test_pad_constant_uses_the_scalar_argument() -> None:
    x = np.array([[1, 2], [3, 4]], dtype=F32)
    out = run("nn.pad", x, np.array(9.0, F32), pad_width=[[1, 0], [0, 2]])
    np.testing.assert_array_equal(out, [[9, 9, 9, 9], [1, 2, 9, 9], [3, 4, 9, 9]])


def test_pad_edge_and_reflect_modes() -> None:
    x = np.array([1, 2, 3], dtype=F32)
    zero = np.array(0.0, F32)
    np.testing.assert_array_equal(
        run("nn.pad", x, zero, pad_width=[[2, 1]], pad_mode="edge"), [1, 1, 1, 2, 3, 3]
    )
    np.testing.assert_array_equal(
        run("nn.pad", x, zero, pad_width=[[2, 2]], pad_mode="reflect"), [3, 2, 1, 2, 3, 2, 1]
    )


def test_pad_type_relation_propagates_unknown_dims_and_reports_errors() -> None:
    assert infer("nn.pad", t("?", 3), t(), pad_width=[[1, 1], [0, 2]]) == t("?", 5)
    with pytest.raises(TypeRelationError, match=r"needs one \[before, after\] pair per dim"):
        infer("nn.pad", t(2, 3), t(), pad_width=[[1, 1]])
    with pytest.raises(TypeRelationError, match="unknown pad_mode 'wrap'"):
        infer("nn.pad", t(2), t(), pad_width=[[1, 1]], pad_mode="wrap")
    with pytest.raises(TypeRelationError, match="pad value must be a scalar"):
        infer("nn.pad", t(2), t(1), pad_width=[[1, 1]])
    with pytest.raises(TypeRelationError, match="reflect padding"):
        infer("nn.pad", t(2), t(), pad_width=[[2, 0]], pad_mode="reflect")


def test_dropout_is_identity_with_a_mask_of_ones() -> None:
    assert infer("nn.dropout", t(2, 3)) == TupleType((t(2, 3), t(2, 3)))
    x = rand(2, 3)
    out, mask = ops.get("nn.dropout").reference([x], ops.get("nn.dropout").make_attrs({}))
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(mask, np.ones((2, 3)))


def test_nn_fusion_patterns_follow_tvm() -> None:
    expected = {
        "nn.relu": OpPattern.ELEMWISE,
        "nn.leaky_relu": OpPattern.ELEMWISE,
        "nn.bias_add": OpPattern.BROADCAST,
        "nn.dense": OpPattern.OUT_ELEMWISE_FUSABLE,
        "nn.matmul": OpPattern.OUT_ELEMWISE_FUSABLE,
        "nn.batch_matmul": OpPattern.OUT_ELEMWISE_FUSABLE,
        "nn.softmax": OpPattern.OUT_ELEMWISE_FUSABLE,
        "nn.log_softmax": OpPattern.OUT_ELEMWISE_FUSABLE,
        "nn.batch_flatten": OpPattern.INJECTIVE,
        "nn.pad": OpPattern.INJECTIVE,
        "nn.dropout": OpPattern.OPAQUE,
    }
    assert {name: ops.get(name).pattern for name in expected} == expected


def test_dense_prints_units_none_because_it_has_no_default() -> None:
    op = ops.get("nn.dense")
    assert op.printed_attrs(op.make_attrs({"units": None})) == [("units", None)]
