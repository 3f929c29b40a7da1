from __future__ import annotations

import math

import numpy as np

from compiler.tir.analysis import expr_equal, free_vars, post_order, substitute
from compiler.tir.expr import (
    Binary,
    Buffer,
    Cast,
    Const,
    PrimExpr,
    Select,
    Var,
    binary,
    intrin,
    maximum,
    minimum,
)
from compiler.tir.simplify import EMPTY, const_int_bound, simplify, simplify_expr, split_constant_offset
from compiler.tir.stmt import Allocate, Evaluate, For, ForKind, IfThenElse, LetStmt, Seq, Store, for_range, seq


def b(op: str, x: PrimExpr | int, y: PrimExpr | int) -> Binary:
    """A Binary node built without the constructor-time folding of `binary`."""
    ex = x if isinstance(x, PrimExpr) else Const(x, "int32")
    ey = y if isinstance(y, PrimExpr) else Const(y, "int32")
    return Binary(op, ex, ey, "bool" if op in ("<", "<=", ">", ">=", "==", "!=") else ex.dtype)


def is_const(e: PrimExpr, value: object, dtype: str) -> bool:
    return isinstance(e, Const) and e.dtype == dtype and e.value == value


# -- expressions ---------------------------------------------------------------------------------


def test_integer_constants_fold_with_c_and_floor_semantics() -> None:
    assert is_const(simplify_expr(b("+", 2, 3)), 5, "int32")
    assert is_const(simplify_expr(b("//", -7, 2)), -4, "int32")
    assert is_const(simplify_expr(b("%", -7, 2)), 1, "int32")
    assert is_const(simplify_expr(b("tdiv", -7, 2)), -3, "int32")
    assert is_const(simplify_expr(b("tmod", -7, 2)), -1, "int32")
    assert is_const(simplify_expr(b("<", 2, 3)), True, "bool")


def test_integer_folding_wraps_to_the_dtype() -> None:
    assert is_const(simplify_expr(b("+", 2**31 - 1, 1)), -(2**31), "int32")


def test_division_by_zero_is_not_folded() -> None:
    e = b("//", 7, 0)
    assert simplify_expr(e) is e


def test_round_folds_halves_away_from_zero_like_c() -> None:
    for value, expected in ((2.5, 3.0), (-2.5, -3.0), (0.5, 1.0), (1.4999, 1.0)):
        assert is_const(simplify_expr(intrin("round", Const(value, "float64"))), expected, "float64")


def test_float_constants_fold_in_their_own_precision() -> None:
    e = Binary("+", Const(0.1, "float32"), Const(0.2, "float32"), "float32")
    folded = simplify_expr(e)
    assert isinstance(folded, Const) and folded.value == float(np.float32(0.1) + np.float32(0.2))
    assert folded.value != 0.1 + 0.2


def test_float_max_of_nan_folds_to_nan() -> None:
    folded = simplify_expr(Binary("max", Const(math.nan, "float32"), Const(1.0, "float32"), "float32"))
    assert isinstance(folded, Const) and math.isnan(folded.value)


def test_intrinsic_of_constant_folds() -> None:
    folded = simplify_expr(intrin("sqrt", Const(4.0, "float32")))
    assert is_const(folded, 2.0, "float32")


def test_integer_identities() -> None:
    x = Var("x")
    assert simplify_expr(b("+", x, 0)) is x
    assert simplify_expr(b("+", 0, x)) is x
    assert simplify_expr(b("-", x, 0)) is x
    assert simplify_expr(b("*", x, 1)) is x
    assert is_const(simplify_expr(b("*", x, 0)), 0, "int32")
    assert simplify_expr(b("//", x, 1)) is x
    assert is_const(simplify_expr(b("%", x, 1)), 0, "int32")
    assert is_const(simplify_expr(b("-", x, x)), 0, "int32")
    assert simplify_expr(b("min", x, x)) is x
    assert simplify_expr(b("max", x, x)) is x


def test_multiple_divided_by_its_factor_is_the_operand() -> None:
    a = Var("a")
    assert simplify_expr(b("//", b("*", a, 8), 8)) is a
    assert is_const(simplify_expr(b("%", b("*", a, 8), 8)), 0, "int32")
    quarter = simplify_expr(b("//", b("*", a, 8), 2))
    assert expr_equal(quarter, b("*", a, 4))


def test_row_major_index_splits_back_into_its_parts_with_loop_ranges() -> None:
    i, j = Var("i"), Var("j")
    flat = b("+", b("*", i, 8), j)
    ranges = {i: (0, 3), j: (0, 7)}
    assert simplify_expr(b("//", flat, 8), ranges) is i
    assert simplify_expr(b("%", flat, 8), ranges) is j


def test_without_ranges_only_the_divisible_part_is_split_off() -> None:
    i, j = Var("i"), Var("j")
    flat = b("+", b("*", i, 8), j)
    assert expr_equal(simplify_expr(b("//", flat, 8)), b("+", i, b("//", j, 8)))
    assert expr_equal(simplify_expr(b("%", flat, 8)), b("%", j, 8))


def test_truncating_division_of_non_negative_values_uses_floor_rules() -> None:
    i, j = Var("i"), Var("j")
    flat = b("+", b("*", i, 8), j)
    assert simplify_expr(b("tdiv", flat, 8), {i: (0, 3), j: (0, 7)}) is i
    negative = b("tdiv", flat, 8)
    assert simplify_expr(negative, {i: (-3, 3), j: (0, 7)}) is negative


def test_nested_floor_divisions_merge() -> None:
    x = Var("x")
    assert expr_equal(simplify_expr(b("//", b("//", x, 4), 2)), b("//", x, 8))
    assert expr_equal(simplify_expr(b("%", b("%", x, 8), 4)), b("%", x, 4))


def test_constant_offsets_merge() -> None:
    x = Var("x")
    assert expr_equal(simplify_expr(b("+", b("+", x, 3), 4)), b("+", x, 7))
    assert simplify_expr(b("-", b("+", x, 3), 3)) is x
    assert expr_equal(simplify_expr(b("+", x, -2)), b("-", x, 2))
    assert expr_equal(simplify_expr(b("*", b("*", x, 3), 4)), b("*", x, 12))


def test_comparisons_and_min_max_fold_with_ranges() -> None:
    i, n = Var("i"), Var("n")
    ranges = {i: (0, 3)}
    assert is_const(simplify_expr(b("<", i, 4), ranges), True, "bool")
    assert is_const(simplify_expr(b(">=", i, 4), ranges), False, "bool")
    kept = b("<", i, 3)
    assert simplify_expr(kept, ranges) is kept
    assert simplify_expr(b("min", i, 10), ranges) is i
    assert simplify_expr(b("max", i, 0), ranges) is i
    unknown = simplify_expr(b("min", i, n), ranges)
    assert isinstance(unknown, Binary) and unknown.op == "min"


def test_float_identities_are_limited_to_exact_ones() -> None:
    x = Var("x", "float32")
    one, zero = Const(1.0, "float32"), Const(0.0, "float32")
    assert simplify_expr(Binary("*", x, one, "float32")) is x
    assert simplify_expr(Binary("/", x, one, "float32")) is x
    assert simplify_expr(Binary("-", x, zero, "float32")) is x
    times_zero = Binary("*", x, zero, "float32")  # NaN * 0 is NaN
    assert simplify_expr(times_zero) is times_zero


def test_select_with_constant_condition_picks_a_branch() -> None:
    x, y = Var("x", "float32"), Var("y", "float32")
    assert simplify_expr(Select(Const(True, "bool"), x, y, "float32")) is x
    assert simplify_expr(Select(b("<", 3, 2), x, y, "float32")) is y
    assert simplify_expr(Select(b("<", Var("i"), 2), x, x, "float32")) is x


def test_casts_fold_and_disappear_when_trivial() -> None:
    assert is_const(simplify_expr(Cast(Const(2.7, "float32"), "int32")), 2, "int32")
    assert is_const(simplify_expr(Cast(Const(-2.7, "float32"), "int32")), -2, "int32")
    assert is_const(simplify_expr(Cast(Const(3, "int32"), "float32")), 3.0, "float32")
    assert is_const(simplify_expr(Cast(Const(0.5, "float32"), "bool")), True, "bool")
    x = Var("x")
    assert simplify_expr(Cast(x, "int32")) is x


def test_logic_with_constants_simplifies() -> None:
    c = b("<", Var("i"), 3)
    assert simplify_expr(Binary("&&", Const(True, "bool"), c, "bool")) is c
    assert is_const(simplify_expr(Binary("&&", c, Const(False, "bool"), "bool")), False, "bool")
    assert is_const(simplify_expr(Binary("||", c, Const(True, "bool"), "bool")), True, "bool")


def test_shared_subexpression_is_simplified_once() -> None:
    x = Var("x")
    shared = b("+", b("+", x, 1), 2)
    out = simplify_expr(b("*", shared, shared))
    assert isinstance(out, Binary) and out.a is out.b


def test_deep_expression_chain_simplifies_without_recursion() -> None:
    e: PrimExpr = Var("x", "float32")
    for _ in range(20_000):
        e = Binary("+", e, Const(0.5, "float32"), "float32")
    assert simplify_expr(e) is e


def test_const_int_bound_of_index_arithmetic() -> None:
    i, j = Var("i"), Var("j")
    ranges = {i: (0, 3), j: (0, 7)}
    assert const_int_bound(b("+", b("*", i, 8), j), ranges) == (0, 31)
    assert const_int_bound(b("-", i, j), ranges) == (-7, 3)
    assert const_int_bound(b("%", Var("k"), 5)) == (0, 4)
    assert const_int_bound(b("//", i, 2), ranges) == (0, 1)
    assert const_int_bound(minimum(i, Var("n")), ranges) == (None, 3)
    assert const_int_bound(maximum(i, Var("n")), ranges) == (0, None)
    assert const_int_bound(Var("u", "uint8")) == (0, None)


# -- statements ----------------------------------------------------------------------------------


def store(buf: Buffer, idx: PrimExpr | int, value: float = 1.0) -> Store:
    return Store(buf, (Const(idx) if isinstance(idx, int) else idx,), Const(value, "float32"))


def test_loop_of_extent_zero_disappears() -> None:
    out = Buffer("out", (4,))
    assert simplify(for_range("i", 0, lambda i: store(out, i))) is EMPTY


def test_loop_of_extent_one_becomes_its_body_at_begin() -> None:
    out = Buffer("out", (4,))
    i = Var("i")
    loop = For(i, Const(2), Const(1), Store(out, (binary("+", i, 1),), Const(1.0, "float32")))
    result = simplify(loop)
    assert isinstance(result, Store) and is_const(result.indices[0], 3, "int32")


def test_claimed_loop_of_extent_one_stays_a_loop() -> None:
    # Its one iteration runs once in all, not once per iteration of the parallel loop around it.
    out = Buffer("out", (4,))
    loop = For(Var("i"), Const(0), Const(1), Store(out, (Const(0),), Const(1.0, "float32")), ForKind.CLAIMED)
    assert simplify(loop) is loop


def test_nested_single_values_are_all_replaced_in_the_innermost_loop() -> None:
    # i = 2; j = 3 * i; k = 5 (a let of a constant); then a real loop over m: out[i + j + k + m].
    out = Buffer("out", (32,))
    i, j, k, m = Var("i"), Var("j"), Var("k"), Var("m")
    store_ = Store(out, (b("+", b("+", b("+", i, j), k), m),), Const(1.0, "float32"))
    inner = LetStmt(k, Const(5), For(m, Const(0), Const(4), store_))
    nest = For(i, Const(2), Const(1), For(j, b("*", i, 3), Const(1), inner))
    result = simplify(nest)
    assert isinstance(result, For) and result.var is m and isinstance(result.body, Store)
    index = result.body.indices[0]
    assert free_vars(index) == [m]
    assert all(is_const(simplify_expr(substitute(index, {m: Const(v)})), 13 + v, "int32") for v in range(4))


def test_nested_sequences_flatten_and_empty_parts_vanish() -> None:
    out = Buffer("out", (4,))
    s0, s1, s2 = store(out, 0), store(out, 1), store(out, 2)
    nested = Seq((s0, Seq((s1, for_range("i", 0, lambda i: store(out, i)))), Seq((s2,))))
    result = simplify(nested)
    assert isinstance(result, Seq) and result.stmts == (s0, s1, s2)


def test_long_sequence_is_simplified_without_recursion() -> None:
    out = Buffer("out", (4,))
    stmts = tuple(store(out, k % 4) for k in range(5_000))
    s = Seq(stmts)
    assert simplify(s) is s


def test_unchanged_statement_is_returned_as_is() -> None:
    out = Buffer("out", (4,))
    loop = for_range("i", 4, lambda i: store(out, i), ForKind.PARALLEL)
    assert simplify(loop) is loop


def test_if_with_constant_condition_keeps_one_branch() -> None:
    out = Buffer("out", (4,))
    then, other = store(out, 0), store(out, 1)
    assert simplify(IfThenElse(b("<", 1, 2), then, other)) is then
    assert simplify(IfThenElse(b(">", 1, 2), then, other)) is other
    assert simplify(IfThenElse(b(">", 1, 2), then)) is EMPTY


def test_condition_known_from_loop_range_removes_the_branch() -> None:
    out = Buffer("out", (4,))
    loop = for_range("i", 4, lambda i: IfThenElse(b("<", i, 4), Store(out, (i,), Const(1.0, "float32"))))
    result = simplify(loop)
    assert isinstance(result, For) and isinstance(result.body, Store)


def test_allocate_with_nothing_left_to_do_disappears() -> None:
    out, tmp = Buffer("out", (4,)), Buffer("tmp", (4,))
    assert simplify(Allocate(tmp, seq(for_range("i", 0, lambda i: store(out, i))))) is EMPTY


def test_evaluate_of_a_constant_disappears() -> None:
    assert simplify(Evaluate(Const(0))) is EMPTY


def test_python_numbers_in_statements_become_constants() -> None:
    out = Buffer("out", (4,))
    result = simplify(Store(out, (1,), 2.5))  # type: ignore[arg-type]  # builders may leave numbers
    assert isinstance(result, Store) and is_const(result.indices[0], 1, "int32")
    assert is_const(result.value, 2.5, "float32")


# -- constant offsets ----------------------------------------------------------------------------


def evaluate(e: PrimExpr, values: dict[Var, int]) -> int:
    folded = simplify_expr(substitute(e, {v: Const(x, v.dtype) for v, x in values.items()}))  # type: ignore[arg-type]
    assert isinstance(folded, Const)
    return int(folded.value)


def test_constant_offsets_are_gathered_through_sums_and_constant_factors() -> None:
    i, j, k = Var("i", "int64"), Var("j", "int64"), Var("k", "int64")
    c = lambda v: Const(v, "int64")  # noqa: E731
    # ((i * 196 + (j + 3)) * 16 + k) - 2 == (i * 196 + j) * 16 + k + 46
    e = b("-", b("+", b("*", b("+", b("*", i, c(196)), b("+", j, c(3))), c(16)), k), c(2))
    rest, offset = split_constant_offset(e)
    assert offset == 46
    assert rest is not None and not any(isinstance(x, Const) and x.value in (3, 2) for x in post_order(rest))
    values = {i: 5, j: 7, k: 11}
    assert evaluate(rest, values) + offset == evaluate(e, values)


def test_constant_offsets_wrap_in_the_index_dtype_and_stop_at_casts_and_other_ops() -> None:
    i = Var("i", "int32")
    rest, offset = split_constant_offset(b("*", b("+", i, 2**30), 4))
    assert offset == 0  # 2**32 wraps to 0 in int32
    cast_ = Cast(b("+", i, 1), "int64")
    assert split_constant_offset(cast_) == (cast_, 0)
    div = b("//", b("+", i, 8), 4)
    assert split_constant_offset(div) == (div, 0)
    assert split_constant_offset(Const(9, "int32")) == (None, 9)
    minus = b("-", 5, i)
    assert split_constant_offset(minus) == (minus, 0)
