"""compiler/tir/injective_loops.py: the store loops of injective results, split at the divisions
they read through and tiled where they transpose. The numbers they compute are checked in C by
tests/compiler/backend/test_lower_primitive.py (`reshape_transpose`, `transpose_reshape`)."""

from __future__ import annotations

from compiler.tir import expr as te
from compiler.tir.analysis import post_order, stmt_exprs
from compiler.tir.injective_loops import Loop, store_nest
from compiler.tir.stmt import For, ForKind, Stmt, Store


def loops_of(nest: Stmt) -> list[tuple[str, int, ForKind]]:
    out = []
    while isinstance(nest, For):
        assert isinstance(nest.extent, te.Const)
        out.append((nest.var.name, int(nest.extent.value), nest.kind))
        nest = nest.body
    assert isinstance(nest, Store)
    return out


def the_store(nest: Stmt) -> Store:
    while isinstance(nest, For):
        nest = nest.body
    assert isinstance(nest, Store)
    return nest


def divisions(store: Store) -> list[te.Binary]:
    done: set[int] = set()
    nodes = [n for root in stmt_exprs(store) for n in post_order(root, done)]
    return [n for n in nodes if isinstance(n, te.Binary) and n.op in ("//", "/", "%")]


def nest_for(out_shape: tuple[int, ...], source_shape: tuple[int, ...], index, kinds=None) -> tuple[Stmt, te.Buffer]:
    """The store `out[i...] = src[index(i...)]` inside loops over `out_shape`."""
    out, src = te.Buffer("out", out_shape), te.Buffer("src", source_shape)
    vars_ = [te.Var(f"ax{k}") for k in range(len(out_shape))]
    store = Store(out, tuple(vars_), src[tuple(index(*vars_))])
    kinds = kinds or [ForKind.SERIAL] * len(out_shape)
    return store_nest([Loop(v, e, k) for v, e, k in zip(vars_, out_shape, kinds)], store), src


def test_an_axis_read_through_a_division_is_split_into_two_loops_without_it() -> None:
    # out[i, j] = src[j // 4, i, j % 4]: the heads of attention merged back.
    nest, _ = nest_for((3, 8), (2, 3, 4), lambda i, j: (j // 4, i, j % 4))
    assert loops_of(nest) == [("ax0", 3, ForKind.SERIAL), ("ax1_o", 2, ForKind.SERIAL), ("ax1_i", 4, ForKind.SERIAL)]
    assert divisions(the_store(nest)) == []


def test_a_division_that_does_not_divide_the_extent_keeps_the_loop() -> None:
    nest, _ = nest_for((3, 10), (3, 3, 4), lambda i, j: (j // 4, i, j % 4))
    assert loops_of(nest) == [("ax0", 3, ForKind.SERIAL), ("ax1", 10, ForKind.SERIAL)]


def test_a_transpose_runs_in_square_blocks() -> None:
    # out[i, j] = src[j, i]: the innermost loop reads 32 elements apart, the outer one contiguously.
    nest, _ = nest_for((32, 64), (64, 32), lambda i, j: (j, i), [ForKind.PARALLEL, ForKind.SERIAL])
    assert loops_of(nest) == [("ax0_o", 2, ForKind.PARALLEL), ("ax1_o", 4, ForKind.SERIAL),
                              ("ax0_i", 16, ForKind.SERIAL), ("ax1_i", 16, ForKind.SERIAL)]
    assert divisions(the_store(nest)) == []


def test_a_transpose_whose_extents_no_block_divides_keeps_the_plain_nest() -> None:
    nest, _ = nest_for((30, 50), (50, 30), lambda i, j: (j, i))
    assert loops_of(nest) == [("ax0", 30, ForKind.SERIAL), ("ax1", 50, ForKind.SERIAL)]


def test_a_short_stride_is_not_a_transpose() -> None:
    # Reading 4 elements apart (a channel interleave) stays in the plain order.
    nest, _ = nest_for((16, 16), (16, 4, 4), lambda i, j: (i, j % 4, j // 4))
    assert [name for name, _, _ in loops_of(nest)] == ["ax0", "ax1_o", "ax1_i"]


def test_a_contiguous_copy_is_left_alone() -> None:
    nest, _ = nest_for((8, 32), (8, 32), lambda i, j: (i, j))
    assert loops_of(nest) == [("ax0", 8, ForKind.SERIAL), ("ax1", 32, ForKind.SERIAL)]
