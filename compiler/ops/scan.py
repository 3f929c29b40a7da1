"""Scans: cumsum and cumprod (TVM's ScanopAttrs: axis=None, dtype=None, exclusive=False).

`axis=None` scans the data flattened in row-major order, giving a 1-D result of all the
elements; otherwise the result has the data's shape. `dtype` (None or "": the data's) is the
result's dtype and the accumulator's: the data is converted first, so an int8 sum with
dtype="int32" does not wrap at 127. `exclusive=True` shifts the scan by one: element i combines
the elements before i, and the first is the identity (0 for cumsum, 1 for cumprod). The Python
API passes `exclusive=None`, which means False. Integer scans wrap in their dtype.

TVM declares both OPAQUE. The kernel walks each line along the axis once, carrying the running
value in a local accumulator (float32 for float16 results, which keeps the long sums accurate).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type, is_valid_dtype
from compiler.ops.common import check_arity, normalize_axis, product, tensor_arg
from compiler.ops.domain import FLOAT_DTYPES, INT_DTYPES, Domain, Draw
from compiler.ops.kernels.common import buffer_dims, input_buffers, unflatten
from compiler.ops.math import drawn_array
from compiler.ops import shape_rules as sr
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext, TensorView
from compiler.tir.dtypes import is_float
from compiler.tir.stmt import Allocate, For, ForKind, Stmt, Store, seq

SCAN_ATTRS = (
    AttrSpec("axis", "int", None, optional=True),
    AttrSpec("dtype", "dtype", None, optional=True),
    AttrSpec("exclusive", "bool", False, optional=True),
)


def _out_dtype(data_dtype: str, attrs: Attrs) -> str:
    dtype = attrs["dtype"]
    return data_dtype if dtype in (None, "") else str(dtype)


def _scan_rel(op: str) -> Callable[[Sequence[Type], Attrs], Type]:
    def type_rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, op)
        data = tensor_arg(types, 0, op)
        dtype = _out_dtype(data.dtype, attrs)
        if not is_valid_dtype(dtype):
            raise TypeRelationError(f'{op}: unknown dtype "{dtype}" for {data}')
        if dtype == "bool":
            raise TypeRelationError(f"{op}: cannot accumulate in bool ({data}); give a numeric dtype")
        axis = attrs["axis"]
        if axis is None:
            if data.ndim == 0:
                raise TypeRelationError(f"{op}: axis=None flattens the data, which needs rank >= 1, got {data}")
            return TensorType((product(data.shape),), dtype)
        normalize_axis(int(axis), data.ndim, op)  # type: ignore[call-overload]  # an int attr
        return TensorType(data.shape, dtype)

    return type_rel


def _scan_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    """The data's shape, flattened when axis is None."""
    shape = sr.dims(inputs[0])
    return [(sr.product(shape),) if attrs["axis"] is None else shape]


def _scan_reference(ufunc: np.ufunc, identity: int) -> Callable[[Sequence[np.ndarray], Attrs], np.ndarray]:
    def reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
        data = arrays[0]
        dtype = np.dtype(_out_dtype(str(data.dtype), attrs))
        x = data.reshape(-1) if attrs["axis"] is None else data
        axis = 0 if attrs["axis"] is None else int(attrs["axis"]) % data.ndim  # type: ignore[call-overload]
        # Floats accumulate in float64, for a reference at least as accurate as the C.
        acc = np.dtype(np.float64) if dtype.kind == "f" else dtype
        x = x.astype(dtype).astype(acc)
        if attrs["exclusive"]:
            pad = [(0, 0)] * x.ndim
            pad[axis] = (1, 0)
            x = np.pad(x, pad, constant_values=identity)
            x = np.delete(x, -1, axis=axis)
        return np.asarray(ufunc.accumulate(x, axis=axis, dtype=acc)).astype(dtype)

    return reference


def _scan_kernel(op: str, combine: Callable[[te.PrimExpr, te.PrimExpr], te.PrimExpr], identity: int) -> Callable[..., Stmt]:
    def kernel(
        ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
        epilogue: Epilogue,
    ) -> Stmt:
        (data,) = input_buffers(inputs, op)
        dims = buffer_dims(data)
        out_dtype = out.dtype
        acc_dtype = "float32" if out_dtype == "float16" else out_dtype
        zero = te.const(0)
        t, k = ctx.var("pos"), ctx.var("k")
        if attrs["axis"] is None:
            count, length = 1, int(np.prod(dims, dtype=np.int64))
            in_idx, out_idx = unflatten(k, dims), (k,)
        else:
            axis = normalize_axis(int(attrs["axis"]), len(dims), op)  # type: ignore[call-overload]
            inner = int(np.prod(dims[axis + 1:], dtype=np.int64))
            count, length = int(np.prod(dims[:axis], dtype=np.int64)) * inner, dims[axis]
            outer_idx = unflatten(t // inner, dims[:axis])
            inner_idx = unflatten(t % inner, dims[axis + 1:])
            in_idx = out_idx = (*outer_idx, k, *inner_idx)
        if count * length == 0:
            return seq()
        acc = te.Buffer(ctx.fresh("running"), (1,), acc_dtype, scope="local")
        value = te.cast(acc_dtype, te.cast(out_dtype, data[in_idx]))
        updated = Store(acc, (zero,), combine(acc[zero], value))

        def store() -> Stmt:
            result = te.cast(out_dtype, acc[zero])
            return Store(out, out_idx, te.cast(out_dtype, epilogue(result, out_idx)))

        step = seq(store(), updated) if attrs["exclusive"] else seq(updated, store())
        body = Allocate(acc, seq(
            Store(acc, (zero,), te.const(float(identity) if acc_dtype.startswith("float") else identity, acc_dtype)),
            For(k, zero, te.const(length), step),
        ))
        kind = ForKind.PARALLEL if ctx.parallel and count > 1 and count * length >= 1 << 14 else ForKind.SERIAL
        return For(t, zero, te.const(count), body, kind)

    return kernel


# A wider dtype of the same kind, or None: the dtype attr's interesting values.
_WIDER = {
    "int8": "int32", "int16": "int64", "int32": "int64", "uint8": "int32", "int64": "int64",
    "float16": "float32", "float32": "float64", "float64": "float64", "bool": "int32",
}


def _scan_domain(product_like: bool) -> Callable[[Draw], Sample]:
    def draw(d: Draw) -> Sample:
        # Short lines keep a float32 accumulation within the domain's ulps of the float64 sum.
        shape = d.shape(min_rank=1, max_rank=3, max_dim=4)
        axis = d.choice((None, d.axis(len(shape))))
        source = d.dtype(FLOAT_DTYPES + INT_DTYPES + ("bool",))
        dtype = d.choice((None, _WIDER[source])) if source != "bool" else "int32"
        attrs = {"axis": axis, "dtype": dtype, "exclusive": d.choice((False, True, None))}
        if product_like:
            # Factors near one: no float overflow (1.1 ** 64 fits float16) and no signed integer
            # overflow (undefined in C).
            if source != "bool" and d.boolean():
                values = (-1.0, 1.0, 1.0, 1.25, 0.5, 0.0) if is_float(source) else (-1, 1, 1, 2, 0)
                return Sample((drawn_array(d, shape, source, values),), attrs)
            return Sample((TensorType(shape, source),), attrs, low=-1.1, high=1.1, int_high=2)
        return Sample((TensorType(shape, source),), attrs, int_high=d.choice((4, 1 << 20)))

    return draw


def _samples(product_like: bool) -> tuple[Sample, ...]:
    low, high = (0.5, 1.5) if product_like else (-2.0, 2.0)
    return (
        Sample((TensorType((2, 3, 4), "float32"),), low=low, high=high),
        Sample((TensorType((2, 3, 4), "float32"),), {"axis": 1}, low=low, high=high),
        Sample((TensorType((2, 3, 4), "float64"),), {"axis": -1, "exclusive": True}, low=low, high=high),
        Sample((TensorType((3, 5), "int32"),), {"axis": 0, "exclusive": True}),
        Sample((np.array([100, 100, 100, -7], np.int8),), {"axis": 0, "dtype": "int32"}),
        Sample((np.array([100, 100, 100, -7], np.int8),), {"axis": 0}),
        Sample((TensorType((4, 2), "float16"),), {"axis": 0, "dtype": "float32"}, low=low, high=high),
        Sample((TensorType((3, 2), "bool"),), {"axis": 1, "dtype": "int32"}),
        Sample((TensorType((5,), "float32"),), {"exclusive": None}, low=low, high=high),
    )


def _scan(name: str, ufunc: np.ufunc, combine: Callable[[te.PrimExpr, te.PrimExpr], te.PrimExpr], identity: int) -> OpDef:
    product_like = identity == 1
    return register(
        OpDef(
            name=name,
            num_inputs=1,
            type_rel=_scan_rel(name),
            pattern=OpPattern.OPAQUE,
            reference=_scan_reference(ufunc, identity),
            kernel=_scan_kernel(name, combine, identity),
            shape_func=_scan_rule,
            attrs=SCAN_ATTRS,
            samples=_samples(product_like),
            domain=Domain(_scan_domain(product_like), ulps=64.0, accumulates=True),
        )
    )


_scan("cumsum", np.add, lambda acc, x: acc + x, 0)
_scan("cumprod", np.multiply, lambda acc, x: acc * x, 1)
