"""dense, matmul, batch_matmul and contrib_dense_pack kernels (compiler/ops/kernels/matmul.py)
built to C and run against the ops' numpy references: both loop nests (lane-wise dot products
when both operands run along the reduction, packed gemm otherwise), weights packed in column
blocks read in place, tile edges, leading dims, transposes, batch broadcast, integer and
float64 accumulation, and fused epilogues."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.runtime.threads import available_cores, set_threads
from compiler.tir import expr as te
from compiler.tir.analysis import walk_stmts
from compiler.tir.stmt import Allocate, For, ForKind, PrimFunc
from tests.built_once import built_once
from tests.compiler.ops.kernels.harness import Library, lower_text, op_call, primitive, reference

RNG = np.random.default_rng(3)


def f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def f64(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape)


def i8(*shape: int) -> np.ndarray:
    return RNG.integers(-100, 100, shape).astype("int8")


def packed(w: np.ndarray, block: int, k_block: int = 1) -> np.ndarray:
    """(N, K) -> NC[block]n (or NC[block]n[k_block]c), N padded with zero units to whole blocks."""
    n, k = w.shape
    padded = np.concatenate([w, np.zeros((-n % block, k), w.dtype)])
    blocks = padded.reshape(-1, block, k // k_block, k_block).transpose(0, 2, 1, 3)
    return blocks if k_block > 1 else blocks[..., 0]


def pack_attrs(units: int, block: int, k_block: int = 1, **extra: object) -> dict[str, object]:
    layout = f"NC{block}n" + (f"{k_block}c" if k_block > 1 else "")
    return {"units": units, "weight_layout": layout, **extra}


DENSE = {"units": None}
PACK = "nn.contrib_dense_pack"
# name -> (op, inputs, attrs)
CASES: dict[str, tuple[str, tuple[np.ndarray, np.ndarray], dict[str, object]]] = {
    "dense_row_and_column_edges": ("nn.dense", (f32(13, 37), f32(21, 37)), DENSE),
    "dense_whole_tiles": ("nn.dense", (f32(12, 20), f32(32, 20)), DENSE),
    "dense_one_row": ("nn.dense", (f32(1, 50), f32(40, 50)), DENSE),
    "dense_fewer_rows_than_a_tile": ("nn.dense", (f32(5, 9), f32(3, 9)), DENSE),
    "dense_one_vector_of_columns": ("nn.dense", (f32(7, 16), f32(8, 16)), DENSE),
    "dense_reduction_of_one": ("nn.dense", (f32(8, 1), f32(17, 1)), DENSE),
    "dense_leading_dims": ("nn.dense", (f32(2, 3, 5), f32(4, 5)), {"units": 4}),
    "dense_int8_to_int32": ("nn.dense", (i8(9, 70), i8(19, 70)), {"units": None, "out_dtype": "int32"}),
    "dense_float64": ("nn.dense", (f64(7, 11), f64(10, 11)), DENSE),
    "dense_parallel": ("nn.dense", (f32(40, 300), f32(200, 300)), DENSE),
    "matmul_plain": ("nn.matmul", (f32(4, 8), f32(8, 3)), {"units": None}),
    "matmul_transposed_both": (
        "nn.matmul", (f32(8, 4), f32(3, 8)),
        {"units": 3, "transpose_a": True, "transpose_b": True},
    ),
    "matmul_transposed_a_leading_dims": ("nn.matmul", (f32(2, 8, 7), f32(8, 18)), {"units": None, "transpose_a": True}),
    "matmul_vector_data": ("nn.matmul", (f32(6), f32(6, 5)), {"units": None}),
    "batch_matmul_transposed_b": ("nn.batch_matmul", (f32(2, 3, 4), f32(2, 5, 4)), {"transpose_b": True}),
    "batch_matmul_shared_x": ("nn.batch_matmul", (f32(1, 4, 3), f32(3, 4, 2)), {"transpose_a": True}),
    "batch_matmul_shared_y": ("nn.batch_matmul", (f32(3, 7, 5), f32(1, 5, 19)), {}),
    "batch_matmul_transposed_both": (
        "nn.batch_matmul", (f32(2, 6, 9), f32(2, 17, 6)),
        {"transpose_a": True, "transpose_b": True},
    ),
    "batch_matmul_parallel": ("nn.batch_matmul", (f32(4, 101, 64), f32(4, 64, 91)), {}),
    # GPT-2's attention scores at 32 tokens: too small a product for two threads.
    "batch_matmul_attention_serial": ("nn.batch_matmul", (f32(12, 32, 64), f32(12, 33, 64)), {"transpose_b": True}),
    "batch_matmul_rows_contiguous": ("nn.batch_matmul", (f32(3, 7, 20), f32(3, 13, 20)), {"transpose_b": True}),
    "batch_matmul_rows_contiguous_shared_x": (
        "nn.batch_matmul", (f32(1, 5, 40), f32(3, 11, 40)),
        {"transpose_b": True},
    ),
    "batch_matmul_rows_contiguous_shared_y": ("nn.batch_matmul", (f32(4, 9, 33), f32(1, 5, 33)), {"transpose_b": True}),
    "batch_matmul_rows_contiguous_parallel": (
        "nn.batch_matmul", (f32(6, 64, 64), f32(6, 64, 64)),
        {"transpose_b": True},
    ),
    # Whole panels of columns (64 is two vectors on AVX2 and on AVX-512): B read where it is.
    "batch_matmul_b_in_place": ("nn.batch_matmul", (f32(4, 21, 37), f32(4, 37, 64)), {}),
    "batch_matmul_b_in_place_shared_y": ("nn.batch_matmul", (f32(3, 9, 12), f32(1, 12, 64)), {}),
    "dense_pack_row_and_column_edges": (PACK, (f32(13, 37), packed(f32(21, 37), 16)), pack_attrs(21, 16)),
    "dense_pack_one_row": (PACK, (f32(1, 50), packed(f32(40, 50), 8)), pack_attrs(40, 8)),
    "dense_pack_primes_with_leading_dims": (PACK, (f32(2, 7, 23), packed(f32(29, 23), 16)), pack_attrs(29, 16)),
    "dense_pack_reduction_of_one": (PACK, (f32(8, 1), packed(f32(17, 1), 8)), pack_attrs(17, 8)),
    "dense_pack_one_unit": (PACK, (f32(11, 5), packed(f32(1, 5), 16)), pack_attrs(1, 16)),
    "dense_pack_block_of_four_vectors": (PACK, (f32(9, 12), packed(f32(64, 12), 32)), pack_attrs(64, 32)),
    "dense_pack_parallel": (PACK, (f32(40, 300), packed(f32(200, 300), 16)), pack_attrs(200, 16)),
    "dense_pack_float64": (PACK, (f64(7, 11), packed(f64(10, 11), 8)), pack_attrs(10, 8)),
    "dense_pack_vnni_int8_to_int32": (
        PACK, (RNG.integers(0, 200, (5, 16)).astype("uint8"), packed(i8(24, 16), 8, 4)),
        pack_attrs(24, 8, 4, out_dtype="int32"),
    ),
}
BIAS = f32(21)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return built_once(tmp_path_factory, "kernels_matmul", build_library)


def build_library(directory: Path) -> Library:
    funcs = [lower_text(primitive(op_call(op, 2, attrs), inputs), name) for name, (op, inputs, attrs) in CASES.items()]
    _, (x, w), _ = CASES["dense_row_and_column_edges"]
    fused = primitive(op_call("nn.dense", 2, DENSE), [x, w, BIAS], "nn.relu(nn.bias_add(%0, %p2, axis=-1))")
    funcs.append(lower_text(fused, "dense_bias_relu"))
    _, (a, b), attrs = CASES["batch_matmul_shared_y"]
    funcs.append(lower_text(primitive(op_call("nn.batch_matmul", 2, attrs), [a, b], "tanh(%0)"), "batch_matmul_tanh"))
    _, (x, w), _ = CASES["dense_parallel"]
    funcs.append(lower_text(primitive(op_call("nn.dense", 2, DENSE), [x, w]), "dense_serial", parallel=False))
    _, (x, w), attrs = CASES["dense_pack_row_and_column_edges"]
    fused = primitive(op_call(PACK, 2, attrs), [x, w, BIAS], "nn.relu(nn.bias_add(%0, %p2, axis=-1))")
    funcs.append(lower_text(fused, "dense_pack_bias_relu"))
    return Library(funcs, directory)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matmul_kernel_matches_reference(library: Library, name: str) -> None:
    op, inputs, attrs = CASES[name]
    (result,) = library.run(name, list(inputs))
    expected = reference(op, inputs, attrs)
    assert result.dtype == expected.dtype
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def test_dense_applies_fused_bias_and_relu(library: Library) -> None:
    _, (x, w), _ = CASES["dense_row_and_column_edges"]
    (result,) = library.run("dense_bias_relu", [x, w, BIAS])
    np.testing.assert_allclose(result, np.maximum(x @ w.T + BIAS, 0), rtol=1e-5, atol=1e-5)


def test_packed_dense_applies_fused_bias_and_relu_to_the_real_units_only(library: Library) -> None:
    _, (x, w), _ = CASES["dense_pack_row_and_column_edges"]
    (result,) = library.run("dense_pack_bias_relu", [x, w, BIAS])
    unpacked = w.transpose(0, 2, 1).reshape(-1, 37)[:21]
    np.testing.assert_allclose(result, np.maximum(x @ unpacked.T + BIAS, 0), rtol=1e-5, atol=1e-5)


def test_packed_dense_reads_the_weight_in_place(library: Library) -> None:
    # A weight packed at compile time costs nothing per call: no copy, no workspace.
    for name in ("dense_pack_parallel", "dense_pack_bias_relu", "dense_pack_vnni_int8_to_int32"):
        assert workspace_buffers(library.funcs[name]) == []


def test_product_loops_index_in_64_bits(library: Library) -> None:
    # Under -fwrapv, int32 index arithmetic may wrap and gcc stops vectorizing (~20x slower).
    for name in ("dense_pack_parallel", "dense_parallel", "matmul_transposed_both"):
        loops = [s for s in walk_stmts(library.funcs[name].body) if isinstance(s, For)]
        assert loops and all(loop.var.dtype == "int64" for loop in loops)


def test_batch_matmul_applies_fused_epilogue(library: Library) -> None:
    _, (a, b), _ = CASES["batch_matmul_shared_y"]
    (result,) = library.run("batch_matmul_tanh", [a, b])
    np.testing.assert_allclose(result, np.tanh(a @ b), rtol=1e-5, atol=1e-5)


def has_parallel_loop(func: PrimFunc) -> bool:
    return any(isinstance(s, For) and s.kind is ForKind.PARALLEL for s in walk_stmts(func.body))


def test_small_batch_matmul_runs_on_one_core_and_a_large_one_on_all(library: Library) -> None:
    assert not has_parallel_loop(library.funcs["batch_matmul_attention_serial"])
    assert has_parallel_loop(library.funcs["batch_matmul_parallel"])


@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_batch_matmul_matches_numpy_at_each_thread_count(library: Library, threads: int) -> None:
    _, (a, b), _ = CASES["batch_matmul_parallel"]
    set_threads(threads)
    try:
        (result,) = library.run("batch_matmul_parallel", [a, b])
    finally:
        set_threads(available_cores())
    np.testing.assert_allclose(result, a @ b, rtol=1e-5, atol=1e-5)


def test_dense_serial_and_parallel_agree_exactly(library: Library) -> None:
    _, (x, w), _ = CASES["dense_parallel"]
    assert not any(isinstance(s, For) and s.kind is ForKind.PARALLEL
                   for s in walk_stmts(library.funcs["dense_serial"].body))
    np.testing.assert_array_equal(library.run("dense_serial", [x, w])[0], library.run("dense_parallel", [x, w])[0])


def workspace_buffers(func: PrimFunc) -> list[te.Buffer]:
    return [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate) and s.buffer.scope == "global"]


def test_dense_with_a_long_reduction_needs_no_workspace(library: Library) -> None:
    # Seed 001's MLP layers are such denses: their workspace stays empty, only intermediates count.
    assert workspace_buffers(library.funcs["dense_parallel"]) == []
    assert workspace_buffers(library.funcs["batch_matmul_rows_contiguous"]) == []


def test_transposed_or_short_reductions_pack_b_into_the_workspace(library: Library) -> None:
    assert len(workspace_buffers(library.funcs["matmul_transposed_both"])) == 1
    assert len(workspace_buffers(library.funcs["dense_fewer_rows_than_a_tile"])) == 1


def test_batch_matmul_reads_whole_panels_of_b_in_place(library: Library) -> None:
    # A transformer's attention products packed a B as large as their input on every call.
    assert workspace_buffers(library.funcs["batch_matmul_b_in_place"]) == []
    assert workspace_buffers(library.funcs["batch_matmul_b_in_place_shared_y"]) == []
    assert len(workspace_buffers(library.funcs["batch_matmul_shared_y"])) == 1  # 19 columns: a ragged panel


def test_batch_matmul_with_many_rows_packs_b_rather_than_taking_dot_products(library: Library) -> None:
    assert len(workspace_buffers(library.funcs["batch_matmul_rows_contiguous_parallel"])) == 1


def test_generated_c_compiles_without_warnings(library: Library) -> None:
    assert library.warnings == []
