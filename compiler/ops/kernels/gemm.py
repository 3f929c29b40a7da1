"""Register-blocked matrix product: `C[b, m, n] = sum_k A(b, m, k) * B(b, k, n)`.

dense, matmul, batch_matmul and conv2d all lower to this loop nest; they differ only in how A
and B are read (`GemmSpec`) and how a result is stored. The shape of the nest was chosen by
measuring on AVX2 + FMA with gcc 12 (`-O3 -march=native -fopenmp-simd`):

* B is packed per call into the workspace as panels `[b][n / NR][k][NR]`, so the innermost
  loop over the NR columns of a tile reads contiguous memory and vectorizes, whatever B's own
  layout (conv2d's weight is any permutation of OIHW). Packing one panel at a time into a
  stack array would need no workspace, but gcc 12 then spills the accumulator tile on every
  k step (two stack arrays under `omp simd`), which costs 3x.
* An MR x NR tile of C accumulates in a local array the C compiler keeps in vector registers
  for the whole k loop: 6 x 16 float32 is 12 AVX2 registers, fed per k step by one broadcast of
  A per row and two loads of B. Without the packing or the tile, gcc vectorizes the k loop
  instead, with strided loads, and runs 20x slower.
* The rows of a tile are unrolled here rather than by the C compiler, so each row's reader
  binds its loop-invariant address parts once per tile (`RowReader.lets`).
* Tiles form one flat loop over (batch, column panel, row block), parallel when the product is
  large enough, so two cores share even a single small product. Consecutive tiles of a thread
  reuse one B panel (or one block of A rows, when A is the larger operand) from cache.
* Edges: the last panel is zero-padded when packing, so every tile computes NR columns and only
  the store skips the padding; the last row block starts early so it too has MR rows, and
  stores only the rows the block before did not (one tile body: ResNet-50's kernel C 451 -> 329
  KB, gcc's CPU on it 11.5 -> 7.9 s, the code as fast and its results bit-identical).
* B may come packed already (`GemmSpec.panels`): nn.contrib_dense_pack's NC[NR]n weight, packed
  at compile time by AlterOpLayout, is exactly this panel layout, so nothing is copied per call.
* Loop and index variables are 64-bit. The C is built with `-fwrapv`, under which int32 index
  arithmetic may wrap and is no longer affine to gcc: it then neither vectorizes the column loops
  nor keeps the tile in registers, and the product runs ~20x slower (measured with gcc 12).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compiler.ops.kernels.schedule import ORDERS, choose
from compiler.tir import expr as te
from compiler.tir.analysis import post_order
from compiler.tir.compute import KernelContext
from compiler.tir.dtypes import itemsize
from compiler.tir.stmt import Allocate, For, ForKind, IfThenElse, LetStmt, Stmt, Store, seq

# Products with fewer multiply-adds than this run on one core: an OpenMP fork/join costs a few
# microseconds, as much as ~2^18 multiply-adds take.
PARALLEL_MIN_MACS = 1 << 18
# Packing fewer elements than this is not worth a fork/join either.
PARALLEL_MIN_PACK = 1 << 15
# The L2 a thread's tiles are sized for (512 KiB on the AMD EPYC, 1-2 MiB on the Xeons): where A
# is read in place, `row_chunks` weighs rereading A that does not fit in it beside a B panel
# against rereading B once per chunk of rows.
L2_BYTES = 512 << 10
# Row blocks outer reads the whole of B once per row block: fine while B stays in L2, and
# otherwise it comes from L3 every time. ResNet-50's 3x3 layers on 14x14 (four 147 KB panels per
# channel group) ran 4-5% faster with their panels outer, each swept over the band from L2.
ROWS_OUTER_MAX_B_BYTES = 256 << 10
# A convolution that reads A in place (a 1x1 layer) strides through its channel blocks: with the
# panels outer, an A of more than two L2s came from L3 with that stride once per panel; with the
# rows outer a tile's rows stay in L1 over every panel while B streams. ResNet-50's 1x1 layer
# from 512 to 256 channels on 28x28 (1.6 MB of A): 0.93-0.94x by least times at one and two
# threads (`relaycc tune` chose it in four runs out of four). Its 14x14 layers with 800 KB of A
# measured from 0.85x to 1.03x, so they keep the rule below.
ROWS_OUTER_MIN_IN_PLACE_ROWS = 128
# A reduction whose A (read in place) and B panel together overflow L2 is taken in chunks of its
# outermost axis, each chunk's part of A and of the panel within half an L2, partial sums kept
# in the workspace between chunks (`k_chunks`).
K_CHUNK_BYTES = L2_BYTES // 2
# The `unroll_k` knob (schedule.py): a tile's innermost reduction loop taken this many steps at a
# time, written out whole by gcc. Rolled, each 20-instruction step of an AVX2 6x16 tile (6
# broadcasts, 2 weight loads, 12 FMAs) carries 3 more of loop control, and every 16 steps a
# restart of about 28 (the rows' addresses); unrolled, a 16-step pass of a 5x16 tile is 280
# instructions for 160 FMAs. gcc takes longer on such a kernel, so the rule unrolls only
# products of at most `UNROLLED_MAX_ROWS` rows, whose few tiles each run a long reduction:
# ResNet-50's five 7x7 kernels ran 0.89-0.97x by least times and 0.81-0.98x by medians (60
# interleaved runs, one thread, busy host; `relaycc tune` had picked two of them unrolled), for
# 0.66 s more of gcc's CPU on its kernels (4.70 -> 5.36 s, with the row steps written as helper
# calls, backend/fma_rows.py; gcc's own unrolling of the vectorized row loops had cost 1.8 s).
# float16 ResNet-50's 7x7 kernels, whose stores take the last step (every pass but the last
# unrolled), 0.85-0.98x by least times, for 0.44 s more of gcc (6.08 -> 6.52 s). Unrolling
# float32's 14x14 kernels as well (64 -> 196 rows) gained 0.94-1.0 for 0.83 s more. Only
# whole unrolling: gcc's partial unrolling of a tile step (by the pragma or written out twice)
# rotated the accumulators through memory and ran 1.5x slower.
# On AVX-512 (the 2-core AMD EPYC of Zen 5, 13x32 tiles of zmm registers) the same unrolling ran
# the five 7x7 kernels 1.25-1.5x slower than rolled (`relaycc tune`: 0.66-0.80x rolled), though
# gcc's code for them had no spills; the rule keeps it to machines of narrower vectors.
UNROLLED_STEPS = 16
UNROLLED_MAX_ROWS = 64
# On AVX-512 a convolution of at most this many rows takes its tile height from `exact_rows`:
# ResNet-50's 7x7 maps in 7 tiles of 7 rows by 32 channels, where `fitted_rows` took 13 rows
# (4 tiles, 52 rows computed), ran its five 7x7 kernels 0.82-0.87x (AMD EPYC Zen 5, one thread,
# profile means over two alternations): more than the 6% of rows saved. Not measured on AVX2,
# whose 6-row tiles keep `fitted_rows` (10 tiles of 5 there).
EXACT_TILE_MAX_ROWS = 64
UNROLLED_MAX_LANES = 16  # float32 lanes from which the rule never unrolls
INDEX = "int64"

Loader = Callable[[Sequence[te.PrimExpr]], te.PrimExpr]


@dataclass(frozen=True)
class RowReader:
    """How a tile reads one row of A: `lets` are bound once per tile (outside the k loops),
    then `load(ks)` gives A at the reduction index `ks` (one variable per axis of `GemmSpec.k`)."""

    lets: tuple[tuple[te.Var, te.PrimExpr], ...]
    load: Loader


@dataclass(frozen=True)
class Panels:
    """B read in place, a panel at a time: `load(bb, panel, ks, column in panel)` reads it at
    the reduction index `ks` (one variable per axis of `GemmSpec.k`), `width` columns per panel,
    anything finite past the last column (the store skips them)."""

    width: int
    load: Callable[[te.PrimExpr, te.PrimExpr, Sequence[te.PrimExpr], te.PrimExpr], te.PrimExpr]


# Writes one row of a tile: (b, m, first column n0, width, value of column j) -> the stores.
RowStore = Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, int, Callable[[te.PrimExpr], te.PrimExpr]], Stmt]


@dataclass(frozen=True)
class GemmSpec:
    """One (batched) product and how to read and write it.

    `k` is the reduction as a loop nest, outermost first (conv2d reduces over input channels and
    the two kernel axes). `a_row(b, m)` reads row m of A for batch b. `b_load(bb, ks, n)` reads
    B of B-batch `bb`; `b_batches` B operands exist and `b_batch_of(b)` picks the one batch b
    uses (default: the only one, or b itself). `store(b, m, n, value)` writes a result (the
    caller applies the epilogue and the output layout). Everything accumulates in `dtype`.
    """

    batch: int
    m: int
    n: int
    k: tuple[int, ...]
    dtype: str
    a_row: Callable[[te.PrimExpr, te.PrimExpr], RowReader]
    b_load: Callable[[te.PrimExpr, Sequence[te.PrimExpr], te.PrimExpr], te.PrimExpr]
    store: Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr, te.PrimExpr], Stmt]
    b_batches: int = 1
    b_batch_of: Callable[[te.PrimExpr], te.PrimExpr] | None = None
    panels: Panels | None = None
    # Replaces `store` for whole tile rows when columns map to outputs in runs, not one by one.
    store_row: RowStore | None = None
    # The tiles run on one core below this many multiply-adds.
    parallel_min_macs: int = PARALLEL_MIN_MACS
    # Whether the last reduction step is taken in the store (see `_tile`); a caller whose store
    # applies an epilogue to the value may turn it off.
    peel_last: bool = True
    # The bytes of A when the product reads it in place (0: A is a copy its caller sized for the
    # caches). Panels outer reread all of it once per panel; a large A is swept in chunks
    # (`row_chunks`).
    a_bytes: int = 0
    # Where the reduction may be taken in chunks (`k_chunks`), whose partial sums sit in the
    # workspace: (slot, slots) for a product inside a caller's parallel loop that runs one slot
    # per thread (each slot keeps its own partial sums), (0, 1) where no loop around the product
    # is parallel; None, never.
    chunk_slot: tuple[te.PrimExpr, int] | None = None

    @property
    def k_total(self) -> int:
        total = 1
        for extent in self.k:
            total *= extent
        return total

    def b_batch(self, b: te.PrimExpr) -> te.PrimExpr:
        if self.b_batch_of is not None:
            return self.b_batch_of(b)
        return te.const(0) if self.b_batches == 1 else b


def vector_lanes(ctx: KernelContext, dtype: str) -> int:
    """Lanes of `dtype` in the widest vector register (ctx counts float32 lanes)."""
    return max(1, ctx.vector_lanes * 4 // itemsize(dtype))


def peels_last_step(store: Callable[[te.PrimExpr], Stmt], dtype: str) -> bool:
    """`GemmSpec.peel_last` for a product whose store of a value `v` is `store(v)`: the last
    reduction step stays in the store unless the store computes on the value in the product's
    dtype (an epilogue: bias, scale, relu, residual); then one loop nest serves every step, a
    third of a 3x3 layer's C and gcc's time, as fast. A plain store would become a memcpy and a
    float16 one is staged through a row copy (half_stages.py), either of which keeps the tile out
    of registers (float16 ResNet-50 1.18x)."""
    probe = te.Var("relaycc_probe", dtype)
    plain = store(probe)
    while isinstance(plain, IfThenElse):
        plain = plain.then_case
    computes = (isinstance(plain, Store) and plain.value is not probe and plain.buffer.dtype == dtype
                and all(node.dtype != "float16" for node in post_order(plain.value)))
    return not computes


def index_var(ctx: KernelContext, base: str) -> te.Var:
    """A loop or index variable of the products (64-bit: see the module docstring)."""
    return te.Var(ctx.fresh(base), INDEX)


def tile_rows(ctx: KernelContext, dtype: str, width: int) -> int:
    """Rows of a register tile `width` columns wide: as many as the vector registers hold with
    one row of B and one broadcast of A beside them (16 registers, 32 with AVX-512), at most
    6 / 14 rows (the tiles measured best on AVX2: 6 x 16)."""
    vectors = -(-width // vector_lanes(ctx, dtype))
    registers = 32 if ctx.vector_lanes >= 16 else 16
    return max(1, min(registers // 2 - 2, (registers - vectors - 1) // vectors))


def fitted_rows(rows: int, m: int) -> int:
    """`rows`, or one row fewer when that computes a twentieth fewer rows of an `m`-row product
    (its last tile overlaps the one before): a 7x7 map's 49 pixels are 54 rows in tiles of 6 and 50
    in tiles of 5 (ResNet-50's 7x7 layers 0.93-0.96x, one thread)."""
    def computed(r: int) -> int:
        return -(-m // r) * r

    if rows > 2 and computed(rows - 1) * 20 <= computed(rows) * 19:
        return rows - 1
    return rows


def exact_rows(rows: int, m: int) -> int:
    """The tile height from half of `rows` up to `rows` that computes the fewest rows of an
    `m`-row product (the tallest of those): a 7x7 map's 49 pixels in 7 tiles of 7."""
    return min(range(-(-rows // 2), rows + 1), key=lambda r: (-(-m // r) * r, -r))


def tile_shape(ctx: KernelContext, dtype: str, n: int) -> tuple[int, int]:
    """(rows, columns) of the register tile: two vectors wide, one when n fits in one."""
    lanes = vector_lanes(ctx, dtype)
    width = lanes if n <= lanes else 2 * lanes
    return tile_rows(ctx, dtype, width), width


def flat_index(ks: Sequence[te.PrimExpr], extents: Sequence[int]) -> te.PrimExpr:
    flat: te.PrimExpr = te.const(0)
    for var, extent in zip(ks, extents):
        flat = flat * extent + var
    return flat


def loop_nest(
    ctx: KernelContext, base: str, extents: Sequence[int], body: Callable[[list[te.Var]], Stmt],
    kind: ForKind = ForKind.SERIAL,
) -> Stmt:
    """Loops of `kind` over `extents`, outermost first, with fresh variables named `base0, base1...`."""
    vars_ = [index_var(ctx, f"{base}{i}") for i in range(len(extents))]
    stmt = body(vars_)
    for var, extent in reversed(list(zip(vars_, extents))):
        stmt = For(var, _index(0), _index(extent), stmt, kind)
    return stmt


def _index(value: int) -> te.PrimExpr:
    return te.const(value, INDEX)


def let_all(lets: Sequence[tuple[te.Var, te.PrimExpr]], body: Stmt) -> Stmt:
    for var, value in reversed(list(lets)):
        body = LetStmt(var, value, body)
    return body


def _decode(flat: te.Var, extents: Sequence[int]) -> list[te.PrimExpr]:
    """The digits of `flat` in the mixed radix `extents` (outermost first)."""
    out: list[te.PrimExpr] = []
    rest: te.PrimExpr = flat
    for k, extent in enumerate(reversed(extents)):
        last = k == len(extents) - 1
        out.append(rest if last else rest % extent)
        rest = rest // extent
    return list(reversed(out))


PanelLoad = Callable[[Sequence[te.PrimExpr], te.PrimExpr], te.PrimExpr]  # (ks, column in panel) -> B


def _pack_panel(
    ctx: KernelContext, spec: GemmSpec, bb: te.PrimExpr, nb: te.PrimExpr, nr: int,
    store: Callable[[te.PrimExpr, te.PrimExpr, te.PrimExpr], Stmt],
) -> Stmt:
    """Copies columns [nb * nr, nb * nr + nr) of B-batch `bb` (zeros past the last column) with
    `store(flat k, column in panel, value)`; `nb` may be a variable."""
    full, rem = divmod(spec.n, nr)

    def columns(width: int) -> Stmt:
        def body(ks: list[te.Var]) -> Stmt:
            kf = flat_index(ks, spec.k)
            j = index_var(ctx, "j")
            copy = For(j, _index(0), _index(width), store(
                kf, j, te.cast(spec.dtype, spec.b_load(bb, ks, nb * nr + j))), ForKind.VECTORIZED)
            if width == nr:
                return copy
            z = index_var(ctx, "j")
            zero = For(z, _index(width), _index(nr - width), store(kf, z, te.const(0, spec.dtype)),
                       ForKind.VECTORIZED)
            return seq(copy, zero)

        return loop_nest(ctx, "pk", spec.k, body)

    if full and rem:
        return IfThenElse(nb < full, columns(nr), columns(rem))
    return columns(nr if full else rem)


def gemm(ctx: KernelContext, spec: GemmSpec) -> Stmt:
    """The loop nest computing and storing every element of `spec`'s product: B packed into
    the workspace, then the tiles as one flat loop."""
    if spec.batch == 0 or spec.m == 0 or spec.n == 0:
        return seq()
    if spec.panels is not None:
        nr = spec.panels.width
        mr = tile_rows(ctx, spec.dtype, nr)
        if ctx.vector_lanes >= UNROLLED_MAX_LANES and spec.m <= EXACT_TILE_MAX_ROWS:
            mr = exact_rows(mr, spec.m)
        else:
            mr = fitted_rows(mr, spec.m)
    else:
        mr, nr = tile_shape(ctx, spec.dtype, spec.n)
    mr = int(choose(ctx, "tile_rows", mr, range(1, tile_rows(ctx, spec.dtype, nr) + 1)))  # type: ignore[call-overload]
    panels = -(-spec.n // nr)
    packed: te.Buffer | None = None
    pack: Stmt = seq()
    if spec.k_total > 0 and spec.panels is None:
        packed = te.Buffer(ctx.fresh("packed_b"), (spec.b_batches, panels, spec.k_total, nr), spec.dtype)
        pack = _pack_all(ctx, spec, packed, nr)
    row_blocks = -(-spec.m // mr)
    t = index_var(ctx, "tile")
    b, nb, mb = index_var(ctx, "b"), index_var(ctx, "nb"), index_var(ctx, "mb")
    panel_bytes = spec.k_total * nr * itemsize(spec.dtype)
    outer = choose(ctx, "order", "panels" if panels_outer(spec, nr) else "rows", ORDERS) == "panels"
    split = _split_axis(spec)
    k_parts = 1
    if split is not None:
        rule = k_chunks(spec.a_bytes if outer else 0, panel_bytes, spec.k[split])
        k_parts = int(choose(ctx, "k_chunks", rule, _divisors(spec.k[split])))  # type: ignore[call-overload]
    unroll = 1
    # A peeled product's nest over a single axis has no pass before the last (`_all_but_last`).
    if spec.k and spec.k[-1] % UNROLLED_STEPS == 0 and (len(spec.k) > 1 or not spec.peel_last):
        unrolls = spec.m <= UNROLLED_MAX_ROWS and ctx.vector_lanes < UNROLLED_MAX_LANES
        rule = UNROLLED_STEPS if unrolls else 1
        unroll = int(choose(ctx, "unroll_k", rule, (1, UNROLLED_STEPS)))  # type: ignore[call-overload]
    # With the reduction in chunks a chunk of A stays in L2 beside the panel: no row chunks.
    chunks = row_chunks(spec.a_bytes, row_blocks, panels, panel_bytes) if k_parts == 1 else 1
    if outer and chunks > 1:
        # A chunk of row blocks at a time, the panels swept over each: the chunk stays in L2.
        b_e, c_e, nb_e, mi_e = _decode(t, (spec.batch, chunks, panels, row_blocks // chunks))
        mb_e = c_e * (row_blocks // chunks) + mi_e
    elif outer:
        b_e, nb_e, mb_e = _decode(t, (spec.batch, panels, row_blocks))
    else:
        b_e, mb_e, nb_e = _decode(t, (spec.batch, row_blocks, panels))
    bb = spec.b_batch(b)

    def load(ks: Sequence[te.PrimExpr], j: te.PrimExpr) -> te.PrimExpr:
        if spec.panels is not None:
            return te.cast(spec.dtype, spec.panels.load(bb, nb, ks, j))
        assert packed is not None
        return packed[bb, nb, flat_index(ks, spec.k), j]

    count = spec.batch * panels * row_blocks
    part: KPart | None = None
    if k_parts > 1:
        assert split is not None
        assert spec.chunk_slot is not None
        slot, slots = spec.chunk_slot
        partial = te.Buffer(ctx.fresh("partial"), (slots, count, mr * nr), spec.dtype)
        part = KPart(index_var(ctx, "kc"), k_parts, split, partial, slot, t)
    body = let_all([(b, b_e), (nb, nb_e), (mb, mb_e)], _row_block(ctx, spec, load, b, nb, mb, mr, nr, part, unroll))
    compute: Stmt = For(t, _index(0), _index(count), body, _tile_loop_kind(ctx, spec, count))
    if part is not None:
        compute = Allocate(part.partial, For(part.var, _index(0), _index(k_parts), compute, ForKind.SERIAL))
    return compute if packed is None else Allocate(packed, seq(pack, compute))


@dataclass(frozen=True)
class KPart:
    """The reduction taken in `count` chunks of axis `axis`, the chunk's index `var` outside the
    tile loop; tile `tile`'s partial sums wait in `partial[slot, tile]` between chunks."""

    var: te.Var
    count: int
    axis: int
    partial: te.Buffer
    slot: te.PrimExpr
    tile: te.Var


def _split_axis(spec: GemmSpec) -> int | None:
    """The reduction axis a product may take in chunks: its outermost of more than one step,
    for a product whose caller gives it a place for partial sums (`GemmSpec.chunk_slot`) and
    whose store applies an epilogue (one loop nest per tile: see `_tile`)."""
    if spec.peel_last or spec.chunk_slot is None:
        return None
    return next((i for i, extent in enumerate(spec.k) if extent > 1), None)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def k_chunks(a_bytes: int, panel_bytes: int, extent: int) -> int:
    """Chunks of a reduction axis of `extent` steps for a product that reads `a_bytes` of A in
    place, each panel of B (`panel_bytes`) swept over all of A: 1 while A fits in L2 beside a
    panel, else the fewest (a divisor of `extent`) that put a chunk's part of both within
    `K_CHUNK_BYTES`. Each chunk then reads its part of A from L3 once, not once per panel; the
    partial sums cost a store and a load per tile and chunk. ResNet-50's 1x1 layers on 7x7
    (2048 channels in, 400 KB of A beside a 128 KB panel) ran 0.92x in four chunks, as fast in
    two, 0.98x slower in eight."""
    total = a_bytes + panel_bytes
    if a_bytes <= 0 or total <= L2_BYTES:
        return 1
    fitting = [d for d in _divisors(extent) if -(-total // d) <= K_CHUNK_BYTES]
    return fitting[0] if fitting else extent


def panels_outer(spec: GemmSpec, nr: int) -> bool:
    """Whether consecutive tiles share a B panel (each panel swept over the row blocks) rather
    than a block of A rows (each swept over the panels): the rows when A is read in place and
    larger than two L2s (`ROWS_OUTER_MIN_IN_PLACE_ROWS`), else the panel when B is the larger
    operand (dense: few rows, many outputs) or too large to stay in L2
    (`ROWS_OUTER_MAX_B_BYTES`), else the rows (conv2d: many pixels)."""
    if spec.a_bytes > 2 * L2_BYTES and spec.m >= ROWS_OUTER_MIN_IN_PLACE_ROWS:
        return False
    b_bytes = spec.k_total * -(-spec.n // nr) * nr * itemsize(spec.dtype)
    return spec.n >= spec.m or b_bytes > ROWS_OUTER_MAX_B_BYTES


def row_chunks(a_bytes: int, row_blocks: int, panels: int, panel_bytes: int) -> int:
    """How many chunks of row blocks (a divisor of `row_blocks`) the `panels` B panels of
    `panel_bytes` each are swept over, for a product reading `a_bytes` of A in place: the fewest
    bytes from L3 by estimate. Each chunk reads all of B again; a chunk of A that does not fit in
    `L2_BYTES` beside a panel is read again, in part, for every panel. ResNet-50's 1x1 layers on
    14x14 with 1024 channels (800 KB of A) take three chunks, 0.94x; on 7x7 with 2048 (400 KB of A
    beside a 128 KB panel, 4 MB of B) one, 0.96-0.98x against two. 1 when A is not read in place."""
    if a_bytes <= 0:
        return 1

    def traffic(chunks: int) -> int:
        overflow = max(0, -(-a_bytes // chunks) + panel_bytes - L2_BYTES)
        return chunks * panels * panel_bytes + panels * overflow

    divisors = [d for d in range(1, row_blocks + 1) if row_blocks % d == 0]
    return min(divisors, key=lambda d: (traffic(d), d))


def packed_once(ctx: KernelContext, spec: GemmSpec) -> tuple[te.Buffer, Stmt, Panels]:
    """B of `spec` packed for many products that share it (a product of `?` rows is run a
    chunk of rows at a time): the buffer, the loop that fills it, and the `Panels` that read
    it, for each chunk's spec."""
    _, nr = tile_shape(ctx, spec.dtype, spec.n)
    panels = -(-spec.n // nr)
    packed = te.Buffer(ctx.fresh("packed_b"), (spec.b_batches, panels, spec.k_total, nr), spec.dtype)

    def load(bb: te.PrimExpr, nb: te.PrimExpr, ks: Sequence[te.PrimExpr], j: te.PrimExpr) -> te.PrimExpr:
        return packed[bb, nb, flat_index(ks, spec.k), j]

    return packed, _pack_all(ctx, spec, packed, nr), Panels(nr, load)


def _pack_all(ctx: KernelContext, spec: GemmSpec, packed: te.Buffer, nr: int) -> Stmt:
    panels = -(-spec.n // nr)
    p = index_var(ctx, "panel")
    bb, nb = index_var(ctx, "bb"), index_var(ctx, "nb")
    bb_e, nb_e = _decode(p, (spec.b_batches, panels))
    body = _pack_panel(ctx, spec, bb, nb, nr, lambda kf, j, value: Store(packed, (bb, nb, kf, j), value))
    # A product too small for threads has a pack too small for them as well.
    big = (spec.b_batches * panels * spec.k_total * nr >= PARALLEL_MIN_PACK
           and spec.batch * spec.m * spec.n * spec.k_total >= spec.parallel_min_macs)
    kind = ForKind.PARALLEL if ctx.parallel and big and spec.b_batches * panels > 1 else ForKind.SERIAL
    return For(p, _index(0), _index(spec.b_batches * panels), let_all([(bb, bb_e), (nb, nb_e)], body), kind)


def _tile_loop_kind(ctx: KernelContext, spec: GemmSpec, iterations: int) -> ForKind:
    macs = spec.batch * spec.m * spec.n * spec.k_total
    return ForKind.PARALLEL if ctx.parallel and iterations > 1 and macs >= spec.parallel_min_macs else ForKind.SERIAL


def _row_block(
    ctx: KernelContext, spec: GemmSpec, panel: PanelLoad, b: te.Var, nb: te.Var, mb: te.Var, mr: int, nr: int,
    part: KPart | None = None, unroll: int = 1,
) -> Stmt:
    """The tile of row block `mb` and panel `nb`. When `mr` does not divide m, the last block
    starts early, at row m - mr, so every tile has `mr` rows and the tile's loop nest is emitted
    once (a tile of the leftover rows had its own nest: a third of a convolution's C, and gcc's
    time with it). The rows it shares with the block before are computed again but not stored:
    a result written over its residual input (compiler/tir/inplace.py) would add it twice."""
    full, rem = divmod(spec.m, mr)
    if full and rem and spec.store_row is None:
        # Products stored element by element (dense, matmul) keep a tile of the leftover rows:
        # recomputing the shared rows ran the transformer block's dense layers 4-15% slower.
        return IfThenElse(mb < full, _tile(ctx, spec, panel, b, nb, mb * mr, mr, nr, part=part, unroll=unroll),
                          _tile(ctx, spec, panel, b, nb, mb * mr, rem, nr, part=part, unroll=unroll))
    if not full:
        return _tile(ctx, spec, panel, b, nb, mb * mr, rem, nr, part=part, unroll=unroll)
    if not rem:
        return _tile(ctx, spec, panel, b, nb, mb * mr, mr, nr, part=part, unroll=unroll)
    m0 = te.minimum(mb * mr, _index(spec.m - mr))
    return _tile(ctx, spec, panel, b, nb, m0, mr, nr, (mr - rem, mb < full), part, unroll)


def _tile(
    ctx: KernelContext,
    spec: GemmSpec,
    panel: PanelLoad,
    b: te.Var,
    nb: te.Var,
    m0: te.PrimExpr,
    rows: int,
    nr: int,
    shared: tuple[int, te.PrimExpr] | None = None,
    part: KPart | None = None,
    unroll: int = 1,
) -> Stmt:
    """One tile of `rows` x nr results whose top-left corner is (m0, nb * nr); with `shared`
    (count, condition) its first `count` rows are stored only where the condition holds; with
    `part`, the chunk of the reduction `part.var` names, from and to the tile's partial sums
    but in the last chunk, which stores; `unroll`: see `_reduction_nest` and `_all_but_last`.

    The last reduction step is taken in the store (`acc + a * b` written out): were the store a
    plain copy of the tile, gcc would turn it into a memcpy, which keeps the tile in memory
    instead of registers for the whole k loop (3x slower; an epilogue hides this, a bare product
    does not). A caller whose store computes on the value turns this off (`peel_last`): the
    reduction is then one loop nest rather than one per axis, and its C a third or less."""
    acc = te.Buffer(ctx.fresh("acc"), (rows * nr,), spec.dtype, scope="local")
    z = index_var(ctx, "j")
    init = For(z, _index(0), _index(rows * nr), Store(acc, (z,), te.const(0, spec.dtype)), ForKind.VECTORIZED)
    readers = [spec.a_row(b, m0 + i) for i in range(rows)]
    if not spec.k_total:
        return Allocate(acc, seq(init, _store_tile(ctx, spec, lambda i, j: acc[j + i * nr], b, nb, m0, rows, nr, shared)))

    def step(ks: Sequence[te.PrimExpr]) -> Stmt:
        a_vars = [te.Var(ctx.fresh(f"a{i}"), spec.dtype) for i in range(rows)]
        fmas: list[Stmt] = []
        for i, a in enumerate(a_vars):
            j = index_var(ctx, "j")
            cell = (j + i * nr,)
            fmas.append(For(j, _index(0), _index(nr),
                            Store(acc, cell, acc[cell] + a * panel(ks, j)), ForKind.VECTORIZED))
        return let_all([(a, te.cast(spec.dtype, r.load(ks))) for a, r in zip(a_vars, readers)], seq(*fmas))

    if not spec.peel_last:
        lets = [let for r in readers for let in r.lets]
        store_all = _store_tile(ctx, spec, lambda i, j: acc[j + i * nr], b, nb, m0, rows, nr, shared)
        if part is None:
            whole = _reduction_nest(ctx, spec.k, step, unroll)
            return Allocate(acc, seq(init, let_all(lets, seq(whole, store_all))))
        return Allocate(acc, seq(_resume(ctx, part, acc, init), let_all(lets, seq(
            _chunk_of_reduction(ctx, spec.k, part, step, unroll), _suspend(ctx, part, acc, store_all)))))

    last = [_index(extent - 1) for extent in spec.k]
    last_a = [te.Var(ctx.fresh(f"a{i}"), spec.dtype) for i in range(rows)]

    def result(i: int, j: te.PrimExpr) -> te.PrimExpr:
        return acc[j + i * nr] + last_a[i] * panel(last, j)

    store = let_all([(a, te.cast(spec.dtype, r.load(last))) for a, r in zip(last_a, readers)],
                    _store_tile(ctx, spec, result, b, nb, m0, rows, nr, shared))
    lets = [let for r in readers for let in r.lets]
    return Allocate(acc, seq(init, let_all(lets, seq(_all_but_last(ctx, spec.k, step, unroll), store))))


def _resume(ctx: KernelContext, part: KPart, acc: te.Buffer, init: Stmt) -> Stmt:
    """The tile's accumulators: zeros in the first chunk, the partial sums after."""
    z = index_var(ctx, "j")
    load = For(z, _index(0), _index(acc.shape[0]), Store(acc, (z,), part.partial[part.slot, part.tile, z]), ForKind.VECTORIZED)
    return IfThenElse(te.eq(part.var, _index(0)), init, load)


def _suspend(ctx: KernelContext, part: KPart, acc: te.Buffer, store_all: Stmt) -> Stmt:
    """The tile's partial sums kept for the next chunk, or stored after the last."""
    z = index_var(ctx, "j")
    keep = For(z, _index(0), _index(acc.shape[0]), Store(part.partial, (part.slot, part.tile, z), acc[z]), ForKind.VECTORIZED)
    return IfThenElse(part.var < part.count - 1, keep, store_all)


def _chunk_of_reduction(
    ctx: KernelContext, extents: Sequence[int], part: KPart, body: Callable[[Sequence[te.PrimExpr]], Stmt],
    unroll: int = 1,
) -> Stmt:
    """`body` at every index of chunk `part.var` of the loop nest over `extents`, in order."""
    step = extents[part.axis] // part.count
    chunk = [step if i == part.axis else extent for i, extent in enumerate(extents)]

    def shifted(ks: Sequence[te.PrimExpr]) -> Stmt:
        return body([k + part.var * step if i == part.axis else k for i, k in enumerate(ks)])

    return _reduction_nest(ctx, chunk, shifted, unroll)


def _reduction_nest(ctx: KernelContext, extents: Sequence[int], step: Callable[[Sequence[te.PrimExpr]], Stmt],
                    unroll: int = 1) -> Stmt:
    """The tile's reduction loops, `step` at every index in order, rolled (see ForKind.ROLLED);
    with `unroll` dividing the innermost extent, that loop is taken `unroll` steps at a time, the
    steps written out by the C compiler."""
    if not extents or unroll <= 1 or extents[-1] % unroll:
        return loop_nest(ctx, "k", extents, step, ForKind.ROLLED)
    vars_ = [index_var(ctx, f"k{i}") for i in range(len(extents))]
    inner = index_var(ctx, f"k{len(extents)}")
    last = vars_[-1] * _index(unroll) + inner if extents[-1] > unroll else inner
    stmt: Stmt = For(inner, _index(0), _index(unroll), step([*vars_[:-1], last]), ForKind.UNROLLED)
    if extents[-1] > unroll:
        stmt = For(vars_[-1], _index(0), _index(extents[-1] // unroll), stmt, ForKind.ROLLED)
    for var, extent in reversed(list(zip(vars_[:-1], extents[:-1]))):
        stmt = For(var, _index(0), _index(extent), stmt, ForKind.ROLLED)
    return stmt


def _all_but_last(ctx: KernelContext, extents: Sequence[int], body: Callable[[Sequence[te.PrimExpr]], Stmt],
                  unroll: int = 1) -> Stmt:
    """`body` at every index of the loop nest over `extents` but the last one, in order: one
    nest whose innermost loop stops a step early on the outer loops' last pass, so the body's C
    is written once (a nest per axis wrote it once per axis: four times for a 3x3 layer). With
    `unroll` dividing the innermost extent, the passes before the last take that loop unrolled
    (see `_reduction_nest`) and the last one keeps it rolled."""
    if not extents or any(extent == 0 for extent in extents):
        return seq()
    outer = [index_var(ctx, f"k{i}") for i in range(len(extents) - 1)]
    last_pass: te.PrimExpr | None = None
    for var, extent in zip(outer, extents):
        at_end = te.eq(var, _index(extent - 1))
        last_pass = at_end if last_pass is None else te.logical_and(last_pass, at_end)
    inner = index_var(ctx, f"k{len(extents) - 1}")
    whole = _index(extents[-1])
    if last_pass is None:
        nest: Stmt = For(inner, _index(0), _index(extents[-1] - 1), body([inner]), ForKind.ROLLED)
    elif unroll > 1 and extents[-1] % unroll == 0:
        steps = index_var(ctx, f"k{len(extents)}")
        at = inner * _index(unroll) + steps if extents[-1] > unroll else steps
        unrolled: Stmt = For(steps, _index(0), _index(unroll), body([*outer, at]), ForKind.UNROLLED)
        if extents[-1] > unroll:
            unrolled = For(inner, _index(0), _index(extents[-1] // unroll), unrolled, ForKind.ROLLED)
        last = index_var(ctx, f"k{len(extents) - 1}")
        nest = IfThenElse(last_pass, For(last, _index(0), _index(extents[-1] - 1), body([*outer, last]), ForKind.ROLLED),
                          unrolled)
    else:
        # Bound before the loop: gcc drops `#pragma GCC unroll` from a loop whose test branches.
        stop = index_var(ctx, "k_stop")
        nest = LetStmt(stop, te.select(last_pass, _index(extents[-1] - 1), whole),
                       For(inner, _index(0), stop, body([*outer, inner]), ForKind.ROLLED))
    for var, extent in reversed(list(zip(outer, extents))):
        nest = For(var, _index(0), _index(extent), nest, ForKind.ROLLED)
    return nest


def _store_tile(
    ctx: KernelContext, spec: GemmSpec, result: Callable[[int, te.PrimExpr], te.PrimExpr],
    b: te.Var, nb: te.Var, m0: te.PrimExpr, rows: int, nr: int,
    shared: tuple[int, te.PrimExpr] | None = None,
) -> Stmt:
    """Stores `result(row in tile, column in panel)` of every row, skipping columns past n, and
    the first rows only under `shared`'s condition."""
    count, condition = shared if shared is not None else (0, te.const(True))

    def guarded(i: int, stmt: Stmt) -> Stmt:
        return IfThenElse(condition, stmt) if i < count else stmt

    if spec.store_row is not None:
        store_row = spec.store_row
        return seq(*(guarded(i, store_row(b, m0 + i, nb * nr, nr, lambda j, i=i: result(i, j))) for i in range(rows)))
    full, rem = divmod(spec.n, nr)

    def rows_of(width: int) -> Stmt:
        out: list[Stmt] = []
        for i in range(rows):
            j = index_var(ctx, "j")
            out.append(guarded(i, For(j, _index(0), _index(width),
                                      spec.store(b, m0 + i, nb * nr + j, result(i, j)), ForKind.VECTORIZED)))
        return seq(*out)

    if full and rem:
        return IfThenElse(nb < full, rows_of(nr), rows_of(rem))
    return rows_of(nr if full else rem)
