"""A float16 epilogue staged through row arrays: which loops are staged, into what, and a
compiled float16 conv + scale + shift + residual add + relu against numpy's float16 rounding
at each op, on values that hit ties, half subnormals, overflow and NaN."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.driver import BuildOptions, build
from compiler.ops.kernels.half_stages import NARROW, ROUND, WIDEN, stage_half_conversions
from compiler.runtime.module import CompiledModule
from compiler.tir import expr as te
from compiler.tir.analysis import post_order, stmt_exprs, walk_stmts
from compiler.tir.compute import KernelContext
from compiler.tir.stmt import For, ForKind, IfThenElse, Stmt, Store

W = 16


def _rounded(x: te.PrimExpr) -> te.PrimExpr:
    return te.cast("float32", te.cast("float16", x))


def _loop(value_of, out_dtype: str = "float16", cond_of=None) -> For:
    """for j in [0, 16): out[j * 5] = value_of(j), under `cond_of(j)` when given."""
    out = te.Buffer("out", (W * 5,), out_dtype)
    j = te.Var("j", "int64")
    value = value_of(j)
    store: Stmt = Store(out, (j * 5,), te.cast(out_dtype, value))
    if cond_of is not None:
        store = IfThenElse(cond_of(j), store)
    return For(j, te.const(0, "int64"), te.const(W, "int64"), store, ForKind.VECTORIZED)


def _calls(stmt: Stmt) -> list[str]:
    return [e.name for s in walk_stmts(stmt) for root in stmt_exprs(s) for e in post_order(root)
            if isinstance(e, te.CallExtern)]


ACC = te.Buffer("acc", (W,), "float32", scope="local")
SCALE = te.Buffer("scale", (W,), "float32")
RESIDUAL = te.Buffer("residual", (W * 5,), "float16")


def test_each_rounding_and_half_load_becomes_one_row_conversion() -> None:
    def value(j: te.Var) -> te.PrimExpr:
        scaled = _rounded(_rounded(ACC[j]) * SCALE[j])
        return te.maximum(_rounded(scaled + te.cast("float32", RESIDUAL[j * 5])), te.const(0.0, "float32"))

    staged = stage_half_conversions(KernelContext(), _loop(value))
    # The residual add's rounding is left out: the narrowing after the relu rounds the same bits
    # (compiler/tir/half_rounding.py).
    assert _calls(staged) == [ROUND, ROUND, WIDEN, NARROW]
    stores = [s for s in walk_stmts(staged) if isinstance(s, Store)]
    assert stores[-1].buffer.name == "out" and isinstance(stores[-1].value, te.Load)  # a 16-bit copy of the row


def test_a_value_rounded_before_a_relu_and_after_it_is_rounded_once() -> None:
    def value(j: te.Var) -> te.PrimExpr:
        return _rounded(te.maximum(_rounded(ACC[j]), te.const(0.0, "float32")))  # relu between two roundings

    assert _calls(stage_half_conversions(KernelContext(), _loop(value))) == [NARROW]


def test_a_rounding_of_a_value_already_in_float16_is_not_staged_again() -> None:
    def value(j: te.Var) -> te.PrimExpr:
        larger = te.maximum(_rounded(ACC[j]), _rounded(ACC[j] * SCALE[j]))  # a float16 value already
        return _rounded(larger) * 2.0

    assert _calls(stage_half_conversions(KernelContext(), _loop(value))) == [ROUND, ROUND, NARROW]


def test_a_condition_free_of_the_loop_guards_the_whole_staged_row() -> None:
    y = te.Var("y", "int64")
    staged = stage_half_conversions(KernelContext(), _loop(lambda j: _rounded(ACC[j]) * 2.0, cond_of=lambda j: y >= 3))
    assert isinstance(staged, IfThenElse) and _calls(staged.then_case) == [ROUND, NARROW]


@pytest.mark.parametrize("case", ["float32", "select", "condition on j", "extent not constant"])
def test_loops_without_a_float16_conversion_or_that_cannot_be_staged_are_returned_as_they_are(case: str) -> None:
    if case == "float32":
        loop = _loop(lambda j: ACC[j] * SCALE[j], out_dtype="float32")
    elif case == "select":
        loop = _loop(lambda j: te.Select(j < 3, _rounded(ACC[j]), SCALE[j], "float32"))
    elif case == "condition on j":
        loop = _loop(lambda j: _rounded(ACC[j]), cond_of=lambda j: j < 8)
    else:
        n = te.Var("n", "int64")
        inner = _loop(lambda j: _rounded(ACC[j]))
        loop = For(inner.var, inner.begin, n, inner.body, inner.kind)
    assert stage_half_conversions(KernelContext(), loop) is loop


MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 6, 7), float16], %w: Tensor[(16, 16, K, K), float16], %s: Tensor[(16, 1, 1), float16],
          %b: Tensor[(16, 1, 1), float16], %r: Tensor[(1, 16, 6, 7), float16]) {
  %0 = nn.conv2d(%x, %w, padding=[P, P, P, P], channels=16, kernel_size=[K, K]);
  nn.relu(add(add(multiply(%0, %s), %b), %r))
}"""


def _numpy_float16_program(x: np.ndarray, w: np.ndarray, s: np.ndarray, b: np.ndarray, r: np.ndarray,
                           pad: int) -> np.ndarray:
    k = w.shape[-1]
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(2, 3))
    conv = np.einsum("nchwij,ocij->nohw", windows, w.astype(np.float64)).astype(np.float16)  # exact sums
    with np.errstate(over="ignore", invalid="ignore"):
        return np.maximum(((conv * s) + b) + r, np.float16(0))


@pytest.mark.parametrize("k, pad", [(1, 0), (3, 1)])
def test_a_float16_residual_chain_rounds_each_op_as_numpy_does_bit_for_bit(tmp_path: Path, k: int, pad: int) -> None:
    rng = np.random.default_rng(7)
    # Small integers: every conv sum is exact in float32, whatever the order of the additions.
    x = rng.integers(-3, 4, (1, 16, 6, 7)).astype(np.float16)
    w = rng.integers(-2, 3, (16, 16, k, k)).astype(np.float16)
    # Odd integers times scales whose last mantissa bit is set make exact ties at the product's
    # rounding; 2^-20 (and a residual of subnormals) makes half subnormals, 8192 overflows.
    s = np.float16([1 + 2.0**-10, 3 + 2.0**-8, 1 / 3, 2.0**-20, 8192, -1.5, 0.1, 7, 2.0**-14, 1, -2.0**-18, 5.5,
                    1 + 3 * 2.0**-10, 0.75, -0.3, 2]).reshape(16, 1, 1)
    b = np.float16([0.5, -0.25, 2.0**-24, 0, 1e-3, 3, -7, 0.125, 2.0**-15, -1, 0, 6e4, 0.2, -0.1, 2.0**-23, 1]
                   ).reshape(16, 1, 1)
    r = rng.normal(0, 3, (1, 16, 6, 7)).astype(np.float16)
    r[0, 2, 1, :3] = [np.inf, -np.inf, np.nan]
    r[0, 5, 3, 2:5] = [6e4, -6e4, 2.0**-24]
    r[0, 3] = rng.integers(-3, 4, (6, 7)) * np.float16(2.0**-24)
    with np.errstate(over="ignore", invalid="ignore"):
        conv = _numpy_float16_program(x, w, np.float16(1).reshape(1, 1, 1), np.float16(0), np.float16(0), pad)
        products = np.abs(conv.astype(np.float64) * s)
        below = products.astype(np.float16)
        ulp = np.spacing(below).astype(np.float64)
        assert np.any(np.abs(products - below.astype(np.float64)) == ulp / 2), "no ties"

    text = MODEL.replace("K", str(k)).replace("P", str(pad))
    build(text, tmp_path, BuildOptions(), {"w": w, "s": s, "b": b})
    assert any("relaycc_halfroundn_f32(" in f.read_text() for f in (tmp_path / "src").glob("*.c"))
    (got,) = CompiledModule(tmp_path).run({"x": x, "r": r}).outputs

    want = _numpy_float16_program(x, w, s, b, r, pad)
    finite = np.abs(want[np.isfinite(want)])
    assert np.isinf(want).any() and np.isnan(want).any() and ((finite > 0) & (finite < 2.0**-14)).any()
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
