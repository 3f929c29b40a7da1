"""The register-blocked product (compiler/ops/kernels/gemm.py): tile choice, loop structure,
and results of products whose reduction is a loop nest, built to C and run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from compiler.ops.kernels.gemm import (
    GemmSpec,
    Panels,
    RowReader,
    exact_rows,
    fitted_rows,
    gemm,
    k_chunks,
    panels_outer,
    row_chunks,
    tile_rows,
    tile_shape,
)
from compiler.tir import expr as te
from compiler.tir.analysis import post_order, walk_stmts
from compiler.tir.compute import KernelContext
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, PrimFunc, Stmt, Store, seq
from tests.built_once import built_once
from tests.compiler.ops.kernels.harness import Library

RNG = np.random.default_rng(1)


def nested_product(name: str, batch: int, m: int, n: int, k: tuple[int, int], shared_b: bool) -> PrimFunc:
    """out[b, m, n] = sum_{k0, k1} x[b, m, k0, k1] * y[b or 0, k0, k1, n]."""
    x = te.Buffer("x", (batch, m, *k))
    y = te.Buffer("y", (1 if shared_b else batch, *k, n))
    out = te.Buffer("out", (batch, m, n))

    def a_row(b: te.PrimExpr, row: te.PrimExpr) -> RowReader:
        return RowReader((), lambda ks: x[b, row, ks[0], ks[1]])

    def b_load(bb: te.PrimExpr, ks: Sequence[te.PrimExpr], col: te.PrimExpr) -> te.PrimExpr:
        return y[bb, ks[0], ks[1], col]

    def store(b: te.PrimExpr, row: te.PrimExpr, col: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        return Store(out, (b, row, col), value)

    spec = GemmSpec(batch, m, n, k, "float32", a_row, b_load, store, b_batches=1 if shared_b else batch)
    return PrimFunc(name, (x, y, out), gemm(KernelContext(), spec), num_inputs=2)


PRODUCTS = {
    "nested_reduction": (2, 9, 19, (3, 4), False),
    "nested_reduction_shared_b": (3, 14, 33, (2, 5), True),
    "empty_reduction": (1, 4, 5, (0, 3), False),
}


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return built_once(tmp_path_factory, "kernels_gemm", build_library)


def counted_product(name: str, m: int, n: int, k: tuple[int, int], unroll: int = 1) -> PrimFunc:
    """`nested_product` that also adds one to `hits[m, n]` at every store of out[m, n]; its
    store takes the last reduction step, the passes before it `unroll` steps at a time."""
    x, y = te.Buffer("x", (1, m, *k)), te.Buffer("y", (1, *k, n))
    out, hits = te.Buffer("out", (1, m, n)), te.Buffer("hits", (1, m, n), "int32")

    def store(b: te.PrimExpr, row: te.PrimExpr, col: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        return seq(Store(out, (b, row, col), value), Store(hits, (b, row, col), hits[b, row, col] + 1))

    spec = GemmSpec(1, m, n, k, "float32", lambda b, row: RowReader((), lambda ks: x[b, row, ks[0], ks[1]]),
                    lambda bb, ks, col: y[bb, ks[0], ks[1], col], store)
    ctx = KernelContext(schedule={"unroll_k": unroll})
    body = gemm(ctx, spec)
    assert ctx.decisions.get("unroll_k", 1) == unroll
    return PrimFunc(name, (x, y, out, hits), body, num_inputs=2)


# m = 9 and 14 leave 3 and 2 rows past the last whole row block of 6.
COUNTED = {"counted_9": (9, 19, (3, 4)), "counted_14": (14, 8, (2, 5)),
           "counted_unrolled_16": (9, 19, (3, 16), 16), "counted_unrolled_32": (14, 8, (2, 32), 16)}


def chunked_product(name: str, m: int, n: int, k: tuple[int, int], parts: int, unroll: int = 1) -> PrimFunc:
    """relu(x @ y) with its reduction in `parts` chunks, its innermost loop taken `unroll` steps at
    a time, counting stores in `hits` as `counted_product` does."""
    x, y = te.Buffer("x", (1, m, *k)), te.Buffer("y", (1, *k, n))
    out, hits = te.Buffer("out", (1, m, n)), te.Buffer("hits", (1, m, n), "int32")

    def store(b: te.PrimExpr, row: te.PrimExpr, col: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        return seq(Store(out, (b, row, col), te.maximum(value, te.const(0.0))),
                   Store(hits, (b, row, col), hits[b, row, col] + 1))

    spec = GemmSpec(1, m, n, k, "float32", lambda b, row: RowReader((), lambda ks: x[b, row, ks[0], ks[1]]),
                    lambda bb, ks, col: y[bb, ks[0], ks[1], col], store, peel_last=False, chunk_slot=(te.const(0, "int64"), 1))
    ctx = KernelContext(schedule={"k_chunks": parts, "unroll_k": unroll})
    body = gemm(ctx, spec)
    assert ctx.decisions["k_chunks"] == parts
    assert ctx.decisions.get("unroll_k", 1) == unroll
    return PrimFunc(name, (x, y, out, hits), body, num_inputs=2)


# The chunks split the reduction's outermost axis of more than one step: k0 in three, then k1
# in two (k0 has one step); m = 9 has rows the last block shares.
CHUNKED = {"chunked_k0": (9, 19, (3, 4), 3), "chunked_k1": (14, 40, (1, 6), 2)}
# Unrolled innermost loops: one of exactly 16 steps, and one of 32 taken as 2 x 16 inside chunks.
UNROLLED = {"unrolled_16": (9, 19, (3, 16), 1, 16), "unrolled_32_chunked": (14, 24, (2, 32), 2, 16)}


def build_library(directory: Path) -> Library:
    funcs = [nested_product(name, *shape) for name, shape in PRODUCTS.items()]
    funcs += [counted_product(name, *shape) for name, shape in COUNTED.items()]
    funcs += [chunked_product(name, *shape) for name, shape in CHUNKED.items()]
    funcs += [chunked_product(name, *shape) for name, shape in UNROLLED.items()]
    return Library(funcs, directory)


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_product_with_a_nested_reduction_matches_numpy(library: Library, name: str) -> None:
    batch, m, n, k, shared = PRODUCTS[name]
    x = RNG.uniform(-1, 1, (batch, m, *k)).astype("float32")
    y = RNG.uniform(-1, 1, (1 if shared else batch, *k, n)).astype("float32")
    (result,) = library.run(name, [x, y])
    expected = np.einsum("bmij,bijn->bmn", x, np.broadcast_to(y, (batch, *k, n)))
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(COUNTED))
def test_rows_the_last_row_block_shares_with_the_one_before_are_stored_once(library: Library, name: str) -> None:
    # The last block starts early so that it has a whole tile of rows; storing its shared rows
    # again would add a residual read from the output twice.
    m, n, k = COUNTED[name][:3]
    x = RNG.uniform(-1, 1, (1, m, *k)).astype("float32")
    y = RNG.uniform(-1, 1, (1, *k, n)).astype("float32")
    result, hits = library.run(name, [x, y])
    np.testing.assert_allclose(result, np.einsum("bmij,bijn->bmn", x, y), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(hits, np.full((1, m, n), 123 + 1, "int32"))  # the harness starts it at 123


@pytest.mark.parametrize("name", sorted(CHUNKED) + sorted(UNROLLED))
def test_a_reduction_in_chunks_stores_each_result_once_after_the_last_chunk(library: Library, name: str) -> None:
    m, n, k = {**CHUNKED, **UNROLLED}[name][:3]
    x = RNG.uniform(-1, 1, (1, m, *k)).astype("float32")
    y = RNG.uniform(-1, 1, (1, *k, n)).astype("float32")
    result, hits = library.run(name, [x, y])
    np.testing.assert_allclose(result, np.maximum(np.einsum("bmij,bijn->bmn", x, y), 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(hits, np.full((1, m, n), 123 + 1, "int32"))


def test_partial_sums_of_a_chunked_reduction_live_in_the_workspace() -> None:
    func = chunked_product("f", 9, 19, (3, 4), 3)
    partials = [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate) and s.buffer.name.startswith("partial")]
    assert [(b.scope, b.shape) for b in partials] == [("global", (1, 4, 96))]  # one slot: 2 row blocks x 2 panels
    chunk_loops = [s for s in walk_stmts(func.body) if isinstance(s, For) and s.var.name.startswith("kc")]
    assert [(int(te.as_expr(s.extent).value), s.kind) for s in chunk_loops] == [(3, ForKind.SERIAL)]


def test_k_chunks_split_a_reduction_whose_a_overflows_l2_beside_a_panel() -> None:
    # ResNet-50's 1x1 layer on 7x7 with 2048 channels (128 channel blocks): 400 KB of A beside
    # a 128 KB panel; on 14x14 with 1024 (64 blocks): 800 KB beside 64 KB.
    assert k_chunks(400 << 10, 128 << 10, 128) == 4
    assert k_chunks(800 << 10, 64 << 10, 64) == 4
    assert k_chunks(300 << 10, 64 << 10, 64) == 1  # fits in L2 beside its panel
    assert k_chunks(0, 1 << 20, 64) == 1  # A not read in place
    assert k_chunks(4 << 20, 128 << 10, 3) == 3  # no divisor fits: every step its own chunk


@pytest.mark.parametrize("peel_last", [True, False])
def test_a_reduction_stays_whole_under_a_peeled_store_or_without_a_place_for_partial_sums(peel_last: bool) -> None:
    # The peeled last step sits in the store, after every chunk; and a product whose caller
    # names no slot for its partial sums (it may run inside the caller's parallel loop) would
    # share one buffer between threads: neither has the knob.
    ctx = KernelContext(schedule={"k_chunks": 2})
    slot = (te.const(0, "int64"), 1) if peel_last else None
    spec = GemmSpec(1, 9, 16, (4, 4), "float32", lambda b, row: RowReader((), lambda ks: te.const(1.0)),
                    lambda bb, ks, col: te.const(1.0), lambda b, row, col, value: seq(), peel_last=peel_last,
                    chunk_slot=slot)
    gemm(ctx, spec)
    assert "k_chunks" not in ctx.decisions


@pytest.mark.parametrize("name", sorted(UNROLLED))
def test_unroll_k_writes_the_innermost_reduction_loop_out_sixteen_steps_at_a_time(name: str) -> None:
    func = chunked_product(name, *UNROLLED[name])
    k = UNROLLED[name][2]
    unrolled = [s for s in walk_stmts(func.body) if isinstance(s, For) and s.kind is ForKind.UNROLLED]
    assert unrolled and all(int(te.as_expr(s.extent).value) == 16 for s in unrolled)
    # Above each, the rest of that axis rolled (32 steps as two passes of 16), or the next axis.
    outer = [s for s in walk_stmts(func.body) if isinstance(s, For) and s.kind is ForKind.ROLLED and s.body in unrolled]
    assert [int(te.as_expr(s.extent).value) for s in outer] == [k[-1] // 16 if k[-1] > 16 else k[-2]] * len(unrolled)


def test_a_peeled_product_unrolls_every_pass_but_the_last_which_stops_a_step_short() -> None:
    func = counted_product("f", 9, 19, (3, 16), 16)
    splits = [s for s in walk_stmts(func.body) if isinstance(s, IfThenElse) and isinstance(s.else_case, For)
              and s.else_case.kind is ForKind.UNROLLED]
    assert splits  # one per tile nest (9 rows: a tile of 6 and one of the 3 left)
    for split in splits:
        last, others = split.then_case, split.else_case
        assert (last.kind, int(te.as_expr(last.extent).value)) == (ForKind.ROLLED, 15)
        assert (others.kind, int(te.as_expr(others.extent).value)) == (ForKind.UNROLLED, 16)


@pytest.mark.parametrize("rows, lanes, rule", [(49, 8, 16), (64, 8, 16), (65, 8, 1), (196, 8, 1), (49, 16, 1)])
def test_unroll_k_rule_unrolls_only_products_of_few_rows_on_avx2(rows: int, lanes: int, rule: int) -> None:
    ctx = KernelContext(vector_lanes=lanes)
    spec = GemmSpec(1, rows, 16, (4, 16), "float32", lambda b, row: RowReader((), lambda ks: te.const(1.0)),
                    lambda bb, ks, col: te.const(1.0), lambda b, row, col, value: seq(), peel_last=False)
    gemm(ctx, spec)
    assert (ctx.decisions["unroll_k"], ctx.decisions["unroll_k:allowed"]) == (rule, [1, 16])


@pytest.mark.parametrize("peel_last, k", [(False, (2, 12)), (True, (32,))])
def test_unroll_k_is_offered_only_where_a_pass_of_sixteen_steps_exists(peel_last: bool, k: tuple[int, ...]) -> None:
    # A peeled product over one axis runs it once, a step short: no whole pass to unroll.
    ctx = KernelContext(schedule={"unroll_k": 16})
    spec = GemmSpec(1, 9, 16, k, "float32", lambda b, row: RowReader((), lambda ks: te.const(1.0)),
                    lambda bb, ks, col: te.const(1.0), lambda b, row, col, value: seq(), peel_last=peel_last)
    gemm(ctx, spec)
    assert "unroll_k" not in ctx.decisions


def test_a_product_stored_element_by_element_keeps_a_tile_of_the_leftover_rows() -> None:
    # Only products stored a tile row at a time (convolutions) start their last block early.
    func = nested_product("f", 1, 9, 16, (4, 4), False)
    accumulators = [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate) and s.buffer.scope == "local"]
    assert [b.shape for b in accumulators] == [(96,), (48,)]


def test_tile_is_six_rows_by_two_vectors_of_float32() -> None:
    assert tile_shape(KernelContext(vector_lanes=8), "float32", 500) == (6, 16)


def test_a_row_fewer_per_tile_where_that_computes_a_twentieth_fewer_rows() -> None:
    assert fitted_rows(6, 49) == 5  # a 7x7 map: 54 rows in tiles of 6, 50 in tiles of 5
    assert fitted_rows(6, 25) == 5  # 30 against 25
    assert fitted_rows(6, 196) == 6  # 14x14: 198 against 200
    assert fitted_rows(6, 3136) == 6  # 56x56 divides by 6 already
    assert fitted_rows(2, 3) == 2  # never below two rows


def test_exact_rows_takes_the_tallest_tile_of_the_fewest_computed_rows_down_to_half_height() -> None:
    assert exact_rows(14, 49) == 7  # a 7x7 map: 7 tiles of 7, where 13 rows computed 52
    assert exact_rows(14, 64) == 8  # 8 x 8 = 64 exactly; 13 computes 65
    assert exact_rows(14, 14) == 14
    assert exact_rows(14, 5) == 7  # nothing below half height: 7 rows, 2 of them wasted
    assert exact_rows(1, 3) == 1


@pytest.mark.parametrize("lanes, rows", [(16, 7), (8, 5)])
def test_a_small_convolution_on_avx512_takes_exact_tiles_and_on_avx2_fitted_ones(lanes: int, rows: int) -> None:
    # ResNet-50's 7x7 layers: 49 pixels, weights read in place a panel of two vectors at a time.
    ctx = KernelContext(vector_lanes=lanes)
    width = 2 * lanes
    spec = GemmSpec(1, 49, 2 * width, (4, 16), "float32", lambda b, row: RowReader((), lambda ks: te.const(1.0)),
                    lambda bb, ks, col: te.const(1.0), lambda b, row, col, value: seq(),
                    panels=Panels(width, lambda bb, panel, ks, col: te.const(1.0)), peel_last=False)
    gemm(ctx, spec)
    assert ctx.decisions["tile_rows"] == rows


def test_row_chunks_weigh_rereading_a_against_rereading_b() -> None:
    # ResNet-50's 1x1 layer on 14x14 with 1024 channels: 800 KB of A, 16 panels of 64 KB.
    assert row_chunks(800 << 10, 33, 16, 64 << 10) == 3
    # On 7x7 with 2048 channels: 400 KB of A beside a 128 KB panel overflows L2 by 16 KB, less
    # than a second read of B's 4 MB.
    assert row_chunks(400 << 10, 10, 32, 128 << 10) == 1
    assert row_chunks(2 << 20, 7, 16, 64 << 10) == 7  # a prime count: the chunks are single blocks
    assert row_chunks(100, 33, 16, 64 << 10) == 1
    assert row_chunks(0, 33, 16, 64 << 10) == 1  # A not read in place


def test_tiles_share_a_panel_when_b_is_the_larger_operand_or_too_large_for_l2() -> None:
    def spec(m: int, n: int, k: tuple[int, ...]) -> GemmSpec:
        return GemmSpec(1, m, n, k, "float32", lambda b, row: RowReader((), lambda ks: te.const(0.0)),
                        lambda bb, ks, col: te.const(0.0), lambda b, row, col, value: seq())

    assert panels_outer(spec(64, 500, (800,)), 16)  # dense: B is the larger operand
    assert not panels_outer(spec(3136, 64, (3, 3, 64)), 16)  # a 56x56 3x3 layer: 147 KB of B
    # A 14x14 3x3 band with 256 input channels and 64 output channels in its group: 590 KB of B.
    assert panels_outer(spec(98, 64, (3, 3, 256)), 16)


def test_tiles_share_rows_when_a_read_in_place_is_larger_than_two_l2s() -> None:
    def spec(m: int, n: int, k: int, a_bytes: int) -> GemmSpec:
        return GemmSpec(1, m, n, (k,), "float32", lambda b, row: RowReader((), lambda ks: te.const(0.0)),
                        lambda bb, ks, col: te.const(0.0), lambda b, row, col, value: seq(), a_bytes=a_bytes)

    # ResNet-50's 1x1 layer from 512 to 256 channels on 28x28: 1.6 MB of A, 512 KB of B.
    assert not panels_outer(spec(784, 256, 512, 784 * 512 * 4), 16)
    # Its 1x1 layers on 14x14 with 1024 channels (800 KB of A) keep their panels.
    assert panels_outer(spec(196, 512, 1024, 196 * 1024 * 4), 16)
    # A small map keeps the panels whatever A weighs.
    assert panels_outer(spec(49, 512, 2048 * 16, 49 * 2048 * 16 * 4), 16)


def test_tile_is_one_vector_wide_when_the_columns_fit_in_one() -> None:
    assert tile_shape(KernelContext(vector_lanes=8), "float32", 8) == (6, 8)


def test_tile_width_counts_lanes_of_the_accumulation_dtype() -> None:
    assert tile_shape(KernelContext(vector_lanes=8), "float64", 100) == (6, 8)


def test_inner_loops_are_vectorized_over_contiguous_packed_columns() -> None:
    func = nested_product("f", 1, 12, 32, (4, 4), False)
    packed = [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate) and s.buffer.scope == "global"]
    assert [b.shape for b in packed] == [(1, 2, 16, 16)]
    accumulators = [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate) and s.buffer.scope == "local"]
    assert accumulators and all(b.shape == (96,) for b in accumulators)
    fma_loops = [s for s in walk_stmts(func.body) if isinstance(s, For) and isinstance(s.body, Store)
                 and s.body.buffer in accumulators and s.kind is ForKind.VECTORIZED
                 and any(isinstance(e, te.Load) and e.buffer is packed[0] for e in post_order(s.body.value))]
    # One per tile row: the reduction step is written once, its nest stopping k1 a step early
    # when k0 is at its last (the last step is taken in the store).
    assert len(fma_loops) == 6


def test_reduction_loops_of_a_tile_are_rolled() -> None:
    # Unrolled, a 3x3x3 reduction's steps are interleaved by gcc, which then spills the tile.
    func = nested_product("f", 1, 12, 32, (3, 3), False)
    accumulators = {s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate) and s.buffer.scope == "local"}
    reductions = [s for s in walk_stmts(func.body) if isinstance(s, For) and s.kind is not ForKind.VECTORIZED
                  and any(isinstance(t, Store) and t.buffer in accumulators for t in walk_stmts(s.body))
                  and not any(isinstance(t, Allocate) for t in walk_stmts(s.body))]
    assert reductions and all(s.kind is ForKind.ROLLED for s in reductions)


def test_the_store_takes_the_last_reduction_step_so_it_is_never_a_plain_copy() -> None:
    # gcc turns a tile copied out unchanged into a memcpy and then keeps the tile in memory.
    func = nested_product("f", 2, 9, 19, (3, 4), False)
    out = func.outputs[0]
    stores = [s for s in walk_stmts(func.body) if isinstance(s, Store) and s.buffer is out]
    assert stores and all(isinstance(s.value, te.Binary) for s in stores)


def test_tile_rows_fill_the_register_file() -> None:
    assert tile_shape(KernelContext(vector_lanes=16), "float32", 500) == (14, 32)  # AVX-512: 28 + 2 + 1
    assert tile_rows(KernelContext(vector_lanes=8), "float32", 32) == 2  # four vectors a row
    assert tile_rows(KernelContext(vector_lanes=8), "float32", 64) == 1


def test_empty_reduction_needs_no_workspace() -> None:
    func = nested_product("f", 1, 4, 5, (0, 3), False)
    assert not any(isinstance(s, Allocate) and s.buffer.scope == "global" for s in walk_stmts(func.body))
