"""Which inputs a kernel's output may be written over, on hand-built loop nests and on the
kernels lowering makes of fused Relay functions."""

from __future__ import annotations

import numpy as np

from compiler.driver import BuildOptions, lower
from compiler.parser import parse
from compiler.tir.analysis import walk_stmts
from compiler.tir.expr import Buffer, CallExtern, Const, Var, as_expr, eq, select
from compiler.tir.inplace import inplace_inputs, shared_params
from compiler.tir.stmt import Allocate, Evaluate, For, PrimFunc, Store, loop_nest, seq

SHAPE = (4, 8)


def kernel(body_of, n_inputs: int = 2, in_shape: tuple[int, ...] = SHAPE) -> PrimFunc:
    ins = [Buffer(f"p{k}", in_shape) for k in range(n_inputs)]
    out = Buffer("out", SHAPE)
    return PrimFunc("k", (*ins, out), body_of(ins, out), n_inputs)


def test_an_elementwise_output_may_be_written_over_its_first_input_of_the_same_shape() -> None:
    func = kernel(lambda ins, out: loop_nest(["i", "j"], SHAPE, lambda v: Store(out, tuple(v), ins[0][v[0], v[1]] * 2.0
                                                                              + ins[1][v[0], v[1]])))
    assert inplace_inputs(func) == {0: 0}
    assert shared_params(func) == {0, 2}


def test_an_input_read_at_another_index_is_never_written_over() -> None:
    # out[i, j] = p0[i, 7 - j]: writing out[i, 0] would destroy what out[i, 7] reads.
    func = kernel(lambda ins, out: loop_nest(["i", "j"], SHAPE, lambda v: Store(out, tuple(v), ins[0][v[0], 7 - v[1]])),
                  n_inputs=1)
    assert inplace_inputs(func) == {}


def test_an_input_read_outside_the_output_store_is_never_written_over() -> None:
    def body(ins, out):
        tmp = Buffer("tmp", SHAPE)
        return seq(loop_nest(["i", "j"], SHAPE, lambda v: Store(tmp, tuple(v), ins[0][v[0], v[1]])),
                   loop_nest(["a", "b"], SHAPE, lambda v: Store(out, tuple(v), tmp[v[0], v[1]] + ins[0][v[0], v[1]])))
    assert inplace_inputs(kernel(body, n_inputs=1)) == {}


def test_an_output_the_kernel_reads_back_shares_nothing() -> None:
    def body(ins, out):
        return seq(loop_nest(["i", "j"], SHAPE, lambda v: Store(out, tuple(v), ins[0][v[0], v[1]])),
                   loop_nest(["a", "b"], SHAPE, lambda v: Store(out, tuple(v), out[v[0], v[1]] + 1.0)))
    assert inplace_inputs(kernel(body, n_inputs=1)) == {}


def test_a_store_of_the_output_that_does_not_read_the_input_disables_it() -> None:
    # A zero fill before the real store would clobber the input it is about to read.
    def body(ins, out):
        return seq(loop_nest(["i", "j"], SHAPE, lambda v: Store(out, tuple(v), Const(0.0, "float32"))),
                   loop_nest(["a", "b"], SHAPE, lambda v: Store(out, tuple(v), ins[0][v[0], v[1]] + 1.0)))
    assert inplace_inputs(kernel(body, n_inputs=1)) == {}


def test_a_buffer_passed_to_an_extern_call_shares_nothing() -> None:
    def body(ins, out):
        return seq(Evaluate(CallExtern("peek", (ins[0],))),
                   loop_nest(["i", "j"], SHAPE, lambda v: Store(out, tuple(v), ins[0][v[0], v[1]])))
    assert inplace_inputs(kernel(body, n_inputs=1)) == {}


def test_inputs_of_another_shape_or_dtype_are_not_candidates() -> None:
    # p0 is (1, 8) broadcast along rows: each element is read by four outputs.
    func = kernel(lambda ins, out: loop_nest(["i", "j"], SHAPE, lambda v: Store(out, tuple(v), ins[0][0, v[1]])),
                  n_inputs=1, in_shape=(1, 8))
    assert inplace_inputs(func) == {}


def test_a_dim_of_extent_one_is_the_same_index_whatever_it_is_written_as() -> None:
    ins = [Buffer("p0", (1, 8))]
    out = Buffer("out", (1, 8))
    body = loop_nest(["b", "j"], (1, 8), lambda v: Store(out, tuple(v), ins[0][0, v[1]] + 1.0))
    assert inplace_inputs(PrimFunc("k", (*ins, out), body, 1)) == {0: 0}


def test_a_run_time_dim_read_through_its_broadcast_test_is_the_stored_index() -> None:
    # p0[n == 1 ? 0 : i, j]: under the equal shapes the executor requires, n == 1 means i == 0.
    n, m = Var("n", "int64"), Var("m", "int64")
    ins = [Buffer("p0", (n, 8))]
    out = Buffer("out", (m, 8))
    body = loop_nest(["i", "j"], (m, 8), lambda v: Store(
        out, tuple(v), ins[0][select(eq(n, 1), Const(0, "int64"), v[0]), v[1]] + 1.0))
    assert inplace_inputs(PrimFunc("k", (*ins, out), body, 1, scalar_params=(n, m))) == {0: 0}


def test_a_broadcast_test_of_another_dim_than_the_inputs_own_is_never_the_stored_index() -> None:
    n, m = Var("n", "int64"), Var("m", "int64")
    ins = [Buffer("p0", (n, 8))]
    out = Buffer("out", (m, 8))
    body = loop_nest(["i", "j"], (m, 8), lambda v: Store(
        out, tuple(v), ins[0][select(eq(m, 1), Const(0, "int64"), v[0]), v[1]] + 1.0))
    assert inplace_inputs(PrimFunc("k", (*ins, out), body, 1, scalar_params=(n, m))) == {}


def test_a_bias_of_static_ones_against_run_time_dims_is_not_a_candidate_but_the_residual_is() -> None:
    # The bias reads index 0 along its dims of 1, as a same-shape input would at an image of
    # 1x1; chosen first, it had left the residual without the output's bytes.
    h, w = Var("h", "int64"), Var("w", "int64")
    bias, residual, out = Buffer("bias", (1, 4, 1, 1)), Buffer("res", (1, 4, h, w)), Buffer("out", (1, 4, h, w))
    body = loop_nest(["n", "c", "y", "x"], (1, 4, h, w), lambda v: Store(
        out, tuple(v), bias[0, v[1], 0, 0] + residual[v[0], v[1], v[2], v[3]]))
    assert inplace_inputs(PrimFunc("k", (bias, residual, out), body, 2, scalar_params=(h, w))) == {0: 1}


def test_static_dims_that_differ_beside_a_run_time_dim_are_not_candidates() -> None:
    n = Var("n", "int64")
    ins = [Buffer("p0", (n, 4))]
    out = Buffer("out", (n, 8))
    body = loop_nest(["i", "j"], (n, 4), lambda v: Store(out, tuple(v), ins[0][v[0], v[1]] + 1.0))
    assert inplace_inputs(PrimFunc("k", (*ins, out), body, 1, scalar_params=(n,))) == {}


RESIDUAL = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 14, 14), float32], %s: Tensor[(1, 16, 14, 14), float32],
          %w: Tensor[(16, 16, K, K), float32], %a: Tensor[(32, 64), float32], %r: Tensor[(32, 48), float32],
          %u: Tensor[(48, 64), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[P, P, P, P], channels=16, kernel_size=[K, K]);
  %1 = add(%0, %s);
  %2 = nn.dense(%a, %u, units=48);
  %3 = add(%2, %r);
  (nn.relu(%1), %3)
}"""


def _lowered_kernels(k: int, pad: int) -> list[PrimFunc]:
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((16, 16, k, k)).astype("float32"),
              "u": rng.standard_normal((48, 64)).astype("float32")}
    text = RESIDUAL.replace("K", str(k)).replace("P", str(pad))
    return lower(parse(text), BuildOptions(), params).prim_funcs


def test_convolution_and_dense_with_a_residual_epilogue_may_write_over_the_residual() -> None:
    for k, pad in ((1, 0), (3, 1)):  # 1x1 reads its input in place; 3x3 copies it a band at a time
        kernels = {f.name: f for f in _lowered_kernels(k, pad)}
        conv = next(f for name, f in kernels.items() if "conv2d" in name)
        assert [tuple(b.shape) for b in conv.inputs][-1] == (1, 16, 14, 14)
        assert inplace_inputs(conv) == {0: len(conv.inputs) - 1}, (k, pad)
        dense = next(f for name, f in kernels.items() if "dense" in name)
        assert [tuple(b.shape) for b in dense.inputs][-1] == (32, 48)
        assert inplace_inputs(dense) == {0: len(dense.inputs) - 1}


def _staged_row(copy_first: bool, shift: int = 0) -> PrimFunc:
    """out[i, j] = p0[i, j] + 1 as a float16 epilogue stages it: row i of p0 copied into a local
    array, then the row of out stored (or the other way round)."""
    p0, out = Buffer("p0", SHAPE), Buffer("out", SHAPE)
    row = Buffer("row", (8,), scope="local")
    i, j, k = Var("i", "int32"), Var("j", "int32"), Var("k", "int32")
    copy = For(j, as_expr(0), as_expr(8), Store(row, (j,), p0[i, (j + shift) % 8 if shift else j]))
    put = For(k, as_expr(0), as_expr(8), Store(out, (i, k), row[k] + 1.0))
    body = For(i, as_expr(0), as_expr(4), Allocate(row, seq(copy, put) if copy_first else seq(put, copy)))
    return PrimFunc("k", (p0, out), body, 1)


def test_an_input_copied_into_a_local_row_before_the_row_is_stored_may_be_written_over() -> None:
    assert inplace_inputs(_staged_row(copy_first=True)) == {0: 0}


def test_an_input_copied_after_the_output_row_is_stored_is_never_written_over() -> None:
    assert inplace_inputs(_staged_row(copy_first=False)) == {}


def test_an_input_row_copied_from_other_columns_than_stored_is_never_written_over() -> None:
    assert inplace_inputs(_staged_row(copy_first=True, shift=1)) == {}


def test_a_float16_convolution_staged_through_rows_may_still_write_over_its_residual() -> None:
    rng = np.random.default_rng(1)
    for k, pad in ((1, 0), (3, 1)):
        text = RESIDUAL.replace("K", str(k)).replace("P", str(pad)).replace("float32", "float16")
        params = {"w": rng.standard_normal((16, 16, k, k)).astype("float16"),
                  "u": rng.standard_normal((48, 64)).astype("float16")}
        kernels = {f.name: f for f in lower(parse(text), BuildOptions(), params).prim_funcs}
        conv = next(f for name, f in kernels.items() if "conv2d" in name)
        assert any(isinstance(s, Store) and s.buffer.scope == "local" and s.buffer.dtype == "float16"
                   for s in walk_stmts(conv.body)), "the residual is read through a staged row"
        # The data is float16 too (its cast folded into the kernel, which widens it), of the
        # residual's shape: only the residual, read at the stored index, may be written over.
        assert conv.inputs[0].dtype == "float16"
        residual = [b.dtype for b in conv.inputs].index("float16", 1)
        assert inplace_inputs(conv) == {0: residual}, (k, pad)
