"""Pool kernels (compiler/ops/kernels/pool.py) built to C and run against the ops' numpy
references: windows, padding, ceil mode, dilation, layouts, integer dtypes and epilogues."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.tir.analysis import walk_stmts
from compiler.tir.stmt import For, ForKind
from tests.built_once import built_once
from tests.compiler.ops.kernels.harness import Library, lower_text, op_call, primitive, reference

RNG = np.random.default_rng(11)


def f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-2, 2, shape).astype("float32")


def i32(*shape: int) -> np.ndarray:
    return RNG.integers(-50, 50, shape).astype("int32")


# name -> (op, data, attrs)
CASES: dict[str, tuple[str, np.ndarray, dict[str, object]]] = {
    "max_2x2_stride_2": ("nn.max_pool2d", f32(1, 2, 6, 6), {"pool_size": [2, 2], "strides": [2, 2]}),
    "max_3x3_padded": ("nn.max_pool2d", f32(2, 3, 7, 5), {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    "max_ceil_mode": (
        "nn.max_pool2d", f32(1, 2, 5, 5),
        {"pool_size": [2, 3], "strides": [2, 2], "padding": [0, 1, 1, 0], "ceil_mode": True},
    ),
    "max_dilated_nhwc": ("nn.max_pool2d", f32(1, 6, 6, 2), {"pool_size": [2, 2], "dilation": [2, 1], "layout": "NHWC"}),
    "max_int_windows_in_padding": ("nn.max_pool2d", i32(1, 1, 2, 2), {"pool_size": [2, 2], "padding": [3]}),
    "max_nhwc_to_nchw": (
        "nn.max_pool2d", f32(2, 5, 4, 3),
        {"pool_size": [2, 2], "layout": "NHWC", "out_layout": "NCHW"},
    ),
    "max_parallel": ("nn.max_pool2d", f32(1, 16, 64, 64), {"pool_size": [2, 2], "strides": [2, 2]}),
    # ResNet-50's pool, and rows of more than one chunk of vectorized outputs with a ragged end.
    "max_resnet_stem": ("nn.max_pool2d", f32(1, 4, 23, 23), {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    "max_long_rows": ("nn.max_pool2d", f32(2, 3, 5, 301), {"pool_size": [3, 2], "strides": [1, 2], "padding": [1, 0, 0, 2]}),
    "max_dilated_wide": ("nn.max_pool2d", f32(1, 2, 9, 90), {"pool_size": [2, 3], "dilation": [1, 3], "padding": [0, 4]}),
    "avg_padded": ("nn.avg_pool2d", f32(2, 3, 7, 5), {"pool_size": [3, 3], "strides": [2, 2], "padding": [1]}),
    "avg_count_include_pad_ceil": (
        "nn.avg_pool2d", f32(1, 2, 5, 5),
        {"pool_size": [3, 3], "strides": [2, 2], "padding": [1], "count_include_pad": True, "ceil_mode": True},
    ),
    "avg_ceil_excluding_pad": (
        "nn.avg_pool2d", f32(1, 2, 6, 7),
        {"pool_size": [3, 2], "strides": [2, 3], "padding": [0, 1], "ceil_mode": True},
    ),
    "avg_int_truncates": ("nn.avg_pool2d", i32(1, 2, 5, 5), {"pool_size": [2, 2], "strides": [2, 2], "padding": [1]}),
    "avg_nhwc_dilated": (
        "nn.avg_pool2d", f32(1, 7, 6, 3),
        {"pool_size": [2, 2], "dilation": [2, 2], "padding": [1, 0], "layout": "NHWC"},
    ),
    "global_avg": ("nn.global_avg_pool2d", f32(2, 3, 4, 5), {}),
    "global_avg_nhwc": ("nn.global_avg_pool2d", f32(1, 4, 3, 6), {"layout": "NHWC"}),
    "global_avg_int": ("nn.global_avg_pool2d", i32(2, 3, 3, 3), {}),
    "global_max": ("nn.global_max_pool2d", f32(2, 3, 4, 5), {}),
    "global_max_nhwc_to_nchw": ("nn.global_max_pool2d", f32(2, 3, 3, 4), {"layout": "NHWC", "out_layout": "NCHW"}),
}


def pool_text(op: str, data: np.ndarray, attrs: dict[str, object], tail: str = "") -> str:
    return primitive(op_call(op, 1, attrs), [data], tail)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return built_once(tmp_path_factory, "kernels_pool", build_library)


def build_library(directory: Path) -> Library:
    funcs = [lower_text(pool_text(*case), name) for name, case in CASES.items()]
    op, data, attrs = CASES["avg_padded"]
    funcs.append(lower_text(pool_text(op, data, attrs, "nn.relu(negative(%0))"), "avg_then_negative_relu"))
    op, data, attrs = CASES["max_long_rows"]
    funcs.append(lower_text(pool_text(op, data, attrs, "nn.relu(negative(%0))"), "max_then_negative_relu"))
    op, data, attrs = CASES["global_max"]
    funcs.append(lower_text(pool_text(op, data, attrs, "exp(%0)"), "global_max_then_exp"))
    return Library(funcs, directory)


@pytest.mark.parametrize("name", sorted(CASES))
def test_pool_kernel_matches_reference(library: Library, name: str) -> None:
    op, data, attrs = CASES[name]
    (result,) = library.run(name, [data])
    expected = reference(op, [data], attrs)
    assert result.dtype == expected.dtype
    np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-6)


def _with_nan_and_infinities() -> np.ndarray:
    data = f32(1, 4, 23, 23)
    data[0, 0, 5, 7] = np.nan  # an interior window's element
    data[0, 1, 0, 0] = np.nan  # a corner: only windows at the left edge see it
    data[0, 2, :, :] = -np.inf  # windows of -inf only: the lowest finite value wins, as in TVM
    data[0, 3, 10, 22] = np.inf
    return data


def test_max_pool_keeps_nan_and_infinities_as_numpy_does(library: Library) -> None:
    op, _, attrs = CASES["max_resnet_stem"]
    data = _with_nan_and_infinities()
    (result,) = library.run("max_resnet_stem", [data])
    expected = reference(op, [data], attrs)
    np.testing.assert_array_equal(result, expected)
    assert np.isnan(result[0, 0]).sum() == np.isnan(expected[0, 0]).sum() > 0
    assert (result[0, 2] == np.finfo(np.float32).min).all()
    assert np.isposinf(result[0, 3]).any()


def test_max_pool_rows_are_vectorized_inside_the_input(library: Library) -> None:
    def vectorized(name: str) -> bool:
        return any(isinstance(s, For) and s.kind is ForKind.VECTORIZED for s in walk_stmts(library.funcs[name].body))

    assert vectorized("max_resnet_stem") and vectorized("max_long_rows") and vectorized("max_dilated_wide")


def test_pool_applies_the_fused_epilogue(library: Library) -> None:
    op, data, attrs = CASES["avg_padded"]
    (result,) = library.run("avg_then_negative_relu", [data])
    np.testing.assert_allclose(result, np.maximum(-reference(op, [data], attrs), 0), rtol=1e-6, atol=1e-6)


def test_vectorized_max_pool_applies_the_fused_epilogue(library: Library) -> None:
    op, data, attrs = CASES["max_long_rows"]
    (result,) = library.run("max_then_negative_relu", [data])
    np.testing.assert_allclose(result, np.maximum(-reference(op, [data], attrs), 0), rtol=1e-6, atol=1e-6)


def test_global_pool_applies_the_fused_epilogue(library: Library) -> None:
    op, data, attrs = CASES["global_max"]
    (result,) = library.run("global_max_then_exp", [data])
    np.testing.assert_allclose(result, np.exp(reference(op, [data], attrs)), rtol=1e-6)


def test_only_large_pools_run_in_parallel(library: Library) -> None:
    def parallel(name: str) -> bool:
        return any(isinstance(s, For) and s.kind is ForKind.PARALLEL for s in walk_stmts(library.funcs[name].body))

    assert parallel("max_parallel")
    assert not parallel("max_2x2_stride_2")


def test_generated_c_compiles_without_warnings(library: Library) -> None:
    assert library.warnings == []
