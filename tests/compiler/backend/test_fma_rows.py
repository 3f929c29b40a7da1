"""A register tile's row step written as a call of the vector helper
(compiler/backend/fma_rows.py): which loops qualify, and the C a product gets."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from compiler.backend.codegen_c import emit_c_module
from compiler.backend.fma_rows import fma_row
from compiler.ops.kernels.gemm import GemmSpec, RowReader, gemm
from compiler.tir import expr as te
from compiler.tir.compute import KernelContext
from compiler.tir.stmt import For, ForKind, PrimFunc, Stmt, Store

ACC = te.Buffer("acc", (96,), "float32", scope="local")
W = te.Buffer("w", (4, 9, 16), "float32")


def row(value: te.PrimExpr | None = None, *, acc: te.Buffer = ACC, offset: int = 16, extent: int = 16,
        kind: ForKind = ForKind.VECTORIZED, j: te.Var | None = None) -> For:
    """`acc[offset + j] += a * w[n, k, j]`, or `value` stored there."""
    j = j or te.Var("j", "int64")
    n, k, a = te.Var("n", "int64"), te.Var("k", "int64"), te.Var("a", "float32")
    cell = (j + offset,)
    stored = value if value is not None else acc[cell] + a * W[n, k, j]
    return For(j, te.const(0, "int64"), te.const(extent, "int64"), Store(acc, cell, stored), kind)


def test_a_tile_row_step_is_recognized_with_its_offset_scale_and_first_weight() -> None:
    loop = row()
    found = fma_row(loop)
    assert found is not None
    assert (found.acc, found.offset, found.width, found.weight.buffer) == (ACC, 16, 16, W)
    assert isinstance(found.scale, te.Var) and found.scale.name == "a"
    assert isinstance(found.weight.indices[-1], te.Const) and found.weight.indices[-1].value == 0


def test_the_scale_may_come_second_and_the_offset_may_be_zero() -> None:
    j, n, a = te.Var("j", "int64"), te.Var("n", "int64"), te.Var("a", "float32")
    loop = For(j, te.const(0, "int64"), te.const(16, "int64"),
               Store(ACC, (j,), ACC[j] + W[n, 0, j] * a), ForKind.VECTORIZED)
    found = fma_row(loop)
    assert found is not None and found.offset == 0 and found.scale is a


def _other_cases() -> list[tuple[str, For]]:
    j, n, a = te.Var("j", "int64"), te.Var("n", "int64"), te.Var("a", "float32")
    half = te.Buffer("h", (16,), "float16")
    global_acc = te.Buffer("g", (96,), "float32")
    return [
        ("not a simd loop", row(kind=ForKind.SERIAL)),
        ("a global accumulator", row(acc=global_acc)),
        ("the weight read across j", row(ACC[(j + 16,)] + a * W[n, j, 0], j=j)),
        ("the scale depends on j", row(ACC[(j + 16,)] + te.cast("float32", j) * W[n, 0, j], j=j)),
        ("a float16 weight widened", row(ACC[(j + 16,)] + a * te.cast("float32", half[j]), j=j)),
        ("another cell added", row(ACC[(j + 32,)] + a * W[n, 0, j], j=j)),
        ("a subtraction", row(ACC[(j + 16,)] - a * W[n, 0, j], j=j)),
    ]


@pytest.mark.parametrize("case", _other_cases(), ids=lambda c: c[0])
def test_other_loops_keep_their_own_form(case: tuple[str, For]) -> None:
    assert fma_row(case[1]) is None


def _product_c(k: Sequence[int]) -> str:
    x, y = te.Buffer("x", (12, *k)), te.Buffer("y", (*k, 32))
    out = te.Buffer("out", (12, 32))

    def store(b: te.PrimExpr, r: te.PrimExpr, c: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        return Store(out, (r, c), te.maximum(value, te.const(0.0)))

    spec = GemmSpec(1, 12, 32, tuple(k), "float32", lambda b, r: RowReader((), lambda ks: x[(r, *ks)]),
                    lambda bb, ks, c: y[(*ks, c)], store, peel_last=False)
    return emit_c_module([PrimFunc("f", (x, y, out), gemm(KernelContext(), spec), num_inputs=2)])


def test_a_product_calls_the_helper_once_per_tile_row_and_includes_it() -> None:
    code = _product_c((3, 16))
    assert code.count("relaycc_fmarow_f32(acc") == 6  # the 6 rows of a 6x16 tile (AVX2)
    assert "void relaycc_fmarow_f32(" in code
