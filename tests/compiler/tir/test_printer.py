from __future__ import annotations

from compiler.tir.expr import Binary, Buffer, CallExtern, Const, PrimExpr, Var, cast, intrin, select
from compiler.tir.printer import expr_text, stmt_text, tir_text
from compiler.tir.stmt import Allocate, Evaluate, ForKind, IfThenElse, LetStmt, PrimFunc, Store, for_range, seq


def test_tir_text_shows_signature_loops_and_stores() -> None:
    n = Var("n", "int64")
    a, b, c = Buffer("A", (n,)), Buffer("B", (n,)), Buffer("C", (n,))
    body = for_range("i", n, lambda i: Store(c, (i,), a[i] + b[i]), ForKind.PARALLEL)
    func = PrimFunc("add", (a, b, c), body, 2, scalar_params=(n,))
    assert tir_text(func) == (
        "primfn add(A: float32[n], B: float32[n], n: int64) -> (C: float32[n]) {\n"
        "  parallel for i in [0, n) {\n"
        "    C[i] = (A[i] + B[i])\n"
        "  }\n"
        "}\n"
    )


def test_statements_print_allocations_lets_branches_and_calls() -> None:
    out = Buffer("out", (4,))
    tmp = Buffer("tmp", (4,), scope="local")
    t = Var("t")
    body = Allocate(tmp, seq(
        LetStmt(t, Const(2), IfThenElse(t > 1, Store(tmp, (Const(0),), Const(1.5, "float32")),
                                        Store(tmp, (Const(0),), Const(0.0, "float32")))),
        Evaluate(CallExtern("helper", (tmp, out, Const(4)))),
    ))
    assert stmt_text(body) == (
        "allocate tmp: float32[4] local\n"
        "let t: int32 = 2\n"
        "if (t > 1) {\n"
        "  tmp[0] = 1.5\n"
        "} else {\n"
        "  tmp[0] = 0.0\n"
        "}\n"
        "call_extern('helper', tmp, out, 4)"
    )


def test_expressions_print_intrinsics_selects_and_casts() -> None:
    x = Var("x", "float32")
    e = select(x > 0.0, intrin("exp", x), cast("float32", Var("k")))
    assert expr_text(e) == "select((x > 0.0), exp(x), float32(k))"
    assert expr_text(Binary("min", Var("i"), Const(3, "int64"), "int32")) == "min(i, int64(3))"


def test_distinct_variables_with_one_name_are_told_apart() -> None:
    out = Buffer("out", (4, 3), "int32")
    body = for_range("i", 4, lambda outer: for_range("i", 3, lambda inner: Store(out, (outer, inner), outer + inner)))
    text = stmt_text(body)
    assert "for i_1 in [0, 3)" in text and "out[i, i_1] = (i + i_1)" in text


def test_deep_expression_prints_without_recursion() -> None:
    e: PrimExpr = Var("x", "float32")
    for _ in range(20_000):
        e = Binary("+", e, Const(1.0, "float32"), "float32")
    assert expr_text(e).count("+") == 20_000
