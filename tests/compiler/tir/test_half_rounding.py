"""Roundings that a later rounding makes redundant (compiler/tir/half_rounding.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from compiler.driver import BuildOptions, build
from compiler.runtime.module import CompiledModule
from compiler.tir import expr as te
from compiler.tir.analysis import post_order
from compiler.tir.half_rounding import drop_clamped_roundings

F32, F16 = "float32", "float16"
X = te.Buffer("x", (8,), F32)
Y = te.Buffer("y", (8,), F32)


def _rounded(e: te.PrimExpr) -> te.PrimExpr:
    return te.cast(F32, te.cast(F16, e))


def _roundings(e: te.PrimExpr) -> int:
    return sum(1 for n in post_order(e) if isinstance(n, te.Cast) and n.dtype == F16)


def _c(value: float) -> te.PrimExpr:
    return te.const(value, F32)


def test_a_relu_between_a_rounding_and_a_narrowing_reads_the_unrounded_value() -> None:
    value = X[0] * Y[0]
    out = drop_clamped_roundings(te.cast(F16, te.maximum(_rounded(value), _c(0.0))))
    assert _roundings(out) == 1
    assert isinstance(out, te.Cast) and out.dtype == F16
    assert isinstance(out.value, te.Binary) and out.value.op == "max" and out.value.a is value


def test_a_clip_chain_between_two_roundings_keeps_only_the_outer_one() -> None:
    clip = te.maximum(te.minimum(_rounded(X[0] + Y[0]), _c(6.0)), _c(-1.5))
    out = drop_clamped_roundings(_rounded(clip) * 2.0)
    assert _roundings(out) == 1


def test_a_rounding_of_a_rounding_is_one_rounding() -> None:
    assert _roundings(drop_clamped_roundings(_rounded(_rounded(X[0] * 3.0)))) == 1
    assert _roundings(drop_clamped_roundings(te.cast(F16, _rounded(X[0] * 3.0)))) == 1


@pytest.mark.parametrize("case", ["max with -0.0", "min with +0.0", "constant first", "not a float16 value", "NaN",
                                  "not a constant", "an add between", "no outer rounding"])
def test_roundings_that_a_clamp_does_not_commute_with_are_kept(case: str) -> None:
    inner = _rounded(X[0] * Y[0])
    value = {
        "max with -0.0": te.maximum(inner, _c(-0.0)),
        "min with +0.0": te.minimum(inner, _c(0.0)),
        "constant first": te.maximum(_c(0.0), inner),
        "not a float16 value": te.maximum(inner, _c(0.1)),
        "NaN": te.maximum(inner, _c(float("nan"))),
        "not a constant": te.maximum(inner, Y[1]),
        "an add between": te.maximum(inner + 1.0, _c(0.0)),
        "no outer rounding": te.maximum(inner, _c(0.0)),
    }[case]
    root = value if case == "no outer rounding" else te.cast(F16, value)
    assert drop_clamped_roundings(root) is root


MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(N), float16], %y: Tensor[(N), float16]) {
  %0 = nn.relu(multiply(%x, %y));
  %1 = clip(add(%x, %y), a_min=-1.5f, a_max=6f);
  %2 = clip(multiply(%x, %y), a_min=-0.5f, a_max=1f);
  (%0, %1, %2)
}"""


def _cmax(a: np.ndarray, b: float) -> np.ndarray:
    """The generated C's max: `a > b || a != a ? a : b` (so max(-0.0, +0.0) is +0.0)."""
    b16 = np.float16(b)
    return np.where((a > b16) | np.isnan(a), a, b16)


def _cmin(a: np.ndarray, b: float) -> np.ndarray:
    b16 = np.float16(b)
    return np.where((a < b16) | np.isnan(a), a, b16)


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    special = [  # x, y
        (2.0**-12, -2.0**-14),   # a product that rounds to -0.0
        (2.0**-12, 2.0**-14),    # ... and to +0.0
        (-0.0, -0.0), (0.0, -0.0), (0.5, -0.5),
        (1 + 2.0**-10, 1 + 2.0**-10), (2048, 1), (2048, 3),  # ties to even
        (300, 300), (-300, 300), (6e4, 6e4),  # overflow to infinity
        (np.nan, 1), (np.inf, 0), (-np.inf, 2), (np.inf, -np.inf),
        (2.0**-24, 3), (-2.0**-24, 2.0**-3), (5.996, 0.004), (-1.499, -0.002), (0.999, 1.001),
    ]
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 1 << 16, (2, 4096), dtype=np.uint16).view(np.float16)
    scaled = rng.normal(0, 2, (2, 4096)).astype(np.float16)
    x = np.concatenate([np.float16([a for a, _ in special]), bits[0], scaled[0]])
    y = np.concatenate([np.float16([b for _, b in special]), bits[1], scaled[1]])
    return x, y


def test_compiled_clamps_after_float16_ops_round_as_each_op_does_bit_for_bit(tmp_path: Path) -> None:
    x, y = _inputs()
    build(MODEL.replace("N", str(x.size)), tmp_path, BuildOptions())
    kernels = re.findall(r"int32_t tvmgen_default_fused_\w+\([^)]*\) \{.*?\n\}", "\n".join(
        f.read_text() for f in (tmp_path / "src").glob("*_lib[1-9]*.c")), flags=re.S)
    assert kernels and not any("halfround" in k for k in kernels)  # every rounding went into a narrowing
    got = CompiledModule(tmp_path).run({"x": x, "y": y}).outputs

    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    with np.errstate(all="ignore"):
        product, total = (x32 * y32).astype(np.float16), (x32 + y32).astype(np.float16)  # each op rounds
    want = [_cmax(product, 0.0), _cmax(_cmin(total, 6.0), -1.5), _cmax(_cmin(product, 1.0), -0.5)]
    assert any(np.signbit(w[w == 0]).any() for w in want) and any(np.isinf(w).any() for w in want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        finite = ~np.isnan(w)
        np.testing.assert_array_equal(g[finite].view(np.uint16), w[finite].view(np.uint16))
