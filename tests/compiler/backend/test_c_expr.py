from __future__ import annotations

import math

import numpy as np
import pytest

from compiler.backend.c_expr import c_literal, code_for_op, strip_parens
from compiler.tir.expr import BINARY_OPS, INTRINSICS, UNARY_OPS


def test_code_for_op_covers_every_operator_and_intrinsic() -> None:
    assert set(code_for_op) == set(BINARY_OPS) | set(UNARY_OPS) | set(INTRINSICS)


@pytest.mark.parametrize("value, dtype, text", [
    (0.1, "float32", "0.1f"),
    (1e-5, "float32", "1e-05f"),
    (3.0, "float32", "3.0f"),
    (-1.5, "float32", "(-1.5f)"),
    (math.inf, "float32", "INFINITY"),
    (-math.inf, "float64", "(-INFINITY)"),
    (math.nan, "float32", "NAN"),
    (0.1, "float64", "0.1"),
    (7, "int32", "7"),
    (-7, "int32", "(-7)"),
    (-(2**31), "int32", "INT32_MIN"),
    (2**32, "int32", "INT64_C(4294967296)"),
    (5, "int64", "INT64_C(5)"),
    (-(2**63), "int64", "INT64_MIN"),
    (3, "uint32", "UINT32_C(3)"),
    (-3, "int8", "((int8_t)-3)"),
    (True, "bool", "1"),
])
def test_literals(value: float, dtype: str, text: str) -> None:
    assert c_literal(value, dtype) == text


def test_float32_literal_reads_back_as_numpys_float32() -> None:
    for value in (0.1, 1 / 3, 2.0**-149, 3.4028234663852886e38, 16777217.0):
        text = c_literal(value, "float32").rstrip("f")
        assert np.float32(float(text)) == np.float32(value)


def test_float16_literal_is_exact() -> None:
    assert c_literal(0.1, "float16") == f"((_Float16){float(np.float16(0.1))!r}f)"


@pytest.mark.parametrize("text, keep_if, stripped", [
    ("(a + b)", "", "a + b"),
    ("(a) + (b)", "", "(a) + (b)"),
    ("((void)x, 0)", "", "((void)x, 0)"),
    ("(f(a, b))", "", "f(a, b)"),
    ("(c ? a : b)", "?", "(c ? a : b)"),
    ("x", "", "x"),
])
def test_strip_parens_keeps_meaning(text: str, keep_if: str, stripped: str) -> None:
    assert strip_parens(text, keep_if) == stripped


def test_float_max_is_a_nan_propagating_helper_and_int_division_is_guarded() -> None:
    assert code_for_op["max"](["a", "b"], "float32") == "relaycc_max_f32(a, b)"
    assert code_for_op["//"](["a", "b"], "int64") == "relaycc_floordiv_i64(a, b)"
    assert code_for_op["//"](["a", "b"], "uint32") == "relaycc_truncdiv_u32(a, b)"
    assert code_for_op["tdiv"](["a", "b"], "int32") == "relaycc_truncdiv_i32(a, b)"


def test_math_functions_follow_the_dtype() -> None:
    assert code_for_op["exp"](["x"], "float32") == "relaycc_exp_f32(x)"
    assert code_for_op["erf"](["x"], "float32") == "relaycc_erf_f32(x)"
    assert code_for_op["tanh"](["x"], "float32") == "relaycc_tanh_f32(x)"
    assert code_for_op["log"](["x"], "float32") == "logf(x)"
    assert code_for_op["exp"](["x"], "float16") == "((_Float16)expf((float)x))"
    assert code_for_op["exp"](["x"], "float64") == "exp(x)"
    assert code_for_op["exp"](["x"], "int32") == "((int32_t)exp((double)x))"
    assert code_for_op["round"](["x"], "float32") == "roundf(x)"
    assert code_for_op["sigmoid"](["x"], "float32") == "(1.0f / (1.0f + relaycc_exp_f32(-x)))"
    assert code_for_op["floor"](["i"], "int32") == "i"
