"""TVM's dynamic operators (`dyn.*`): static operators whose shape-like attributes became tensor
inputs, so that a model can compute them at run time (ONNX and TensorFlow importers emit them).

Each op is declared by its static counterpart and a *static form*: which arguments carry the
values that the static op takes as attributes (`value_args`), and how those values (numpy
arrays) and the dyn op's own attributes make the static op's attributes. From that one
declaration come

* the numpy reference: the static op's reference, with the values turned into attributes (the
  static op's type relation first checks them, so bad values give the static op's message);
* DynamicToStatic (compiler/passes/dynamic_to_static.py): a call whose value arguments are
  constants becomes the static op, which then takes the static code path;
* the samples and domains, which give the value arguments as arrays, the call's constant
  arguments (`extras["constant_args"]`).

Signatures, attribute names and defaults are TVM's (src/relay/op/dyn/**, python/tvm/relay/op/dyn/**):

| op | arguments | attributes |
| --- | --- | --- |
| dyn.reshape | data, newshape | newshape (unused), allowzero |
| dyn.broadcast_to | data, shape | shape (unused), dtype (unused) |
| dyn.zeros, dyn.ones | shape | shape (unused), dtype |
| dyn.full | fill_value, shape | shape (unused), dtype ("" = fill_value's) |
| dyn.tile | data, reps | reps (unused) |
| dyn.strided_slice | data, begin, end, strides | begin/end/strides/axes (unused), slice_mode |
| dyn.topk | data, k | k (unused), axis, ret_type, is_ascend, dtype |
| dyn.image.resize2d | data, size, roi | image.resize2d's attributes (size/roi unused) |
| dyn.nn.pad | data, pad_width, pad_value | pad_width (unused), pad_mode |
| dyn.expand_dims | data, axis | num_newaxis |
| dyn.squeeze | data, axis | axis (unused) |
| dyn.one_hot | indices, on_value, off_value, depth | axis, dtype |
| dyn.sparse_to_dense | sparse_indices, sparse_values, default_value, output_shape | (none) |

The "unused" attributes exist because TVM's attrs nodes have those fields and its printer may
show them (`newshape=[]`); they are accepted and ignored.

Type relations are TVM's: a result dim is `?` where it depends on a value (the result rank comes
from the static length of the shape input), static where TVM keeps it (strided_slice's axes past
`len(begin)`, topk's other axes, resize2d's N and C, one_hot's indices dims). Like TVM's, the
relations never read constant values: a constant shape gives a static type only once
DynamicToStatic has run. Unlike TVM, dyn.reshape refuses -2, -3 and -4 in its values (they change
the rank that the type promised; TVM asserts on -2 and -4 at run time).

Shape rules are TVM's data-dependent ones, per argument (`shape_data_dependent` is a tuple): the
value arguments are read as data, the others by their dims. TVM registers some of these ops as
reading every input's data (dyn.tile, dyn.topk, dyn.full, ...), but their rules only use the
other inputs' shapes; reading dims lets a data input with `?` dims have a shape function too.
The ops have no loops of their own: DynamicToStatic makes a constant-shaped call static before
fusion; a call with shape inputs computed at run time needs the dynamic AOT entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from compiler.diagnostics import InputError
from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, MAX_RANK, TensorType, TupleType, Type, dtype_of, flatten_tensor_types, is_valid_dtype
from compiler.ops import shape_rules as sr
from compiler.ops.common import check_arity, tensor_arg
from compiler.ops.domain import Domain, Draw
from compiler.ops.layout import parse_layout
from compiler.ops.transform import Compute, reshape_compute
from compiler.ops.registry import (
    REQUIRED,
    AttrError,
    AttrSpec,
    OpDef,
    OpPattern,
    Sample,
    TypeRelationError,
    get,
    register,
)
from compiler.tir import expr as te
from compiler.tir.compute import TensorView

F32 = "float32"
I64 = "int64"
SHAPE_DTYPES = ("int64", "int64", "int32")

# (values of the value arguments, the dyn call's attrs) -> the static op's attrs
ToAttrs = Callable[[Sequence[np.ndarray], Attrs], dict[str, object]]


@dataclass(frozen=True)
class StaticForm:
    """How a dyn op becomes its static op: the arguments whose values become attributes, and
    those attributes. The other arguments stay arguments, in their order."""

    static: str
    value_args: tuple[int, ...]
    to_attrs: ToAttrs

    def kept_args(self, num_args: int) -> tuple[int, ...]:
        return tuple(k for k in range(num_args) if k not in self.value_args)

    def static_attrs(self, name: str, values: Sequence[np.ndarray], attrs: Attrs) -> Attrs:
        """The static op's attrs for these values; an InputError naming `name` when the values
        cannot be attributes (a 2-D newshape, a -2 in it)."""
        try:
            return get(self.static).make_attrs(self.to_attrs(values, attrs))
        except (TypeRelationError, AttrError, ValueError) as err:
            raise InputError(f"{name}: {err}") from None


def static_form(name: str) -> StaticForm | None:
    """The static form of op `name`, None for an op that is not a dyn op."""
    form = get(name).extras.get("static_form")
    return form if isinstance(form, StaticForm) else None


def _reference(name: str, form: StaticForm) -> Callable[[Sequence[np.ndarray], Attrs], object]:
    def reference(a: Sequence[np.ndarray], attrs: Attrs) -> object:
        static = get(form.static)
        sattrs = form.static_attrs(name, [np.asarray(a[k]) for k in form.value_args], attrs)
        kept = [a[k] for k in form.kept_args(len(a))]
        types = [TensorType(np.shape(v), dtype_of(np.asarray(v))) for v in kept]
        try:
            static.type_rel(types, sattrs)
        except TypeRelationError as err:
            # The values are run-time data here: say which op received them.
            raise InputError(f"{name}: {err}") from None
        return static.reference(kept, sattrs)

    return reference


# --- values as attributes -----------------------------------------------------------------------------


def _ints(value: np.ndarray, what: str) -> tuple[int, ...]:
    array = np.asarray(value)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ValueError(f"{what} must be a 1-D integer tensor, got {array.dtype}{list(array.shape)}")
    return tuple(int(v) for v in array)


def _scalar_int(value: np.ndarray, what: str) -> int:
    array = np.asarray(value)
    if array.size != 1 or array.ndim > 1 or array.dtype.kind not in "iu":
        raise ValueError(f"{what} must be one integer (0-d or of shape (1,)), got {array.dtype}{list(array.shape)}")
    return int(array.reshape(()))


def _reshape_attrs(values: Sequence[np.ndarray], attrs: Attrs) -> dict[str, object]:
    newshape = _ints(values[0], "newshape")
    bad = [v for v in newshape if v < -1]
    if bad:
        raise ValueError(f"newshape {list(newshape)}: value {bad[0]} is not valid in a dynamic reshape "
                         "(only positive sizes, 0 and -1 keep the rank of the newshape tensor)")
    return {"newshape": newshape, "allowzero": attrs["allowzero"]}


def _strided_slice_attrs(values: Sequence[np.ndarray], attrs: Attrs) -> dict[str, object]:
    begin, end, strides = (_ints(v, what) for v, what in zip(values, ("begin", "end", "strides")))
    if not len(begin) == len(end) == len(strides):
        raise ValueError(f"begin {list(begin)}, end {list(end)} and strides {list(strides)} must have one length")
    return {"begin": begin, "end": end, "strides": strides, "slice_mode": attrs["slice_mode"], "axes": None}


def _topk_attrs(values: Sequence[np.ndarray], attrs: Attrs) -> dict[str, object]:
    return {"k": _scalar_int(values[0], "k"), **{n: attrs[n] for n in ("axis", "ret_type", "is_ascend", "dtype")}}


_RESIZE_KEEP = ("layout", "method", "coordinate_transformation_mode", "rounding_method", "cubic_alpha",
                "cubic_exclude", "extrapolation_value", "out_dtype")


def _resize2d_attrs(values: Sequence[np.ndarray], attrs: Attrs) -> dict[str, object]:
    roi = np.asarray(values[1])
    if roi.ndim != 1 or roi.dtype.kind != "f":
        raise ValueError(f"roi must be a 1-D float tensor, got {roi.dtype}{list(roi.shape)}")
    return {"size": _ints(values[0], "size"), "roi": tuple(float(v) for v in roi),
            **{n: attrs[n] for n in _RESIZE_KEEP}}


def _pad_attrs(values: Sequence[np.ndarray], attrs: Attrs) -> dict[str, object]:
    width = np.asarray(values[0])
    if width.ndim != 2 or width.dtype.kind not in "iu":
        raise ValueError(f"pad_width must be a 2-D integer tensor, got {width.dtype}{list(width.shape)}")
    return {"pad_width": tuple(tuple(int(v) for v in row) for row in width), "pad_mode": attrs["pad_mode"]}


def _shape_attr(key: str, *copied: str) -> ToAttrs:
    """The one value argument is the static op's `key` attribute (a shape)."""

    def to_attrs(values: Sequence[np.ndarray], attrs: Attrs) -> dict[str, object]:
        return {key: _ints(values[0], key), **{n: attrs[n] for n in copied}}

    return to_attrs


# --- type relations ---------------------------------------------------------------------------------


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def _length(types: Sequence[Type], k: int, op: str, what: str) -> int:
    """The static length of the 1-D integer argument `k`, which is the rank of what it describes."""
    ty = tensor_arg(types, k, op)
    if ty.ndim != 1 or not _is_int(ty.dtype):
        raise TypeRelationError(f"{op}: {what} must be a 1-D integer tensor, got {ty}")
    if ty.shape[0] is ANY:
        raise TypeRelationError(f"{op}: {what} {ty} must have a static length (it gives the result's rank)")
    return int(ty.shape[0])  # type: ignore[arg-type]  # ANY excluded above


def _scalar(types: Sequence[Type], k: int, op: str, what: str, integer: bool = False) -> TensorType:
    ty = tensor_arg(types, k, op)
    one = ty.ndim == 0 or (integer and ty.ndim == 1 and ty.shape[0] == 1)
    if not one or (integer and not _is_int(ty.dtype)):
        kind = "an integer scalar (0-d or of shape (1,))" if integer else "a scalar (0-d)"
        raise TypeRelationError(f"{op}: {what} must be {kind}, got {ty}")
    return ty


def _unknown(rank: int, dtype: str) -> TensorType:
    return TensorType((ANY,) * rank, dtype)


Values = Sequence[object]


def _reshape_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.reshape"
    check_arity(types, 2, op)
    data = tensor_arg(types, 0, op)
    return _unknown(_length(types, 1, op, "newshape"), data.dtype)


def _broadcast_to_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.broadcast_to"
    check_arity(types, 2, op)
    data = tensor_arg(types, 0, op)
    return _unknown(_length(types, 1, op, "shape"), data.dtype)


def _init_rel(op: str) -> Callable[..., Type]:
    def rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
        check_arity(types, 1, op)
        dtype = attrs["dtype"]
        if not is_valid_dtype(dtype):
            raise TypeRelationError(f"{op}: unknown dtype {dtype!r}")
        return _unknown(_length(types, 0, op, "shape"), dtype)

    return rel


def _full_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.full"
    check_arity(types, 2, op)
    fill = _scalar(types, 0, op, "fill_value")
    dtype = attrs["dtype"] or fill.dtype
    if not is_valid_dtype(dtype):
        raise TypeRelationError(f"{op}: unknown dtype {dtype!r}")
    return _unknown(_length(types, 1, op, "shape"), dtype)


def _tile_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.tile"
    check_arity(types, 2, op)
    data = tensor_arg(types, 0, op)
    return _unknown(max(data.ndim, _length(types, 1, op, "reps")), data.dtype)


def _strided_slice_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.strided_slice"
    check_arity(types, 4, op)
    data = tensor_arg(types, 0, op)
    n = _length(types, 1, op, "begin")
    for k, what in ((2, "end"), (3, "strides")):
        if _length(types, k, op, what) != n:
            raise TypeRelationError(f"{op}: begin, end and strides must have one length, got {n} and {types[k]}")
    if n > data.ndim:
        raise TypeRelationError(f"{op}: begin slices {n} axes of {data}, which has only {data.ndim}")
    if attrs["slice_mode"] not in ("end", "size"):
        raise TypeRelationError(f"{op}: unknown slice_mode {attrs['slice_mode']!r} (expected end or size)")
    return TensorType((ANY,) * n + data.shape[n:], data.dtype)


def _axis(axis: int, ndim: int, op: str) -> int:
    if not -ndim <= axis < ndim:
        raise TypeRelationError(f"{op}: axis {axis} is out of range for rank {ndim}")
    return axis + ndim if axis < 0 else axis


def _topk_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.topk"
    check_arity(types, 2, op)
    data = tensor_arg(types, 0, op)
    _scalar(types, 1, op, "k", integer=True)
    axis = _axis(attrs["axis"], data.ndim, op)
    shape = data.shape[:axis] + (ANY,) + data.shape[axis + 1 :]
    value_ty, index_ty = TensorType(shape, data.dtype), TensorType(shape, attrs["dtype"])
    kind = attrs["ret_type"]
    if kind == "both":
        return TupleType((value_ty, index_ty))
    if kind in ("values", "indices"):
        return value_ty if kind == "values" else index_ty
    raise TypeRelationError(f"{op}: unknown ret_type {kind!r} (expected both, values or indices)")


def _resize2d_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.image.resize2d"
    check_arity(types, 3, op)
    data = tensor_arg(types, 0, op)
    layout = parse_layout(attrs["layout"], op)
    if data.ndim != len(layout.axes):
        raise TypeRelationError(f"{op}: data {data} does not have the rank of layout {attrs['layout']}")
    if _length(types, 1, op, "size") != 2:
        raise TypeRelationError(f"{op}: size must hold the 2 output sizes (height, width), got {types[1]}")
    roi = tensor_arg(types, 2, op)
    if roi.ndim != 1 or not roi.dtype.startswith("float"):
        raise TypeRelationError(f"{op}: roi must be a 1-D float tensor, got {roi}")
    shape = list(data.shape)
    for letter in "HW":
        shape[layout.index(letter)] = ANY
    return TensorType(tuple(shape), attrs["out_dtype"] or data.dtype)


def _pad_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.nn.pad"
    check_arity(types, 3, op)
    data = tensor_arg(types, 0, op)
    width = tensor_arg(types, 1, op)
    if width.ndim != 2 or not _is_int(width.dtype) or width.shape[0] != data.ndim or width.shape[1] != 2:
        raise TypeRelationError(f"{op}: pad_width must be an integer tensor of shape ({data.ndim}, 2), one "
                                f"[before, after] pair per dim of {data}; got {width}")
    _scalar(types, 2, op, "pad_value")
    return _unknown(data.ndim, data.dtype)


def _expand_dims_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.expand_dims"
    check_arity(types, 2, op)
    data = tensor_arg(types, 0, op)
    _scalar(types, 1, op, "axis", integer=True)
    if attrs["num_newaxis"] < 0:
        raise TypeRelationError(f"{op}: num_newaxis must not be negative, got {attrs['num_newaxis']}")
    if data.ndim + attrs["num_newaxis"] > MAX_RANK:
        raise TypeRelationError(f"{op}: {attrs['num_newaxis']} new axes exceed the maximum rank {MAX_RANK}")
    return _unknown(data.ndim + attrs["num_newaxis"], data.dtype)


def _squeeze_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.squeeze"
    check_arity(types, 2, op)
    data = tensor_arg(types, 0, op)
    n = _length(types, 1, op, "axis")
    if n > data.ndim:
        raise TypeRelationError(f"{op}: {n} axes to squeeze from {data}")
    return _unknown(data.ndim - n, data.dtype)


def _one_hot_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.one_hot"
    check_arity(types, 4, op)
    indices = tensor_arg(types, 0, op)
    if not _is_int(indices.dtype):
        raise TypeRelationError(f"{op}: indices must be integers, got {indices}")
    _scalar(types, 1, op, "on_value")
    _scalar(types, 2, op, "off_value")
    _scalar(types, 3, op, "depth", integer=True)
    axis = attrs["axis"]
    at = indices.ndim if axis == -1 else axis
    if not 0 <= at <= indices.ndim:
        raise TypeRelationError(f"{op}: axis {axis} is out of range for indices {indices}")
    if not is_valid_dtype(attrs["dtype"]):
        raise TypeRelationError(f"{op}: unknown dtype {attrs['dtype']!r}")
    return TensorType(indices.shape[:at] + (ANY,) + indices.shape[at:], attrs["dtype"])


def _sparse_to_dense_rel(types: Sequence[Type], attrs: Attrs, values: Values = ()) -> Type:
    op = "dyn.sparse_to_dense"
    check_arity(types, 4, op)
    indices, sparse, default = (tensor_arg(types, k, op) for k in range(3))
    if not _is_int(indices.dtype) or indices.ndim > 2:
        raise TypeRelationError(f"{op}: sparse_indices must be a 0-D, 1-D or 2-D integer tensor, got {indices}")
    if sparse.ndim > 1:
        raise TypeRelationError(f"{op}: sparse_values must be 0-D or 1-D, got {sparse}")
    if default.ndim != 0:
        raise TypeRelationError(f"{op}: default_value must be a scalar, got {default}")
    return _unknown(_length(types, 3, op, "output_shape"), sparse.dtype)


# --- shape rules --------------------------------------------------------------------------------------


def _view(arg: sr.ShapeArg, what: str) -> TensorView:
    if not isinstance(arg, TensorView):
        raise sr.ShapeRuleError(f"the shape rule reads the values of {what}")
    return arg


def _values(arg: sr.ShapeArg, what: str) -> list[te.PrimExpr]:
    """The int64 values of a 1-D value argument (its length is static: the type needs it)."""
    view = _view(arg, what)
    if view.ndim == 0:
        return [sr.int64(view[()])]
    n = view.shape[0]
    if not isinstance(n, int):
        raise sr.ShapeRuleError(f"{what} has no static length")
    return [sr.int64(view[i]) for i in range(n)]


def _first(arg: sr.ShapeArg, what: str) -> te.PrimExpr:
    view = _view(arg, what)
    return sr.int64(view[()] if view.ndim == 0 else view[0])


def _const(value: int) -> te.PrimExpr:
    return te.const(value, I64)


def _values_rule(k: int, what: str) -> sr.ShapeRule:
    """The result dims are the values of argument `k` (zeros, broadcast_to, sparse_to_dense)."""

    def rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
        return [sr.fill(out_type, _values(inputs[k], what))]

    return rule


def _reshape_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """Each value: positive is the dim, 0 copies the input dim at its position (or is 0 with
    allowzero), -1 is what the element count leaves for it."""
    data = sr.dims(inputs[0], "data")
    codes = _values(inputs[1], "newshape")
    out: list[te.PrimExpr] = []
    for i, code in enumerate(codes):
        copied = sr.int64(data[i]) if i < len(data) else _const(0)
        zero = _const(0) if attrs["allowzero"] else copied
        out.append(te.select(code > 0, code, te.select(te.eq(code, 0), zero, _const(1))))
    known = sr.product(out)
    total = sr.product(data)
    inferred = total // te.maximum(known, 1)
    return [sr.fill(out_type, [te.select(te.eq(code, -1), inferred, dim) for code, dim in zip(codes, out)])]


def _tile_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """The shorter of data's dims and reps is padded with leading 1s, then they multiply."""
    data = [sr.int64(d) for d in sr.dims(inputs[0], "data")]
    reps = _values(inputs[1], "reps")
    rank = max(len(data), len(reps))
    data = [_const(1)] * (rank - len(data)) + data
    reps = [_const(1)] * (rank - len(reps)) + reps
    return [sr.fill(out_type, [d * r for d, r in zip(data, reps)])]


def _strided_slice_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """strided_slice's extents with begin, end and strides known only at run time: the same
    clamping as the static rule, with the stride's sign chosen by a select."""
    data = sr.dims(inputs[0], "data")
    begin, end, strides = (_values(x, w) for x, w in zip(inputs[1:], ("begin", "end", "strides")))
    size_mode = attrs["slice_mode"] == "size"
    out: list[sr.Dim] = list(data)
    for k, (b_raw, e_raw) in enumerate(zip(begin, end)):
        extent = sr.int64(data[k])
        stride = _const(1) if size_mode else strides[k]
        down = stride < 0

        def canonical(index: te.PrimExpr) -> te.PrimExpr:
            value = te.select(index < 0, extent + index, index)
            low = te.select(down, _const(-1), _const(0))
            high = te.select(down, extent - 1, extent)
            return te.minimum(te.maximum(value, low), high)

        b = canonical(b_raw)
        if size_mode:
            e = te.select(e_raw < 0, extent, te.minimum(b + e_raw, extent))
        else:
            e = canonical(e_raw)
        length = te.select(down, b - e, e - b)
        step = te.select(down, -stride, stride)
        out[k] = (te.maximum(length, 0) + step - 1) // step
    return [sr.fill(out_type, out)]


def _topk_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """data's dims with k along the axis, the whole axis for k < 1 (as the static topk)."""
    data = sr.dims(inputs[0], "data")
    axis = sr.normalize_axis(attrs["axis"], len(data))
    k = _first(inputs[1], "k")
    whole = sr.int64(data[axis])
    along = te.select(k < 1, whole, te.minimum(k, whole))
    shape = (*data[:axis], along, *data[axis + 1 :])
    return [shape for _ in flatten_tensor_types(out_type)]


def _resize2d_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    data = sr.dims(inputs[0], "data")
    height, width = _values(inputs[1], "size")
    return [sr.relaid_out(data, attrs["layout"], {"H": height, "W": width}, "", "dyn.image.resize2d")]


def _pad_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    data = sr.dims(inputs[0], "data")
    width = _view(inputs[1], "pad_width")
    return [tuple(sr.int64(d) + sr.int64(width[i, 0]) + sr.int64(width[i, 1]) for i, d in enumerate(data))]


def _expand_dims_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """Output dim j is 1 for the num_newaxis positions from the (normalized) axis on, else the
    input dim it lands on."""
    data = [sr.int64(d) for d in sr.dims(inputs[0], "data")]
    n, rank = attrs["num_newaxis"], len(data)
    axis = _first(inputs[1], "axis")
    at = te.select(axis < 0, axis + rank + 1, axis)
    out: list[te.PrimExpr] = []
    for j in range(rank + n):
        before = data[j] if j < rank else _const(1)
        after = data[j - n] if 0 <= j - n < rank else _const(1)
        out.append(te.select(j < at, before, te.select(j < at + n, _const(1), after)))
    return [sr.fill(out_type, out)]


def _squeeze_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """The dims not named by the axis values, in order: output j is the input dim whose count
    of kept dims before it is j."""
    data = [sr.int64(d) for d in sr.dims(inputs[0], "data")]
    rank = len(data)
    axes = _values(inputs[1], "axis")
    kept: list[te.PrimExpr] = []
    for i in range(rank):
        named = [te.logical_or(te.eq(a, i), te.eq(a, i - rank)) for a in axes]
        hit: te.PrimExpr = te.const(False, "bool")
        for x in named:
            hit = te.logical_or(hit, x)
        kept.append(te.select(hit, _const(0), _const(1)))
    out: list[te.PrimExpr] = []
    for j in range(rank - len(axes)):
        dim = _const(0)
        position = _const(0)
        for i in range(rank):
            dim = dim + te.select(te.logical_and(te.eq(kept[i], 1), te.eq(position, j)), data[i], _const(0))
            position = position + kept[i]
        out.append(dim)
    return [sr.fill(out_type, out)]


def _one_hot_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    indices = sr.dims(inputs[0], "indices")
    at = len(indices) if attrs["axis"] == -1 else attrs["axis"]
    return [sr.fill(out_type, (*indices[:at], _first(inputs[3], "depth"), *indices[at:]))]


# --- domains ------------------------------------------------------------------------------------------


def _shape_array(d: Draw, values: Sequence[int]) -> np.ndarray:
    return np.array(list(values), dtype=d.choice(SHAPE_DTYPES)).reshape(len(values))


def _from_static(static: str, convert: Callable[[Draw, Sample], Sample | None]) -> Callable[[Draw], Sample]:
    """A domain drawing the static op's calls and moving their attributes into value arguments;
    `convert` returns None for a call the dyn op cannot express, which is drawn again."""

    def draw(d: Draw) -> Sample:
        domain = get(static).domain
        assert domain is not None
        for _ in range(50):
            sample = convert(d, domain.draw(d))
            if sample is not None:
                return sample
        raise AssertionError(f"no call of {static} drawn in 50 tries has a dynamic form")

    return draw


def _reshape_domain(d: Draw) -> Sample:
    shape = d.shape(1, 4, 1, 4)
    total = int(np.prod(shape))
    rest = int(np.prod(shape[1:]))
    newshape = d.choice((
        [total], [-1], [shape[0], -1], [-1, rest], list(reversed(shape)), [0, -1], [1, total, 1],
        [0] * len(shape), [*shape[:-1], 1, shape[-1]],
    ))
    dtype = d.choice(("float32", "float32", "int32", "float16", "int8", "bool"))
    return Sample((TensorType(shape, dtype), _shape_array(d, newshape)), {"allowzero": d.choice((0, 0, 1))
                                                                           if 0 not in newshape else 0})


def _broadcast_to(d: Draw, s: Sample) -> Sample:
    return Sample((s.inputs[0], _shape_array(d, s.attrs["shape"])), {}, s.low, s.high, s.int_high)


def _init(d: Draw, s: Sample) -> Sample:
    return Sample((_shape_array(d, s.attrs["shape"]),), {"dtype": s.attrs["dtype"]}, s.low, s.high, s.int_high)


def _full(d: Draw, s: Sample) -> Sample:
    attrs = {"dtype": s.attrs["dtype"]} if s.attrs.get("dtype") else {}
    return Sample((s.inputs[0], _shape_array(d, s.attrs["shape"])), attrs, s.low, s.high, s.int_high)


def _tile(d: Draw, s: Sample) -> Sample:
    return Sample((s.inputs[0], _shape_array(d, s.attrs["reps"])), {}, s.low, s.high, s.int_high)


def _strided_slice(d: Draw, s: Sample) -> Sample | None:
    if s.attrs.get("axes") is not None:
        return None
    begin, end = list(s.attrs["begin"]), list(s.attrs["end"])
    strides = list(s.attrs.get("strides") or ())
    if len(begin) != len(end):
        return None
    strides += [1] * (len(begin) - len(strides))
    arrays = tuple(_shape_array(d, v) for v in (begin, end, strides[: len(begin)]))
    return Sample((s.inputs[0], *arrays), {"slice_mode": s.attrs.get("slice_mode", "end")}, s.low, s.high,
                  s.int_high)


def _topk(d: Draw, s: Sample) -> Sample:
    k = s.attrs.get("k", 1)
    value = np.array(k, dtype=d.choice(SHAPE_DTYPES))
    if d.boolean():
        value = value.reshape(1)
    attrs = {n: v for n, v in s.attrs.items() if n != "k"}
    return Sample((s.inputs[0], value), attrs, s.low, s.high, s.int_high)


def _resize2d(d: Draw, s: Sample) -> Sample:
    roi = s.attrs.get("roi") or (0.0, 0.0, 0.0, 0.0)
    attrs = {n: v for n, v in s.attrs.items() if n not in ("size", "roi")}
    return Sample((s.inputs[0], _shape_array(d, s.attrs["size"]), np.array(roi, dtype=F32)), attrs, s.low, s.high,
                  s.int_high)


def _pad(d: Draw, s: Sample) -> Sample:
    width = np.array([list(w) for w in s.attrs["pad_width"]], dtype=d.choice(SHAPE_DTYPES)).reshape(-1, 2)
    attrs = {"pad_mode": s.attrs["pad_mode"]} if "pad_mode" in s.attrs else {}
    return Sample((s.inputs[0], width, s.inputs[1]), attrs, s.low, s.high, s.int_high)


def _expand_dims(d: Draw, s: Sample) -> Sample:
    attrs = {"num_newaxis": s.attrs["num_newaxis"]} if "num_newaxis" in s.attrs else {}
    return Sample((s.inputs[0], np.array(s.attrs["axis"], dtype=d.choice(SHAPE_DTYPES))), attrs, s.low, s.high,
                  s.int_high)


def _squeeze(d: Draw, s: Sample) -> Sample | None:
    data = s.inputs[0]
    if not isinstance(data, TensorType):
        return None
    axes = s.attrs.get("axis")
    if axes is None:
        axes = [k for k, n in enumerate(data.shape) if n == 1]
    return Sample((data, _shape_array(d, axes)), {}, s.low, s.high, s.int_high)


def _one_hot(d: Draw, s: Sample) -> Sample:
    depth = np.array(s.attrs.get("depth", 1), dtype=d.choice(SHAPE_DTYPES))
    attrs = {n: v for n, v in s.attrs.items() if n != "depth"}
    return Sample((*s.inputs, depth), attrs, s.low, s.high, s.int_high)


def _sparse_to_dense(d: Draw, s: Sample) -> Sample:
    return Sample((*s.inputs, _shape_array(d, s.attrs["output_shape"])), {}, s.low, s.high, s.int_high)


# --- registration ---------------------------------------------------------------------------------


def _unused(name: str, kind: str = "any") -> AttrSpec:
    """A field of TVM's attrs node that the dyn op leaves unset (its value is an argument)."""
    return AttrSpec(name, kind, None, optional=True)


def dyn_op(
    name: str,
    form: StaticForm,
    num_inputs: int,
    type_rel: Callable[..., Type],
    pattern: OpPattern,
    attrs: tuple[AttrSpec, ...],
    rule: sr.ShapeRule,
    data_dependent: tuple[bool, ...],
    domain: Callable[[Draw], Sample],
    samples: tuple[Sample, ...],
    reshape_only: bool = False,
    compute: Compute | None = None,
) -> OpDef:
    return register(
        OpDef(
            name=name,
            num_inputs=num_inputs,
            type_rel=type_rel,
            pattern=pattern,
            reference=_reference(name, form),
            attrs=attrs,
            samples=samples,
            reshape_only=reshape_only,
            compute=compute,
            shape_func=rule,
            shape_data_dependent=data_dependent,
            domain=Domain(domain),
            # Array inputs of samples and domains are the call's constant value arguments,
            # which DynamicToStatic turns into the static op's attributes.
            extras={"constant_args": form.value_args, "static_form": form},
        )
    )


def _out_dtype(out_type: Type) -> str:
    assert isinstance(out_type, TensorType)
    return out_type.dtype


def _fill_compute(value: int) -> Compute:
    return lambda idx, inputs, attrs, out_type: te.const(value, _out_dtype(out_type))


def _arr(values: Sequence[int] | int, dtype: str = I64) -> np.ndarray:
    return np.array(values, dtype=dtype)


dyn_op(
    "dyn.reshape", StaticForm("reshape", (1,), _reshape_attrs), 2, _reshape_rel, OpPattern.INJECTIVE,
    (_unused("newshape", "ints"), AttrSpec("allowzero", "int", 0)),
    _reshape_rule, (False, True), _reshape_domain,
    (
        Sample((TensorType((2, 3, 4), F32), _arr([4, 0, -1]))),
        Sample((TensorType((6,), "int32"), _arr([2, 3], "int32"))),
        Sample((TensorType((2, 3), F32), _arr([-1]))),
    ),
    reshape_only=True,
    # A run-time newshape: the kernel's extents are loads from the newshape buffer.
    compute=reshape_compute("dyn.reshape"),
)
dyn_op(
    "dyn.broadcast_to", StaticForm("broadcast_to", (1,), _shape_attr("shape")), 2, _broadcast_to_rel,
    OpPattern.BROADCAST, (_unused("shape", "ints"), AttrSpec("dtype", "dtype", "")),
    _values_rule(1, "shape"), (False, True), _from_static("broadcast_to", _broadcast_to),
    (Sample((TensorType((3, 1), F32), _arr([2, 3, 4]))),),
)
for _name in ("zeros", "ones"):
    dyn_op(
        f"dyn.{_name}", StaticForm(_name, (0,), _shape_attr("shape", "dtype")), 1, _init_rel(f"dyn.{_name}"),
        OpPattern.OPAQUE, (_unused("shape", "ints"), AttrSpec("dtype", "dtype", REQUIRED)),
        _values_rule(0, "shape"), (True,), _from_static(_name, _init),
        (Sample((_arr([2, 3]),), {"dtype": F32}), Sample((_arr([4], "int32"),), {"dtype": "int8"})),
        compute=_fill_compute(0 if _name == "zeros" else 1),
    )
dyn_op(
    "dyn.full", StaticForm("full", (1,), _shape_attr("shape", "dtype")), 2, _full_rel, OpPattern.ELEMWISE,
    (_unused("shape", "ints"), AttrSpec("dtype", "dtype", "")),
    _values_rule(1, "shape"), (False, True), _from_static("full", _full),
    (Sample((TensorType((), F32), _arr([2, 3]))), Sample((TensorType((), F32), _arr([3])), {"dtype": "int32"})),
    compute=lambda idx, inputs, attrs, out_type: te.cast(_out_dtype(out_type), inputs[0][()]),
)
dyn_op(
    "dyn.tile", StaticForm("tile", (1,), _shape_attr("reps")), 2, _tile_rel, OpPattern.INJECTIVE,
    (_unused("reps", "ints"),), _tile_rule, (False, True), _from_static("tile", _tile),
    (Sample((TensorType((2, 3), F32), _arr([2, 1, 2]))), Sample((TensorType((2, 3, 4), "int32"), _arr([3])))),
)
dyn_op(
    "dyn.strided_slice", StaticForm("strided_slice", (1, 2, 3), _strided_slice_attrs), 4, _strided_slice_rel,
    OpPattern.INJECTIVE,
    (_unused("begin", "ints"), _unused("end", "ints"), _unused("strides", "ints"), AttrSpec("slice_mode", "str", "end"),
     _unused("axes", "ints")),
    _strided_slice_rule, (False, True, True, True), _from_static("strided_slice", _strided_slice),
    (
        Sample((TensorType((4, 5, 3), F32), _arr([1, 0]), _arr([3, 5]), _arr([1, 2]))),
        Sample((TensorType((4, 6), F32), _arr([-1, 1]), _arr([-100, 100]), _arr([-2, 2]))),
        Sample((TensorType((4, 5), F32), _arr([-2, 1]), _arr([2, -1]), _arr([1, 1])), {"slice_mode": "size"}),
    ),
)
dyn_op(
    "dyn.topk", StaticForm("topk", (1,), _topk_attrs), 2, _topk_rel, OpPattern.OPAQUE,
    (_unused("k", "int"), AttrSpec("axis", "int", -1), AttrSpec("ret_type", "str", "both"),
     AttrSpec("is_ascend", "bool", False), AttrSpec("dtype", "dtype", "int32")),
    _topk_rule, (False, True), _from_static("topk", _topk),
    (
        Sample((TensorType((3, 5), F32), _arr(2))),
        Sample((TensorType((4, 3), F32), _arr([0])), {"axis": 0, "ret_type": "values", "is_ascend": True}),
    ),
)
dyn_op(
    "dyn.image.resize2d", StaticForm("image.resize2d", (1, 2), _resize2d_attrs), 3, _resize2d_rel,
    OpPattern.INJECTIVE,
    (_unused("size", "ints"), _unused("roi"), *(s for s in get("image.resize2d").attrs if s.name in _RESIZE_KEEP)),
    _resize2d_rule, (False, True, False), _from_static("image.resize2d", _resize2d),
    (
        Sample((TensorType((1, 2, 3, 4), F32), _arr([5, 2]), np.zeros(4, F32))),
        Sample((TensorType((1, 3, 4, 2), F32), _arr([6, 3]), np.zeros(4, F32)),
               {"layout": "NHWC", "method": "nearest_neighbor", "coordinate_transformation_mode": "asymmetric"}),
    ),
)
dyn_op(
    "dyn.nn.pad", StaticForm("nn.pad", (1,), _pad_attrs), 3, _pad_rel, OpPattern.INJECTIVE,
    (_unused("pad_width", "nested_ints"), AttrSpec("pad_mode", "str", "constant")),
    _pad_rule, (False, True, False), _from_static("nn.pad", _pad),
    (
        Sample((TensorType((2, 3), F32), _arr([[1, 0], [2, 1]]), TensorType((), F32))),
        Sample((TensorType((3, 4), F32), _arr([[1, 1], [0, 2]]), TensorType((), F32)), {"pad_mode": "reflect"}),
    ),
)
dyn_op(
    "dyn.expand_dims", StaticForm("expand_dims", (1,), lambda v, a: {"axis": _scalar_int(v[0], "axis"),
                                                                     "num_newaxis": a["num_newaxis"]}),
    2, _expand_dims_rel, OpPattern.INJECTIVE, (AttrSpec("num_newaxis", "int", 1),),
    _expand_dims_rule, (False, True), _from_static("expand_dims", _expand_dims),
    (Sample((TensorType((2, 3), F32), _arr(1)), {"num_newaxis": 2}), Sample((TensorType((2, 3), F32), _arr(-1)))),
)
dyn_op(
    "dyn.squeeze", StaticForm("squeeze", (1,), _shape_attr("axis")), 2, _squeeze_rel, OpPattern.INJECTIVE,
    (_unused("axis", "ints"),), _squeeze_rule, (False, True), _from_static("squeeze", _squeeze),
    (Sample((TensorType((1, 3, 1, 2), F32), _arr([0, -2]))), Sample((TensorType((2, 1), F32), _arr([1], "int32")))),
    reshape_only=True,
)
dyn_op(
    "dyn.one_hot",
    StaticForm("one_hot", (3,), lambda v, a: {"depth": _scalar_int(v[0], "depth"), "axis": a["axis"],
                                              "dtype": a["dtype"]}),
    4, _one_hot_rel, OpPattern.OUT_ELEMWISE_FUSABLE, (AttrSpec("axis", "int", -1), AttrSpec("dtype", "dtype", REQUIRED)),
    _one_hot_rule, (False, False, False, True), _from_static("one_hot", _one_hot),
    (Sample((TensorType((2, 3), "int32"), TensorType((), F32), TensorType((), F32), _arr(4, "int32")),
            {"dtype": F32}),),
)
dyn_op(
    "dyn.sparse_to_dense", StaticForm("sparse_to_dense", (3,), _shape_attr("output_shape")), 4,
    _sparse_to_dense_rel, OpPattern.OPAQUE, (), _values_rule(3, "output_shape"), (False, False, False, True),
    _from_static("sparse_to_dense", _sparse_to_dense),
    (Sample((_arr([[0, 1], [2, 3]], "int32"), TensorType((2,), F32), TensorType((), F32), _arr([3, 4]))),),
)
