"""Running a fixed-shape kernel once per batch row, for a batch dim known only at run time.

Hand-tiled kernels (convolutions, pools, softmax) specialize on their extents. When the only
unknown dim of a call is its batch, axis 0 of the result and of the inputs that carry it, and
the op declares that each result row depends only on the same row of those inputs
(`extras["batch_rows"](attrs)`), the kernel is built for a batch of one on stand-in buffers,
and its loads and stores of the stand-ins are moved to row `b` of the real buffers inside a loop
over `b`. The kernel's own code is the static one, so it keeps its tiling and vectorization.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from compiler.tir import expr as te
from compiler.tir.analysis import ExprRewriter, map_stmt
from compiler.tir.compute import TensorView
from compiler.tir.stmt import Allocate, Evaluate, For, ForKind, IfThenElse, LetStmt, Seq, Stmt, Store


def batch_rows_only(inputs: Sequence[TensorView], outputs: Sequence[te.Buffer]) -> te.PrimExpr | None:
    """The batch extent when it is the only unknown dim: axis 0 of every output, and of each
    input that has any unknown dim; None otherwise."""
    batch = outputs[0].shape[0] if outputs and outputs[0].shape else None
    if not isinstance(batch, te.PrimExpr):
        return None
    shapes = [b.shape for b in outputs] + [v.shape for v in inputs if not _static(v.shape)]
    for shape in shapes:
        if not shape or shape[0] is not batch or not _static(shape[1:]):
            return None
    return batch


def stand_in(buffer: te.Buffer, name: str) -> te.Buffer:
    """A buffer like `buffer` with a batch of one."""
    return te.Buffer(name, (1, *buffer.shape[1:]), buffer.dtype, buffer.scope)


def move_to_row(stmt: Stmt, real: Mapping[te.Buffer, te.Buffer], row: te.Var) -> Stmt:
    """`stmt` with every load and store of a stand-in buffer done on row `row` of its real
    buffer (the stand-in's batch index is 0, so the real index is `row` plus it)."""

    def rewrite(node: te.PrimExpr) -> te.PrimExpr:
        if isinstance(node, te.Load) and node.buffer in real:
            return te.Load(real[node.buffer], (row + node.indices[0], *node.indices[1:]), node.dtype)
        return node

    return _move_stores(map_stmt(stmt, ExprRewriter(rewrite)), real, row)


def batch_loop(row: te.Var, batch: te.PrimExpr, body: Stmt) -> For:
    return For(row, te.const(0), batch, body, ForKind.SERIAL)


def _move_stores(stmt: Stmt, real: Mapping[te.Buffer, te.Buffer], row: te.Var) -> Stmt:
    if isinstance(stmt, Store):
        if stmt.buffer not in real:
            return stmt
        return Store(real[stmt.buffer], (row + stmt.indices[0], *stmt.indices[1:]), stmt.value)
    if isinstance(stmt, Seq):
        return Seq(tuple(_move_stores(s, real, row) for s in stmt.stmts))
    if isinstance(stmt, For):
        return For(stmt.var, stmt.begin, stmt.extent, _move_stores(stmt.body, real, row), stmt.kind)
    if isinstance(stmt, Allocate):
        return Allocate(stmt.buffer, _move_stores(stmt.body, real, row))
    if isinstance(stmt, LetStmt):
        return LetStmt(stmt.var, stmt.value, _move_stores(stmt.body, real, row))
    if isinstance(stmt, IfThenElse):
        other = None if stmt.else_case is None else _move_stores(stmt.else_case, real, row)
        return IfThenElse(stmt.cond, _move_stores(stmt.then_case, real, row), other)
    if isinstance(stmt, Evaluate):
        return stmt
    raise TypeError(f"unknown loop-level statement {type(stmt).__name__}")


def _static(shape: Sequence[object]) -> bool:
    return all(isinstance(d, int) for d in shape)
