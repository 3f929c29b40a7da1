"""The direct N-d convolution loops (compiler/ops/kernels/conv_direct.py) built to C and run
against the ops' numpy references: every op that uses them, row chunks, signed integer weights,
blocked and permuted layouts, the packed input workspace, parallel loops and a fused epilogue."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.tir.analysis import walk_stmts
from compiler.tir.stmt import Allocate, For, ForKind
from tests.built_once import built_once
from tests.compiler.ops.kernels.harness import Library, lower_text, op_call, primitive, reference

RNG = np.random.default_rng(11)


def f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def i8(*shape: int) -> np.ndarray:
    return RNG.integers(-128, 128, shape).astype("int8")


def u8(*shape: int) -> np.ndarray:
    return RNG.integers(0, 256, shape).astype("uint8")


# name -> (op, data, weight, attrs)
CASES: dict[str, tuple[str, np.ndarray, np.ndarray, dict[str, object]]] = {
    "conv1d_same_padding": ("nn.conv1d", f32(2, 5, 17), f32(7, 5, 3), {"padding": [1]}),
    "conv1d_rows_longer_than_a_chunk": ("nn.conv1d", f32(1, 2, 300), f32(3, 2, 3), {"padding": [0, 2]}),
    "conv1d_stride_above_kernel_nwc": (
        "nn.conv1d", f32(1, 20, 4), f32(2, 2, 6),
        {"strides": [5], "dilation": [2], "groups": 2, "data_layout": "NWC", "kernel_layout": "WIO"},
    ),
    "conv1d_uint8_int8_to_int32": ("nn.conv1d", u8(1, 6, 9), i8(4, 6, 3), {"padding": [2, 1], "out_dtype": "int32"}),
    "conv3d_ndhwc_to_ncdhw": (
        "nn.conv3d", f32(1, 4, 5, 6, 3), f32(2, 2, 3, 3, 4),
        {"padding": [1, 0, 1], "data_layout": "NDHWC", "kernel_layout": "DHWIO", "out_layout": "NCDHW"},
    ),
    "conv3d_parallel": ("nn.conv3d", f32(1, 8, 8, 16, 16), f32(8, 8, 3, 3, 3), {"padding": [1]}),
    "conv2d_transpose_stride_2": (
        "nn.conv2d_transpose", f32(1, 6, 5, 4), f32(6, 3, 4, 4),
        {"strides": [2, 2], "padding": [1, 1], "output_padding": [1, 0]},
    ),
    "conv1d_transpose_int8_groups": (
        "nn.conv1d_transpose", i8(1, 4, 6), i8(4, 2, 3),
        {"strides": [3], "padding": [2, 0], "groups": 2, "out_dtype": "int32"},
    ),
    "conv3d_transpose_dilated": (
        "nn.conv3d_transpose", f32(1, 2, 2, 3, 3), f32(2, 2, 2, 2, 2), {"strides": [1, 2, 3], "dilation": [2, 1, 1]},
    ),
    "nchwc_8i8o": (
        "nn.contrib_conv2d_NCHWc", f32(1, 2, 6, 6, 8), f32(2, 2, 3, 3, 8, 8),
        {"padding": [1, 1], "channels": 16, "kernel_size": [3, 3], "data_layout": "NCHW8c",
         "kernel_layout": "OIHW8i8o", "out_layout": "NCHW8c"},
    ),
    "depthwise_nchwc_multiplier_2": (
        "nn.contrib_depthwise_conv2d_NCHWc", f32(1, 1, 7, 7, 4), f32(2, 1, 3, 3, 1, 4),
        {"strides": [2, 2], "padding": [1, 1], "groups": 4, "data_layout": "NCHW4c",
         "kernel_layout": "OIHW1i4o", "out_layout": "NCHW4c"},
    ),
}
BIAS = f32(7)


def conv_text(op: str, data: np.ndarray, weight: np.ndarray, attrs: dict[str, object], tail: str = "") -> str:
    return primitive(op_call(op, 2, attrs), [data, weight] + ([BIAS] if tail else []), tail)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return built_once(tmp_path_factory, "kernels_conv_direct", build_library)


def build_library(directory: Path) -> Library:
    funcs = [lower_text(conv_text(*case), name) for name, case in CASES.items()]
    funcs.append(
        lower_text(conv_text(*CASES["conv1d_same_padding"], "nn.relu(nn.bias_add(%0, %p2))"), "fused_bias_relu")
    )
    funcs.append(lower_text(conv_text(*CASES["conv3d_parallel"]), "conv3d_serial", parallel=False))
    return Library(funcs, directory)


@pytest.mark.parametrize("name", sorted(CASES))
def test_direct_conv_kernel_matches_reference(library: Library, name: str) -> None:
    op, data, weight, attrs = CASES[name]
    (result,) = library.run(name, [data, weight])
    expected = reference(op, [data, weight], attrs)
    assert result.dtype == expected.dtype
    if result.dtype.kind == "f":
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(result, expected)


def test_direct_conv_applies_fused_bias_and_relu_when_storing(library: Library) -> None:
    op, data, weight, attrs = CASES["conv1d_same_padding"]
    (result,) = library.run("fused_bias_relu", [data, weight, BIAS])
    expected = np.maximum(reference(op, [data, weight], attrs) + BIAS[:, None], 0)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def test_large_direct_conv_runs_rows_in_parallel_and_serially_alike(library: Library) -> None:
    assert any(isinstance(s, For) and s.kind is ForKind.PARALLEL for s in walk_stmts(library.funcs["conv3d_parallel"].body))
    serial = library.funcs["conv3d_serial"]
    assert not any(isinstance(s, For) and s.kind is ForKind.PARALLEL for s in walk_stmts(serial.body))
    _, data, weight, _ = CASES["conv3d_parallel"]
    np.testing.assert_array_equal(
        library.run("conv3d_serial", [data, weight])[0], library.run("conv3d_parallel", [data, weight])[0]
    )


def packed_shapes(library: Library, name: str) -> list[tuple[object, ...]]:
    return [
        s.buffer.shape for s in walk_stmts(library.funcs[name].body)
        if isinstance(s, Allocate) and s.buffer.name.startswith("packed")
    ]


def test_input_is_packed_once_in_canonical_order_with_its_padding(library: Library) -> None:
    assert packed_shapes(library, "conv1d_same_padding") == [(2, 5, 19)]
    # NDHWC data is packed as NCDHW.
    assert packed_shapes(library, "conv3d_ndhwc_to_ncdhw") == [(1, 3, 6, 5, 8)]
    # The transposed convolution's input is spread by the strides: out + (K-1) per axis.
    assert packed_shapes(library, "conv2d_transpose_stride_2") == [(1, 6, 14, 11)]


def test_generated_c_compiles_without_warnings(library: Library) -> None:
    assert library.warnings == []
