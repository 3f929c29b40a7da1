"""nn.conv2d kernels (compiler/ops/kernels/conv2d.py) built to C and run against numpy.

Covers the three loop nests (output channels by pixels for one group and unit steps, the
implicit-im2col GEMM over pixels, the direct kernel for narrow groups), tile edges, every padding form, strides, dilation, groups, layouts, integer accumulation and a
fused bias_add + relu epilogue.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.tir.analysis import walk_stmts
from compiler.tir.stmt import Allocate, For, ForKind
from tests.built_once import built_once
from tests.compiler.ops.kernels.harness import Library, lower_text, op_call, primitive, reference

RNG = np.random.default_rng(7)


def f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def i8(*shape: int) -> np.ndarray:
    return RNG.integers(-8, 8, shape).astype("int8")


# name -> (data, weight, attrs)
CASES: dict[str, tuple[np.ndarray, np.ndarray, dict[str, object]]] = {
    "gemm_3x3_same_padding": (f32(1, 8, 10, 10), f32(16, 8, 3, 3), {"padding": [1, 1]}),
    "gemm_column_and_row_edges": (
        f32(2, 5, 9, 7), f32(12, 5, 3, 2),
        {"strides": [2, 1], "padding": [1, 0, 2, 1], "dilation": [2, 1]},
    ),
    "gemm_groups": (f32(1, 6, 7, 7), f32(16, 3, 3, 3), {"groups": 2, "padding": [1]}),
    "gemm_1x1_stride_2": (f32(2, 4, 9, 9), f32(24, 4, 1, 1), {"strides": [2, 2]}),
    "gemm_bottom_right_padding_only": (f32(1, 3, 6, 6), f32(9, 3, 3, 3), {"padding": [0, 0, 2, 1]}),
    "gemm_nhwc_hwio": (
        f32(1, 7, 7, 5), f32(3, 3, 5, 9),
        {"padding": [1, 1], "data_layout": "NHWC", "kernel_layout": "HWIO"},
    ),
    "gemm_nhwc_ohwi_to_nchw": (
        f32(2, 6, 5, 3), f32(10, 2, 2, 3),
        {"strides": [2, 1], "data_layout": "NHWC", "kernel_layout": "OHWI", "out_layout": "NCHW"},
    ),
    "gemm_int8_to_int32": (i8(1, 4, 6, 6), i8(8, 4, 3, 3), {"padding": [1], "out_dtype": "int32"}),
    "gemm_parallel": (f32(1, 16, 20, 20), f32(32, 16, 3, 3), {"padding": [1]}),
    "direct_depthwise": (f32(1, 8, 9, 9), f32(8, 1, 3, 3), {"groups": 8, "padding": [1]}),
    "direct_depthwise_multiplier": (
        f32(2, 4, 8, 7), f32(8, 1, 3, 3),
        {"groups": 4, "strides": [2, 2], "padding": [1, 2]},
    ),
    "direct_depthwise_nhwc_hwoi": (
        f32(1, 6, 5, 3), f32(3, 3, 3, 1),
        {"padding": [1], "groups": 3, "data_layout": "NHWC", "kernel_layout": "HWOI"},
    ),
    "direct_few_outputs": (f32(1, 3, 8, 8), f32(4, 3, 3, 3), {"padding": [1, 1, 1, 1], "dilation": [2, 2]}),
    "direct_long_rows_in_chunks": (f32(1, 2, 3, 300), f32(2, 1, 1, 3), {"groups": 2}),
    "direct_int8_to_int32": (i8(1, 2, 4, 4), i8(2, 2, 2, 2), {"kernel_layout": "OHWI", "out_dtype": "int32"}),
    "channels_1x1_in_place": (f32(2, 4, 8, 8), f32(24, 4, 1, 1), {}),
    "channels_small_map_tiles_span_rows": (f32(1, 5, 3, 3), f32(7, 5, 3, 3), {"padding": [1, 1]}),
    "channels_dilated_to_nhwc_out": (f32(2, 3, 9, 8), f32(13, 3, 2, 3),
                                     {"dilation": [2, 1], "padding": [0, 2, 1, 0], "out_layout": "NHWC"}),
    "channels_3x3_stride_2_phases": (f32(1, 3, 11, 10), f32(8, 3, 3, 3), {"strides": [2, 2], "padding": [1, 1]}),
    "channels_stride_3_dilation_2": (f32(2, 2, 13, 12), f32(5, 2, 3, 2),
                                     {"strides": [3, 2], "dilation": [2, 3], "padding": [2, 1, 0, 1]}),
    "channels_7x7_stride_2_stem": (f32(1, 3, 20, 20), f32(16, 3, 7, 7), {"strides": [2, 2], "padding": [3, 3]}),
    "channels_float64": (f32(1, 3, 6, 6).astype("float64"), f32(8, 3, 3, 3).astype("float64"), {"padding": [1]}),
}
BIAS = f32(16)


def conv_text(data: np.ndarray, weight: np.ndarray, attrs: dict[str, object], tail: str = "") -> str:
    return primitive(op_call("nn.conv2d", 2, attrs), [data, weight] + ([BIAS] if tail else []), tail)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return built_once(tmp_path_factory, "kernels_conv2d", build_library)


def build_library(directory: Path) -> Library:
    funcs = [lower_text(conv_text(*case), name) for name, case in CASES.items()]
    data, weight, attrs = CASES["gemm_3x3_same_padding"]
    funcs.append(lower_text(conv_text(data, weight, attrs, "nn.relu(nn.bias_add(%0, %p2))"), "fused_bias_relu"))
    funcs.append(lower_text(conv_text(*CASES["gemm_parallel"]), "gemm_serial", parallel=False))
    return Library(funcs, directory)


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv2d_kernel_matches_reference(library: Library, name: str) -> None:
    data, weight, attrs = CASES[name]
    (result,) = library.run(name, [data, weight])
    expected = reference("nn.conv2d", [data, weight], attrs)
    assert result.dtype == expected.dtype
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def test_conv2d_applies_fused_bias_and_relu_when_storing(library: Library) -> None:
    data, weight, attrs = CASES["gemm_3x3_same_padding"]
    (result,) = library.run("fused_bias_relu", [data, weight, BIAS])
    expected = np.maximum(reference("nn.conv2d", [data, weight], attrs) + BIAS[:, None, None], 0)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def test_conv2d_without_parallel_loops_gives_the_same_result(library: Library) -> None:
    data, weight, _ = CASES["gemm_parallel"]
    func = library.funcs["gemm_serial"]
    assert not any(isinstance(s, For) and s.kind is ForKind.PARALLEL for s in walk_stmts(func.body))
    np.testing.assert_array_equal(library.run("gemm_serial", [data, weight])[0],
                                  library.run("gemm_parallel", [data, weight])[0])


def test_large_conv2d_runs_its_tiles_in_parallel(library: Library) -> None:
    func = library.funcs["gemm_parallel"]
    assert any(isinstance(s, For) and s.kind is ForKind.PARALLEL for s in walk_stmts(func.body))


def allocations(library: Library, name: str, prefix: str) -> list[tuple[object, ...]]:
    return [s.buffer.shape for s in walk_stmts(library.funcs[name].body)
            if isinstance(s, Allocate) and s.buffer.name.startswith(prefix)]


def test_padding_is_materialized_once_in_the_workspace(library: Library) -> None:
    assert allocations(library, "gemm_3x3_same_padding", "padded") == [(1, 8, 12, 12)]
    assert allocations(library, "gemm_groups", "padded") == [(1, 6, 9, 9)]


def test_small_map_padding_is_copied_once_into_a_grid_of_the_padded_width(library: Library) -> None:
    ((size,),) = allocations(library, "channels_float64", "grid")  # type: ignore[misc]
    plane = 8 * 8
    assert 3 * plane <= size < 3 * plane + 64  # and slack for the panel past the last plane


def test_strided_conv_reads_a_phase_grid(library: Library) -> None:
    ((size,),) = allocations(library, "channels_3x3_stride_2_phases", "grid")  # type: ignore[misc]
    assert size >= 4 * 3 * 6 * 6  # four phases of a 6x6 plane (5x5 outputs and one more tap)


def test_unpadded_1x1_conv_reads_its_input_in_place(library: Library) -> None:
    assert not any(isinstance(s, Allocate) and s.buffer.scope == "global"
                   for s in walk_stmts(library.funcs["channels_1x1_in_place"].body))
    assert allocations(library, "gemm_1x1_stride_2", "grid") != []  # striding copies every other pixel


def test_generated_c_compiles_without_warnings(library: Library) -> None:
    assert library.warnings == []
