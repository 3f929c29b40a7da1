"""compiler.frontend.onnx.ops_reduce: reductions, arg max/min, TopK, Hardmax, CumProd."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compiler.frontend.onnx.onnx_models import interpret, single_node

RNG = np.random.default_rng(9)
X = RNG.standard_normal((2, 3, 4)).astype("float32")

_NUMPY = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max, "ReduceMin": np.min,
          "ReduceProd": np.prod}


@pytest.mark.parametrize("op_type", sorted(_NUMPY))
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduction_over_axes_given_as_an_input(op_type: str, keepdims: int) -> None:
    m = single_node(op_type, {"x": X}, initializers={"axes": np.array([0, -1], dtype="int64")}, opset=18,
                    keepdims=keepdims)
    (got,) = interpret(m, {"x": X})
    np.testing.assert_allclose(got, _NUMPY[op_type](X, axis=(0, 2), keepdims=bool(keepdims)), rtol=1e-5)


def test_reduction_axes_as_an_attribute_before_opset_18() -> None:
    (got,) = interpret(single_node("ReduceMean", {"x": X}, opset=13, axes=[1]), {"x": X})
    np.testing.assert_allclose(got, X.mean(axis=1, keepdims=True), rtol=1e-6)


def test_reduction_without_axes_reduces_all_unless_noop() -> None:
    (got,) = interpret(single_node("ReduceSum", {"x": X}), {"x": X})
    np.testing.assert_allclose(got, X.sum(keepdims=True), rtol=1e-5)
    (got,) = interpret(single_node("ReduceSum", {"x": X}, noop_with_empty_axes=1), {"x": X})
    np.testing.assert_array_equal(got, X)


@pytest.mark.parametrize(("op_type", "expected"), [
    ("ReduceL1", lambda x: np.abs(x).sum(axis=1, keepdims=True)),
    ("ReduceL2", lambda x: np.sqrt((x * x).sum(axis=1, keepdims=True))),
    ("ReduceSumSquare", lambda x: (x * x).sum(axis=1, keepdims=True)),
    ("ReduceLogSumExp", lambda x: np.log(np.exp(x).sum(axis=1, keepdims=True))),
])
def test_composed_reductions(op_type: str, expected: object) -> None:
    (got,) = interpret(single_node(op_type, {"x": X}, opset=13, axes=[1]), {"x": X})
    np.testing.assert_allclose(got, expected(X), rtol=1e-5)  # type: ignore[operator]


def test_argmax_and_argmin_give_int64_and_select_last_index() -> None:
    x = np.array([[1, 3, 3], [2, 2, 0]], dtype="float32")
    (got,) = interpret(single_node("ArgMax", {"x": x}, axis=1, keepdims=0), {"x": x})
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [1, 0])
    (got,) = interpret(single_node("ArgMax", {"x": x}, axis=1, select_last_index=1), {"x": x})
    np.testing.assert_array_equal(got, [[2], [1]])
    (got,) = interpret(single_node("ArgMin", {"x": x}, axis=0), {"x": x})
    np.testing.assert_array_equal(got, [[0, 1, 1]])


def test_topk_largest_and_smallest() -> None:
    x = np.array([[3.0, 1.0, 4.0, 1.5]], dtype="float32")
    values, indices = interpret(single_node("TopK", {"x": x}, n_out=2, initializers={"k": np.array([2])}), {"x": x})
    np.testing.assert_array_equal(values, [[4.0, 3.0]])
    np.testing.assert_array_equal(indices, [[2, 0]])
    values, _ = interpret(single_node("TopK", {"x": x}, n_out=2, initializers={"k": np.array([2])}, largest=0), {"x": x})
    np.testing.assert_array_equal(values, [[1.0, 1.5]])


def test_hardmax_marks_the_first_maximum() -> None:
    x = np.array([[1.0, 3.0, 3.0], [0.0, -1.0, -2.0]], dtype="float32")
    (got,) = interpret(single_node("Hardmax", {"x": x}), {"x": x})
    np.testing.assert_array_equal(got, [[0, 1, 0], [1, 0, 0]])
