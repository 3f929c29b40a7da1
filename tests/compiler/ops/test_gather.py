"""gather, gather_nd, scatter_elements, scatter_nd and one_hot (compiler/ops/gather.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.driver import export, lower
from compiler.ir.expr import Function
from compiler.parser.printer import astext
from compiler.ir.structural import structural_equal
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import OpPattern, TypeRelationError
from compiler.parser import parse, parse_expr
from compiler.passes.infer_type import infer_expr
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

F32 = "float32"
I32 = "int32"


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


X = np.arange(12, dtype=F32).reshape(3, 4)


def test_gather_reads_along_the_axis_at_each_index() -> None:
    idx = np.array([[2, 0, 1, 2], [0, 0, 0, 1]], dtype=I32)
    out = run("gather", X, idx, axis=0)
    assert out.tolist() == [[X[idx[i, j], j] for j in range(4)] for i in range(2)]
    idx1 = np.array([[3], [0], [1]], dtype="int64")
    assert run("gather", X, idx1, axis=-1).tolist() == [[3.0], [4.0], [9.0]]


def test_gather_nd_with_full_tuples_slices_and_batch_dims() -> None:
    # Full index tuples: out[y] = data[indices[0, y], indices[1, y]].
    idx = np.array([[0, 2, 1], [3, 0, 1]], dtype=I32)
    assert run("gather_nd", X, idx).tolist() == [X[0, 3], X[2, 0], X[1, 1]]
    # Shorter tuples take whole slices of the remaining dims.
    assert run("gather_nd", X, np.array([[2, 0]], dtype=I32)).tolist() == [X[2].tolist(), X[0].tolist()]
    # batch_dims=1: indices' dim 1 walks the batch; out[b, y] = data[b, indices[0, b, y]].
    data = np.arange(24, dtype=F32).reshape(2, 3, 4)
    idx = np.array([[[2, 0], [1, 1]]], dtype=I32)
    out = run("gather_nd", data, idx, batch_dims=1)
    assert out.shape == (2, 2, 4)
    for b in range(2):
        for y in range(2):
            np.testing.assert_array_equal(out[b, y], data[b, idx[0, b, y]])


def test_gather_nd_shapes() -> None:
    assert infer("gather_nd", t(3, 4, 5), t(2, 6, dtype=I32)) == t(6, 5)
    assert infer("gather_nd", t(3, 4, 5), t(1, 3, "?", dtype=I32), batch_dims=1) == t(3, "?", 5)


def test_scatter_elements_update_keeps_the_last_of_repeated_indices() -> None:
    data = np.zeros((2, 3), F32)
    idx = np.array([[0, 2, 0]], dtype=I32)
    upd = np.array([[1, 2, 3]], dtype=F32)
    assert run("scatter_elements", data, idx, upd, axis=1).tolist() == [[3, 0, 2], [0, 0, 0]]


def test_scatter_elements_shifts_negative_indices_once() -> None:
    data = np.zeros(4, F32)
    out = run("scatter_elements", data, np.array([-1, -4], dtype=I32), np.array([5, 6], dtype=F32))
    assert out.tolist() == [6, 0, 0, 5]


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [
        ("add", [9, 8, 3]),
        ("mul", [10, 12, 3]),
        ("min", [1, 1, 3]),
        ("max", [5, 4, 3]),
        # One step at a time: element 0 goes 2 -> (2+5)/2=3 -> (3+1)/2=2 -> (2+1)/2=1.
        ("mean", [1, 2, 3]),
    ],
)
def test_scatter_elements_reductions_combine_in_index_order(reduction: str, expected: list[int]) -> None:
    data = np.array([2, 3, 3], dtype=I32)
    idx = np.array([0, 1, 0, 1, 0], dtype=I32)
    upd = np.array([5, 4, 1, 1, 1], dtype=I32)
    assert run("scatter_elements", data, idx, upd, reduction=reduction).tolist() == expected


def test_scatter_elements_integer_mean_truncates_towards_zero() -> None:
    data, updates = np.array([-3], "int8"), np.array([0], "int8")
    out = run("scatter_elements", data, np.array([0], I32), updates, reduction="mean")
    assert out.tolist() == [-1]


def test_scatter_elements_with_indices_smaller_than_data() -> None:
    data = np.zeros((3, 3), F32)
    out = run("scatter_elements", data, np.array([[2, 1]], I32), np.array([[7, 8]], F32), axis=0)
    expected = np.zeros((3, 3), F32)
    expected[2, 0], expected[1, 1] = 7, 8
    np.testing.assert_array_equal(out, expected)


def test_scatter_nd_updates_whole_slices_and_adds_repeats() -> None:
    data = np.zeros((3, 2), F32)
    idx = np.array([[2, 0, 2]], dtype=I32)
    upd = np.array([[1, 2], [3, 4], [5, 6]], dtype=F32)
    assert run("scatter_nd", data, idx, upd).tolist() == [[3, 4], [0, 0], [5, 6]]
    assert run("scatter_nd", data, idx, upd, mode="add").tolist() == [[3, 4], [0, 0], [6, 8]]
    # Full index tuples address single elements.
    full = run("scatter_nd", data, np.array([[0, 1], [1, 0]], I32), np.array([9, 8], F32))
    assert full.tolist() == [[0, 9], [8, 0], [0, 0]]


def test_one_hot_gives_off_rows_for_out_of_range_indices() -> None:
    on, off = np.array(5.0, F32), np.array(1.0, F32)
    out = run("one_hot", np.array([0, 2, -1, 3], I32), on, off, depth=3, dtype="int32")
    assert out.tolist() == [[5, 1, 1], [1, 1, 5], [1, 1, 1], [1, 1, 1]]
    on, off = np.array(1, I32), np.array(0, I32)
    out0 = run("one_hot", np.array([1, 0], I32), on, off, depth=3, axis=0, dtype=F32)
    assert out0.tolist() == [[0, 1], [1, 0], [0, 0]]


def test_one_hot_inserts_the_depth_axis() -> None:
    expected = t(2, "?", 4, dtype="int8")
    assert infer("one_hot", t(2, "?", dtype=I32), t(), t(), depth=4, dtype="int8") == expected
    assert infer("one_hot", t(2, 3, dtype=I32), t(), t(), depth=4, axis=1, dtype=F32) == t(2, 4, 3)


def test_gather_family_patterns_follow_tvm() -> None:
    assert ops.get("gather").pattern is OpPattern.INJECTIVE
    assert ops.get("gather_nd").pattern is OpPattern.INJECTIVE
    assert ops.get("scatter_elements").pattern is OpPattern.OPAQUE
    assert ops.get("scatter_nd").pattern is OpPattern.OPAQUE
    assert ops.get("one_hot").pattern is OpPattern.OUT_ELEMWISE_FUSABLE
    assert ops.get("scatter_elements").kernel is not None and ops.get("scatter_nd").kernel is not None


@pytest.mark.parametrize(
    ("name", "types", "attrs", "message"),
    [
        ("gather", [t(3, 4), t(3, 4)], {"axis": 0}, "gather: indices must be integers"),
        ("gather", [t(3, 4), t(4, dtype=I32)], {"axis": 0}, "must have one rank"),
        ("gather", [t(3, 4), t(2, 3, dtype=I32)], {"axis": 0}, "differ in dim 1"),
        ("gather", [t(3, 4), t(3, 4, dtype=I32)], {"axis": 2}, "axis 2 is out of range"),
        ("gather_nd", [t(3, 4), t("?", 2, dtype=I32)], {}, "needs a static first dim"),
        ("gather_nd", [t(3, 4), t(3, 2, dtype=I32)], {}, "do not fit data"),
        ("gather_nd", [t(3, 4), t(1, 2, dtype=I32)], {"batch_dims": 1}, "batch dim 0 differs"),
        ("scatter_elements", [t(3), t(2, dtype=I32), t(2, dtype="float16")], {}, "must have the dtype of"),
        ("scatter_elements", [t(3), t(2, dtype=I32), t(3)], {}, "must have one shape"),
        ("scatter_elements", [t(3, 2), t(1, 3, dtype=I32), t(1, 3)], {}, "exceed data"),
        ("scatter_elements", [t(3), t(2, dtype=I32), t(2)], {"reduction": "sum"}, "unknown reduction 'sum'"),
        ("scatter_nd", [t(3, 2), t(1, 2, dtype=I32), t(2, 3)], {}, r"must have shape indices.shape\[1:\]"),
        ("scatter_nd", [t(3), t(2, 2, dtype=I32), t(2)], {}, "do not fit data"),
        ("scatter_nd", [t(3), t(1, 2, dtype=I32), t(2)], {"mode": "mean"}, "unknown mode 'mean'"),
        ("one_hot", [t(3, dtype=I32), t(), t()], {"depth": 0, "dtype": F32}, "depth must be positive"),
        ("one_hot", [t(3, dtype=I32), t(1), t()], {"depth": 2, "dtype": F32}, "must be scalars"),
        ("one_hot", [t(3, dtype=I32), t(), t()], {"depth": 2, "axis": 2, "dtype": F32}, "axis 2 must be -1"),
    ],
)
def test_gather_family_misuse_is_a_type_error(
    name: str, types: list[Type], attrs: dict, message: str
) -> None:
    with pytest.raises(TypeRelationError, match=message):
        infer(name, *types, **attrs)


MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(3, 4), float32], %i: Tensor[(2, 4), int64], %u: Tensor[(2, 4), float32]) {
  %0 = gather(%x, %i, axis=0);
  %1 = scatter_elements(%x, %i, %u, reduction="add");
  %2 = gather_nd(%1, %i, batch_dims=0, index_rank=2);
  %3 = one_hot(%i, 1f, 0f, depth=3, axis=-1, dtype="float32");
  %4 = scatter_nd(%x, %i, %2, mode="update");
  (%0, %2, %3, %4)
}
"""


def test_gather_family_parses_prints_and_compiles_end_to_end(tmp_path: Path) -> None:
    mod = parse(MODEL)
    assert structural_equal(parse(astext(mod)), mod)
    rng = np.random.default_rng(0)
    inputs = {
        "x": rng.standard_normal((3, 4)).astype(F32),
        "i": np.array([[2, 0, 1, 2], [0, 1, 2, 2]], "int64"),
        "u": rng.standard_normal((2, 4)).astype(F32),
    }
    expected = run_main(mod, inputs)
    export(lower(mod), tmp_path, MODEL)
    got = CompiledModule(tmp_path).run(inputs).outputs
    assert len(got) == len(expected) == 4
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_scatter_kernels_apply_a_fused_epilogue_after_the_last_update(tmp_path: Path) -> None:
    from compiler.backend.lower_primitive import lower_primitive
    from tests.compiler.backend.prim_library import build_prim_library

    func = parse_expr(
        """fn (%x: Tensor[(3, 2), float32], %i: Tensor[(1, 3), int32], %u: Tensor[(3, 2), float32],
               %j: Tensor[(2, 2), int32], %v: Tensor[(2, 2), float32], Primitive=1) {
          %0 = scatter_nd(%x, %i, %u, mode="add");
          %1 = scatter_elements(%x, %j, %v, axis=0, reduction="mul");
          (negative(%0), exp(%1))
        }"""
    )
    assert isinstance(func, Function)
    infer_expr(func)
    prim = lower_primitive(func, "scatter_epilogues")
    library = build_prim_library([prim], tmp_path, "scatter_epilogues")
    rng = np.random.default_rng(1)
    x, u, v = (rng.standard_normal(s).astype(F32) for s in ((3, 2), (3, 2), (2, 2)))
    i, j = np.array([[2, 0, 2]], I32), np.array([[1, 0], [1, 2]], I32)
    got = library.run("scatter_epilogues", [x, i, u, j, v])
    added = x.copy()
    for k, row in enumerate(i[0]):
        added[row] += u[k]
    multiplied = x.copy()
    for (a, b), value in np.ndenumerate(v):
        multiplied[j[a, b], b] *= value
    np.testing.assert_allclose(got[0], -added, rtol=1e-6)
    np.testing.assert_allclose(got[1], np.exp(multiplied), rtol=1e-6)
