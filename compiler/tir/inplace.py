"""Which inputs of a kernel its output may overwrite: the facts the memory planner needs to put
a result in the buffer of an input that dies at that call.

A residual block ends in `relu(conv(x) + shortcut)`: the fused kernel reads `shortcut[i]` only
to compute `out[i]`, so `out` could live in `shortcut`'s bytes once nothing later reads the
shortcut. Without that, the block's two largest tensors (the shortcut and the sum) and the
convolution's input are live at once: a third of ResNet-50's workspace.

An input `P` may be written over by an output `O` when, in the kernel's loop nest:
* both have the same dtype and rank, and each dim static and equal in both, or known only at
  run time in both (those may differ here: the dynamic executor shares the two buffers only
  when the run's shapes are equal, compiler/backend/aot_dynamic.py);
* `O` is never read, and neither is passed to an extern call;
* every read of `P` is inside the value of a store to `O` at exactly the index stored, and
  every store to `O` reads `P` there: so `P[i]` is read while `O[i]` is computed, by the
  statement that writes `O[i]`, and by nothing else.
Under equal shapes, a read of `P` that broadcasts a run-time dim (`d == 1 ? 0 : i`, from
compiler/ops/broadcast.py) reads at `i`: when `d` is 1, so is `O`'s dim, whose only index is 0.
A read may also be a copy of `P[i]` into a local array, `for j: L[j] = P[I(j)]`, when a later
loop of the same sequence stores `O[I(j)]` for every j of the same range: a float16 epilogue
staged through local arrays (compiler/ops/kernels/half_stages.py) reads a tile row's residual
that way, all of it before the row's stores.
This rests on one more property the loop nests keep and this analysis cannot see: each output
element is stored once (an anchor's epilogue is applied at its one store of each element,
compiler/tir/compute.py). A second store of `O[i]` would read the first one's result as `P[i]`.

The C kernel names such a pair without `restrict` (codegen_c.py), since the two then may be
one buffer.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from compiler.tir.analysis import expr_equal, post_order, stmt_exprs, substitute, walk_stmts
from compiler.tir.expr import Binary, Buffer, CallExtern, Const, Load, PrimExpr, Select, as_expr
from compiler.tir.stmt import For, PrimFunc, Seq, Stmt, Store


_FOUND: WeakKeyDictionary[PrimFunc, dict[int, int]] = WeakKeyDictionary()


def inplace_inputs(func: PrimFunc) -> dict[int, int]:
    """For each output (by position among the outputs) an input (by position among the
    inputs) its buffer may be, as the module docstring says; at most one input per output,
    each input for at most one output. Asked by the C signature and the executor alike, so
    kept per function."""
    found = _FOUND.get(func)
    if found is None:
        found = _FOUND[func] = _find(func)
    return dict(found)


def shared_params(func: PrimFunc) -> set[int]:
    """Positions in `func.params` of the buffers that may be one buffer."""
    return {k for o, i in inplace_inputs(func).items() for k in (i, func.num_inputs + o)}


def _find(func: PrimFunc) -> dict[int, int]:
    stores: dict[Buffer, list[Store]] = {}
    loads: dict[Buffer, list[tuple[Load, Store | None]]] = {}
    passed: set[Buffer] = set()
    staged = _staged_reads(func.body)
    for stmt in walk_stmts(func.body):
        if isinstance(stmt, Store) and id(stmt) in staged:
            target, read = staged[id(stmt)]
            loads.setdefault(read.buffer, []).append((read, target))
            continue
        if isinstance(stmt, Store):
            stores.setdefault(stmt.buffer, []).append(stmt)
            # Only a store's value counts as read "where stored", not its indices.
            roots = [(as_expr(i), None) for i in stmt.indices] + [(as_expr(stmt.value), stmt)]
        else:
            roots = [(e, None) for e in stmt_exprs(stmt)]
        for root, owner in roots:
            for e in post_order(root):
                if isinstance(e, Load):
                    loads.setdefault(e.buffer, []).append((e, owner))
                elif isinstance(e, CallExtern):
                    passed.update(a for a in e.args if isinstance(a, Buffer))
    pairs: dict[int, int] = {}
    taken: set[int] = set()
    for o, out in enumerate(func.outputs):
        if out in loads or out in passed or out not in stores:
            continue
        for i, inp in enumerate(func.inputs):
            if i in taken or inp in passed or not _same_layout(inp, out) or inp in func.outputs:
                continue
            if _read_only_where_stored(loads.get(inp, []), stores[out], inp):
                pairs[o] = i
                taken.add(i)
                break
    return pairs


def _staged_reads(body: Stmt) -> dict[int, tuple[Store, Load]]:
    """The copies `L[j] = P[I(j)]` into a local array (by id of the copy's store) that a later
    loop of the same sequence follows with a store `O[I(j)]` over the same range: that store,
    and the read with the copy's loop variable renamed to the store's."""
    found: dict[int, tuple[Store, Load]] = {}
    for seq_ in walk_stmts(body):
        if not isinstance(seq_, Seq):
            continue
        for k, first in enumerate(seq_.stmts):
            copy = first.body if isinstance(first, For) else None
            if not (isinstance(copy, Store) and copy.buffer.scope == "local" and isinstance(copy.value, Load)
                    and copy.value.buffer.scope == "global" and len(copy.indices) == 1
                    and as_expr(copy.indices[0]) is first.var):
                continue
            for later in seq_.stmts[k + 1:]:
                store = later.body if isinstance(later, For) else None
                if not (isinstance(later, For) and isinstance(store, Store) and store.buffer.scope == "global"
                        and expr_equal(as_expr(later.begin), as_expr(first.begin))
                        and expr_equal(as_expr(later.extent), as_expr(first.extent))):
                    continue
                read = substitute(copy.value, {first.var: later.var})
                assert isinstance(read, Load)
                if _same_index(read.indices, store.indices, read.buffer.shape):
                    found[id(copy)] = (store, read)
                    break
    return found


def _same_layout(a: Buffer, b: Buffer) -> bool:
    """Same dtype and rank, each dim static in both and equal, or known only at run time in
    both (the executor compares those). A static dim against a run-time one is a broadcast
    operand (a bias's 1 against a `?` image height), never the output's own bytes."""
    return a.dtype == b.dtype and len(a.shape) == len(b.shape) and all(
        isinstance(x, PrimExpr) and isinstance(y, PrimExpr)
        or not isinstance(x, PrimExpr) and not isinstance(y, PrimExpr) and x == y
        for x, y in zip(a.shape, b.shape))


def _read_only_where_stored(reads: list[tuple[Load, Store | None]], stores: list[Store], inp: Buffer) -> bool:
    if not reads:
        return False  # nothing to gain, and an unread input may be read by a later call
    for load, store in reads:
        if store is None or not any(s is store for s in stores) or not _same_index(load.indices, store.indices,
                                                                                      inp.shape):
            return False
    read_by = {id(store) for _, store in reads}
    return all(id(s) in read_by for s in stores)


def _same_index(a: tuple[PrimExpr, ...], b: tuple[PrimExpr, ...], shape: tuple[PrimExpr | int, ...]) -> bool:
    """Equal indices; along a dim of extent 1 every index in bounds is 0 (a broadcast reads
    `0` where the store says `b`)."""
    return len(a) == len(b) == len(shape) and all(
        (not isinstance(d, PrimExpr) and d == 1) or expr_equal(_unbroadcast(as_expr(x), d), as_expr(y))
        for x, y, d in zip(a, b, shape))


def _unbroadcast(index: PrimExpr, dim: PrimExpr | int) -> PrimExpr:
    """`i` for the read index `dim == 1 ? 0 : i` of a run-time dim, else `index`."""
    if not (isinstance(index, Select) and isinstance(dim, PrimExpr)):
        return index
    cond, zero = index.cond, index.t
    if (isinstance(cond, Binary) and cond.op == "==" and expr_equal(cond.a, dim)
            and isinstance(cond.b, Const) and cond.b.value == 1 and isinstance(zero, Const) and zero.value == 0):
        return index.f
    return index
