"""meshgrid, trilu, unravel_index, searchsorted, sparse_to_dense, matrix_set_diag, adv_index and
sliding_window (compiler/ops/index_ops.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.driver import export, lower
from compiler.parser.printer import astext
from compiler.ir.types import ANY, TensorType, TupleType, Type, dtype_of
from compiler.ops.registry import AttrError, OpPattern, TypeRelationError
from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

F32 = "float32"
I32 = "int32"


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def type_of(value: object) -> Type:
    if isinstance(value, tuple):
        return TupleType(tuple(type_of(v) for v in value))
    assert isinstance(value, np.ndarray)
    return TensorType(value.shape, dtype_of(value))


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def run(name: str, *args: object, **attrs: object) -> object:
    """The reference result, checked against the type relation."""
    op = ops.get(name)
    a = op.make_attrs(attrs)
    ty = op.type_rel([type_of(x) for x in args], a)
    out = op.reference(list(args), a)  # type: ignore[arg-type]  # tuple arguments too
    assert type_of(out) == ty
    return out


# --- meshgrid -------------------------------------------------------------------------------------


def test_meshgrid_xy_swaps_the_first_two_dims_only() -> None:
    a, b, c = np.arange(2, dtype=F32), np.arange(3, dtype=F32), np.arange(4, dtype=F32)
    grids = run("meshgrid", (a, b, c), indexing="xy")
    assert isinstance(grids, tuple) and [g.shape for g in grids] == [(3, 2, 4)] * 3
    np.testing.assert_array_equal(grids[0][:, :, 0], np.tile(a, (3, 1)))
    ij = run("meshgrid", (a, b, c))
    assert [g.shape for g in ij] == [(2, 3, 4)] * 3  # type: ignore[union-attr]


def test_meshgrid_treats_a_scalar_as_length_one() -> None:
    grids = run("meshgrid", (np.array(7, I32), np.arange(3, dtype=I32)))
    np.testing.assert_array_equal(grids[0], [[7, 7, 7]])  # type: ignore[index]
    assert infer("meshgrid", TupleType((t(), t("?")))) == TupleType((t(1, "?"), t(1, "?")))


def test_meshgrid_errors() -> None:
    with pytest.raises(TypeRelationError, match="meshgrid needs scalars or 1-D tensors"):
        infer("meshgrid", TupleType((t(2, 2), t(3))))
    with pytest.raises(TypeRelationError, match="meshgrid needs tensors of one dtype"):
        infer("meshgrid", TupleType((t(2), t(3, dtype=I32))))
    with pytest.raises(TypeRelationError, match='meshgrid: indexing must be "ij" or "xy"'):
        infer("meshgrid", TupleType((t(2),)), indexing="ji")
    with pytest.raises(TypeRelationError, match="meshgrid expects a non-empty tuple"):
        infer("meshgrid", t(2))


# --- trilu ----------------------------------------------------------------------------------------


def test_trilu_keeps_the_upper_or_lower_triangle_from_diagonal_k() -> None:
    x = np.arange(1, 13, dtype=F32).reshape(3, 4)
    row_minus_col = np.subtract.outer(range(3), range(4))
    np.testing.assert_array_equal(run("trilu", x, np.array(1, I32)), np.where(row_minus_col <= -1, x, 0))
    np.testing.assert_array_equal(
        run("trilu", x, np.array(-1, "int64"), upper=False), np.where(row_minus_col >= 1, x, 0)
    )


def test_trilu_errors() -> None:
    with pytest.raises(TypeRelationError, match="trilu: k must be a 0-D tensor"):
        infer("trilu", t(3, 3), t(1, dtype=I32))
    with pytest.raises(TypeRelationError, match="trilu: k must be an integer tensor"):
        infer("trilu", t(3, 3), t())
    with pytest.raises(TypeRelationError, match="trilu needs a matrix or a batch of matrices"):
        infer("trilu", t(3), t(dtype=I32))


# --- unravel_index --------------------------------------------------------------------------------


def test_unravel_index_matches_numpy_in_range() -> None:
    shape = np.array([3, 4, 2], I32)
    indices = np.array([0, 5, 23, 17], I32)
    expected = np.stack(np.unravel_index(indices, (3, 4, 2)))
    np.testing.assert_array_equal(run("unravel_index", indices, shape), expected)
    np.testing.assert_array_equal(run("unravel_index", np.array(17, "int64"), shape), [2, 0, 1])


def test_unravel_index_wraps_an_index_past_the_end_in_the_first_coordinate() -> None:
    # numpy raises; TVM's floor divisions and moduli wrap.
    np.testing.assert_array_equal(run("unravel_index", np.array([7], I32), np.array([2, 3], I32)), [[0], [1]])


def test_unravel_index_errors() -> None:
    with pytest.raises(TypeRelationError, match="unravel_index: indices must be an integer tensor"):
        infer("unravel_index", t(3), t(2, dtype=I32))
    with pytest.raises(TypeRelationError, match="unravel_index: shape must be a 1-D tensor"):
        infer("unravel_index", t(3, dtype=I32), t(2, 1, dtype=I32))
    assert infer("unravel_index", t("?", dtype="int64"), t(3, dtype=I32)) == t(3, "?", dtype="int64")


# --- searchsorted ---------------------------------------------------------------------------------


def test_searchsorted_left_and_right_on_ties() -> None:
    seq = np.array([1, 2, 2, 2, 5], F32)
    values = np.array([2, 0, 9, 3], F32)
    np.testing.assert_array_equal(run("searchsorted", seq, values), np.searchsorted(seq, values))
    expected = np.searchsorted(seq, values, "right")
    np.testing.assert_array_equal(run("searchsorted", seq, values, right=True), expected)


def test_searchsorted_searches_each_row_of_a_multidimensional_sequence() -> None:
    seq = np.array([[0, 1, 4], [2, 3, 3]], I32)
    values = np.array([[4, 1], [3, 0]], I32)
    expected = [[2, 1], [1, 0]]
    np.testing.assert_array_equal(run("searchsorted", seq, values, dtype="int64"), expected)


def test_searchsorted_on_an_unsorted_row_stops_where_the_binary_search_stops() -> None:
    seq = np.array([5, 1, 4, 2, 3], F32)
    # lo=0, hi=5: mid 2 (4 >= 2.5) -> hi=2; mid 1 (1 < 2.5) -> lo=2.
    np.testing.assert_array_equal(run("searchsorted", seq, np.array([2.5], F32)), [2])


def test_searchsorted_errors() -> None:
    with pytest.raises(TypeRelationError, match="searchsorted: values must have rank 1 or more"):
        infer("searchsorted", t(4), t())
    with pytest.raises(TypeRelationError, match="needs values of the same rank"):
        infer("searchsorted", t(2, 4), t(6))
    with pytest.raises(TypeRelationError, match="differ in outer dim 0"):
        infer("searchsorted", t(2, 4), t(3, 6))
    with pytest.raises(TypeRelationError, match="searchsorted needs sorted_sequence and values of one dtype"):
        infer("searchsorted", t(4), t(3, dtype=I32))


# --- sparse_to_dense ------------------------------------------------------------------------------


def test_sparse_to_dense_later_duplicates_win_and_outside_indices_are_ignored() -> None:
    indices = np.array([[0, 1], [2, 3], [0, 1], [5, 0]], I32)
    values = np.array([1, 2, 3, 4], F32)
    out = run("sparse_to_dense", indices, values, np.array(-1, F32), output_shape=[3, 4])
    expected = np.full((3, 4), -1, F32)
    expected[0, 1], expected[2, 3] = 3, 2
    np.testing.assert_array_equal(out, expected)


def test_sparse_to_dense_with_1d_indices_sets_whole_rows_and_scalar_values_broadcast() -> None:
    indices, value, default = np.array([2, 0], I32), np.array(5, I32), np.array(0, I32)
    out = run("sparse_to_dense", indices, value, default, output_shape=[3, 2])
    np.testing.assert_array_equal(out, [[5, 5], [0, 0], [5, 5]])


def test_sparse_to_dense_errors() -> None:
    with pytest.raises(TypeRelationError, match="sparse_to_dense: default_value must be a scalar"):
        infer("sparse_to_dense", t(2, dtype=I32), t(2), t(1), output_shape=[4])
    with pytest.raises(TypeRelationError, match="needs one column per output dim"):
        infer("sparse_to_dense", t(2, 3, dtype=I32), t(2), t(), output_shape=[4, 4])
    with pytest.raises(TypeRelationError, match="needs one value per index"):
        infer("sparse_to_dense", t(2, dtype=I32), t(3), t(), output_shape=[4])
    with pytest.raises(TypeRelationError, match="must have the dtype of sparse_values"):
        infer("sparse_to_dense", t(2, dtype=I32), t(2), t(dtype=I32), output_shape=[4])
    with pytest.raises(AttrError, match="requires attribute output_shape"):
        ops.get("sparse_to_dense").make_attrs({})


# --- matrix_set_diag ------------------------------------------------------------------------------


def test_matrix_set_diag_sets_one_diagonal() -> None:
    x = np.zeros((2, 3, 4), I32)
    diag = np.array([[1, 2, 3], [4, 5, 6]], I32)
    out = run("matrix_set_diag", x, diag, k1=1, k2=1)
    expected = x.copy()
    for n in range(3):
        expected[:, n, n + 1] = diag[:, n]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    ("super_right", "sub_right"), [(True, False), (False, True), (True, True), (False, False)]
)
def test_matrix_set_diag_band_alignment(super_right: bool, sub_right: bool) -> None:
    # A 3x4 matrix, diagonals -1..2 of lengths 2, 3, 3, 2 stored in rows of 3 (top row = k2).
    x = np.zeros((3, 4), I32)
    diag = np.arange(1, 13, dtype=I32).reshape(4, 3)
    out = run("matrix_set_diag", x, diag, k1=-1, k2=2, super_diag_right_align=super_right,
              sub_diag_right_align=sub_right)
    expected = x.copy()
    for k in range(-1, 3):
        length = min(4 - max(k, 0), 3 + min(k, 0))
        row = diag[2 - k]
        right = super_right if k >= 0 else sub_right
        part = row[3 - length :] if right else row[:length]
        for n in range(length):
            expected[(n, n + k) if k >= 0 else (n - k, n)] = part[n]
    np.testing.assert_array_equal(out, expected)


def test_matrix_set_diag_errors() -> None:
    with pytest.raises(TypeRelationError, match="matrix_set_diag: k1=2 must not exceed k2=1"):
        infer("matrix_set_diag", t(3, 4), t(3), k1=2, k2=1)
    with pytest.raises(TypeRelationError, match=r"need a diagonal of shape \(2, 3\)"):
        infer("matrix_set_diag", t(2, 3, 4), t(2, 4), k1=0, k2=0)
    with pytest.raises(TypeRelationError, match="diagonals 0..4 lie outside"):
        infer("matrix_set_diag", t(3, 4), t(5, 3), k1=0, k2=4)
    with pytest.raises(TypeRelationError, match="matrix_set_diag needs input and diagonal of one dtype"):
        infer("matrix_set_diag", t(3, 3), t(3, dtype=I32), k1=0, k2=0)


# --- adv_index ------------------------------------------------------------------------------------


def test_adv_index_broadcasts_the_index_tensors_like_numpy() -> None:
    x = np.arange(40, dtype=F32).reshape(4, 5, 2)
    rows, cols = np.array([[0], [3]], I32), np.array([1, 4, 2], "int64")
    np.testing.assert_array_equal(run("adv_index", (x, rows, cols)), x[rows, cols])
    np.testing.assert_array_equal(run("adv_index", (x, np.array([2, 2], I32))), x[[2, 2]])


def test_adv_index_errors() -> None:
    with pytest.raises(TypeRelationError, match="adv_index: 3 index tensors for"):
        infer("adv_index", TupleType((t(2, 2), t(1, dtype=I32), t(1, dtype=I32), t(1, dtype=I32))))
    with pytest.raises(TypeRelationError, match="adv_index: index tensors must be integers"):
        infer("adv_index", TupleType((t(2, 2), t(1))))
    with pytest.raises(TypeRelationError, match="adv_index: shapes of .* do not broadcast"):
        infer("adv_index", TupleType((t(4, 4), t(2, dtype=I32), t(3, dtype=I32))))
    with pytest.raises(TypeRelationError, match="adv_index needs data and at least one index"):
        infer("adv_index", TupleType((t(4, 4),)))


# --- sliding_window -------------------------------------------------------------------------------


def test_sliding_window_windows_every_dim_from_axis() -> None:
    x = np.arange(40, dtype=F32).reshape(2, 5, 4)
    out = run("sliding_window", x, axis=1, window_shape=[2, 3], strides=[2, 1])
    assert out.shape == (2, 2, 2, 2, 3)  # type: ignore[union-attr]
    for a in range(2):
        for b in range(2):
            window = x[:, 2 * a : 2 * a + 2, b : b + 3]
            np.testing.assert_array_equal(out[:, a, b], window)  # type: ignore[index]


def test_sliding_window_count_rounds_up_partial_strides() -> None:
    # (7 - 3 + 1) = 5 starts, every 2nd: 0, 2, 4.
    assert infer("sliding_window", t(7), axis=0, window_shape=[3], strides=[2]) == t(3, 3)
    assert infer("sliding_window", t("?", 7), axis=1, window_shape=[3], strides=[2]) == t("?", 3, 3)


def test_sliding_window_errors() -> None:
    with pytest.raises(TypeRelationError, match=r"window_shape \[2\] and strides \[1\] need 2 entries"):
        infer("sliding_window", t(3, 4), axis=0, window_shape=[2], strides=[1])
    with pytest.raises(TypeRelationError, match="sliding_window: axis -1 must be in"):
        infer("sliding_window", t(3, 4), axis=-1, window_shape=[2], strides=[1])
    with pytest.raises(TypeRelationError, match="does not fit"):
        infer("sliding_window", t(3, 4), axis=1, window_shape=[5], strides=[1])
    with pytest.raises(TypeRelationError, match="must be positive"):
        infer("sliding_window", t(3, 4), axis=1, window_shape=[2], strides=[0])


def test_index_op_patterns_follow_tvm() -> None:
    expected = {
        "meshgrid": OpPattern.INJECTIVE,
        "trilu": OpPattern.ELEMWISE,
        "unravel_index": OpPattern.INJECTIVE,
        "searchsorted": OpPattern.OPAQUE,
        "sparse_to_dense": OpPattern.OPAQUE,
        "matrix_set_diag": OpPattern.INJECTIVE,
        "adv_index": OpPattern.INJECTIVE,
        "sliding_window": OpPattern.OPAQUE,
    }
    assert {name: ops.get(name).pattern for name in expected} == expected


# --- whole models ---------------------------------------------------------------------------------

MODEL = """#[version = "0.0.5"]
def @main(%a: Tensor[(3), float32], %b: Tensor[(4), float32], %k: Tensor[(), int32],
          %s: Tensor[(6), float32], %i: Tensor[(2), int32], %sp: Tensor[(2, 2), int64],
          %v: Tensor[(2), float32], %d: Tensor[(), float32],
          %g: Tensor[(3, 3), float32], %shape: Tensor[(2), int32]) {
  %0 = meshgrid((%a, %b), indexing="xy");
  %1 = trilu(%0.0, %k, upper=False);
  %2 = sliding_window(%1, axis=0, window_shape=[2, 2], strides=[1, 2]);
  %3 = adv_index((%1, %i));
  %4 = searchsorted(%s, %0.1, right=True, dtype="int64");
  %5 = sparse_to_dense(%sp, %v, %d, output_shape=[4, 3]);
  %6 = matrix_set_diag(%5, %g, k1=-1, k2=1, super_diag_right_align=False, sub_diag_right_align=True);
  %7 = unravel_index(%i, %shape);
  (%2, add(%3, %3), %4, %6, %7)
}
"""


def test_index_op_attrs_round_trip_through_the_printer() -> None:
    mod = parse(MODEL)
    text = astext(mod)
    assert astext(parse(text)) == text
    pieces = (
        'meshgrid(%0, indexing="xy")',
        "trilu(%2, %k, upper=False)",
        "window_shape=[2, 2], strides=[1, 2]",
        'right=True, dtype="int64"',
        "output_shape=[4, 3]",
        "k1=-1, k2=1, super_diag_right_align=False, sub_diag_right_align=True",
    )
    for piece in pieces:
        assert piece in text, piece


def test_index_model_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    mod = parse(MODEL)
    rng = np.random.default_rng(2)
    inputs = {
        "a": rng.normal(size=3).astype(F32),
        "b": rng.normal(size=4).astype(F32),
        "k": np.array(1, I32),
        "s": np.sort(rng.integers(-2, 3, 6)).astype(F32),
        "i": np.array([2, 0], I32),
        "sp": np.array([[0, 1], [3, 2]], "int64"),
        "v": np.array([5.0, 6.0], F32),
        "d": np.array(-1.0, F32),
        "g": rng.normal(size=(3, 3)).astype(F32),
        "shape": np.array([2, 2], I32),  # index 2 is in range, 0 too
    }
    # The sequence holds small integers, so ties with the grid values do not occur; make one.
    inputs["b"][1] = inputs["s"][2]
    export(lower(mod), tmp_path, MODEL)
    got = CompiledModule(tmp_path).run(inputs).outputs
    expected = run_main(mod, inputs)
    assert len(got) == len(expected) == 5
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(g, e)
