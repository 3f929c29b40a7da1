"""Pools on NCHW[b]c data (compiler/ops/kernels/pool_blocked.py) built to C and run against the
ops' numpy references: windows, padding, ceil mode, dilation, averages' counts, integer dtypes,
NaNs, epilogues; and the block as the vectorized innermost loop."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from compiler.tir.analysis import post_order, stmt_exprs, walk_stmts
from compiler.tir.expr import Binary, Load
from compiler.tir.stmt import For, ForKind, IfThenElse
from tests.compiler.ops.kernels.harness import Library, lower_text, op_call, primitive, reference

RNG = np.random.default_rng(12)


def f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-2, 2, shape).astype("float32")


def blocked(op: str, data: np.ndarray, attrs: dict[str, object]) -> tuple[str, np.ndarray, dict[str, object]]:
    block = data.shape[4]
    return op, data, {**attrs, "layout": f"NCHW{block}c", "out_layout": f"NCHW{block}c"}


def _with_nan_and_infinities() -> np.ndarray:
    data = f32(1, 2, 9, 9, 8)
    data[0, 0, 4, 4, 3] = np.nan
    data[0, 1, 0, 0, 0] = np.nan  # a corner: only windows at the edge see it
    data[0, 1, :, :, 5] = -np.inf  # windows of -inf only: the lowest finite value wins, as in TVM
    data[0, 0, 8, 8, 7] = np.inf
    return data


# name -> (op, data, attrs)
CASES: dict[str, tuple[str, np.ndarray, dict[str, object]]] = {
    "max_resnet_stem": blocked("nn.max_pool2d", f32(1, 2, 23, 23, 16),
                               {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    "max_2x2_stride_2": blocked("nn.max_pool2d", f32(2, 1, 6, 6, 8), {"pool_size": [2, 2], "strides": [2, 2]}),
    "max_ceil_mode_dilated": blocked("nn.max_pool2d", f32(1, 2, 7, 6, 4),
                                     {"pool_size": [2, 3], "strides": [2, 2], "dilation": [2, 1],
                                      "padding": [0, 1, 1, 0], "ceil_mode": True}),
    "max_nan_and_infinities": blocked("nn.max_pool2d", _with_nan_and_infinities(),
                                      {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    "avg_padded": blocked("nn.avg_pool2d", f32(2, 2, 7, 5, 8), {"pool_size": [3, 3], "strides": [2, 2], "padding": [1]}),
    "avg_count_include_pad_ceil": blocked("nn.avg_pool2d", f32(1, 1, 5, 5, 16),
                                          {"pool_size": [3, 3], "strides": [2, 2], "padding": [1],
                                           "count_include_pad": True, "ceil_mode": True}),
    "avg_int_truncates": blocked("nn.avg_pool2d", RNG.integers(-50, 50, (1, 2, 5, 5, 4)).astype("int32"),
                                 {"pool_size": [2, 2], "strides": [2, 2], "padding": [1]}),
    "global_avg": blocked("nn.global_avg_pool2d", f32(2, 3, 4, 5, 8), {}),
    "global_max": blocked("nn.global_max_pool2d", f32(1, 2, 7, 7, 16), {}),
    # float16 maxima are taken in float32, each tap's run widened whole: the same values.
    "max_float16_nan_and_infinities": blocked("nn.max_pool2d", _with_nan_and_infinities().astype("float16"),
                                              {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}),
    "global_max_float16": blocked("nn.global_max_pool2d", f32(1, 2, 5, 5, 16).astype("float16"), {}),
    "global_avg_int8": blocked("nn.global_avg_pool2d", RNG.integers(-100, 100, (1, 2, 3, 3, 8)).astype("int8"), {}),
}


def pool_text(op: str, data: np.ndarray, attrs: dict[str, object], tail: str = "") -> str:
    return primitive(op_call(op, 1, attrs), [data], tail)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    funcs = [lower_text(pool_text(*case), name) for name, case in CASES.items()]
    funcs.append(lower_text(pool_text(*CASES["max_resnet_stem"], "nn.relu(negative(%0))"), "max_then_negative_relu"))
    funcs.append(lower_text(pool_text(*CASES["global_avg"], "exp(%0)"), "global_avg_then_exp"))
    return Library(funcs, Path(tmp_path_factory.mktemp("pool_blocked")))


@pytest.mark.parametrize("name", sorted(CASES))
def test_blocked_pool_matches_reference(library: Library, name: str) -> None:
    op, data, attrs = CASES[name]
    (result,) = library.run(name, [data])
    expected = reference(op, [data], attrs)
    assert result.dtype == expected.dtype
    if data.dtype == np.float16:  # a maximum is one of the inputs: bit for bit
        np.testing.assert_array_equal(result, expected)
    np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-6)


def test_blocked_pools_apply_the_fused_epilogue(library: Library) -> None:
    op, data, attrs = CASES["max_resnet_stem"]
    (result,) = library.run("max_then_negative_relu", [data])
    np.testing.assert_allclose(result, np.maximum(-reference(op, [data], attrs), 0), rtol=1e-6)
    op, data, attrs = CASES["global_avg"]
    (result,) = library.run("global_avg_then_exp", [data])
    np.testing.assert_allclose(result, np.exp(reference(op, [data], attrs)), rtol=1e-5)


@pytest.mark.parametrize("name", ["max_resnet_stem", "avg_padded", "global_max"])
def test_the_channel_block_is_the_vectorized_innermost_loop_and_no_access_splits_channels(
        library: Library, name: str) -> None:
    func = library.funcs[name]
    block = CASES[name][1].shape[4]
    vectorized = [s for s in walk_stmts(func.body) if isinstance(s, For) and s.kind is ForKind.VECTORIZED]
    assert vectorized and all(int(s.extent.value) == block for s in vectorized)  # type: ignore[attr-defined]
    ops = {e.op for s in walk_stmts(func.body) for root in stmt_exprs(s) for load in post_order(root)
           if isinstance(load, Load) and load.buffer is func.inputs[0]
           for index in load.indices for e in post_order(index) if isinstance(e, Binary)}
    assert not ops & {"//", "%"}


def _sequential_max(data: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    """The kernels' running maximum over the in-image taps, rows then columns: NaN sticks once
    seen, and an element equal to the running maximum replaces it (its sign of zero wins)."""
    n, blocks, h, w, b = data.shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    out = np.empty((n, blocks, oh, ow, b), data.dtype)
    for idx in np.ndindex(n, blocks, oh, ow, b):
        img, blk, y, x, j = idx
        best = np.float32(np.finfo(np.float32).min)
        for iy in range(y * stride - pad, y * stride - pad + k):
            for ix in range(x * stride - pad, x * stride - pad + k):
                if 0 <= iy < h and 0 <= ix < w:
                    v = data[img, blk, iy, ix, j]
                    best = best if (best > v or np.isnan(best)) else v
        out[idx] = best
    return out


def test_a_max_pool_reading_edge_pixels_for_padding_keeps_every_bit() -> None:
    data = RNG.choice(np.array([0.0, -0.0, 1.0, -1.0], np.float32), (1, 1, 7, 7, 16))
    data[0, 0, 0, :, 2] = np.nan
    data[0, 0, :, 6, 3] = -0.0
    data[0, 0, 6, 6, 4] = np.nan
    case = blocked("nn.max_pool2d", data, {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]})
    func = lower_text(pool_text(*case), "max_edges")
    assert not any(isinstance(s, IfThenElse) for s in walk_stmts(func.body))
    lib = Library([func], Path(tempfile.mkdtemp(prefix="pool_edges")))
    (result,) = lib.run("max_edges", [data])
    np.testing.assert_array_equal(result.view(np.uint32), _sequential_max(data, 3, 2, 1).view(np.uint32))


@pytest.mark.parametrize("attrs, clamps", [
    ({"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1]}, True),
    ({"pool_size": [2, 2], "strides": [2, 2]}, True),
    ({"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1], "dilation": [2, 2]}, False),
    # a window wholly in the padding has no edge pixel of its own
    ({"pool_size": [2, 2], "strides": [1, 1], "padding": [2, 2]}, False),
    # ceil mode's last window reaching past the image, and one starting in the padding
    ({"pool_size": [3, 3], "strides": [2, 2], "ceil_mode": True}, True),
    ({"pool_size": [2, 2], "strides": [2, 2], "padding": [0, 0, 1, 1], "ceil_mode": True}, False),
])
def test_only_max_pools_whose_windows_all_hold_an_image_pixel_read_edges_for_padding(
        attrs: dict[str, object], clamps: bool) -> None:
    case = blocked("nn.max_pool2d", f32(1, 1, 6, 6, 8), attrs)
    func = lower_text(pool_text(*case), "max_clamp_rule")
    branches = any(isinstance(s, IfThenElse) for s in walk_stmts(func.body))
    assert branches is not clamps
    expected = reference(case[0], [case[1]], case[2])
    (result,) = Library([func], Path(tempfile.mkdtemp(prefix="pool_rule"))).run("max_clamp_rule", [case[1]])
    np.testing.assert_allclose(result, expected, rtol=0, atol=0)
