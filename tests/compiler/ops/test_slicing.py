"""strided_slice and take (compiler/ops/slicing.py)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import AttrError, OpPattern, TypeRelationError
from tests.compiler.ops.shape_rule_eval import rule_dims

F32 = "float32"


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def run(name: str, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    a = op.make_attrs(attrs)
    ty = op.type_rel([TensorType(x.shape, str(x.dtype)) for x in arrays], a)
    out = op.reference(list(arrays), a)
    assert isinstance(ty, TensorType) and out.shape == ty.shape and str(out.dtype) == ty.dtype
    return out


def sliced(x: np.ndarray, **attrs: object) -> np.ndarray:
    attrs.setdefault("strides", None)
    attrs.setdefault("axes", None)
    return run("strided_slice", x, **attrs)


X = np.arange(20, dtype=F32).reshape(4, 5)


def test_strided_slice_takes_trailing_axes_whole() -> None:
    np.testing.assert_array_equal(sliced(X, begin=[1], end=[3]), X[1:3, :])


def test_strided_slice_counts_negative_indices_from_the_end() -> None:
    np.testing.assert_array_equal(sliced(X, begin=[-3, -4], end=[-1, -1]), X[1:3, 1:4])


def test_strided_slice_clamps_out_of_range_indices() -> None:
    np.testing.assert_array_equal(sliced(X, begin=[-100, 2], end=[100, 1000]), X[:, 2:])
    np.testing.assert_array_equal(sliced(X, begin=[2], end=[2]), X[2:2])


def test_strided_slice_with_positive_and_negative_strides() -> None:
    np.testing.assert_array_equal(sliced(X, begin=[0, 4], end=[4, -100], strides=[2, -2]), X[0:4:2, 4::-2])
    np.testing.assert_array_equal(sliced(X, begin=[-1], end=[-5], strides=[-1]), X[3:-5:-1])
    np.testing.assert_array_equal(sliced(X, begin=[3], end=[-100], strides=[-1]), X[::-1])


def test_strided_slice_axes_select_which_dims_the_lists_describe() -> None:
    np.testing.assert_array_equal(sliced(X, begin=[1], end=[4], axes=[1]), X[:, 1:4])
    np.testing.assert_array_equal(
        sliced(X, begin=[3, 0], end=[0, 2], strides=[-1, 1], axes=[-1, 0]), X[0:2, 3:0:-1]
    )


def test_strided_slice_size_mode_reads_end_as_sizes() -> None:
    np.testing.assert_array_equal(sliced(X, begin=[1, 2], end=[2, -1], slice_mode="size"), X[1:3, 2:])
    # Strides are ignored in size mode; the size counts from the canonical begin.
    np.testing.assert_array_equal(sliced(X, begin=[-2], end=[2], strides=[3], slice_mode="size"), X[2:4])


def test_strided_slice_shapes_with_unknown_dims() -> None:
    assert infer("strided_slice", t("?", 5), begin=[0, 1], end=[2, 4], strides=None, axes=None) == t("?", 3)
    assert infer("strided_slice", t("?", 5), begin=[1], end=[3], strides=[1], axes=[1]) == t("?", 2)


def test_strided_slice_errors() -> None:
    with pytest.raises(TypeRelationError, match=r"strided_slice: strides \[0\] contains 0"):
        infer("strided_slice", t(4, 5), begin=[0], end=[2], strides=[0], axes=None)
    with pytest.raises(
        TypeRelationError, match="begin 3 lies beyond end 1 for stride 1 along axis 0 of extent 4"
    ):
        infer("strided_slice", t(4, 5), begin=[3], end=[1], strides=None, axes=None)
    with pytest.raises(TypeRelationError, match="longer than the rank 2"):
        infer("strided_slice", t(4, 5), begin=[0, 0, 0], end=[1, 1, 1], strides=None, axes=None)
    with pytest.raises(TypeRelationError, match="one entry per axis"):
        infer("strided_slice", t(4, 5), begin=[0, 0], end=[1, 1], strides=None, axes=[1])
    with pytest.raises(TypeRelationError, match="unknown slice_mode 'start'"):
        infer("strided_slice", t(4, 5), begin=[0], end=[1], strides=None, slice_mode="start", axes=None)
    # As in TVM, strides and axes have no default: printed models always carry them.
    with pytest.raises(AttrError, match="requires attribute strides"):
        ops.get("strided_slice").make_attrs({"begin": [0], "end": [1], "axes": None})


# --- take -----------------------------------------------------------------------------------------

DATA = np.arange(12, dtype=F32).reshape(3, 4)


def test_take_without_axis_indexes_the_flattened_data() -> None:
    out = run("take", DATA, np.array([[0, 11], [5, 20]], dtype="int32"))
    np.testing.assert_array_equal(out, [[0, 11], [5, 11]])  # clip: 20 -> 11


def test_take_clip_and_wrap_modes_along_an_axis() -> None:
    idx = np.array([-1, 1, 6], dtype="int64")
    np.testing.assert_array_equal(run("take", DATA, idx, axis=1), DATA[:, [0, 1, 3]])
    np.testing.assert_array_equal(run("take", DATA, idx, axis=1, mode="wrap"), DATA[:, [3, 1, 2]])
    np.testing.assert_array_equal(run("take", DATA, idx, axis=-2, mode="wrap"), DATA[[2, 1, 0], :])


def test_take_fast_mode_uses_indices_as_given() -> None:
    idx = np.array([[2, 0], [1, 1]], dtype="int32")
    out = run("take", DATA, idx, axis=0, mode="fast")
    assert out.shape == (2, 2, 4)
    np.testing.assert_array_equal(out[0, 0], DATA[2])


def test_take_with_batch_dims_pairs_leading_dims() -> None:
    data = np.arange(24, dtype=F32).reshape(2, 4, 3)
    idx = np.array([[3, 0], [1, 2]], dtype="int32")
    out = run("take", data, idx, axis=1, batch_dims=1)
    assert out.shape == (2, 2, 3)
    for b in range(2):
        for j in range(2):
            np.testing.assert_array_equal(out[b, j], data[b, idx[b, j]])


def test_take_of_a_scalar_index_returns_a_0d_array_not_a_numpy_scalar() -> None:
    # Found by the domain draws: np.take and flat indexing give numpy scalars for a 0-d index.
    vector = np.arange(4, dtype=F32)
    for attrs in ({"axis": 0}, {"axis": None}, {"axis": -1, "mode": "wrap"}):
        out = run("take", vector, np.array(6, dtype="int32"), **attrs)
        assert isinstance(out, np.ndarray) and out.shape == ()
    assert run("take", vector, np.array(6, dtype="int32"), axis=0) == 3.0  # clipped
    assert run("take", vector, np.array(6, dtype="int32"), axis=0, mode="wrap") == 2.0


def test_take_shapes_with_unknown_dims() -> None:
    assert infer("take", t("?", 4), t(5, dtype="int32"), axis=1) == t("?", 5)
    assert infer("take", t(3, 4), t("?", dtype="int64")) == t("?")
    assert infer("take", t(7, 8), t(2, 3, dtype="int32"), axis=0) == t(2, 3, 8)


def test_take_errors() -> None:
    with pytest.raises(
        TypeRelationError, match=r"take: indices must be integers, got Tensor\[\(2\), float32\]"
    ):
        infer("take", t(3, 4), t(2), axis=0)
    with pytest.raises(TypeRelationError, match="unknown mode 'nan'"):
        infer("take", t(3, 4), t(2, dtype="int32"), mode="nan")
    with pytest.raises(TypeRelationError, match="batch_dims=2 must lie in"):
        infer("take", t(3, 4), t(3, 2, dtype="int32"), axis=1, batch_dims=2)
    with pytest.raises(TypeRelationError, match="batch dim 0 differs"):
        infer("take", t(3, 4), t(2, 2, dtype="int32"), axis=1, batch_dims=1)
    with pytest.raises(TypeRelationError, match="axis 2 is out of range"):
        infer("take", t(3, 4), t(2, dtype="int32"), axis=2)


def test_slicing_ops_are_injective() -> None:
    assert ops.get("strided_slice").pattern is OpPattern.INJECTIVE
    assert ops.get("take").pattern is OpPattern.INJECTIVE


def test_strided_slice_rule_canonicalizes_begin_and_end_against_the_run_time_extent() -> None:
    attrs = {"strides": None, "axes": None}
    out = t("?")
    assert rule_dims("strided_slice", [(5,)], out, begin=[-2], end=[100], **attrs) == [[2]]
    assert rule_dims("strided_slice", [(1,)], out, begin=[-2], end=[100], **attrs) == [[1]]
    assert rule_dims("strided_slice", [(7,)], out, begin=[-1], end=[-100], strides=[-3], axes=None) == [[3]]
    assert rule_dims("strided_slice", [(5,)], out, begin=[1], end=[3], slice_mode="size", **attrs) == [[3]]
    assert rule_dims("strided_slice", [(2,)], out, begin=[1], end=[3], slice_mode="size", **attrs) == [[1]]
    # A begin past its end is a type error for a known extent; at run time the axis is empty.
    assert rule_dims("strided_slice", [(5,)], out, begin=[3], end=[1], **attrs) == [[0]]
    for extent, begin, end, stride in [(5, -2, 100, 1), (7, -1, -100, -3), (6, 1, -1, 2), (4, 3, 0, -1), (4, -1, -5, -1)]:
        x = np.zeros(extent, F32)
        expected = sliced(x, begin=[begin], end=[end], strides=[stride]).shape
        assert rule_dims("strided_slice", [(extent,)], out, begin=[begin], end=[end], strides=[stride], axes=None) == [
            list(expected)
        ]
