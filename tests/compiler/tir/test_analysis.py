from __future__ import annotations

import math

import pytest

from compiler.diagnostics import UnsupportedError
from compiler.tir.analysis import (
    ExprRewriter,
    expr_equal,
    free_vars,
    io_bytes,
    kernel_workspace_alignment,
    post_order,
    substitute,
    uses_parallel,
    walk_stmts,
    workspace_bytes,
    workspace_layout,
)
from compiler.tir.expr import Binary, Buffer, Const, PrimExpr, Var, binary
from compiler.tir.stmt import Allocate, For, ForKind, LetStmt, PrimFunc, Seq, Stmt, Store, for_range, seq


def func_with(body: Stmt, *params: Buffer, scalars: tuple[Var, ...] = ()) -> PrimFunc:
    return PrimFunc("f", params, body, 0, scalar_params=scalars)


def fill(buf: Buffer) -> Stmt:
    return for_range("i", buf.shape[0], lambda i: Store(buf, (i,), Const(0.0, "float32")))


def test_workspace_layout_places_global_allocations_one_after_another_aligned() -> None:
    a, b, c = Buffer("a", (3,)), Buffer("b", (5,), "float64"), Buffer("c", (1,), "int8")
    local = Buffer("acc", (8,), scope="local")
    body = Allocate(a, seq(fill(a), Allocate(local, fill(local)), Allocate(b, Allocate(c, Seq(())))))
    func = func_with(body)
    # Whatever the model's alignment of intermediates, a kernel's own buffers sit at 64 bytes.
    assert workspace_layout(func) == {a: 0, b: 64, c: 128}
    assert workspace_bytes(func) == 192
    assert workspace_layout(func, alignment=64) == {a: 0, b: 64, c: 128}
    assert workspace_bytes(func, alignment=128) == 384


def test_kernel_workspace_alignment_is_a_cache_line_or_the_model_alignment_if_larger() -> None:
    assert [kernel_workspace_alignment(a) for a in (1, 16, 64, 128)] == [64, 64, 64, 128]
    with pytest.raises(ValueError, match="must be positive"):
        kernel_workspace_alignment(0)


def test_function_without_global_allocations_needs_no_workspace() -> None:
    out = Buffer("out", (4,))
    local = Buffer("acc", (8,), scope="local")
    func = func_with(Allocate(local, fill(out)), out)
    assert workspace_layout(func) == {} and workspace_bytes(func) == 0


def test_dynamic_global_allocation_is_rejected() -> None:
    n = Var("n", "int64")
    tmp = Buffer("tmp", (n,))
    with pytest.raises(UnsupportedError, match="workspace buffer tmp has a dynamic size"):
        workspace_bytes(func_with(Allocate(tmp, Seq(())), scalars=(n,)))


def test_io_bytes_counts_static_parameters() -> None:
    n = Var("n", "int64")
    x, y, dyn = Buffer("x", (2, 3)), Buffer("y", (4,), "int64"), Buffer("d", (n,))
    assert io_bytes(func_with(Seq(()), x, y, dyn, scalars=(n,))) == 2 * 3 * 4 + 4 * 8


def test_uses_parallel_finds_nested_parallel_loops() -> None:
    out = Buffer("out", (4, 4))
    inner = for_range("i", 4, lambda i: for_range("j", 4, lambda j: Store(out, (i, j), Const(0.0, "float32")),
                                                   ForKind.PARALLEL))
    assert uses_parallel(func_with(inner, out))
    assert not uses_parallel(func_with(fill(Buffer("o", (4,)))))


def test_free_vars_excludes_bound_variables_and_includes_shape_dims() -> None:
    n, scale = Var("n", "int64"), Var("scale")
    x = Buffer("x", (n,), "int32")
    body = for_range("i", n, lambda i: LetStmt(Var("t"), i * 2, Store(x, (i,), x[i] * scale)))
    assert free_vars(body) == [n, scale]


def test_free_vars_of_an_expression() -> None:
    a, c = Var("a"), Var("c")
    assert free_vars(a * 3 + c + a) == [a, c]


def test_substitute_replaces_variables_and_keeps_unrelated_nodes() -> None:
    i, j = Var("i"), Var("j")
    e = i * 8 + j
    out = substitute(e, {j: Const(3)})
    assert isinstance(e, Binary) and isinstance(out, Binary)
    assert out.a is e.a and isinstance(out.b, Const)
    assert substitute(e, {Var("k"): Const(1)}) is e


def test_substitute_in_statements() -> None:
    n = Var("n")
    out = Buffer("out", (8,))
    stmt = for_range("i", n, lambda i: Store(out, (i,), Const(1.0, "float32")))
    replaced = substitute(stmt, {n: Const(8)})
    assert isinstance(replaced, For) and isinstance(replaced.extent, Const)
    assert replaced.body is stmt.body


def test_expr_equal_is_structural() -> None:
    i = Var("i")
    assert expr_equal(i * 8 + 1, i * 8 + 1)
    assert not expr_equal(i * 8 + 1, i * 8 + 2)
    assert not expr_equal(i * 8, Var("i") * 8)
    assert expr_equal(Const(math.nan, "float32"), Const(math.nan, "float32"))
    assert not expr_equal(Const(1, "int32"), Const(1, "int64"))


def test_rewriter_maps_a_shared_node_to_one_result() -> None:
    x = Var("x")
    shared = x + 1
    double = binary("*", shared, shared)
    y = Var("y")
    out = ExprRewriter(lambda e: y if e is x else e)(double)
    assert isinstance(out, Binary) and out.a is out.b and out.a is not shared


def test_post_order_walks_deep_chains_iteratively() -> None:
    e: PrimExpr = Var("x", "float32")
    for _ in range(20_000):
        e = Binary("+", e, Const(1.0, "float32"), "float32")
    nodes = list(post_order(e))
    assert nodes[-1] is e and len(nodes) == 40_001


def test_walk_stmts_is_in_program_order() -> None:
    out = Buffer("out", (2,))
    s0 = Store(out, (Const(0),), Const(0.0, "float32"))
    s1 = Store(out, (Const(1),), Const(1.0, "float32"))
    body = Seq((s0, Seq((s1,))))
    assert [s for s in walk_stmts(body) if isinstance(s, Store)] == [s0, s1]
