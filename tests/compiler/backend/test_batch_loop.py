"""Running a fixed-shape kernel once per batch row: when the batch is the only unknown dim,
and how loads and stores move to the row."""

from __future__ import annotations

from compiler.backend.batch_loop import batch_rows_only, move_to_row, stand_in
from compiler.tir import expr as te
from compiler.tir.analysis import walk_stmts
from compiler.tir.compute import TensorView
from compiler.tir.stmt import For, Store

N = te.Var("n", "int64")


def buffer(name: str, *shape: int | te.PrimExpr) -> te.Buffer:
    return te.Buffer(name, tuple(shape), "float32")


def test_batch_is_found_when_it_is_the_only_unknown_dim() -> None:
    data, weight, out = buffer("x", N, 3), buffer("w", 4, 3), buffer("y", N, 4)
    views = [TensorView.of_buffer(data), TensorView.of_buffer(weight)]
    assert batch_rows_only(views, [out]) is N


def test_no_batch_when_another_dim_is_unknown_or_the_batch_differs() -> None:
    m = te.Var("m", "int64")
    out = buffer("y", N, 4)
    assert batch_rows_only([TensorView.of_buffer(buffer("x", N, m))], [out]) is None
    assert batch_rows_only([TensorView.of_buffer(buffer("x", m, 4))], [out]) is None
    assert batch_rows_only([], [buffer("y", 2, 4)]) is None


def test_loads_and_stores_of_stand_ins_move_to_the_row() -> None:
    x, y = buffer("x", N, 3), buffer("y", N, 3)
    x1, y1 = stand_in(x, "x_row"), stand_in(y, "y_row")
    assert x1.shape == (1, 3) and y1.shape == (1, 3)
    i, row = te.Var("i", "int32"), te.Var("row", "int32")
    kernel = For(i, te.const(0), te.const(3), Store(y1, (te.const(0), i), x1[0, i] * 2))
    moved = move_to_row(kernel, {x1: x, y1: y}, row)
    (store,) = [s for s in walk_stmts(moved) if isinstance(s, Store)]
    assert store.buffer is y
    load = store.value.a  # type: ignore[attr-defined]  # x[row + 0, i] * 2
    assert isinstance(load, te.Load) and load.buffer is x
