"""Loop-level statements and PrimFunc.

Statements: For (serial / parallel / vectorized / unrolled / claimed), Store, Allocate, LetStmt,
IfThenElse, Seq and Evaluate (an expression for its effect, e.g. a `CallExtern`). A PrimFunc
takes buffer parameters (inputs, then outputs) and scalar parameters (dynamic dims).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from compiler.ir.attrs import EMPTY_ATTRS, Attrs
from compiler.tir.expr import Buffer, ExprLike, PrimExpr, Var, as_expr


class ForKind(Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"  # an OpenMP parallel for
    VECTORIZED = "vectorized"  # a hint: the C compiler is asked to vectorize (omp simd)
    UNROLLED = "unrolled"  # a hint: the C compiler is asked to unroll
    # A hint: the C compiler is asked not to unroll. A register tile's reduction step is a dozen
    # FMAs already; gcc unrolls a loop of three such steps whole (a 3x3 kernel over 3 channels)
    # and then interleaves them and spills the tile (the CNN's first layer 0.78x rolled).
    ROLLED = "rolled"
    # Inside a PARALLEL loop: the iterations are shared out among that loop's iterations as they
    # go, each taken by whichever asks next (an atomic counter the parallel loop resets), and
    # each runs once in all. A thread the host delays leaves its share to the others, where a
    # static split would make every thread wait for it at the loop's end. Outside any parallel
    # loop it is a plain loop.
    CLAIMED = "claimed"


class Stmt:
    """Base of loop-level statements."""


@dataclass(frozen=True, eq=False)
class For(Stmt):
    var: Var
    begin: PrimExpr
    extent: PrimExpr
    body: Stmt
    kind: ForKind = ForKind.SERIAL


@dataclass(frozen=True, eq=False)
class Store(Stmt):
    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    value: PrimExpr


@dataclass(frozen=True, eq=False)
class Allocate(Stmt):
    """`buffer` exists while `body` runs. Global-scope allocations are placed in the workspace
    pool by the memory planner; local ones are stack arrays."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False)
class LetStmt(Stmt):
    var: Var
    value: PrimExpr
    body: Stmt


@dataclass(frozen=True, eq=False)
class IfThenElse(Stmt):
    cond: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, eq=False)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False)
class Evaluate(Stmt):
    value: PrimExpr


def seq(*stmts: Stmt | Sequence[Stmt]) -> Stmt:
    """A statement sequence, flattening nested sequences; a single statement is returned as is."""
    flat: list[Stmt] = []
    for s in stmts:
        items = s if isinstance(s, (list, tuple)) else [s]
        for item in items:
            if isinstance(item, Seq):
                flat.extend(item.stmts)
            else:
                flat.append(item)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def for_range(
    name: str,
    extent: ExprLike,
    body_fn: Callable[[Var], Stmt],
    kind: ForKind = ForKind.SERIAL,
    begin: ExprLike = 0,
) -> For:
    """`for (name = begin; name < begin + extent; ++name) body_fn(name)`."""
    var = Var(name, "int32")
    return For(var, as_expr(begin), as_expr(extent), body_fn(var), kind)


def loop_nest(
    names: Sequence[str],
    extents: Sequence[ExprLike],
    body_fn: Callable[[list[Var]], Stmt],
    kinds: Sequence[ForKind] | None = None,
) -> Stmt:
    """Perfectly nested loops over `extents`, outermost first; `body_fn(vars)` makes the body."""
    vars_ = [Var(n, "int32") for n in names]
    stmt = body_fn(vars_)
    for k in reversed(range(len(vars_))):
        kind = kinds[k] if kinds else ForKind.SERIAL
        stmt = For(vars_[k], as_expr(0), as_expr(extents[k]), stmt, kind)
    return stmt


@dataclass(frozen=True, eq=False)
class PrimFunc:
    """A loop-level function: `int32_t name(buffers..., scalars...)` returning 0 on success.

    `params` are the buffer parameters: the first `num_inputs` are read, the rest written.
    `scalar_params` carry dynamic dimensions. `attrs` hold e.g. global_symbol and target.
    `func_type` is the Relay type of the function it implements, so Relay calls to it can be
    type-checked after lowering.
    """

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    num_inputs: int
    scalar_params: tuple[Var, ...] = ()
    attrs: Attrs = EMPTY_ATTRS
    func_type: object = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return self.params[: self.num_inputs]

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return self.params[self.num_inputs :]

    def __str__(self) -> str:
        from compiler.tir.printer import tir_text

        return tir_text(self)

    def with_name(self, name: str) -> PrimFunc:
        return PrimFunc(name, self.params, self.body, self.num_inputs, self.scalar_params,
                        self.attrs.with_attr("global_symbol", name), self.func_type, dict(self.extra))
