"""Reductions over partial accumulators (compiler/tir/partial_reduce.py): when the lowering
uses them, and the compiled reductions against numpy (float sums within rounding, integer sums
and max/min exactly, NaN propagating)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.tir import expr as te
from compiler.tir.analysis import walk_stmts
from compiler.tir.partial_reduce import unit_stride
from compiler.tir.stmt import For, ForKind, PrimFunc
from tests.compiler.ops.kernels.harness import Library, lower_text, op_call, primitive

RNG = np.random.default_rng(11)


def test_unit_stride_wants_the_variable_in_the_last_index_with_step_one() -> None:
    p = te.Buffer("p", (8, 64), "float32")
    i, k = te.Var("i", "int32"), te.Var("k", "int32")
    assert unit_stride(p[i, k] * p[i, k], k)
    assert unit_stride(p[i, k + 3] + p[i, 0], k)
    assert unit_stride(p[i, te.cast("int64", 5 - (0 - k))], k)
    assert not unit_stride(p[k, i], k)
    assert not unit_stride(p[i, k * 2], k)
    assert not unit_stride(p[i, k // 2], k)


# name -> (op, data, attrs)
CASES: dict[str, tuple[str, np.ndarray, dict[str, object]]] = {
    # 45 = two blocks of 16 and a remainder of 13.
    "sum_last_axis_with_a_remainder": ("sum", RNG.uniform(-1, 1, (6, 45)).astype("float32"), {"axis": [-1]}),
    "mean_last_axis": ("mean", RNG.uniform(-1, 1, (4, 256)).astype("float32"), {"axis": [1]}),
    "sum_two_trailing_axes": ("sum", RNG.uniform(-1, 1, (3, 5, 40)).astype("float32"), {"axis": [1, 2]}),
    "sum_first_axis": ("sum", RNG.uniform(-1, 1, (64, 3)).astype("float32"), {"axis": [0]}),
    "sum_float64": ("sum", RNG.uniform(-1, 1, (2, 100)), {"axis": [-1]}),
    "sum_int32_wraps": ("sum", RNG.integers(2**30, 2**31 - 1, (3, 50)).astype("int32"), {"axis": [-1]}),
    "max_last_axis": ("max", RNG.normal(size=(5, 70)).astype("float32"), {"axis": [-1]}),
    "min_last_axis": ("min", RNG.normal(size=(5, 70)).astype("float32"), {"axis": [-1]}),
    "max_int64": ("max", RNG.integers(-2**62, 2**62, (2, 33)), {"axis": [-1]}),
}


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    funcs = [lower_text(primitive(op_call(op, 1, attrs), [data]), name) for name, (op, data, attrs) in CASES.items()]
    return Library(funcs, Path(tmp_path_factory.mktemp("partial_reduce")))


def _simd_loops(func: PrimFunc) -> int:
    return sum(1 for s in walk_stmts(func.body) if isinstance(s, For) and s.kind is ForKind.VECTORIZED)


def test_only_contiguous_float_and_int_reductions_use_partials(library: Library) -> None:
    assert _simd_loops(library.funcs["sum_last_axis_with_a_remainder"]) == 2  # init and accumulate
    assert _simd_loops(library.funcs["sum_two_trailing_axes"]) == 2
    assert _simd_loops(library.funcs["sum_first_axis"]) == 0  # strided: would be gathers


def test_float_sums_match_numpy_within_rounding(library: Library) -> None:
    for name in ("sum_last_axis_with_a_remainder", "mean_last_axis", "sum_two_trailing_axes", "sum_first_axis",
                 "sum_float64"):
        op, data, attrs = CASES[name]
        axes = tuple(attrs["axis"])  # type: ignore[arg-type]  # lists of ints above
        expected = data.astype(np.float64).sum(axis=axes)
        if op == "mean":
            expected = expected / np.prod([data.shape[a] for a in axes])
        (result,) = library.run(name, [data])
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6, err_msg=name)


def test_integer_sums_wrap_exactly_as_in_order(library: Library) -> None:
    _, data, _ = CASES["sum_int32_wraps"]
    (result,) = library.run("sum_int32_wraps", [data])
    assert result.dtype == np.int32
    np.testing.assert_array_equal(result, data.sum(axis=-1, dtype=np.int32))


def test_max_and_min_are_exact(library: Library) -> None:
    for name, pick in (("max_last_axis", np.max), ("min_last_axis", np.min), ("max_int64", np.max)):
        _, data, _ = CASES[name]
        (result,) = library.run(name, [data])
        np.testing.assert_array_equal(result, pick(data, axis=-1), err_msg=name)


def test_nan_anywhere_in_a_row_makes_its_max_nan(library: Library) -> None:
    _, data, _ = CASES["max_last_axis"]
    data = data.copy()
    data[0, 3], data[1, 69], data[2, 40] = np.nan, np.nan, np.nan  # a block, the remainder, mid-row
    (result,) = library.run("max_last_axis", [data])
    assert np.isnan(result[:3]).all()
    np.testing.assert_array_equal(result[3:], data[3:].max(axis=-1))


def test_generated_c_compiles_without_warnings(library: Library) -> None:
    assert library.warnings == []
