"""softmax / log_softmax kernels (compiler/ops/kernels/softmax.py) built to C and run against
the ops' numpy references along every axis, with large inputs and a fused epilogue."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.tir.analysis import walk_stmts
from compiler.tir.stmt import For, ForKind
from tests.built_once import built_once
from tests.compiler.ops.kernels.harness import Library, lower_text, op_call, primitive, reference

RNG = np.random.default_rng(5)


def f32(*shape: int, scale: float = 3.0) -> np.ndarray:
    return RNG.uniform(-scale, scale, shape).astype("float32")


# name -> (op, data, attrs)
CASES: dict[str, tuple[str, np.ndarray, dict[str, object]]] = {
    "softmax_last_axis": ("nn.softmax", f32(3, 7), {}),
    "softmax_middle_axis": ("nn.softmax", f32(2, 5, 3), {"axis": 1}),
    "softmax_first_axis": ("nn.softmax", f32(4, 3, 2), {"axis": 0}),
    "softmax_negative_axis": ("nn.softmax", f32(2, 3, 4, 5), {"axis": -2}),
    "softmax_large_values_do_not_overflow": ("nn.softmax", f32(2, 9, scale=300.0), {}),
    "softmax_one_dim": ("nn.softmax", f32(11), {}),
    "softmax_parallel": ("nn.softmax", f32(64, 1000), {}),
    # Rows of at least two blocks of partials take the vector passes; 45 leaves a remainder.
    "softmax_vector_rows": ("nn.softmax", f32(3, 45), {}),
    "softmax_vector_rows_large_values": ("nn.softmax", f32(2, 64, scale=300.0), {}),
    "softmax_vector_rows_float64": ("nn.softmax", f32(2, 40).astype("float64"), {}),
    "log_softmax_vector_rows": ("nn.log_softmax", f32(3, 45), {}),
    "log_softmax_last_axis": ("nn.log_softmax", f32(3, 7), {}),
    "log_softmax_first_axis": ("nn.log_softmax", f32(3, 4, 2), {"axis": 0}),
    "log_softmax_large_values": ("nn.log_softmax", f32(4, 6, scale=300.0), {"axis": 1}),
}


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return built_once(tmp_path_factory, "kernels_softmax", build_library)


def build_library(directory: Path) -> Library:
    funcs = [lower_text(primitive(op_call(op, 1, attrs), [data]), name) for name, (op, data, attrs) in CASES.items()]
    _, data, _ = CASES["softmax_middle_axis"]
    fused = primitive(op_call("nn.softmax", 1, {"axis": 1}), [data], "multiply(%0, 2f)")
    funcs.append(lower_text(fused, "softmax_times_two"))
    widened = primitive(op_call("nn.softmax", 1, {"axis": 1}), [data], 'cast(%0, dtype="float64")')
    funcs.append(lower_text(widened, "softmax_to_float64"))
    _, rows, _ = CASES["softmax_vector_rows"]
    widened_rows = primitive(op_call("nn.softmax", 1, {}), [rows], 'cast(%0, dtype="float64")')
    funcs.append(lower_text(widened_rows, "softmax_vector_rows_to_float64"))
    return Library(funcs, directory)


@pytest.mark.parametrize("name", sorted(CASES))
def test_softmax_kernel_matches_reference(library: Library, name: str) -> None:
    op, data, attrs = CASES[name]
    (result,) = library.run(name, [data])
    np.testing.assert_allclose(result, reference(op, [data], attrs), rtol=1e-5, atol=1e-6)


def test_softmax_rows_sum_to_one(library: Library) -> None:
    _, data, _ = CASES["softmax_parallel"]
    (result,) = library.run("softmax_parallel", [data])
    np.testing.assert_allclose(result.sum(axis=-1), 1.0, rtol=1e-5)


def test_softmax_applies_the_fused_epilogue(library: Library) -> None:
    _, data, attrs = CASES["softmax_middle_axis"]
    (result,) = library.run("softmax_times_two", [data])
    np.testing.assert_allclose(result, 2 * reference("nn.softmax", [data], attrs), rtol=1e-5, atol=1e-6)


def test_softmax_with_an_epilogue_changing_the_dtype_recomputes_exp(library: Library) -> None:
    _, data, attrs = CASES["softmax_middle_axis"]
    (result,) = library.run("softmax_to_float64", [data])
    assert result.dtype == np.float64
    np.testing.assert_allclose(result, reference("nn.softmax", [data], attrs), rtol=1e-5, atol=1e-6)


def test_last_axis_rows_run_as_vector_loops(library: Library) -> None:
    def simd_loops(name: str) -> int:
        return sum(1 for s in walk_stmts(library.funcs[name].body) if isinstance(s, For) and s.kind is ForKind.VECTORIZED)

    # init and accumulate for max and for sum, and the normalize pass
    assert simd_loops("softmax_vector_rows") == 5
    assert simd_loops("softmax_last_axis") == 0  # 7 elements: too short for partials
    assert simd_loops("softmax_middle_axis") == 0  # strided


def test_vector_rows_with_an_epilogue_changing_the_dtype(library: Library) -> None:
    _, data, attrs = CASES["softmax_vector_rows"]
    (result,) = library.run("softmax_vector_rows_to_float64", [data])
    assert result.dtype == np.float64
    np.testing.assert_allclose(result, reference("nn.softmax", [data], attrs), rtol=1e-5, atol=1e-6)


def test_generated_c_compiles_without_warnings(library: Library) -> None:
    assert library.warnings == []
