"""dense, matmul, batch_matmul and contrib_dense_pack as `dot_gemm` or `gemm` products.

Leading dims of a matmul's data fold into the rows of one product (the weight is shared);
batch_matmul is a batched product whose batch of 1 on either side is broadcast. When both
operands run along the reduction in memory (dense; `transpose_b` without `transpose_a`), the
lane-wise `dot_gemm` needs no packing; otherwise `gemm` reads A one element per row and k step
and repacks B, so transposed operands need no copy either. A weight packed in column blocks
(contrib_dense_pack's NC[b]n, what AlterOpLayout makes of a constant weight) is already in
`gemm`'s panel layout and is read in place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from compiler.ops.kernels.common import buffer_dims, unflatten
from compiler.ops.kernels.dot import DotSpec, dot_gemm
from compiler.ops.kernels.gemm import GemmSpec, Panels, RowReader, gemm, index_var, tile_shape, vector_lanes
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext
from compiler.tir.stmt import Allocate, For, ForKind, Stmt, Store, seq

# Shorter reductions leave most lanes of the dot products idle; the packed gemm serves them.
DOT_MIN_VECTORS = 2
# From this many rows on, packing B (N x K copies) and running the broadcast-FMA tile beats the
# dot products, which fold every result's lanes at the end: measured on AVX2 (gcc 12), 128 x 256
# x 256 runs at ~80 GFLOP/s against ~30; a single row streams B faster as dot products than
# packing it first. batch_matmul (activations times activations, a small B per batch) packs
# per call from here on; dense and matmul leave a runtime weight unpacked (a weight copy in the
# workspace would be the largest buffer of the model) and get theirs packed at compile time
# when it is a constant (compiler/passes/alter_op_layout.py), from the same row count on.
DOT_MAX_ROWS = 16
# Rows per product when the row count is only known at run time: the tiled kernel is built for
# this many rows and run once per chunk, the last rows one at a time.
ROW_CHUNK = 8
# batch_matmul's products run on one core below this many multiply-adds. Attention's are small
# and read what the previous kernel's threads wrote: GPT-2's 12 x 32 x 32 x 64 (786,432) ran
# 0.6-0.7x its one-thread time at two threads, the transformer's 4 x 128 x 128 x 64 1.4x.
BATCH_PARALLEL_MIN_MACS = 1 << 21


Lets = tuple[tuple[te.Var, te.PrimExpr], ...]


def _row_lets(ctx: KernelContext, index: tuple[te.PrimExpr, ...]) -> tuple[Lets, tuple[te.PrimExpr, ...]]:
    """Binds the parts of a row index that need division to variables, computed once per tile."""
    if len(index) <= 1:
        return (), index
    vars_ = tuple(index_var(ctx, "row") for _ in index)
    return tuple(zip(vars_, index)), vars_


def _rows_contiguous(
    ctx: KernelContext, transpose_a: bool, transpose_b: bool, k: int, dtype: str, rows: int = 0
) -> bool:
    """True when both operands run along k in memory, k fills a few vectors and there are
    fewer than DOT_MAX_ROWS `rows` (0: any count): then the lane-wise dot products of
    `dot_gemm` need no packing (see compiler/ops/kernels/dot.py) and pay."""
    return (not transpose_a and transpose_b and rows < DOT_MAX_ROWS
            and k >= DOT_MIN_VECTORS * vector_lanes(ctx, dtype))


def matmul_loops(
    ctx: KernelContext,
    data: te.Buffer,
    weight: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    transpose_a: bool,
    transpose_b: bool,
) -> Stmt:
    """`out[..., m, n] = sum_k data[..., m, k] * weight[k, n]`, each operand optionally
    transposed (dense is `transpose_b`); data may have any number of leading dims. Leading
    dims known only at run time run the tiled product in chunks of rows; an unknown reduction
    or column extent gets plain loops."""
    if not _static(weight) or not isinstance(out.shape[-1], int) or (transpose_a and not _static(data)):
        return _plain_matmul(ctx, data, weight, out, epilogue, transpose_a, transpose_b)
    w_dims = buffer_dims(weight)
    k = w_dims[0] if not transpose_b else w_dims[1]
    n = int(out.shape[-1])

    def product(rows: int, a_at: ARow, store_at: StoreAt) -> Stmt:
        if _rows_contiguous(ctx, transpose_a, transpose_b, k, out.dtype):
            def b_row(b: te.PrimExpr, col: te.PrimExpr) -> RowReader:
                return RowReader((), lambda ks: weight[col, ks[0]])

            return dot_gemm(ctx, DotSpec(1, rows, n, k, out.dtype, a_at, b_row, store_at))

        def b_load(bb: te.PrimExpr, ks: Sequence[te.PrimExpr], col: te.PrimExpr) -> te.PrimExpr:
            return weight[col, ks[0]] if transpose_b else weight[ks[0], col]

        return gemm(ctx, GemmSpec(batch=1, m=rows, n=n, k=(k,), dtype=out.dtype, a_row=a_at, b_load=b_load,
                                  store=store_at))

    return _by_rows(ctx, data, out, epilogue, transpose_a, product)


def packed_dense_loops(
    ctx: KernelContext, data: te.Buffer, weight: te.Buffer, out: te.Buffer, epilogue: Epilogue
) -> Stmt:
    """`out[..., m, n] = sum_k data[..., m, k] * W[n, k]` with W packed in column blocks: NC[b]n,
    (N/b, K, b), or NC[b]n[c]c, (N/b, K/c, b, c). Columns past `out`'s last (a weight padded to
    whole blocks) are computed and not stored."""
    dims = buffer_dims(weight)
    block = dims[2]
    k_block = dims[3] if len(dims) == 4 else 1
    k = dims[1] * k_block
    n = int(out.shape[-1])

    def load(bb: te.PrimExpr, panel: te.PrimExpr, ks: Sequence[te.PrimExpr], j: te.PrimExpr) -> te.PrimExpr:
        (kf,) = ks
        if len(dims) == 4:
            return weight[panel, kf // k_block, j, kf % k_block]
        return weight[panel, kf, j]

    def product(rows: int, a_at: ARow, store_at: StoreAt) -> Stmt:
        unused = lambda bb, ks, col: te.const(0, out.dtype)  # noqa: E731  # B is read through the panels
        return gemm(ctx, GemmSpec(batch=1, m=rows, n=n, k=(k,), dtype=out.dtype, a_row=a_at, b_load=unused,
                                  store=store_at, panels=Panels(block, load)))

    return _by_rows(ctx, data, out, epilogue, False, product)


ARow = Callable[[te.PrimExpr, te.PrimExpr], RowReader]
StoreAt = Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], Stmt]


def _by_rows(
    ctx: KernelContext, data: te.Buffer, out: te.Buffer, epilogue: Epilogue, transpose_a: bool,
    product: Callable[[int, ARow, StoreAt], Stmt],
) -> Stmt:
    """`product(rows, a_row, store)` over the rows of `out` (its dims but the last, flattened):
    once when their count is static, else in chunks of ROW_CHUNK rows and then one at a time."""
    rows_dims = out.shape[:-1]
    m: int | te.PrimExpr = 1
    for d in rows_dims:
        m = m * d

    def a_row(b: te.PrimExpr, row: te.PrimExpr) -> RowReader:
        lets, index = _row_lets(ctx, unflatten(row, rows_dims))

        def load(ks: Sequence[te.PrimExpr]) -> te.PrimExpr:
            if transpose_a:
                return data[(*index[:-1], ks[0], index[-1])]
            return data[(*index, ks[0])]

        return RowReader(lets, load)

    def store(b: te.PrimExpr, row: te.PrimExpr, n: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        idx = (*unflatten(row, rows_dims), n)
        return Store(out, idx, te.cast(out.dtype, epilogue(value, idx)))

    def chunk(rows: int, first: te.PrimExpr) -> Stmt:
        def a_at(b: te.PrimExpr, row: te.PrimExpr) -> RowReader:
            return a_row(b, first + row)

        def store_at(b: te.PrimExpr, row: te.PrimExpr, col: te.PrimExpr, value: te.PrimExpr) -> Stmt:
            return store(b, first + row, col, value)

        return product(rows, a_at, store_at)

    if isinstance(m, int):
        return chunk(m, te.const(0, "int64"))
    first, row = index_var(ctx, "chunk"), index_var(ctx, "row")
    whole = (m // ROW_CHUNK) * ROW_CHUNK
    return seq(
        For(first, te.const(0, "int64"), m // ROW_CHUNK, chunk(ROW_CHUNK, first * ROW_CHUNK)),
        For(row, whole, m - whole, chunk(1, row)),
    )


def _static(buffer: te.Buffer) -> bool:
    return all(isinstance(d, int) for d in buffer.shape)


def _plain_matmul(
    ctx: KernelContext, data: te.Buffer, weight: te.Buffer, out: te.Buffer, epilogue: Epilogue,
    transpose_a: bool, transpose_b: bool,
) -> Stmt:
    """The product as plain loops over every output element, for extents known only at run
    time where the tiled kernels need them fixed (attention over a `?` sequence)."""
    k = weight.shape[1] if transpose_b else weight.shape[0]
    lead = len(out.shape) - 1

    def a_load(idx: tuple[te.PrimExpr, ...], kk: te.PrimExpr) -> te.PrimExpr:
        rows = idx[:lead]
        return data[(*rows[:-1], kk, rows[-1])] if transpose_a else data[(*rows, kk)]

    def b_load(idx: tuple[te.PrimExpr, ...], kk: te.PrimExpr) -> te.PrimExpr:
        return weight[idx[-1], kk] if transpose_b else weight[kk, idx[-1]]

    return plain_product(ctx, out, k, a_load, b_load, epilogue)


def plain_product(
    ctx: KernelContext,
    out: te.Buffer,
    k: int | te.PrimExpr,
    a_load: Callable[[tuple[te.PrimExpr, ...], te.PrimExpr], te.PrimExpr],
    b_load: Callable[[tuple[te.PrimExpr, ...], te.PrimExpr], te.PrimExpr],
    epilogue: Epilogue,
) -> Stmt:
    """`out[idx] = sum_k a(idx, k) * b(idx, k)` for every output index, accumulating in the
    output dtype, the outermost loop parallel."""
    idx = tuple(ctx.var(f"ax{i}") for i in range(len(out.shape)))
    kk = ctx.var("k")
    acc = te.Buffer(ctx.fresh("acc"), (1,), out.dtype, scope="local")
    zero = te.const(0, out.dtype)
    update = Store(acc, (te.const(0),), acc[0] + te.cast(out.dtype, a_load(idx, kk)) * te.cast(out.dtype, b_load(idx, kk)))
    body: Stmt = Allocate(acc, seq(
        Store(acc, (te.const(0),), zero),
        For(kk, te.const(0), te.as_expr(k), update),
        Store(out, idx, te.cast(out.dtype, epilogue(acc[0], idx))),
    ))
    for i in reversed(range(len(idx))):
        kind = ForKind.PARALLEL if i == 0 and ctx.parallel and len(idx) > 1 else ForKind.SERIAL
        body = For(idx[i], te.const(0), te.as_expr(out.shape[i]), body, kind)
    return body


def batch_matmul_loops(
    ctx: KernelContext,
    x: te.Buffer,
    y: te.Buffer,
    out: te.Buffer,
    epilogue: Epilogue,
    transpose_a: bool,
    transpose_b: bool,
) -> Stmt:
    """`out[b, m, n] = sum_k x[b, m, k] * y[b, k, n]` (each optionally transposed); a batch of 1
    on either side is shared by every output batch. Extents known only at run time get plain
    loops (the batch of 1 then tested at run time too)."""
    if not (_static(x) and _static(y) and _static(out)):
        return _plain_batch_matmul(ctx, x, y, out, epilogue, transpose_a, transpose_b)
    batch, m, n = buffer_dims(out)
    x_batch, y_batch = buffer_dims(x)[0], buffer_dims(y)[0]
    y_dims = buffer_dims(y)
    k = y_dims[2] if transpose_b else y_dims[1]

    def a_row(b: te.PrimExpr, row: te.PrimExpr) -> RowReader:
        bx = b if x_batch > 1 else te.const(0)

        def load(ks: Sequence[te.PrimExpr]) -> te.PrimExpr:
            return x[bx, ks[0], row] if transpose_a else x[bx, row, ks[0]]

        return RowReader((), load)

    def b_load(bb: te.PrimExpr, ks: Sequence[te.PrimExpr], col: te.PrimExpr) -> te.PrimExpr:
        return y[bb, col, ks[0]] if transpose_b else y[bb, ks[0], col]

    def store(b: te.PrimExpr, row: te.PrimExpr, col: te.PrimExpr, value: te.PrimExpr) -> Stmt:
        idx = (b, row, col)
        return Store(out, idx, te.cast(out.dtype, epilogue(value, idx)))

    if _rows_contiguous(ctx, transpose_a, transpose_b, k, out.dtype, rows=m):
        def b_row(b: te.PrimExpr, col: te.PrimExpr) -> RowReader:
            by = b if y_batch > 1 else te.const(0)
            return RowReader((), lambda ks: y[by, col, ks[0]])

        return dot_gemm(ctx, DotSpec(batch, m, n, k, out.dtype, a_row, b_row, store))
    spec = GemmSpec(
        batch=batch, m=m, n=n, k=(k,), dtype=out.dtype, a_row=a_row, b_load=b_load, store=store,
        b_batches=y_batch, b_batch_of=lambda b: b if y_batch > 1 else te.const(0),
        parallel_min_macs=BATCH_PARALLEL_MIN_MACS, panels=_b_in_place(ctx, y, out.dtype, n, transpose_b),
    )
    return gemm(ctx, spec)


def _b_in_place(ctx: KernelContext, y: te.Buffer, dtype: str, n: int, transpose_b: bool) -> Panels | None:
    """B's rows as the tile's panels, read where they are, when a panel is a run of each row:
    an attention product's B is a few hundred KiB of activations, packed again on every call
    into a scratch as large as it, the largest buffer of a transformer block's workspace."""
    _, width = tile_shape(ctx, dtype, n)
    if transpose_b or n % width:
        return None

    def load(bb: te.PrimExpr, panel: te.PrimExpr, ks: Sequence[te.PrimExpr], j: te.PrimExpr) -> te.PrimExpr:
        return y[bb, ks[0], panel * width + j]

    return Panels(width, load)


def _plain_batch_matmul(
    ctx: KernelContext, x: te.Buffer, y: te.Buffer, out: te.Buffer, epilogue: Epilogue,
    transpose_a: bool, transpose_b: bool,
) -> Stmt:
    k = y.shape[2] if transpose_b else y.shape[1]

    def batch_of(buffer: te.Buffer, b: te.PrimExpr) -> te.PrimExpr:
        dim = buffer.shape[0]
        if isinstance(dim, int):
            return b if dim > 1 else te.const(0)
        return te.select(te.eq(dim, 1), te.const(0, b.dtype), b)

    def a_load(idx: tuple[te.PrimExpr, ...], kk: te.PrimExpr) -> te.PrimExpr:
        b, row, _ = idx
        return x[batch_of(x, b), kk, row] if transpose_a else x[batch_of(x, b), row, kk]

    def b_load(idx: tuple[te.PrimExpr, ...], kk: te.PrimExpr) -> te.PrimExpr:
        b, _, col = idx
        return y[batch_of(y, b), col, kk] if transpose_b else y[batch_of(y, b), kk, col]

    return plain_product(ctx, out, k, a_load, b_load, epilogue)
