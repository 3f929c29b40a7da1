"""Repetition and reversal: tile, repeat, reverse and reverse_sequence.

Attribute names and defaults are TVM's (`include/tvm/relay/attrs/transform.h`); `repeat` and
`reverse` need their axis (TVM's attr default is unset, and its Python API always passes one).

* tile(reps): the shorter of the data shape and `reps` is padded with leading 1s; each output
  dim is the data dim times its rep (BROADCAST, as TVM declares it).
* repeat(repeats, axis): each element is repeated `repeats` times along `axis` (BROADCAST).
* reverse(axis): flips one axis (INJECTIVE).
* reverse_sequence(seq_lengths, seq_axis=1, batch_axis=0): for every batch b, the first
  seq_lengths[b] elements along seq_axis are flipped and the rest kept; as in TVM's topi a length
  <= 1 leaves the row alone and a length past the axis flips the whole axis (INJECTIVE).

Loops: every op is a compute reading one input element per output element.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, Type
from compiler.ops.common import check_arity, dims_equal, normalize_axis, static_dims, tensor_arg
from compiler.ops.domain import Domain, Draw
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops import shape_rules as sr
from compiler.ops.shape_rules import same_shape_rule
from compiler.tir.compute import Index, TensorView
from compiler.tir.expr import PrimExpr, cast, logical_or, select

F32 = "float32"
# Dtypes the domains draw data from: floats, the common integer widths and bool.
DATA_DTYPES = ("float32", "float32", "int32", "float16", "float64", "int8", "int64", "uint8", "bool")


# --- tile -----------------------------------------------------------------------------------------


def tile_shapes(shape: Sequence[Dim], reps: Sequence[int]) -> tuple[tuple[Dim, ...], tuple[int, ...]]:
    """The data shape and reps, both padded with leading 1s to the longer rank."""
    rank = max(len(shape), len(reps))
    return (1,) * (rank - len(shape)) + tuple(shape), (1,) * (rank - len(reps)) + tuple(reps)


def _tile_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "tile"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    reps = attrs["reps"]
    if any(r <= 0 for r in reps):
        raise TypeRelationError(f"{op}: reps {list(reps)} must all be positive")
    shape, full_reps = tile_shapes(data.shape, reps)
    return TensorType(tuple(ANY if d is ANY else d * r for d, r in zip(shape, full_reps)), data.dtype)


def _tile_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    shape, reps = tile_shapes(sr.dims(inputs[0]), attrs["reps"])
    return [sr.fill(out_type, tuple(sr.int64(d) * r for d, r in zip(shape, reps)))]


def _tile_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    data = inputs[0]
    shape = static_dims(data.shape, "tile")
    lead = len(idx) - len(shape)
    return data[tuple(idx[lead + k] % d if d != 1 else 0 for k, d in enumerate(shape))]


def _tile_domain(d: Draw) -> Sample:
    shape = d.shape(0, 3, 1, 4)
    reps = [d.choice((1, 1, 2, 3)) for _ in range(d.integer(0 if shape else 1, 4))]
    return Sample((TensorType(shape, d.dtype(DATA_DTYPES)),), {"reps": reps})


register(
    OpDef(
        name="tile",
        num_inputs=1,
        type_rel=_tile_rel,
        pattern=OpPattern.BROADCAST,
        reference=lambda a, attrs: np.tile(a[0], attrs["reps"]),
        attrs=(AttrSpec("reps", "ints", REQUIRED),),
        compute=_tile_compute,
        shape_func=_tile_rule,
        domain=Domain(_tile_domain),
        samples=(
            Sample((TensorType((2, 3), F32),), {"reps": [2, 3]}),
            Sample((TensorType((2, 3), "int32"),), {"reps": [2, 1, 2]}),  # reps longer than the rank
            Sample((TensorType((2, 1, 3), "float16"),), {"reps": [4]}),  # reps shorter than the rank
            Sample((TensorType((), "int8"),), {"reps": [3, 2]}),
        ),
    )
)


# --- repeat ---------------------------------------------------------------------------------------


def _repeat_axis(data: TensorType | np.ndarray, attrs: Attrs) -> int:
    op = "repeat"
    if attrs["repeats"] < 1:
        raise TypeRelationError(f"{op}: repeats must be at least 1, got {attrs['repeats']}")
    return normalize_axis(attrs["axis"], data.ndim, op)


def _repeat_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "repeat")
    data = tensor_arg(types, 0, "repeat")
    axis = _repeat_axis(data, attrs)
    shape = list(data.shape)
    extent = shape[axis]
    shape[axis] = ANY if extent is ANY else extent * attrs["repeats"]
    return TensorType(tuple(shape), data.dtype)


def _repeat_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    shape: list[sr.Dim] = list(sr.dims(inputs[0]))
    axis = sr.normalize_axis(attrs["axis"], len(shape))
    shape[axis] = sr.int64(shape[axis]) * attrs["repeats"]
    return [sr.fill(out_type, shape)]


def _repeat_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    axis = normalize_axis(attrs["axis"], len(idx), "repeat")
    return inputs[0][tuple(i // attrs["repeats"] if k == axis else i for k, i in enumerate(idx))]


def _repeat_domain(d: Draw) -> Sample:
    shape = d.shape(1, 4, 1, 4)
    attrs = {"repeats": d.choice((1, 2, 3)), "axis": d.axis(len(shape))}
    return Sample((TensorType(shape, d.dtype(DATA_DTYPES)),), attrs)


register(
    OpDef(
        name="repeat",
        num_inputs=1,
        type_rel=_repeat_rel,
        pattern=OpPattern.BROADCAST,
        reference=lambda a, attrs: np.repeat(a[0], attrs["repeats"], axis=_repeat_axis(a[0], attrs)),
        attrs=(AttrSpec("repeats", "int", REQUIRED), AttrSpec("axis", "int", REQUIRED)),
        compute=_repeat_compute,
        shape_func=_repeat_rule,
        domain=Domain(_repeat_domain),
        samples=(
            Sample((TensorType((2, 3), F32),), {"repeats": 2, "axis": 0}),
            Sample((TensorType((2, 3, 2), "int64"),), {"repeats": 3, "axis": -1}),
            Sample((TensorType((4,), "uint8"),), {"repeats": 1, "axis": 0}),
        ),
    )
)


# --- reverse --------------------------------------------------------------------------------------


def _reverse_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "reverse")
    data = tensor_arg(types, 0, "reverse")
    normalize_axis(attrs["axis"], data.ndim, "reverse")
    return data


def _reverse_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    data = inputs[0]
    shape = static_dims(data.shape, "reverse")
    axis = normalize_axis(attrs["axis"], data.ndim, "reverse")
    return data[tuple(shape[k] - 1 - i if k == axis else i for k, i in enumerate(idx))]


def _reverse_domain(d: Draw) -> Sample:
    shape = d.shape(1, 4, 1, 5)
    return Sample((TensorType(shape, d.dtype(DATA_DTYPES)),), {"axis": d.axis(len(shape))})


register(
    OpDef(
        name="reverse",
        num_inputs=1,
        type_rel=_reverse_rel,
        pattern=OpPattern.INJECTIVE,
        reference=lambda a, attrs: np.flip(a[0], normalize_axis(attrs["axis"], a[0].ndim, "reverse")).copy(),
        attrs=(AttrSpec("axis", "int", REQUIRED),),
        compute=_reverse_compute,
        shape_func=same_shape_rule,
        domain=Domain(_reverse_domain),
        samples=(
            Sample((TensorType((3, 4), F32),), {"axis": 1}),
            Sample((TensorType((3, 2, 2), "int8"),), {"axis": -3}),
            Sample((TensorType((5,), "float64"),), {"axis": 0}),
        ),
    )
)


# --- reverse_sequence -----------------------------------------------------------------------------

SEQ_LENGTH_DTYPES = ("int32", "int64", "int8", "int16")


def _reverse_sequence_axes(ndim: int, attrs: Attrs) -> tuple[int, int]:
    op = "reverse_sequence"
    seq_axis = normalize_axis(attrs["seq_axis"], ndim, op)
    batch_axis = normalize_axis(attrs["batch_axis"], ndim, op)
    return seq_axis, batch_axis


def _reverse_sequence_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "reverse_sequence"
    check_arity(types, 2, op)
    data, lengths = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    if lengths.ndim != 1 or not lengths.dtype.startswith("int"):
        raise TypeRelationError(f"{op}: seq_lengths must be a 1-D tensor of signed integers, got {lengths}")
    _, batch_axis = _reverse_sequence_axes(data.ndim, attrs)
    if not dims_equal(lengths.shape[0], data.shape[batch_axis]):
        raise TypeRelationError(
            f"{op}: seq_lengths {lengths} must have one length per batch (axis {batch_axis} of {data})"
        )
    return data


def _reverse_sequence(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, lengths = a
    seq_axis, batch_axis = _reverse_sequence_axes(data.ndim, attrs)
    extent = data.shape[seq_axis]
    out = data.copy()
    for b, length in enumerate(lengths.astype(np.int64)):
        if length <= 1:
            continue
        n = min(int(length), extent)
        src = [slice(None)] * data.ndim
        src[batch_axis] = slice(b, b + 1)
        dst = list(src)
        src[seq_axis] = slice(n - 1, None, -1) if n < extent else slice(None, None, -1)
        dst[seq_axis] = slice(0, n)
        out[tuple(dst)] = data[tuple(src)]
    return out


def _reverse_sequence_compute(
    idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type
) -> PrimExpr:
    data, lengths = inputs
    seq_axis, batch_axis = _reverse_sequence_axes(data.ndim, attrs)
    extent = static_dims(data.shape, "reverse_sequence")[seq_axis]
    # In int64, so that a huge int64 length cannot wrap when compared with the position.
    length = cast("int64", lengths[idx[batch_axis]])
    pos = cast("int64", idx[seq_axis])
    keep = logical_or(length <= 1, length <= pos)
    flipped = select(length > extent, (extent - 1) - pos, length - 1 - pos)
    source = cast("int32", select(keep, pos, flipped))
    return data[tuple(source if k == seq_axis else i for k, i in enumerate(idx))]


def _reverse_sequence_domain(d: Draw) -> Sample:
    shape = d.shape(2, 4, 1, 5)
    ndim = len(shape)
    seq_axis = d.axis(ndim)
    batch_axis = d.choice([a for a in range(-ndim, ndim) if (a - seq_axis) % ndim])
    extent = shape[seq_axis]
    cases = (-1, 0, 1, extent, extent + 2)
    lengths = [d.choice((*cases, d.integer(0, extent))) for _ in range(shape[batch_axis])]
    seq = np.array(lengths, dtype=d.dtype(SEQ_LENGTH_DTYPES))
    return Sample(
        (TensorType(shape, d.dtype(DATA_DTYPES)), seq), {"seq_axis": seq_axis, "batch_axis": batch_axis}
    )


register(
    OpDef(
        name="reverse_sequence",
        num_inputs=2,
        type_rel=_reverse_sequence_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_reverse_sequence,
        attrs=(AttrSpec("seq_axis", "int", 1), AttrSpec("batch_axis", "int", 0)),
        compute=_reverse_sequence_compute,
        shape_func=same_shape_rule,
        domain=Domain(_reverse_sequence_domain),
        samples=(
            Sample((TensorType((4, 5), F32), np.array([1, 3, 5, 9], dtype="int32"))),
            Sample(
                (TensorType((3, 4, 2), "int32"), np.array([0, 2, -1, 4], dtype="int64")),
                {"seq_axis": 0, "batch_axis": 1},
            ),
            Sample(
                (TensorType((2, 3, 4), "float16"), np.array([2, 4], dtype="int8")),
                {"seq_axis": -1, "batch_axis": -3},
            ),
        ),
    )
)
