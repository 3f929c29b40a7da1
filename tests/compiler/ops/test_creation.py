"""zeros, ones, full, zeros_like, ones_like (compiler/ops/creation.py)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import AttrError, OpPattern, TypeRelationError


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def run(name: str, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    return op.reference(list(arrays), op.make_attrs(attrs))


def test_zeros_and_ones_take_no_inputs_and_build_the_attr_type() -> None:
    assert infer("zeros", shape=[2, 3], dtype="int64") == TensorType((2, 3), "int64")
    assert infer("ones", shape=[], dtype="float32") == TensorType((), "float32")
    out = run("ones", shape=[2, 2], dtype="int8")
    assert out.dtype == np.int8 and out.sum() == 4
    assert run("zeros", shape=[3], dtype="float32").tolist() == [0.0, 0.0, 0.0]


def test_zeros_requires_shape_and_dtype_and_rejects_bad_values() -> None:
    with pytest.raises(AttrError, match="requires attribute dtype"):
        ops.get("zeros").make_attrs({"shape": [2]})
    with pytest.raises(TypeRelationError, match=r"zeros: shape \[2, -1\] has a negative dim"):
        infer("zeros", shape=[2, -1], dtype="float32")
    with pytest.raises(TypeRelationError, match="ones: unknown dtype 'float8'"):
        infer("ones", shape=[2], dtype="float8")
    with pytest.raises(TypeRelationError, match="expects 0 arguments"):
        infer("zeros", TensorType((2,)), shape=[2], dtype="float32")


def test_full_fills_with_the_scalar_in_the_requested_dtype() -> None:
    value = np.array(2.5, dtype="float32")
    assert infer("full", TensorType((), "float32"), shape=[2, 3]) == TensorType((2, 3), "float32")
    assert infer("full", TensorType((), "float32"), shape=[4], dtype="int32") == TensorType((4,), "int32")
    np.testing.assert_array_equal(run("full", value, shape=[2]), [2.5, 2.5])
    assert run("full", value, shape=[2], dtype="int32").tolist() == [2, 2]
    with pytest.raises(
        TypeRelationError, match=r"full: fill_value must be a scalar, got Tensor\[\(2\), float32\]"
    ):
        infer("full", TensorType((2,), "float32"), shape=[2])


def test_like_ops_copy_the_input_type_including_unknown_dims() -> None:
    ty = TensorType((ANY, 3), "int32")
    assert infer("zeros_like", ty) == ty and infer("ones_like", ty) == ty
    x = np.array([[1.5, -2.0]], dtype="float32")
    assert run("zeros_like", x).tolist() == [[0.0, 0.0]]
    assert run("ones_like", x).tolist() == [[1.0, 1.0]]


def test_creation_ops_are_elementwise() -> None:
    for name in ("zeros", "ones", "full", "zeros_like", "ones_like"):
        assert ops.get(name).pattern is OpPattern.ELEMWISE
