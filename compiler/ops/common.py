"""Helpers shared by several op families: type relation checks and loop index arithmetic."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from compiler.diagnostics import UnsupportedError
from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, Type
from compiler.ops.registry import TypeRelationError
from compiler.tir.analysis import expr_equal
from compiler.tir.expr import Const, PrimExpr, as_expr, cast
from compiler.tir.simplify import simplify_expr


def tensor_arg(types: Sequence[Type], index: int, op: str) -> TensorType:
    """Argument `index` as a TensorType, or a TypeRelationError naming the op and the type."""
    if index >= len(types):
        raise TypeRelationError(f"{op} expects at least {index + 1} arguments, got {len(types)}")
    ty = types[index]
    if not isinstance(ty, TensorType):
        raise TypeRelationError(f"{op} expects a tensor as argument {index}, got {ty}")
    return ty


def check_arity(types: Sequence[Type], n: int, op: str) -> None:
    if len(types) != n:
        raise TypeRelationError(f"{op} expects {n} arguments, got {len(types)}")


def same_dtype(a: TensorType, b: TensorType, op: str) -> str:
    if a.dtype != b.dtype:
        raise TypeRelationError(f"{op} needs operands of one dtype, got {a} and {b}")
    return a.dtype


def normalize_axis(axis: int, ndim: int, op: str) -> int:
    """A non-negative axis in [0, ndim), accepting Python-style negative values."""
    if not -ndim <= axis < ndim:
        raise TypeRelationError(f"{op}: axis {axis} is out of range for rank {ndim}")
    return axis + ndim if axis < 0 else axis


def dims_equal(a: Dim, b: Dim) -> bool:
    """Two dims that may be the same at run time (`?` unifies with anything)."""
    return a is ANY or b is ANY or a == b


def broadcast_shapes(a: TensorType, b: TensorType, op: str) -> tuple[Dim, ...]:
    """numpy broadcasting of two shapes; `?` against n gives n when n != 1, else `?`."""
    ra, rb = list(a.shape), list(b.shape)
    n = max(len(ra), len(rb))
    ra = [1] * (n - len(ra)) + ra
    rb = [1] * (n - len(rb)) + rb
    out: list[Dim] = []
    for da, db in zip(ra, rb):
        if da is ANY or db is ANY:
            other = db if da is ANY else da
            out.append(other if other is not ANY and other != 1 else ANY)
        elif da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            raise TypeRelationError(f"{op}: shapes of {a} and {b} do not broadcast")
    return tuple(out)


def product(dims: Sequence[Dim]) -> Dim:
    """Product of dims, `?` if any is unknown."""
    n = 1
    for d in dims:
        if d is ANY:
            return ANY
        assert isinstance(d, int)
        n *= d
    return n


# --- index arithmetic for loop lowerings ----------------------------------------------------------


def static_dims(shape: Sequence[object], op: str) -> tuple[int, ...]:
    """`shape` as ints; a loop lowering of `op` needs every extent known."""
    dims: list[int] = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int):
            shown = ", ".join(str(x) if isinstance(x, int) else "?" for x in shape)
            raise UnsupportedError(f"{op}: the loop lowering needs static shapes, got ({shown})")
        dims.append(d)
    return tuple(dims)


def row_major_offset(idx: Sequence[PrimExpr], shape: Sequence[int]) -> PrimExpr:
    """The linear offset of index `idx` in a row-major tensor of `shape`."""
    offset: PrimExpr = Const(0)
    for i, extent in zip(idx, shape):
        offset = offset * extent + i
    return offset


def row_major_index(offset: PrimExpr, shape: Sequence[int]) -> tuple[PrimExpr, ...]:
    """The index of linear `offset` in a row-major tensor of `shape` (inverse of row_major_offset).

    The outermost coordinate needs no `%` and the innermost no `//`, which keeps the common
    two-dim case down to one division and one modulo.
    """
    out: list[PrimExpr] = []
    stride = 1
    for k in reversed(range(len(shape))):
        coord = offset // stride
        if k > 0:
            coord = coord % shape[k]
        out.append(coord)
        stride *= shape[k]
    return tuple(reversed(out))


def same_dim(a: object, b: object) -> bool:
    """Two dims are known equal: equal ints, or loop-level expressions equal after
    simplification (the dims of a kernel with `?` dims)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, (int, PrimExpr)) and isinstance(b, (int, PrimExpr)):
        x, y = simplify_expr(as_expr(a)), simplify_expr(as_expr(b))
        return expr_equal(x, y) or expr_equal(simplify_expr(x - y), Const(0, x.dtype))
    return False


def reshape_index_dynamic(
    idx: Sequence[PrimExpr], out_shape: Sequence[object], in_shape: Sequence[object], op: str
) -> tuple[PrimExpr, ...]:
    """`reshape_index` where the leading dims may be known only at run time: dims the two
    shapes share in front (a batch) map directly, the rest must be static."""
    lead = 0
    while lead < min(len(out_shape), len(in_shape)) and same_dim(out_shape[lead], in_shape[lead]):
        if isinstance(out_shape[lead], int) and isinstance(in_shape[lead], int):
            break  # static from here on: the static mapping handles the rest, 1s included
        lead += 1
    rest_out, rest_in = out_shape[lead:], in_shape[lead:]
    if all(isinstance(d, int) and not isinstance(d, bool) for d in (*rest_out, *rest_in)):
        rest = reshape_index(idx[lead:], rest_out, rest_in)  # type: ignore[arg-type]  # ints
    else:
        rest = flat_reshape_index(idx[lead:], rest_out, rest_in)
    return (*idx[:lead], *rest)


def flat_reshape_index(idx: Sequence[PrimExpr], out_shape: Sequence[object], in_shape: Sequence[object]
                       ) -> tuple[PrimExpr, ...]:
    """The reshape mapping through the flat position, for dims known only at run time (int64
    expressions): a division and a remainder per input dim, where `reshape_index` can often
    map dims directly."""
    flat: PrimExpr = Const(0, "int64")
    for i, d in zip(idx, out_shape):
        flat = flat * _index_expr(d) + cast("int64", i)
    out: list[PrimExpr] = []
    for d in reversed(in_shape[1:]):
        out.append(flat % _index_expr(d))
        flat = flat // _index_expr(d)
    out.append(flat)
    return tuple(reversed(out)) if in_shape else ()


def _index_expr(d: object) -> PrimExpr:
    return Const(d, "int64") if isinstance(d, int) else cast("int64", d)  # type: ignore[arg-type]  # PrimExpr


def reshape_index(
    idx: Sequence[PrimExpr], out_shape: Sequence[int], in_shape: Sequence[int]
) -> tuple[PrimExpr, ...]:
    """The input index that a row-major reshape from `in_shape` to `out_shape` reads for `idx`.

    Both shapes are cut into the shortest runs of dims with equal products (size-1 dims read
    index 0 and belong to no run); only inside a run is the index flattened and split again, so
    dims that reshape leaves alone (squeeze, expand_dims, batch_flatten's batch) map directly.
    """
    if 0 in out_shape or 0 in in_shape:
        return tuple(Const(0) for _ in in_shape)  # no element exists: the loops never run
    out_dims = [k for k, d in enumerate(out_shape) if d != 1]
    in_dims = [k for k, d in enumerate(in_shape) if d != 1]
    result: list[PrimExpr] = [Const(0)] * len(in_shape)
    a = b = 0
    while a < len(out_dims) and b < len(in_dims):
        run_out, run_in = [out_dims[a]], [in_dims[b]]
        size_out, size_in = out_shape[out_dims[a]], in_shape[in_dims[b]]
        a, b = a + 1, b + 1
        while size_out != size_in:
            if size_out < size_in:
                run_out.append(out_dims[a])
                size_out *= out_shape[out_dims[a]]
                a += 1
            else:
                run_in.append(in_dims[b])
                size_in *= in_shape[in_dims[b]]
                b += 1
        if len(run_out) == 1 and len(run_in) == 1:
            result[run_in[0]] = idx[run_out[0]]
            continue
        offset = row_major_offset([idx[k] for k in run_out], [out_shape[k] for k in run_out])
        for k, coord in zip(run_in, row_major_index(offset, [in_shape[k] for k in run_in])):
            result[k] = coord
    return tuple(result)


def batch_first(*layout_keys: str) -> Callable[[Attrs, int], bool]:
    """An `extras["batch_rows"]` predicate: each result row along axis 0 depends only on the
    same row of the inputs when every named layout attr puts the batch (N) first ("" means
    the data layout)."""

    def rows(attrs: Attrs, rank: int) -> bool:
        return all(not str(attrs[key]) or str(attrs[key]).startswith("N") for key in layout_keys)

    return rows


def rows_unless_axis_zero(attrs: Attrs, rank: int) -> bool:
    """An `extras["batch_rows"]` predicate for ops working along `axis` (softmax): rows are
    independent when that axis is not the first."""
    axis = int(attrs["axis"])  # type: ignore[call-overload]  # an int attr
    return rank > 1 and (axis + rank if axis < 0 else axis) != 0
