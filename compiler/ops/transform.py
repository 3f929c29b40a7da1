"""Shape transforms: reshape, transpose, squeeze, expand_dims, broadcast_to, layout_transform,
concatenate, stack and split.

Slicing and gathering (strided_slice, take) live in slicing.py, tensor creation (zeros, ones,
full, *_like) in creation.py. Attribute names, order and defaults are TVM's
(`include/tvm/relay/attrs/transform.h`). A tuple argument (concatenate, stack) reaches the type
relation as a TupleType and the reference as a sequence of arrays.

Loops: every op here is a compute over the output index that reads one input element; the
reshape family maps indices with `common.reshape_index`, and the tuple ops choose their field
with selects whose untaken branches are never evaluated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, MAX_RANK, Dim, TensorType, TupleType, Type
from compiler.ops.broadcast import broadcast_index
from compiler.ops.domain import Domain, Draw, kind_dtype, tensor_shape
from compiler.ops.elemwise import ANY_DTYPE
from compiler.ops.common import (
    check_arity,
    dims_equal,
    normalize_axis,
    product,
    reshape_index_dynamic,
    tensor_arg,
)
from compiler.ops.layout import Layout, parse_layout, transform_array, transform_shape
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops import shape_rules as sr
from compiler.tir.compute import Index, TensorView
from compiler.tir.expr import Const, PrimExpr, eq, select

F32 = "float32"


def _show(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _tensor_out(out_type: Type, op: str) -> TensorType:
    if not isinstance(out_type, TensorType):
        raise TypeRelationError(f"{op}: expected a tensor result, got {out_type}")
    return out_type


Compute = Callable[[Index, Sequence[TensorView], Attrs, Type], PrimExpr]


def reshape_compute(op: str) -> Compute:
    """The compute of an op that only reinterprets its input's row-major data in a new shape."""

    def compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
        data = inputs[0]
        out_shape = _tensor_out(out_type, op).shape
        return data[reshape_index_dynamic(idx, out_shape, data.shape, op)]

    return compute


def any_tensor(d: Draw, shape: Sequence[int]) -> TensorType:
    """A tensor of `shape` of any dtype: what the data-movement ops take."""
    return TensorType(tuple(shape), kind_dtype(d, ANY_DTYPE))


def factorize(d: Draw, n: int, parts: int) -> list[int]:
    """`n` as a product of `parts` positive factors, each a divisor drawn in turn."""
    out = []
    for _ in range(parts - 1):
        divisors = [k for k in range(1, n + 1) if n % k == 0]
        out.append(d.choice(divisors))
        n //= out[-1]
    return out + [n]


# --- reshape --------------------------------------------------------------------------------------


def reshape_dims(shape: Sequence[Dim], newshape: Sequence[int], allowzero: bool) -> tuple[Dim, ...]:
    """The output shape of reshape, applying TVM's special codes left to right.

    0 copies the input dim (a real 0 with allowzero), -1 is inferred from the remaining element
    count, -2 copies all remaining input dims, -3 merges the next two input dims, -4 splits the
    next input dim into the two values that follow (one may be -1). Dims copied, merged or split
    from the input do not take part in the -1 inference, as in TVM.
    """
    op = "reshape"
    rank = len(shape)
    out: list[Dim] = []
    used_in: set[int] = set()  # input dims accounted for by 0 / -2 / -3 / -4
    used_out: set[int] = set()  # output dims that came from them
    infer_at: int | None = None
    src = 0
    i = 0

    def source(count: int, code: int) -> None:
        if src + count > rank:
            raise TypeRelationError(
                f"{op}: newshape {list(newshape)} code {code} runs past the input rank {rank}"
            )

    while i < len(newshape):
        code = newshape[i]
        if code > 0 or (code == 0 and allowzero):
            out.append(code)
            src += 1
        elif code == 0:
            source(1, code)
            used_in.add(src)
            used_out.add(len(out))
            out.append(shape[src])
            src += 1
        elif code == -1:
            if infer_at is not None:
                raise TypeRelationError(f"{op}: newshape {list(newshape)} has more than one -1")
            infer_at = len(out)
            out.append(1)
            src += 1
        elif code == -2:
            while src < rank:
                used_in.add(src)
                used_out.add(len(out))
                out.append(shape[src])
                src += 1
        elif code == -3:
            source(2, code)
            used_in.update((src, src + 1))
            used_out.add(len(out))
            out.append(product(shape[src : src + 2]))
            src += 2
        elif code == -4:
            source(1, code)
            if i + 2 >= len(newshape):
                raise TypeRelationError(f"{op}: newshape {list(newshape)} needs two values after -4")
            whole, (left, right) = shape[src], newshape[i + 1 : i + 3]
            if left == -1 and right == -1 or min(left, right) < -1 or 0 in (left, right):
                raise TypeRelationError(
                    f"{op}: newshape {list(newshape)} has an invalid -4 split [{left}, {right}]"
                )
            if whole is not ANY:
                assert isinstance(whole, int)
                if left == -1:
                    left = whole // right
                elif right == -1:
                    right = whole // left
                if left * right != whole:
                    raise TypeRelationError(
                        f"{op}: cannot split dim {whole} of {_show(shape)} into [{newshape[i + 1]}, "
                        f"{newshape[i + 2]}]"
                    )
            else:
                left, right = (ANY if left == -1 else left), (ANY if right == -1 else right)
            used_in.add(src)
            used_out.update((len(out), len(out) + 1))
            out.extend((left, right))
            src += 1
            i += 2
        else:
            raise TypeRelationError(f"{op}: unsupported value {code} in newshape {list(newshape)}")
        i += 1
    if infer_at is not None:
        rest_in = product([d for k, d in enumerate(shape) if k not in used_in])
        rest_out = product([d for k, d in enumerate(out) if k not in used_out and k != infer_at])
        if rest_in is ANY or rest_out is ANY:
            out[infer_at] = ANY
        else:
            assert isinstance(rest_in, int) and isinstance(rest_out, int)
            if rest_out == 0 or rest_in % rest_out:
                raise TypeRelationError(
                    f"{op}: cannot infer the -1 of newshape {list(newshape)} for {_show(shape)}"
                )
            out[infer_at] = rest_in // rest_out
    total_in, total_out = product(shape), product(out)
    if total_in is not ANY and total_out is not ANY and total_in != total_out:
        raise TypeRelationError(
            f"{op}: cannot reshape {_show(shape)} ({total_in} elements) to newshape {list(newshape)} "
            f"= {_show(out)} ({total_out} elements)"
        )
    return tuple(out)


def _reshape_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """reshape_dims over run-time dims: the same codes, with the -1 (and a -1 inside a -4
    split) divided out of the element count when the model runs."""
    shape = sr.dims(inputs[0])
    newshape, allowzero = attrs["newshape"], bool(attrs["allowzero"])
    out: list[sr.Dim] = []
    used_in: set[int] = set()
    used_out: set[int] = set()
    infer_at: int | None = None
    src = i = 0
    while i < len(newshape):
        code = newshape[i]
        if code > 0 or (code == 0 and allowzero):
            out.append(code)
            src += 1
        elif code == 0:
            used_in.add(src)
            used_out.add(len(out))
            out.append(shape[src])
            src += 1
        elif code == -1:
            infer_at = len(out)
            out.append(1)
            src += 1
        elif code == -2:
            used_in.update(range(src, len(shape)))
            used_out.update(range(len(out), len(out) + len(shape) - src))
            out.extend(shape[src:])
            src = len(shape)
        elif code == -3:
            used_in.update((src, src + 1))
            used_out.add(len(out))
            out.append(sr.product(shape[src : src + 2]))
            src += 2
        elif code == -4:
            whole = sr.int64(shape[src])
            left, right = newshape[i + 1 : i + 3]
            used_in.add(src)
            used_out.update((len(out), len(out) + 1))
            out.extend((whole // right if left == -1 else left, whole // left if right == -1 else right))
            src += 1
            i += 2
        i += 1
    if infer_at is not None:
        rest_in = sr.product([d for k, d in enumerate(shape) if k not in used_in])
        rest_out = sr.product([d for k, d in enumerate(out) if k not in used_out and k != infer_at])
        out[infer_at] = rest_in // rest_out
    return [sr.fill(out_type, out)]


def _reshape_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "reshape")
    data = tensor_arg(types, 0, "reshape")
    return TensorType(reshape_dims(data.shape, attrs["newshape"], bool(attrs["allowzero"])), data.dtype)


def _reshape_domain(d: Draw) -> Sample:
    """A newshape built left to right: codes that consume input dims in order (0 copies one,
    -3 merges two, -4 splits one, maybe with a -1), then -2 (the rest) or positive dims whose
    product is the rest, one of them maybe -1."""
    shape = tensor_shape(d, max_rank=4)
    allowzero = d.choice((0, 0, 1))
    codes: list[int] = []
    src = 0
    while src < len(shape) and d.integer(0, 2) > 0:
        form = d.integer(0, 2)
        if form == 0 and not allowzero:
            codes.append(0)
            src += 1
        elif form == 1 and src + 1 < len(shape):
            codes.append(-3)
            src += 2
        else:
            left, right = factorize(d, shape[src], 2)
            split = d.choice(((left, right), (-1, right), (left, -1)))
            codes.extend((-4, *split))
            src += 1
    rest = int(np.prod(shape[src:], dtype=np.int64))
    if src < len(shape) and d.boolean():
        codes.append(-2)
    else:
        tail = factorize(d, rest, d.integer(0 if rest == 1 else 1, 3))
        if tail and -1 not in codes and d.boolean():
            tail[d.integer(0, len(tail) - 1)] = -1
        codes.extend(tail)
    return Sample((any_tensor(d, shape),), {"newshape": codes, "allowzero": allowzero})


register(
    OpDef(
        name="reshape",
        num_inputs=1,
        type_rel=_reshape_rel,
        pattern=OpPattern.INJECTIVE,
        reference=lambda a, attrs: a[0].reshape(
            reshape_dims(a[0].shape, attrs["newshape"], bool(attrs["allowzero"]))
        ),
        attrs=(AttrSpec("newshape", "ints", REQUIRED), AttrSpec("allowzero", "int", 0)),
        reshape_only=True,
        compute=reshape_compute("reshape"),
        shape_func=_reshape_rule,
        samples=(
            Sample((TensorType((2, 3, 4), F32),), {"newshape": [0, -1]}),
            Sample((TensorType((2, 3, 4), F32),), {"newshape": [-3, -2]}),
            Sample((TensorType((2, 3, 4), F32),), {"newshape": [-4, 2, -1, -2]}),
            Sample((TensorType((2, 3, 4), F32),), {"newshape": [6, -1]}),
            Sample((TensorType((2, 6), F32),), {"newshape": [3, 1, 4]}),
        ),
        domain=Domain(_reshape_domain),
    )
)


# --- transpose ------------------------------------------------------------------------------------


def transpose_axes(ndim: int, axes: Sequence[int] | None) -> tuple[int, ...]:
    """The permutation transpose applies: reversed when axes is None or empty."""
    if not axes:
        return tuple(range(ndim - 1, -1, -1))
    if len(axes) != ndim:
        raise TypeRelationError(f"transpose: axes {list(axes)} must have one entry per dim (rank {ndim})")
    perm = tuple(normalize_axis(a, ndim, "transpose") for a in axes)
    if len(set(perm)) != ndim:
        raise TypeRelationError(f"transpose: axes {list(axes)} is not a permutation")
    return perm


def _transpose_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "transpose")
    data = tensor_arg(types, 0, "transpose")
    perm = transpose_axes(data.ndim, attrs["axes"])
    return TensorType(tuple(data.shape[p] for p in perm), data.dtype)


def _transpose_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    shape = sr.dims(inputs[0])
    return [tuple(shape[p] for p in transpose_axes(len(shape), attrs["axes"]))]


def _transpose_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    data = inputs[0]
    source: list[PrimExpr] = [Const(0)] * data.ndim
    for k, axis in enumerate(transpose_axes(data.ndim, attrs["axes"])):
        source[axis] = idx[k]
    return data[tuple(source)]


def _transpose_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, empty=True)
    form = d.integer(0, 3)
    axes: tuple[int, ...] | None = None if form == 0 else ()
    if form > 1:
        remaining, perm = list(range(len(shape))), []
        while remaining:
            perm.append(remaining.pop(d.integer(0, len(remaining) - 1)))
        axes = tuple(a - len(shape) if d.boolean() else a for a in perm)
    return Sample((any_tensor(d, shape),), {"axes": axes})


register(
    OpDef(
        name="transpose",
        num_inputs=1,
        type_rel=_transpose_rel,
        pattern=OpPattern.INJECTIVE,
        reference=lambda a, attrs: np.transpose(a[0], transpose_axes(a[0].ndim, attrs["axes"])),
        attrs=(AttrSpec("axes", "ints", REQUIRED, optional=True),),
        compute=_transpose_compute,
        shape_func=_transpose_rule,
        samples=(
            Sample((TensorType((2, 3, 4), F32),), {"axes": None}),
            Sample((TensorType((2, 3, 4), F32),), {"axes": [0, 2, 1]}),
            Sample((TensorType((2, 3, 4, 5), F32),), {"axes": [-1, 0, -2, 1]}),
        ),
        domain=Domain(_transpose_domain),
    )
)


# --- squeeze / expand_dims ------------------------------------------------------------------------


def squeeze_axes(shape: Sequence[Dim], axis: Sequence[int] | None) -> tuple[int, ...]:
    """The dims squeeze drops: the listed ones (each must be 1), or every dim known to be 1."""
    if axis is None:
        # Which dims are 1 must be known when compiling, so TVM refuses `?` here.
        if any(d is ANY for d in shape):
            raise TypeRelationError(f"squeeze: axis must be given for an input of unknown dims {_show(shape)}")
        return tuple(k for k, d in enumerate(shape) if d == 1)
    dropped = tuple(sorted({normalize_axis(a, len(shape), "squeeze") for a in axis}))
    for k in dropped:
        if shape[k] is not ANY and shape[k] != 1:
            raise TypeRelationError(f"squeeze: axis {k} of {_show(shape)} has size {shape[k]}, not 1")
    return dropped


def _squeeze_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "squeeze")
    data = tensor_arg(types, 0, "squeeze")
    dropped = squeeze_axes(data.shape, attrs["axis"])
    return TensorType(tuple(d for k, d in enumerate(data.shape) if k not in dropped), data.dtype)


def _squeeze_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    if attrs["axis"] is None:
        return sr.static_rule(inputs, attrs, out_type)  # the relation needed every dim
    shape = sr.dims(inputs[0])
    dropped = {sr.normalize_axis(a, len(shape)) for a in attrs["axis"]}
    return [tuple(d for k, d in enumerate(shape) if k not in dropped)]


def _squeeze_domain(d: Draw) -> Sample:
    # Dims of 1 often, so that there is something to squeeze.
    shape = tuple(1 if d.boolean() else n for n in tensor_shape(d, empty=True))
    form = d.integer(0, 3)
    axis: tuple[int, ...] | None = None if form == 0 else ()
    if form > 1:
        units = [k for k, n in enumerate(shape) if n == 1]
        axis = tuple(k - len(shape) if d.boolean() else k for k in d.subset(units))
    return Sample((any_tensor(d, shape),), {"axis": axis})


register(
    OpDef(
        name="squeeze",
        num_inputs=1,
        type_rel=_squeeze_rel,
        pattern=OpPattern.INJECTIVE,
        reference=lambda a, attrs: np.squeeze(a[0], axis=squeeze_axes(a[0].shape, attrs["axis"])),
        attrs=(AttrSpec("axis", "ints", None, optional=True),),
        reshape_only=True,
        compute=reshape_compute("squeeze"),
        shape_func=_squeeze_rule,
        samples=(
            Sample((TensorType((1, 3, 1, 2), F32),)),
            Sample((TensorType((1, 3, 1, 2), F32),), {"axis": [-2]}),
        ),
        domain=Domain(_squeeze_domain),
    )
)


def expand_dims_shape(shape: Sequence[Dim], axis: int, num_newaxis: int) -> tuple[Dim, ...]:
    ndim = len(shape)
    if not -ndim - 1 <= axis <= ndim:
        raise TypeRelationError(
            f"expand_dims: axis {axis} is out of range [{-ndim - 1}, {ndim}] for rank {ndim}"
        )
    if num_newaxis < 0:
        raise TypeRelationError(f"expand_dims: num_newaxis must not be negative, got {num_newaxis}")
    if ndim + num_newaxis > MAX_RANK:
        raise TypeRelationError(
            f"expand_dims: {num_newaxis} new axes on rank {ndim} exceed the maximum rank {MAX_RANK}"
        )
    at = axis + ndim + 1 if axis < 0 else axis
    return tuple(shape[:at]) + (1,) * num_newaxis + tuple(shape[at:])


def _expand_dims_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "expand_dims")
    data = tensor_arg(types, 0, "expand_dims")
    return TensorType(expand_dims_shape(data.shape, attrs["axis"], attrs["num_newaxis"]), data.dtype)


def _expand_dims_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    return [expand_dims_shape(sr.dims(inputs[0]), attrs["axis"], attrs["num_newaxis"])]


def _expand_dims_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, max_rank=3, empty=True)
    axis = d.integer(-len(shape) - 1, len(shape))
    return Sample((any_tensor(d, shape),), {"axis": axis, "num_newaxis": d.choice((1, 1, 0, 2, 3))})


register(
    OpDef(
        name="expand_dims",
        num_inputs=1,
        type_rel=_expand_dims_rel,
        pattern=OpPattern.BROADCAST,
        reference=lambda a, attrs: a[0].reshape(
            expand_dims_shape(a[0].shape, attrs["axis"], attrs["num_newaxis"])
        ),
        attrs=(AttrSpec("axis", "int", REQUIRED), AttrSpec("num_newaxis", "int", 1)),
        reshape_only=True,
        compute=reshape_compute("expand_dims"),
        shape_func=_expand_dims_rule,
        samples=(
            Sample((TensorType((2, 3), F32),), {"axis": 1}),
            Sample((TensorType((2, 3), F32),), {"axis": -1, "num_newaxis": 2}),
        ),
        domain=Domain(_expand_dims_domain),
    )
)


# --- broadcast_to ---------------------------------------------------------------------------------


def _broadcast_to_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "broadcast_to"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    shape = attrs["shape"]
    if any(d < 0 for d in shape):
        raise TypeRelationError(f"{op}: shape {list(shape)} has a negative dim")
    # Align from the right; each data dim must be 1 or the target dim (`?` may be either).
    tail = shape[len(shape) - data.ndim :] if data.ndim <= len(shape) else None
    if tail is None or any(d is not ANY and d != 1 and d != s for d, s in zip(data.shape, tail)):
        raise TypeRelationError(f"{op}: {data} does not broadcast to shape {list(shape)}")
    return TensorType(shape, data.dtype)


def _broadcast_to_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    data = inputs[0]
    return data[broadcast_index(idx, data.shape)]


def _broadcast_to_domain(d: Draw) -> Sample:
    target = tensor_shape(d, empty=True)
    return Sample((any_tensor(d, d.broadcastable(target)),), {"shape": target})


register(
    OpDef(
        name="broadcast_to",
        num_inputs=1,
        type_rel=_broadcast_to_rel,
        pattern=OpPattern.BROADCAST,
        reference=lambda a, attrs: np.broadcast_to(a[0], attrs["shape"]).copy(),
        # TVM shares InitOpAttrs with zeros/ones; broadcast_to keeps the data dtype.
        attrs=(AttrSpec("shape", "ints", REQUIRED), AttrSpec("dtype", "dtype", "")),
        compute=_broadcast_to_compute,
        shape_func=sr.static_rule,  # the target shape is an attribute
        samples=(
            Sample((TensorType((3, 1), F32),), {"shape": [2, 3, 4]}),
            Sample((TensorType((4,), "int32"),), {"shape": [3, 4]}),
        ),
        domain=Domain(_broadcast_to_domain),
    )
)


# --- layout_transform -----------------------------------------------------------------------------


def _layout_transform_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "layout_transform"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    src, dst = parse_layout(attrs["src_layout"], op), parse_layout(attrs["dst_layout"], op)
    return TensorType(transform_shape(data.shape, src, dst, op), data.dtype)


def _layout_transform_rule(
    inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type
) -> list[tuple[sr.Dim, ...]]:
    """transform_shape over run-time dims: merge src's sub-axes into each primal extent, then
    split it by dst's factors."""
    op = "layout_transform"
    shape = sr.dims(inputs[0])
    src, dst = parse_layout(attrs["src_layout"], op), parse_layout(attrs["dst_layout"], op)
    totals: dict[str, sr.Dim] = {}
    for letter in src.primal:
        outer = shape[src.index(letter)]
        factor = src.factor(letter)
        totals[letter] = outer if factor is None else sr.int64(outer) * factor
    out: list[sr.Dim] = []
    for letter, factor in dst.axes:
        split = dst.factor(letter) if factor is None else None
        if factor is not None:
            out.append(factor)
        else:
            out.append(totals[letter] if split is None else sr.int64(totals[letter]) // split)
    return [sr.fill(out_type, out)]


def layout_source_index(idx: Index, src: Layout, dst: Layout) -> tuple[PrimExpr, ...]:
    """The index into a `src`-laid-out tensor holding the element at `idx` of its `dst` form.

    Each primal coordinate is first rebuilt from dst's (outer, inner) pair, then split again
    by src's factor; the simplifier folds `(o * 4 + i) // 4` back to `o` when the factors agree.
    """
    coords: dict[str, PrimExpr] = {}
    for letter in dst.primal:
        coord = idx[dst.index(letter)]
        factor = dst.factor(letter)
        if factor is not None:
            coord = coord * factor + idx[dst.index(letter.lower())]
        coords[letter] = coord
    source: list[PrimExpr] = []
    for letter, factor in src.axes:
        if factor is not None:
            source.append(coords[letter.upper()] % factor)
            continue
        split = src.factor(letter)
        source.append(coords[letter] if split is None else coords[letter] // split)
    return tuple(source)


def _layout_transform_compute(
    idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type
) -> PrimExpr:
    op = "layout_transform"
    src, dst = parse_layout(attrs["src_layout"], op), parse_layout(attrs["dst_layout"], op)
    return inputs[0][layout_source_index(idx, src, dst)]


_PLAIN_LAYOUTS = ("NCHW", "NHWC", "CHWN", "HWCN", "NCWH")
_BLOCKED_LAYOUTS = ("NCHW{}c", "NHWC{}c", "NCHW{}h", "NCHW{}w")


def _layout_transform_domain(d: Draw) -> Sample:
    """Between plain permutations of NCHW and layouts splitting C (or H or W) by 2 or 4; the
    split dims are multiples of 4 so that every drawn pair converts."""
    layouts = []
    for _ in range(2):
        if d.boolean():
            layouts.append(d.choice(_PLAIN_LAYOUTS))
        else:
            layouts.append(d.choice(_BLOCKED_LAYOUTS).format(d.choice((2, 4))))
    src, dst = layouts
    sizes = {"N": d.integer(1, 2), "C": 4 * d.integer(1, 2), "H": 4 * d.integer(1, 2), "W": 4}
    layout = parse_layout(src, "layout_transform")
    shape = []
    for letter, factor in layout.axes:
        split = layout.factor(letter)
        shape.append(factor if factor is not None else sizes[letter] // (split or 1))
    return Sample((any_tensor(d, shape),), {"src_layout": src, "dst_layout": dst})


register(
    OpDef(
        name="layout_transform",
        num_inputs=1,
        type_rel=_layout_transform_rel,
        pattern=OpPattern.INJECTIVE,
        reference=lambda a, attrs: transform_array(
            a[0],
            parse_layout(attrs["src_layout"], "layout_transform"),
            parse_layout(attrs["dst_layout"], "layout_transform"),
        ),
        attrs=(AttrSpec("src_layout", "str", REQUIRED), AttrSpec("dst_layout", "str", REQUIRED)),
        compute=_layout_transform_compute,
        shape_func=_layout_transform_rule,
        samples=(
            Sample((TensorType((1, 3, 4, 5), F32),), {"src_layout": "NCHW", "dst_layout": "NHWC"}),
            Sample((TensorType((2, 8, 3, 2), F32),), {"src_layout": "NCHW", "dst_layout": "NCHW4c"}),
            Sample((TensorType((1, 2, 3, 2, 4), F32),), {"src_layout": "NCHW4c", "dst_layout": "NHWC2c"}),
            Sample((TensorType((1, 16, 2, 3), F32),), {"src_layout": "NCHW", "dst_layout": "NCHW16c"}),
            Sample((TensorType((2, 1, 3, 2, 8), "int8"),), {"src_layout": "NCHW8c", "dst_layout": "NCHW"}),
            Sample((TensorType((16, 8, 3, 3), F32),), {"src_layout": "OIHW", "dst_layout": "OIHW8i8o"}),
            Sample((TensorType((2, 2, 1, 3, 4, 8), F32),), {"src_layout": "OIHW4i8o", "dst_layout": "OIHW"}),
            Sample((TensorType((1, 4, 2, 2, 4), F32),), {"src_layout": "NCHW4c", "dst_layout": "NCHW8c"}),
        ),
        domain=Domain(_layout_transform_domain),
    )
)


# --- concatenate / stack / split ------------------------------------------------------------------


def tuple_fields(types: Sequence[Type], op: str) -> tuple[TensorType, ...]:
    """The tensors of a call's single tuple argument, all of one dtype and rank."""
    check_arity(types, 1, op)
    arg = types[0]
    if not isinstance(arg, TupleType) or not arg.fields:
        raise TypeRelationError(f"{op} expects a non-empty tuple of tensors, got {arg}")
    fields: list[TensorType] = []
    for ty in arg.fields:
        if not isinstance(ty, TensorType):
            raise TypeRelationError(f"{op} expects a tuple of tensors, got {arg}")
        if fields and (ty.dtype != fields[0].dtype or ty.ndim != fields[0].ndim):
            raise TypeRelationError(f"{op} needs tensors of one dtype and rank, got {arg}")
        fields.append(ty)
    return tuple(fields)


def _joined_dims(fields: Sequence[TensorType], skip: int | None, op: str) -> list[Dim]:
    """Per-dim agreement of all fields (ignoring dim `skip`), taking the best-known size."""
    dims = list(fields[0].shape)
    for ty in fields[1:]:
        for k, d in enumerate(ty.shape):
            if k == skip:
                continue
            if not dims_equal(dims[k], d):
                raise TypeRelationError(f"{op}: {fields[0]} and {ty} differ in dim {k}")
            if dims[k] is ANY:
                dims[k] = d
    return dims


def _concatenate_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "concatenate"
    fields = tuple_fields(types, op)
    axis = normalize_axis(attrs["axis"], fields[0].ndim, op)
    dims = _joined_dims(fields, axis, op)
    dims[axis] = _sum_dims([ty.shape[axis] for ty in fields])
    return TensorType(tuple(dims), fields[0].dtype)


def tuple_views(inputs: Sequence[object], op: str) -> tuple[TensorView, ...]:
    """The field views of a compute's single tuple argument."""
    fields = inputs[0]
    if not isinstance(fields, tuple) or not all(isinstance(f, TensorView) for f in fields):
        raise TypeRelationError(f"{op} expects a tuple of tensors as its argument")
    return fields


def _concatenate_compute(idx: Index, inputs: Sequence[object], attrs: Attrs, out_type: Type) -> PrimExpr:
    op = "concatenate"
    fields = tuple_views(inputs, op)
    axis = normalize_axis(attrs["axis"], len(idx), op)
    # (begin along axis, view) of each field that holds elements; empty fields are never read.
    parts: list[tuple[int | PrimExpr, TensorView]] = []
    begin: int | PrimExpr = 0
    for view in fields:
        extent = view.shape[axis]  # an int64 expression where the dim is `?`
        if not isinstance(extent, int) or extent:
            parts.append((begin, view))
        begin = begin + extent
    if not parts:
        return Const(0, _tensor_out(out_type, op).dtype)  # an empty result: never evaluated

    def read(begin: int | PrimExpr, view: TensorView) -> PrimExpr:
        return view[tuple(i - begin if k == axis else i for k, i in enumerate(idx))]

    value = read(*parts[-1])
    for (begin, view), (next_begin, _) in reversed(list(zip(parts, parts[1:]))):
        value = select(idx[axis] < next_begin, read(begin, view), value)
    return value


def _concatenate_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    parts = sr.fields(inputs[0])
    axis = sr.normalize_axis(attrs["axis"], len(parts[0]))
    out: list[sr.Dim] = list(parts[0])
    out[axis] = sr.int64(parts[0][axis])
    for part in parts[1:]:
        out[axis] = out[axis] + sr.int64(part[axis])
    return [sr.fill(out_type, out)]


def _sum_dims(dims: Sequence[Dim]) -> Dim:
    total = 0
    for d in dims:
        if d is ANY:
            return ANY
        assert isinstance(d, int)
        total += d
    return total


def _concatenate_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, min_rank=1, empty=True)
    axis = d.axis(len(shape))
    dtype = kind_dtype(d, ANY_DTYPE)
    # The fields differ along the axis, where some may be empty.
    fields = []
    for _ in range(d.integer(1, 4)):
        field = list(shape)
        field[axis] = d.integer(0, 3)
        fields.append(TensorType(tuple(field), dtype))
    return Sample((TupleType(tuple(fields)),), {"axis": axis})


register(
    OpDef(
        name="concatenate",
        num_inputs=1,
        type_rel=_concatenate_rel,
        pattern=OpPattern.INJECTIVE,
        reference=lambda a, attrs: np.concatenate(list(a[0]), axis=attrs["axis"]),
        attrs=(AttrSpec("axis", "int", 0),),
        compute=_concatenate_compute,
        shape_func=_concatenate_rule,
        samples=(
            Sample((TupleType((TensorType((2, 3), F32), TensorType((4, 3), F32))),)),
            Sample(
                (TupleType((TensorType((2, 1), F32), TensorType((2, 3), F32), TensorType((2, 2), F32))),),
                {"axis": -1},
            ),
        ),
        domain=Domain(_concatenate_domain),
    )
)


def _stack_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "stack"
    fields = tuple_fields(types, op)
    dims = _joined_dims(fields, None, op)
    ndim = len(dims)
    axis = attrs["axis"]
    if not -ndim - 1 <= axis <= ndim:
        raise TypeRelationError(f"{op}: axis {axis} is out of range [{-ndim - 1}, {ndim}] for rank {ndim}")
    at = axis + ndim + 1 if axis < 0 else axis
    return TensorType(tuple(dims[:at]) + (len(fields),) + tuple(dims[at:]), fields[0].dtype)


def _stack_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    parts = sr.fields(inputs[0])
    ndim = len(parts[0])
    at = attrs["axis"] + ndim + 1 if attrs["axis"] < 0 else attrs["axis"]
    return [sr.fill(out_type, (*parts[0][:at], len(parts), *parts[0][at:]))]


def _stack_compute(idx: Index, inputs: Sequence[object], attrs: Attrs, out_type: Type) -> PrimExpr:
    fields = tuple_views(inputs, "stack")
    ndim = len(idx) - 1
    axis = attrs["axis"]
    at = axis + ndim + 1 if axis < 0 else axis
    inner = tuple(idx[:at]) + tuple(idx[at + 1 :])
    value = fields[-1][inner]
    for k in reversed(range(len(fields) - 1)):
        value = select(eq(idx[at], k), fields[k][inner], value)
    return value


def _stack_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, max_rank=3, empty=True)
    field = any_tensor(d, shape)
    axis = d.integer(-len(shape) - 1, len(shape))
    return Sample((TupleType((field,) * d.integer(1, 4)),), {"axis": axis})


register(
    OpDef(
        name="stack",
        num_inputs=1,
        type_rel=_stack_rel,
        pattern=OpPattern.INJECTIVE,
        reference=lambda a, attrs: np.stack(list(a[0]), axis=attrs["axis"]),
        attrs=(AttrSpec("axis", "int", 0),),
        compute=_stack_compute,
        shape_func=_stack_rule,
        samples=(
            Sample((TupleType((TensorType((2, 3), F32), TensorType((2, 3), F32))),)),
            Sample((TupleType((TensorType((2, 3), F32),) * 3),), {"axis": -1}),
        ),
        domain=Domain(_stack_domain),
    )
)


def split_bounds(extent: Dim, indices_or_sections: int | Sequence[int], axis: int) -> list[tuple[int, Dim]]:
    """(begin, end) of each part along the split axis; end is ANY for an unknown last bound."""
    op = "split"
    if isinstance(indices_or_sections, int):
        sections = indices_or_sections
        if sections <= 0:
            raise TypeRelationError(f"{op}: indices_or_sections must be positive, got {sections}")
        if extent is ANY:
            return [(0, ANY)] * sections
        assert isinstance(extent, int)
        if extent % sections:
            raise TypeRelationError(
                f"{op}: axis {axis} of size {extent} does not split into {sections} equal parts"
            )
        step = extent // sections
        return [(k * step, (k + 1) * step) for k in range(sections)]
    points = list(indices_or_sections)
    bounds: list[tuple[int, Dim]] = []
    begin = 0
    for p in points:
        if p <= begin or (extent is not ANY and p >= extent):
            raise TypeRelationError(
                f"{op}: indices {points} must be ascending, positive and inside axis {axis} of size {extent}"
            )
        bounds.append((begin, p))
        begin = p
    bounds.append((begin, extent))
    return bounds


def _split_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "split")
    data = tensor_arg(types, 0, "split")
    axis = normalize_axis(attrs["axis"], data.ndim, "split")
    parts = []
    for begin, end in split_bounds(data.shape[axis], attrs["indices_or_sections"], axis):
        shape = list(data.shape)
        shape[axis] = ANY if end is ANY else end - begin
        parts.append(TensorType(tuple(shape), data.dtype))
    return TupleType(tuple(parts))


def _split_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """split_bounds over a run-time extent: equal sections divide it, and the part after the
    last index ends at it."""
    shape = sr.dims(inputs[0])
    axis = sr.normalize_axis(attrs["axis"], len(shape))
    extent = sr.int64(shape[axis])
    spec = attrs["indices_or_sections"]
    if isinstance(spec, int):
        sizes: list[sr.Dim] = [extent // spec] * spec
    else:
        begins = [0, *spec]
        sizes = [end - begin for begin, end in zip(begins, spec)] + [extent - begins[-1]]
    return [
        sr.fill(out_type, (*shape[:axis], size, *shape[axis + 1 :]), k) for k, size in enumerate(sizes)
    ]


def _split(a: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    data = a[0]
    axis = attrs["axis"] % data.ndim
    bounds = split_bounds(data.shape[axis], attrs["indices_or_sections"], axis)
    return tuple(np.take(data, np.arange(b, e), axis=axis) for b, e in bounds)


def _split_compute(
    idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type, *, out_index: int
) -> PrimExpr:
    data = inputs[0]
    axis = normalize_axis(attrs["axis"], data.ndim, "split")
    begin, _ = split_bounds(data.shape[axis], attrs["indices_or_sections"], axis)[out_index]
    return data[tuple(i + begin if k == axis else i for k, i in enumerate(idx))]


def _split_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, min_rank=1, max_dim=7)
    axis = d.axis(len(shape))
    extent = shape[axis]
    if d.boolean():
        sections: int | tuple[int, ...] = d.choice([k for k in range(1, extent + 1) if extent % k == 0])
    else:
        sections = tuple(d.subset(range(1, extent)))
    return Sample((any_tensor(d, shape),), {"indices_or_sections": sections, "axis": axis})


register(
    OpDef(
        name="split",
        num_inputs=1,
        type_rel=_split_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_split,
        attrs=(AttrSpec("indices_or_sections", "int_or_ints", REQUIRED), AttrSpec("axis", "int", 0)),
        compute=_split_compute,
        shape_func=_split_rule,
        samples=(
            Sample((TensorType((6, 2), F32),), {"indices_or_sections": 3}),
            Sample((TensorType((2, 7), F32),), {"indices_or_sections": [2, 5], "axis": -1}),
        ),
        domain=Domain(_split_domain),
    )
)
