"""Helpers shared by the op families: dims known at run time, reshapes over them and the
batch-rows predicates."""

from __future__ import annotations

import pytest

from compiler.diagnostics import UnsupportedError
from compiler.ir.attrs import Attrs
from compiler.ops.common import batch_first, reshape_index_dynamic, rows_unless_axis_zero, same_dim
from compiler.tir import expr as te
from compiler.tir.analysis import substitute
from compiler.tir.simplify import simplify_expr

N = te.Var("n", "int64")


def test_same_dim_compares_ints_and_expressions_after_simplification() -> None:
    assert same_dim(4, 4) and not same_dim(4, 5)
    assert same_dim(N, N) and same_dim(N + 2, 2 + N) and not same_dim(N, N + 1)
    assert not same_dim(N, 4)


def test_reshape_keeps_a_shared_unknown_batch_and_reshapes_the_rest() -> None:
    b, i = te.Var("b", "int32"), te.Var("i", "int32")
    index = reshape_index_dynamic((b, i), (N, 6), (N, 2, 3), "nn.batch_flatten")
    assert index[0] is b and len(index) == 3


@pytest.mark.parametrize("n", [1, 3])
def test_reshape_of_an_unknown_dim_it_cannot_follow_goes_through_the_flat_position(n: int) -> None:
    i = te.Var("i", "int32")
    index = reshape_index_dynamic((i,), (N * 6,), (N, 6), "reshape")
    for flat in range(n * 6):
        values = {i: te.const(flat), N: te.const(n, "int64")}
        assert [fold(substitute(d, values)) for d in index] == [flat // 6, flat % 6]


def fold(expr: te.PrimExpr) -> int:
    """The value of an integer expression of constants."""
    expr = simplify_expr(expr)
    assert isinstance(expr, te.Const), expr
    return int(expr.value)


def test_batch_first_reads_every_named_layout() -> None:
    rows = batch_first("data_layout", "out_layout")
    assert rows(Attrs({"data_layout": "NCHW", "out_layout": ""}), 4)
    assert not rows(Attrs({"data_layout": "CHWN", "out_layout": ""}), 4)
    assert not rows(Attrs({"data_layout": "NCHW", "out_layout": "CNHW"}), 4)


def test_rows_are_independent_unless_the_axis_is_the_first() -> None:
    assert rows_unless_axis_zero(Attrs({"axis": -1}), 2)
    assert not rows_unless_axis_zero(Attrs({"axis": 0}), 2)
    assert not rows_unless_axis_zero(Attrs({"axis": -2}), 2)
    assert not rows_unless_axis_zero(Attrs({"axis": 0}), 1)


def test_static_dims_names_the_op_and_shows_unknown_dims_as_question_marks() -> None:
    from compiler.ops.common import static_dims

    assert static_dims((2, 3), "nn.pad") == (2, 3)
    with pytest.raises(UnsupportedError, match=r"nn.pad: the loop lowering needs static shapes, got \(\?, 3\)"):
        static_dims((N, 3), "nn.pad")
