"""conv2d on NCHW data with a weight packed as OHWI[b]o / OIHW[b]o
(compiler/ops/kernels/conv2d_packed.py, reached through nn.contrib_conv2d_NCHWc) built to C and
run against a convolution written here in numpy.

Covers both weight orders, blocks of one and two vectors (AVX2's 8 lanes and AVX-512's 16),
padding on any side, strides, dilation, odd channel counts, batches, 1x1 layers read in place,
fused bias + relu and residual-add epilogues, and the fallback for blocks the kernel does not
take, and float16 data cast to float32 in the function, which the kernel widens itself as it
copies its bands. The `BANDED` cases are lowered with a copy budget of a few rows, so the padded input is
copied and used in several bands of one height (the last one overlapping the one before where
they do not divide the output's rows), and as if built on a 2-core machine, so
the larger ones share their bands between two threads with a copy each. Which calls reach the
kernel (`packed_block`) is tested with the op, in test_conv_nchwc.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.backend.lower_primitive import lower_primitive
from compiler.backend.codegen_c import emit_prim_func
from compiler.ops.kernels import conv2d_packed, gemm
from compiler.ir.expr import Function
from compiler.parser import parse_expr
from compiler.passes.infer_type import infer_expr
from compiler.tir.compute import KernelContext
from compiler.tir.stmt import Allocate, For, ForKind, PrimFunc, Store
from compiler.runtime.ffi import aligned_empty
from compiler.tir.analysis import post_order, stmt_exprs, walk_stmts, workspace_bytes
from compiler.tir.expr import Binary, CallExtern, Const, Load
from tests.compiler.backend.prim_library import WORKSPACE_ALIGNMENT
from tests.compiler.ops.kernels.harness import Library, op_call, primitive

RNG = np.random.default_rng(11)
OP = "nn.contrib_conv2d_NCHWc"


def f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def pack(weight: np.ndarray, block: int, taps_outer: bool) -> np.ndarray:
    o, i, kh, kw = weight.shape
    blocked = weight.reshape(o // block, block, i, kh, kw)
    return np.ascontiguousarray(blocked.transpose((0, 3, 4, 2, 1) if taps_outer else (0, 2, 3, 4, 1)))


def numpy_conv(data: np.ndarray, weight: np.ndarray, strides: tuple[int, int], dilation: tuple[int, int],
               padding: tuple[int, int, int, int]) -> np.ndarray:
    """out[n, o, y, x] = sum over (i, ky, kx) of w[o, i, ky, kx] * padded[n, i, y*sh + ky*dh, x*sw + kx*dw]."""
    top, left, bottom, right = padding
    x = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    (sh, sw), (dh, dw) = strides, dilation
    o, _, kh, kw = weight.shape
    oh = (x.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (x.shape[3] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((data.shape[0], o, oh, ow))
    for ky in range(kh):
        for kx in range(kw):
            window = x[:, :, ky * dh: ky * dh + (oh - 1) * sh + 1: sh, kx * dw: kx * dw + (ow - 1) * sw + 1: sw]
            out += np.einsum("nihw,oi->nohw", window, weight[:, :, ky, kx].astype(np.float64))
    return out


# name -> (data, OIHW weight, block, taps_outer, float32 lanes of the tile, strides, dilation, padding)
CASES: dict[str, tuple[np.ndarray, np.ndarray, int, bool, int, tuple[int, int], tuple[int, int],
                       tuple[int, int, int, int]]] = {
    "same_padding_3x3": (f32(1, 8, 10, 10), f32(32, 8, 3, 3), 16, True, 8, (1, 1), (1, 1), (1, 1, 1, 1)),
    "odd_channels_taps_inner_uneven_window": (
        f32(2, 5, 9, 7), f32(16, 5, 3, 2), 8, False, 8, (2, 1), (2, 1), (1, 0, 2, 1)),
    "in_place_1x1": (f32(2, 3, 8, 8), f32(16, 3, 1, 1), 16, True, 8, (1, 1), (1, 1), (0, 0, 0, 0)),
    "stride_2_1x1": (f32(1, 6, 9, 9), f32(8, 6, 1, 1), 8, True, 8, (2, 2), (1, 1), (0, 0, 0, 0)),
    "stem_7x7_stride_2": (f32(1, 3, 20, 20), f32(16, 3, 7, 7), 16, True, 8, (2, 2), (1, 1), (3, 3, 3, 3)),
    "dilated_3x3": (f32(1, 7, 11, 12), f32(16, 7, 3, 3), 16, True, 8, (1, 1), (2, 2), (2, 2, 2, 2)),
    "stride_3_only_bottom_right_padding": (
        f32(1, 4, 13, 11), f32(24, 4, 3, 3), 8, True, 8, (3, 2), (1, 1), (0, 0, 2, 1)),
    "batch_2_parallel_tiles": (f32(2, 16, 20, 20), f32(32, 16, 3, 3), 16, True, 8, (1, 1), (1, 1), (1, 1, 1, 1)),
    "avx512_tile_of_32_channels": (f32(1, 7, 9, 9), f32(64, 7, 3, 3), 32, True, 16, (1, 1), (1, 1), (1, 1, 1, 1)),
    "block_of_4_takes_the_generic_kernel": (
        f32(1, 3, 6, 6), f32(8, 3, 3, 3), 4, True, 8, (1, 1), (1, 1), (1, 1, 1, 1)),
    "bands_ragged_last": (f32(1, 4, 23, 13), f32(16, 4, 3, 3), 16, True, 8, (1, 1), (1, 1), (1, 1, 1, 1)),
    "bands_stride_2_phases": (f32(1, 3, 21, 17), f32(16, 3, 3, 3), 16, True, 8, (2, 2), (1, 1), (1, 1, 1, 1)),
    "bands_dilated_taps_inner": (f32(1, 5, 19, 12), f32(8, 5, 3, 3), 8, False, 8, (1, 1), (2, 2), (2, 2, 2, 2)),
    "bands_batch_2": (f32(2, 6, 14, 10), f32(16, 6, 3, 3), 16, True, 8, (1, 1), (1, 1), (1, 1, 1, 1)),
    "bands_asymmetric_padding": (f32(1, 4, 17, 11), f32(16, 4, 3, 3), 16, True, 8, (1, 1), (1, 1), (2, 0, 1, 1)),
    "bands_in_two_slots": (f32(1, 8, 30, 30), f32(32, 8, 3, 3), 16, True, 8, (1, 1), (1, 1), (1, 1, 1, 1)),
    "bands_batch_3_in_two_slots": (f32(3, 8, 13, 13), f32(32, 8, 3, 3), 16, True, 8, (1, 1), (1, 1), (1, 1, 1, 1)),
    "bands_in_channel_groups": (f32(1, 8, 13, 13), f32(64, 8, 3, 3), 16, True, 8, (1, 1), (1, 1), (1, 1, 1, 1)),
    "map_7x7_tiles_of_five_rows": (f32(1, 16, 7, 7), f32(32, 16, 1, 1), 16, True, 8, (1, 1), (1, 1), (0, 0, 0, 0)),
    # 48 pixels in 8 row blocks of 6, 48 channels (9,216 bytes), 64 outputs (panels outer): with
    # L2_BYTES patched to 8 KiB (A 9 KiB beside 3 KiB panels), two chunks of four row blocks.
    "in_place_1x1_in_row_chunks": (f32(1, 48, 8, 6), f32(64, 48, 1, 1), 16, True, 8, (1, 1), (1, 1), (0, 0, 0, 0)),
    # 40 columns on a grid of 42: too little padding to number the rows by pixel.
    "wide_3x3_rows_on_the_grid": (f32(1, 4, 5, 40), f32(16, 4, 3, 3), 16, True, 8, (1, 1), (1, 1), (1, 1, 1, 1)),
}
# Cases lowered for an L2 of 8 KiB (B of more than 4 KiB sweeps its panels outer). The bias and
# relu of "in_place_1x1_relu_in_k_chunks" leave the last reduction step in the loop, so A's 9 KiB
# beside a 3 KiB panel is taken in three chunks of its 48 channels (4 KiB each) rather than in row
# chunks.
SMALL_L2 = ("in_place_1x1_in_row_chunks", "in_place_1x1_relu_in_k_chunks", "lone_band_relu_in_k_chunks",
            "two_slots_relu_in_k_chunks")
TWO_SLOTS_BIAS = f32(32)
CHUNKS_BIAS = f32(64)
# name -> the band copy's budget in bytes, the (output rows per band, bands) it makes, and the
# copies of a band the scratch holds (one per thread when the layer is large enough for threads).
BANDED = {
    "bands_ragged_last": (1440, (4, 6), 1),  # 23 rows: the last band starts at row 19, one row early
    "bands_stride_2_phases": (2400, (4, 3), 1),  # 11 = 3 x 4 - 1, four phase planes per channel
    "bands_dilated_taps_inner": (2880, (5, 4), 1),  # 19 = 4 x 5 - 1, 4 rows of dilated taps below each band
    "bands_batch_2": (1440, (2, 7), 2),  # 14 = 7 x 2, per image
    "bands_asymmetric_padding": (1152, (3, 6), 1),  # 18 = 6 x 3, two zero rows on top, one right column
    "bands_in_two_slots": (6144, (3, 10), 2),  # 30 = 10 x 3, five bands per thread
    "bands_batch_3_in_two_slots": (2880, (2, 7), 2),  # 13 = 7 x 2 - 1; 21 bands, 11 and 10 per thread
    # 13 = 2 x 7 - 1: two bands, each in four groups of 16 channels (the whole output's copy,
    # 7,200 bytes, is over twice the budget, so it is not one band)
    "bands_in_channel_groups": (3520, (7, 2), 2),
}


# name -> (the data's channel block, the output's) of the cases whose activations are NCHW[x]c
# (0: NCHW), as AlterOpLayout's blocked activations between convolutions make them.
BLOCKED = {
    "blocked_1x1_in_place": (8, 16),
    "blocked_3x3_banded": (4, 16),
    "blocked_data_to_nchw": (8, 0),
    "nchw_stem_to_blocked": (0, 16),
    "blocked_stride_2_avx512": (16, 32),
    "bands_blocked_stride_2": (8, 16),
    "blocked_wide_3x3_rows_by_pixel": (16, 16),
}
CASES.update({
    "blocked_1x1_in_place": (f32(2, 16, 7, 9), f32(32, 16, 1, 1), 16, True, 8, (1, 1), (1, 1), (0, 0, 0, 0)),
    "blocked_3x3_banded": (f32(1, 8, 12, 10), f32(32, 8, 3, 3), 16, True, 8, (1, 1), (1, 1), (1, 1, 1, 1)),
    "blocked_data_to_nchw": (f32(1, 16, 9, 9), f32(16, 16, 3, 3), 16, True, 8, (2, 2), (1, 1), (1, 1, 1, 1)),
    "nchw_stem_to_blocked": (f32(1, 3, 15, 15), f32(16, 3, 7, 7), 16, False, 8, (2, 2), (1, 1), (3, 3, 3, 3)),
    "blocked_stride_2_avx512": (f32(1, 32, 9, 9), f32(64, 32, 1, 1), 32, True, 16, (2, 2), (1, 1), (0, 0, 0, 0)),
    "bands_blocked_stride_2": (f32(1, 16, 21, 17), f32(16, 16, 3, 3), 16, True, 8, (2, 2), (1, 1), (1, 1, 1, 1)),
    # wide_3x3_rows_on_the_grid's map with 16 channels a block: 16 channels innermost.
    "blocked_wide_3x3_rows_by_pixel": (f32(1, 16, 5, 40), f32(16, 16, 3, 3), 16, True, 8, (1, 1), (1, 1),
                                       (1, 1, 1, 1)),
})
BANDED["bands_blocked_stride_2"] = (12800, (4, 3), 1)  # bands_stride_2_phases with 16 channels, blocked


def block_channels(x: np.ndarray, block: int) -> np.ndarray:
    """NCHW -> NCHW[block]c (block 0: unchanged)."""
    if not block:
        return x
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def layout(block: int) -> str:
    return f"NCHW{block}c" if block else "NCHW"


def attrs_of(name: str) -> dict[str, object]:
    data, weight, block, taps_outer, _, strides, dilation, padding = CASES[name]
    data_block, out_block = BLOCKED.get(name, (0, 0))
    return {
        "strides": list(strides), "padding": list(padding), "dilation": list(dilation),
        "channels": weight.shape[0], "kernel_size": list(weight.shape[2:]), "data_layout": layout(data_block),
        "kernel_layout": f"{'OHWI' if taps_outer else 'OIHW'}{block}o", "out_layout": layout(out_block),
    }


def inputs_of(name: str) -> list[np.ndarray]:
    data, weight, block, taps_outer, *_ = CASES[name]
    return [block_channels(data, BLOCKED.get(name, (0, 0))[0]), pack(weight, block, taps_outer)]


def expected_of(name: str) -> np.ndarray:
    data, weight, _, _, _, strides, dilation, padding = CASES[name]
    return block_channels(numpy_conv(data, weight, strides, dilation, padding), BLOCKED.get(name, (0, 0))[1])


def lower(text: str, name: str, lanes: int, parallel: bool = True, bands_of: str | None = None) -> PrimFunc:
    """`bands_of`: the case whose band budget applies (default: `name`'s)."""
    func = parse_expr(text)
    assert isinstance(func, Function)
    infer_expr(func)
    case = bands_of or name
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv2d_packed, "band_threads", lambda: 2)  # the build machine's cores
        if name in SMALL_L2 or case in SMALL_L2:
            patch.setattr(gemm, "L2_BYTES", 8 << 10)
            patch.setattr(gemm, "K_CHUNK_BYTES", 4 << 10)
            patch.setattr(gemm, "ROWS_OUTER_MAX_B_BYTES", 4 << 10)
        if case in BANDED:
            patch.setattr(conv2d_packed, "BAND_BYTES", BANDED[case][0])
            patch.setattr(conv2d_packed, "MIN_BAND_PIXELS", 1)
        return lower_primitive(func, name, KernelContext(parallel=parallel, vector_lanes=lanes))


# Cases run again on float16 data cast to float32 in the function (as FuseOps leaves a float16
# model's casts in front of its convolutions, compiler/passes/fusion_input_casts.py): the kernel
# reads the float16 tensor and widens it in its band copy, blocked or not, 1x1 stride-1 included.
# The block of 4 takes the generic kernel, which is given a float32 copy instead.
HALF = ("blocked_1x1_in_place", "nchw_stem_to_blocked", "bands_blocked_stride_2", "blocked_stride_2_avx512",
        "block_of_4_takes_the_generic_kernel", "blocked_3x3_banded", "blocked_wide_3x3_rows_by_pixel")


def half_inputs_of(name: str) -> list[np.ndarray]:
    data, weight = inputs_of(name)
    return [data.astype(np.float16), weight]


def half_expected_of(name: str) -> np.ndarray:
    data, weight, _, _, _, strides, dilation, padding = CASES[name]
    widened = data.astype(np.float16).astype(np.float32)
    return block_channels(numpy_conv(widened, weight, strides, dilation, padding), BLOCKED.get(name, (0, 0))[1])


BIAS = f32(32)
RESIDUAL = f32(1, 32, 10, 10)
RAGGED_RESIDUAL = f32(1, 16, 23, 13)
BLOCKED_RESIDUAL = f32(2, 2, 7, 9, 16)
GROUPED_RESIDUAL = f32(1, 64, 13, 13)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    funcs = [lower(primitive(op_call(OP, 2, attrs_of(name)), inputs_of(name)), name, CASES[name][4])
             for name in CASES]
    call = op_call(OP, 2, attrs_of("same_padding_3x3"))
    packed = inputs_of("same_padding_3x3")
    funcs.append(lower(primitive(call, [*packed, BIAS], "nn.relu(nn.bias_add(%0, %p2))"), "bias_relu", 8))
    funcs.append(lower(primitive(call, [*packed, RESIDUAL], "add(%0, %p2)"), "residual_add", 8))
    ragged = op_call(OP, 2, attrs_of("bands_ragged_last"))
    funcs.append(lower(primitive(ragged, [*inputs_of("bands_ragged_last"), RAGGED_RESIDUAL], "add(%0, %p2)"),
                       "ragged_residual", 8, bands_of="bands_ragged_last"))
    blocked = op_call(OP, 2, attrs_of("blocked_1x1_in_place"))
    funcs.append(lower(primitive(blocked, [*inputs_of("blocked_1x1_in_place"), BLOCKED_RESIDUAL],
                                 "nn.relu(add(%0, %p2))"), "blocked_residual_relu", 8))
    grouped = op_call(OP, 2, attrs_of("bands_in_channel_groups"))
    funcs.append(lower(primitive(grouped, [*inputs_of("bands_in_channel_groups"), GROUPED_RESIDUAL], "add(%0, %p2)"),
                       "grouped_residual", 8, bands_of="bands_in_channel_groups"))
    funcs.append(lower(primitive(call, [*packed, BIAS], "nn.relu(nn.bias_add(%0, %p2))"), "lone_band_relu_in_k_chunks",
                       8))
    slotted = op_call(OP, 2, attrs_of("bands_in_two_slots"))
    for name in ("two_slots_relu", "two_slots_relu_in_k_chunks"):
        funcs.append(lower(primitive(slotted, [*inputs_of("bands_in_two_slots"), TWO_SLOTS_BIAS],
                                     "nn.relu(nn.bias_add(%0, %p2))"), name, 8, bands_of="bands_in_two_slots"))
    chunked = op_call(OP, 2, attrs_of("in_place_1x1_in_row_chunks"))
    funcs.append(lower(primitive(chunked, [*inputs_of("in_place_1x1_in_row_chunks"), CHUNKS_BIAS],
                                 "nn.relu(nn.bias_add(%0, %p2))"), "in_place_1x1_relu_in_k_chunks", 8))
    funcs.append(lower(primitive(op_call(OP, 2, attrs_of("batch_2_parallel_tiles")),
                                 inputs_of("batch_2_parallel_tiles")), "serial", 8, parallel=False))
    for name in HALF:
        call = op_call(OP, 2, attrs_of(name)).replace("(%p0,", '(cast(%p0, dtype="float32"),', 1)
        funcs.append(lower(primitive(call, half_inputs_of(name)), f"half_{name}", CASES[name][4], bands_of=name))
    return Library(funcs, Path(tmp_path_factory.mktemp("conv2d_packed")))


@pytest.mark.parametrize("name", sorted(CASES))
def test_packed_conv2d_matches_numpy(library: Library, name: str) -> None:
    (result,) = library.run(name, inputs_of(name))
    np.testing.assert_allclose(result, expected_of(name), rtol=1e-4, atol=1e-5)


def test_bias_and_relu_are_applied_when_storing(library: Library) -> None:
    (result,) = library.run("bias_relu", [*inputs_of("same_padding_3x3"), BIAS])
    expected = np.maximum(expected_of("same_padding_3x3") + BIAS[:, None, None], 0)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-5)


def test_residual_add_is_applied_when_storing(library: Library) -> None:
    (result,) = library.run("residual_add", [*inputs_of("same_padding_3x3"), RESIDUAL])
    np.testing.assert_allclose(result, expected_of("same_padding_3x3") + RESIDUAL, rtol=1e-4, atol=1e-5)


def test_a_blocked_output_takes_a_blocked_residual_in_its_store(library: Library) -> None:
    (result,) = library.run("blocked_residual_relu", [*inputs_of("blocked_1x1_in_place"), BLOCKED_RESIDUAL])
    expected = np.maximum(expected_of("blocked_1x1_in_place") + BLOCKED_RESIDUAL, 0)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-5)


def data_index_ops(func: PrimFunc) -> set[str]:
    """The arithmetic in the indices of every read of the kernel's first input."""
    data = func.inputs[0]
    found: set[str] = set()
    for stmt in walk_stmts(func.body):
        for root in stmt_exprs(stmt):
            for e in post_order(root):
                if isinstance(e, Load) and e.buffer is data:
                    found |= {i.op for index in e.indices for i in post_order(index) if isinstance(i, Binary)}
    return found


@pytest.mark.parametrize("name", sorted(BLOCKED))
def test_blocked_layouts_run_the_register_blocked_kernel(library: Library, name: str) -> None:
    tiles = [s for s in walk_stmts(library.funcs[name].body) if isinstance(s, Allocate) and s.buffer.name.startswith("acc")]
    assert tiles, "the generic kernel ran"


def test_blocked_data_read_in_place_reduces_over_block_and_channel_without_dividing(library: Library) -> None:
    assert grids(library, "blocked_1x1_in_place") == []
    assert not data_index_ops(library.funcs["blocked_1x1_in_place"]) & {"//", "%"}
    # The copied path keeps its band blocked: whole runs of a pixel's channels, no division.
    assert not data_index_ops(library.funcs["blocked_3x3_banded"]) & {"//", "%"}
    assert not data_index_ops(library.funcs["bands_blocked_stride_2"]) & {"//", "%"}


def test_serial_and_parallel_tiles_give_the_same_result(library: Library) -> None:
    assert not any(isinstance(s, For) and s.kind is ForKind.PARALLEL for s in walk_stmts(library.funcs["serial"].body))
    assert any(isinstance(s, For) and s.kind is ForKind.PARALLEL
               for s in walk_stmts(library.funcs["batch_2_parallel_tiles"].body))
    inputs = inputs_of("batch_2_parallel_tiles")
    np.testing.assert_array_equal(library.run("serial", inputs)[0], library.run("batch_2_parallel_tiles", inputs)[0])


def grids(library: Library, name: str) -> list[Allocate]:
    return [s for s in walk_stmts(library.funcs[name].body) if isinstance(s, Allocate) and s.buffer.name.startswith("grid")]


def test_unpadded_1x1_reads_its_input_in_place_and_padding_is_copied_into_a_grid(library: Library) -> None:
    assert grids(library, "in_place_1x1") == []
    ((size,),) = [g.buffer.shape for g in grids(library, "same_padding_3x3")]
    # One band (a band per thread would be under MIN_BAND_PIXELS): the 12 padded rows of 12, and
    # 2 elements of slack for the last row's taps.
    assert size == 8 * 12 * 12 + 2


@pytest.mark.parametrize("name", sorted(BANDED))
def test_the_copy_holds_one_band_of_rows_within_its_budget(library: Library, name: str) -> None:
    data, weight, _, _, _, strides, dilation, _ = CASES[name]
    budget, (rows, bands), slots = BANDED[name]
    ((size,),) = [g.buffer.shape for g in grids(library, name)]
    oh, ow = expected_of(name).shape[2:4]
    assert -(-oh // rows) == bands > 1
    (kh, kw), (sh, sw), (dh, dw) = weight.shape[2:], strides, dilation
    phases = (2 if sh > 1 and kh > 1 else 1) * (2 if sw > 1 and kw > 1 else 1)
    width, tail = ow + (kw - 1) * dw // sw, (kw - 1) * dw // sw * max(BLOCKED.get(name, (1, 0))[0], 1)
    assert int(size) == slots * (phases * data.shape[1] * (rows + (kh - 1) * dh // sh) * width + tail)
    assert int(size) * 4 <= slots * (budget + budget // 4 + tail * 4)


@pytest.mark.parametrize("name", ["bands_ragged_last", "bands_stride_2_phases", "bands_dilated_taps_inner",
                                  "bands_batch_3_in_two_slots"])
def test_a_ragged_last_band_overlaps_the_one_before_so_the_tiles_are_emitted_once(library: Library, name: str) -> None:
    oh = expected_of(name).shape[2]
    rows = BANDED[name][1][0]
    assert oh % rows
    # One tile of the register block's rows and one of the pixels left over at the band's end:
    # a shorter last band with a product of its own had two more.
    tiles = [s for s in walk_stmts(library.funcs[name].body)
             if isinstance(s, Allocate) and s.buffer.name.startswith("acc")]
    assert len(tiles) <= 2


def test_a_result_written_over_its_residual_input_gets_the_residual_once_in_overlapping_bands(
        library: Library) -> None:
    # The residual's buffer is the output's too, as when the AOT planner writes a residual
    # block's result over its shortcut: rows the last band recomputes must not be stored again.
    data, weight = inputs_of("bands_ragged_last")
    residual = RAGGED_RESIDUAL.copy()
    workspace = aligned_empty(workspace_bytes(library.funcs["ragged_residual"], WORKSPACE_ALIGNMENT), WORKSPACE_ALIGNMENT)
    assert library.library.call("ragged_residual", data, weight, residual, residual, workspace) == 0
    np.testing.assert_allclose(residual, expected_of("bands_ragged_last") + RAGGED_RESIDUAL, rtol=1e-5, atol=1e-5)


def test_band_rows_divide_the_output_within_the_budget_when_they_can() -> None:
    from compiler.ops.kernels.conv2d_by_channels import Grid
    grid = Grid((1, 1), (1, 1), (1, 1), 58, 58)  # ResNet-50's 3x3 layers on 56x56, 64 channels
    fit = conv2d_packed.BAND_BYTES // (64 * 58 * 4) - 2  # 2 rows of taps below each band
    rows = conv2d_packed.band_rows(grid, 64, 3, 56, 4)
    assert 56 % rows == 0 and fit // 2 <= rows <= fit
    assert conv2d_packed.band_rows(grid, 64, 3, 50, 4) == 5  # 10 bands of 5
    # 23 rows divide by no height in range: the fewest rows computed (24), in the fewest bands.
    assert conv2d_packed.band_rows(grid, 64, 3, 23, 4) == 6
    assert conv2d_packed.band_rows(grid, 4096, 3, 56, 4) == 2  # MIN_BAND_PIXELS even past the budget
    assert conv2d_packed.band_rows(grid, 1, 3, 56, 4) == 56  # a small input is one band
    assert conv2d_packed.band_rows(grid, 1, 3, 56, 4, slots=2) == 28  # or one per thread
    assert conv2d_packed.band_rows(grid, 64, 3, 7, 4, slots=2) == 7  # bands of 4 would compute 8 rows
    # ResNet-50's 3x3 layers on 14x14, 256 channels: bands of 4 rows fit the budget but compute
    # 16 rows (two overlapping); two bands of 7 divide the rows, their copy a seventh over budget.
    wide = Grid((1, 1), (1, 1), (1, 1), 16, 16)
    assert conv2d_packed.band_rows(wide, 256, 3, 14, 4, slots=2) == 7
    # In 6-row tiles numbered by pixel, though, those bands of 98 pixels compute 2 x 102 rows
    # and one band of 196 computes 198; its copy (256 KiB) fits twice the budget.
    assert conv2d_packed.band_rows(wide, 256, 3, 14, 4, slots=2, tile=(6, 14)) == 14
    # Numbered on the 16-wide grid, 7 rows are 112 product rows, whole tiles of 6 computing 114
    # per band, 228 in all; one band computes 228 too, no gain.
    assert conv2d_packed.band_rows(wide, 256, 3, 14, 4, slots=2, tile=(6, 0)) == 7
    # 512 channels: the whole band's copy (512 KiB) is over twice the budget.
    assert conv2d_packed.band_rows(wide, 512, 3, 14, 4, slots=2, tile=(6, 14)) != 14
    # ResNet-50's stride-2 layer to 7x7, 512 channels in 4 phases of 8 wide: a band per thread
    # would be 32 pixels, so one band whose product the threads share.
    strided = Grid((2, 2), (1, 1), (2, 2), 8, 8)
    assert conv2d_packed.band_rows(strided, 512, 3, 7, 4, slots=2) == 7


def test_bands_share_threads_in_one_parallel_loop(library: Library) -> None:
    loops = [s for s in walk_stmts(library.funcs["bands_in_two_slots"].body)
             if isinstance(s, For) and s.kind is ForKind.PARALLEL]
    assert loops[0].var.name.startswith("slot") and loops[0].extent.value == 2
    assert not any(isinstance(s, For) and s.kind is ForKind.PARALLEL
                   for s in walk_stmts(library.funcs["bands_ragged_last"].body))  # too small for threads


def test_bands_are_claimed_by_the_threads_as_they_finish(library: Library) -> None:
    claimed = [s for s in walk_stmts(library.funcs["bands_in_two_slots"].body)
               if isinstance(s, For) and s.kind is ForKind.CLAIMED]
    assert len(claimed) == 1 and claimed[0].extent.value == 10


def test_few_bands_are_split_into_groups_of_output_channels_for_the_threads(library: Library) -> None:
    assert conv2d_packed.channel_groups(64, 16, 2, 2) == 4  # 2 bands x 4 groups: 8 items for 2 threads
    assert conv2d_packed.channel_groups(256, 16, 2, 2) == 4  # ResNet-50's 14x14 layers
    assert conv2d_packed.channel_groups(32, 16, 3, 2) == 2  # no more groups than panels
    assert conv2d_packed.channel_groups(64, 16, 10, 2) == 1  # enough bands
    assert conv2d_packed.channel_groups(64, 16, 3, 1) == 1  # one thread
    (claimed,) = [s for s in walk_stmts(library.funcs["bands_in_channel_groups"].body)
                  if isinstance(s, For) and s.kind is ForKind.CLAIMED]
    assert claimed.extent.value == 8


def test_grouped_bands_add_a_residual_once_where_the_last_band_overlaps(library: Library) -> None:
    expected = expected_of("bands_in_channel_groups") + GROUPED_RESIDUAL
    (out,) = library.run("grouped_residual", [*inputs_of("bands_in_channel_groups"), GROUPED_RESIDUAL])
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_a_large_input_read_in_place_is_swept_a_chunk_of_row_blocks_at_a_time(library: Library) -> None:
    # Tile t: chunk t / 16 (4 panels x 4 row blocks), panel (t / 4) % 4, row block 4 * chunk + t % 4.
    text = emit_prim_func(library.funcs["in_place_1x1_in_row_chunks"])
    assert "const int64_t mb = ((tile / INT64_C(16)) * INT64_C(4)) + (tile % INT64_C(4));" in text


def test_a_large_input_read_in_place_under_an_epilogue_is_reduced_in_chunks(library: Library) -> None:
    name = "in_place_1x1_relu_in_k_chunks"
    func = library.funcs[name]
    chunk_loops = [s for s in walk_stmts(func.body) if isinstance(s, For) and s.var.name.startswith("kc")]
    assert [int(s.extent.value) for s in chunk_loops] == [3]
    assert "const int64_t mb = tile % INT64_C(8);" in emit_prim_func(func)  # no row chunks beside them
    (out,) = library.run(name, [*inputs_of("in_place_1x1_in_row_chunks"), CHUNKS_BIAS])
    expected = np.maximum(expected_of("in_place_1x1_in_row_chunks") + CHUNKS_BIAS[:, None, None], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_a_lone_band_copy_that_overflows_l2_beside_a_panel_is_reduced_in_chunks(library: Library) -> None:
    # One band (the map is too small to share): its copy, 4.6 KB, beside a 4.6 KB panel in an
    # L2 of 8 KiB, in three chunks of the taps' rows. A band per thread never chunks
    # (tests/compiler/ops/kernels/test_gemm.py).
    name = "lone_band_relu_in_k_chunks"
    chunk_loops = [s for s in walk_stmts(library.funcs[name].body) if isinstance(s, For) and s.var.name.startswith("kc")]
    assert [int(s.extent.value) for s in chunk_loops] == [3]
    assert not [s for s in walk_stmts(library.funcs["bias_relu"].body) if isinstance(s, For) and s.var.name.startswith("kc")]
    (out,) = library.run(name, [*inputs_of("same_padding_3x3"), BIAS])
    np.testing.assert_array_equal(out, library.run("bias_relu", [*inputs_of("same_padding_3x3"), BIAS])[0])
    expected = np.maximum(expected_of("same_padding_3x3") + BIAS[:, None, None], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_bands_taken_a_band_per_thread_keep_partial_sums_per_slot(library: Library) -> None:
    # Two slots, each band's copy beside its panel over the 8 KiB L2: three chunks of the taps'
    # rows, the partial sums in one row of tiles per slot.
    name = "two_slots_relu_in_k_chunks"
    body = library.funcs[name].body
    assert [int(s.extent.value) for s in walk_stmts(body) if isinstance(s, For) and s.var.name.startswith("kc")] == [3]
    assert any(isinstance(s, For) and s.kind is ForKind.CLAIMED for s in walk_stmts(body))
    (partial,) = [s.buffer for s in walk_stmts(body) if isinstance(s, Allocate) and s.buffer.name.startswith("partial")]
    assert partial.shape[0] == 2
    inputs = [*inputs_of("bands_in_two_slots"), TWO_SLOTS_BIAS]
    (out,) = library.run(name, inputs)
    np.testing.assert_array_equal(out, library.run("two_slots_relu", inputs)[0])
    expected = np.maximum(expected_of("bands_in_two_slots") + TWO_SLOTS_BIAS[:, None, None], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_a_7x7_map_takes_tiles_of_five_rows(library: Library) -> None:
    # 49 pixels: 10 tiles of 5 (50 rows) rather than 9 of 6 (54).
    tiles = [s.buffer for s in walk_stmts(library.funcs["map_7x7_tiles_of_five_rows"].body)
             if isinstance(s, Allocate) and s.buffer.name.startswith("acc")]
    assert tiles and all(int(t.shape[0]) == 5 * 16 for t in tiles)


def test_a_block_other_than_one_or_two_vectors_is_not_the_packed_kernel(library: Library) -> None:
    assert grids(library, "block_of_4_takes_the_generic_kernel") == []


@pytest.mark.parametrize("name", HALF)
def test_float16_data_cast_to_float32_matches_numpy_on_the_widened_values(library: Library, name: str) -> None:
    (result,) = library.run(f"half_{name}", half_inputs_of(name))
    np.testing.assert_allclose(result, half_expected_of(name), rtol=1e-4, atol=1e-5)


def temporaries(func: PrimFunc) -> list[str]:
    return [s.buffer.name for s in walk_stmts(func.body) if isinstance(s, Allocate) and s.buffer.name.startswith("T_")]


@pytest.mark.parametrize("name", [n for n in HALF if n != "block_of_4_takes_the_generic_kernel"])
def test_the_packed_kernel_reads_float16_data_and_widens_it_in_its_bands(library: Library, name: str) -> None:
    func = library.funcs[f"half_{name}"]
    assert func.inputs[0].dtype == "float16"
    assert temporaries(func) == []  # no float32 copy of the whole input
    # A 1x1 stride-1 layer too copies (and widens) bands rather than converting at every read.
    assert len(grids(library, f"half_{name}")) == 1
    calls = {e.name for stmt in walk_stmts(func.body) for root in stmt_exprs(stmt) for e in post_order(root)
             if isinstance(e, CallExtern)}
    # Channel-blocked data is widened by whole rows where a row's pixels are one run in memory
    # (stride 1), else a pixel's run at a time (F16C where the machine has it).
    widened = calls & {"relaycc_halfwidenat_f32", "relaycc_halfwidenn_f32"}
    if BLOCKED[name][0] == 0:
        assert widened == set()
    else:
        assert widened == {"relaycc_halfwidenat_f32" if CASES[name][5] == (1, 1) else "relaycc_halfwidenn_f32"}


def test_a_kernel_that_does_not_widen_gets_a_float32_copy_of_cast_data(library: Library) -> None:
    func = library.funcs["half_block_of_4_takes_the_generic_kernel"]
    assert func.inputs[0].dtype == "float16"
    assert len(temporaries(func)) == 1


def test_generated_c_compiles_without_warnings(library: Library) -> None:
    assert library.warnings == []


def accumulations(func: PrimFunc) -> int:
    """Stores into the register tiles other than their zeroing: one per tile row per copy of
    the reduction's step in the C."""
    return sum(1 for s in walk_stmts(func.body)
               if isinstance(s, Store) and s.buffer.name.startswith("acc") and not isinstance(s.value, Const))


def test_the_reduction_step_is_written_once_whether_or_not_the_store_takes_the_last_one(library: Library) -> None:
    # A bare convolution keeps the last step in its store (a plain store of the tile would be a
    # memcpy to gcc): its one nest stops a step early on the outer loops' last pass, where a
    # nest per axis of its (kh, kw, c) reduction had written the step three times.
    assert accumulations(library.funcs["same_padding_3x3"]) == accumulations(library.funcs["bias_relu"]) == 6


def test_a_float16_epilogue_keeps_the_last_step_in_its_store(library: Library) -> None:
    call = op_call(OP, 2, attrs_of("same_padding_3x3"))
    half = lower(primitive(call, [*inputs_of("same_padding_3x3"), BIAS],
                           'cast(nn.relu(nn.bias_add(%0, %p2)), dtype="float16")'), "half_out", 8)
    assert accumulations(half) == accumulations(library.funcs["same_padding_3x3"])


def tile_loop_extents(func: PrimFunc) -> list[int]:
    return [int(s.extent.value) for s in walk_stmts(func.body)  # type: ignore[attr-defined]  # Const extents
            if isinstance(s, For) and s.var.name.startswith("tile")]


def test_rows_are_the_output_pixels_when_the_grid_pads_them_materially(library: Library) -> None:
    # 10 x 10 outputs on a grid 12 wide: 17 tiles of 6 pixels per panel of 16 channels (two
    # panels), where numbering by grid element computed 20, two padding columns of every row.
    assert tile_loop_extents(library.funcs["same_padding_3x3"]) == [2 * 17]
    assert tile_loop_extents(library.funcs["wide_3x3_rows_on_the_grid"]) == [-(-5 * 42 // 6)]


def test_channel_blocked_rows_are_the_output_pixels_however_little_the_grid_pads_them(library: Library) -> None:
    # 40 columns on a grid of 42, but a block of 16 channels innermost: 200 pixels in 34 tiles of
    # 6, where the grid's 210 elements took 35 (the stem's short tap loops keep the grid).
    assert tile_loop_extents(library.funcs["blocked_wide_3x3_rows_by_pixel"]) == [-(-5 * 40 // 6)]
