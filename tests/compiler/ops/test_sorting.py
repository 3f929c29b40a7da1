"""sort, argsort and topk (compiler/ops/sorting.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.driver import export, lower
from compiler.parser.printer import astext
from compiler.ir.types import ANY, TensorType, TupleType, Type
from compiler.ops.registry import OpPattern, TypeRelationError
from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

F32 = "float32"


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def run(name: str, x: np.ndarray, **attrs: object) -> object:
    op = ops.get(name)
    return op.reference([x], op.make_attrs(attrs))


TIES = np.array([[2, 1, 2, 0, 1, 2]], dtype="int32")


def test_argsort_keeps_tied_elements_in_input_order_ascending() -> None:
    np.testing.assert_array_equal(run("argsort", TIES), [[3, 1, 4, 0, 2, 5]])


def test_argsort_keeps_tied_elements_in_input_order_descending() -> None:
    # Not the reverse of the ascending order: equal elements still come lowest index first.
    np.testing.assert_array_equal(run("argsort", TIES, is_ascend=False), [[0, 2, 5, 1, 4, 3]])


def test_argsort_descending_handles_the_lowest_integer_and_unsigned_values() -> None:
    x = np.array([-128, 127, -128, 0], dtype="int8")
    np.testing.assert_array_equal(run("argsort", x, is_ascend=False), [1, 3, 0, 2])
    u = np.array([0, 255, 3, 0], dtype="uint8")
    np.testing.assert_array_equal(run("argsort", u, is_ascend=False), [1, 2, 0, 3])


def test_sort_along_a_middle_axis() -> None:
    x = np.random.default_rng(0).integers(0, 5, (2, 4, 3)).astype("int64")
    np.testing.assert_array_equal(run("sort", x, axis=1), np.sort(x, axis=1))
    np.testing.assert_array_equal(run("sort", x, axis=-2, is_ascend=False), -np.sort(-x, axis=1))


def test_argsort_index_dtype_follows_the_attr() -> None:
    assert infer("argsort", t(3, 4)) == t(3, 4, dtype="int32")
    assert infer("argsort", t(3, 4), dtype="int64") == t(3, 4, dtype="int64")
    assert run("argsort", np.zeros(3, F32), dtype="float32").dtype == np.float32


def test_topk_returns_values_and_indices_of_the_largest_first() -> None:
    values, indices = run("topk", TIES, k=3)  # type: ignore[misc]  # a tuple for "both"
    np.testing.assert_array_equal(values, [[2, 2, 2]])
    np.testing.assert_array_equal(indices, [[0, 2, 5]])
    np.testing.assert_array_equal(run("topk", TIES, k=2, is_ascend=True, ret_type="indices"), [[3, 1]])


def test_topk_with_k_below_one_keeps_the_whole_axis() -> None:
    x = np.array([[1.0, 3.0], [2.0, 0.0], [5.0, 4.0]], F32)
    expected = [[5.0, 4.0], [2.0, 3.0], [1.0, 0.0]]
    np.testing.assert_array_equal(run("topk", x, k=0, axis=0, ret_type="values"), expected)
    assert infer("topk", t(3, "?"), k=-1, axis=1, ret_type="values") == t(3, "?")


def test_topk_result_types_per_ret_type() -> None:
    assert infer("topk", t(4, 6), k=2) == TupleType((t(4, 2), t(4, 2, dtype="int32")))
    assert infer("topk", t(4, 6), k=2, axis=0, ret_type="values") == t(2, 6)
    assert infer("topk", t("?", 6), k=2, axis=0, ret_type="indices", dtype="int64") == t(2, 6, dtype="int64")


def test_sorting_errors_name_the_op_and_the_problem() -> None:
    with pytest.raises(TypeRelationError, match="sort: axis 2 is out of range for rank 2"):
        infer("sort", t(3, 4), axis=2)
    with pytest.raises(TypeRelationError, match="argsort: axis -3 is out of range"):
        infer("argsort", t(3, 4), axis=-3)
    with pytest.raises(TypeRelationError, match="topk: k=7 is larger than axis 1"):
        infer("topk", t(3, 6), k=7)
    with pytest.raises(TypeRelationError, match='topk: ret_type must be "both", "values" or "indices"'):
        infer("topk", t(3, 6), ret_type="all")
    with pytest.raises(TypeRelationError, match="argsort: dtype 'bool' cannot hold indices"):
        infer("argsort", t(3), dtype="bool")
    with pytest.raises(TypeRelationError, match="sort expects a tensor"):
        infer("sort", TupleType((t(3),)))


def test_sorting_attrs_and_patterns_follow_tvm() -> None:
    for name in ("sort", "argsort", "topk"):
        assert ops.get(name).pattern == OpPattern.OPAQUE
    assert dict(ops.get("topk").make_attrs({})) == {
        "k": 1, "axis": -1, "ret_type": "both", "is_ascend": False, "dtype": "int32"
    }
    assert dict(ops.get("argsort").make_attrs({})) == {"axis": -1, "is_ascend": True, "dtype": "int32"}


MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(3, 8), float32], %y: Tensor[(3, 8), int32]) {
  %0 = topk(%x, k=3, is_ascend=True, dtype="int64");
  %1 = argsort(%y, axis=0, is_ascend=False);
  %2 = sort(%y, axis=1);
  (%0.0, %0.1, add(%1, %2), topk(%x, k=2, ret_type="indices"))
}
"""


def test_sorting_attrs_round_trip_through_the_printer() -> None:
    mod = parse(MODEL)
    assert astext(parse(astext(mod))) == astext(mod)
    text = astext(mod)
    assert 'topk(%x, k=3, is_ascend=True, dtype="int64")' in text
    assert "argsort(%y, axis=0, is_ascend=False)" in text


def test_sorting_model_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    mod = parse(MODEL)
    rng = np.random.default_rng(1)
    inputs = {
        "x": rng.integers(0, 3, (3, 8)).astype(F32),  # many ties
        "y": rng.integers(0, 4, (3, 8)).astype("int32"),
    }
    export(lower(mod), tmp_path, MODEL)
    got = CompiledModule(tmp_path).run(inputs).outputs
    expected = run_main(mod, inputs)
    assert len(got) == len(expected) == 4
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)
