"""Products whose two operands are both contiguous along the reduction:
`C[b, m, n] = sum_k A[b, m, k] * B[b, n, k]` — dense, and batch_matmul with `transpose_b`.

Here no packing is needed: a tile of MR x NR results keeps one vector of partial sums per
result, `acc[i][j][lane] += A[m0 + i, k + lane] * B[n0 + j, k + lane]`, loading each operand
with contiguous vector loads, and folds the lanes when the reduction is done (2 x 6 results per
tile: two A vectors and six B vectors feed twelve FMAs per step). It needs no workspace and does
not repack a weight that is read once per call: a single row (a matrix-vector product) streams
the weight at memory speed. With many rows the packed `gemm` is about twice as fast (AVX2, gcc
12: ~75% of the FMA peak against ~35-50% on the MLP's and a transformer's dense shapes), so
batch_matmul switches to it from DOT_MAX_ROWS rows on and a constant dense weight is packed at
compile time (compiler/ops/kernels/matmul.py).

Summing lane by lane changes the order of the additions, not their precision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from compiler.ops.kernels.gemm import INDEX, PARALLEL_MIN_MACS, RowReader, index_var, let_all, vector_lanes
from compiler.tir import expr as te
from compiler.tir.compute import KernelContext
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, Stmt, Store, seq

TILE = (2, 6)  # rows x columns of results per tile


@dataclass(frozen=True)
class DotSpec:
    """`a_row(b, m)` and `b_row(b, n)` read one k-contiguous row of A and of B (their `load`
    takes a one-element k index); `store(b, m, n, value)` writes a result."""

    batch: int
    m: int
    n: int
    k: int
    dtype: str
    a_row: Callable[[te.PrimExpr, te.PrimExpr], RowReader]
    b_row: Callable[[te.PrimExpr, te.PrimExpr], RowReader]
    store: Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], Stmt]


def dot_gemm(ctx: KernelContext, spec: DotSpec) -> Stmt:
    """The loop nest computing and storing every element of `spec`'s product."""
    if spec.batch == 0 or spec.m == 0 or spec.n == 0:
        return seq()
    mr, nr = TILE
    row_blocks, col_blocks = -(-spec.m // mr), -(-spec.n // nr)
    t = index_var(ctx, "tile")
    b, nb, mb = index_var(ctx, "b"), index_var(ctx, "nb"), index_var(ctx, "mb")
    # Consecutive tiles share the B rows (few rows of A, as in dense) or the A rows.
    rest = t // (col_blocks * row_blocks)
    if spec.n >= spec.m:
        nb_e, mb_e = (t // row_blocks) % col_blocks, t % row_blocks
    else:
        mb_e, nb_e = (t // col_blocks) % row_blocks, t % col_blocks
    full_m, rem_m = divmod(spec.m, mr)
    full_n, rem_n = divmod(spec.n, nr)

    def by_columns(rows: int) -> Stmt:
        if full_n and rem_n:
            return IfThenElse(nb < full_n, _tile(ctx, spec, b, mb * mr, nb * nr, rows, nr),
                              _tile(ctx, spec, b, mb * mr, nb * nr, rows, rem_n))
        return _tile(ctx, spec, b, mb * mr, nb * nr, rows, nr if full_n else rem_n)

    if full_m and rem_m:
        body: Stmt = IfThenElse(mb < full_m, by_columns(mr), by_columns(rem_m))
    else:
        body = by_columns(mr if full_m else rem_m)
    count = spec.batch * row_blocks * col_blocks
    macs = spec.batch * spec.m * spec.n * spec.k
    kind = ForKind.PARALLEL if ctx.parallel and count > 1 and macs >= PARALLEL_MIN_MACS else ForKind.SERIAL
    return For(t, te.const(0, INDEX), te.const(count, INDEX), let_all([(b, rest), (nb, nb_e), (mb, mb_e)], body), kind)


def _index(value: int) -> te.PrimExpr:
    return te.const(value, INDEX)


def _pairwise_sum(terms: list[te.PrimExpr]) -> te.PrimExpr:
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def _tile(
    ctx: KernelContext, spec: DotSpec, b: te.Var, m0: te.PrimExpr, n0: te.PrimExpr, rows: int, cols: int
) -> Stmt:
    lanes = vector_lanes(ctx, spec.dtype)
    steps, tail = divmod(spec.k, lanes)
    acc = te.Buffer(ctx.fresh("acc"), (rows * cols * lanes,), spec.dtype, scope="local")
    a_rows = [spec.a_row(b, m0 + i) for i in range(rows)]
    b_rows = [spec.b_row(b, n0 + j) for j in range(cols)]
    zero = te.const(0, spec.dtype)
    z = index_var(ctx, "l")
    stmts: list[Stmt] = [For(z, _index(0), _index(rows * cols * lanes), Store(acc, (z,), zero), ForKind.VECTORIZED)]

    def a(i: int, k: te.PrimExpr) -> te.PrimExpr:
        return te.cast(spec.dtype, a_rows[i].load((k,)))

    def bv(j: int, k: te.PrimExpr) -> te.PrimExpr:
        return te.cast(spec.dtype, b_rows[j].load((k,)))

    if steps:
        kv = index_var(ctx, "kv")
        fmas: list[Stmt] = []
        for i in range(rows):
            for j in range(cols):
                lane = index_var(ctx, "l")
                cell = (lane + (i * cols + j) * lanes,)
                k = kv * lanes + lane
                fmas.append(For(lane, _index(0), _index(lanes),
                                Store(acc, cell, acc[cell] + a(i, k) * bv(j, k)), ForKind.VECTORIZED))
        stmts.append(For(kv, _index(0), _index(steps), seq(*fmas)))
    for i in range(rows):
        for j in range(cols):
            base = (i * cols + j) * lanes
            total = _pairwise_sum([acc[base + lane] for lane in range(lanes)]) if steps else zero
            value: te.PrimExpr = total
            if tail:
                kt = index_var(ctx, "kt")
                first = _index(base)
                stmts.append(Store(acc, (first,), total))
                stmts.append(For(kt, _index(steps * lanes), _index(tail),
                                 Store(acc, (first,), acc[first] + a(i, kt) * bv(j, kt))))
                value = acc[first]
            stmts.append(spec.store(b, m0 + i, n0 + j, value))
    lets = [let for r in (*a_rows, *b_rows) for let in r.lets]
    return Allocate(acc, let_all(lets, seq(*stmts)))
