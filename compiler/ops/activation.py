"""Activations and dtype changes: nn.prelu, nn.fast_softmax, reinterpret and cast_like.

* `nn.prelu(data, alpha, axis=1)`: `alpha` is 1-D with the length of `data`'s `axis`; an
  element keeps its value when positive and is scaled by its channel's alpha otherwise. TVM's
  relation and TOPI index the shape with the axis as given, so a negative axis is an error.
  BROADCAST, like TVM.
* `nn.fast_softmax(axis=-1)`: TVM computes softmax with its fast_exp approximation; here it is
  softmax itself, lowered by nn.softmax's kernel (OUT_ELEMWISE_FUSABLE).
* `reinterpret(dtype)`: the same bits read as another dtype of the same width (float32 <->
  int32, float16 <-> uint16, ...). ELEMWISE.
* `cast_like(data, dtype_like)`: `cast` to the dtype of the second argument, whose shape and
  values do not matter. ELEMWISE.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import TensorType, Type, is_valid_dtype
from compiler.ops.common import check_arity, dims_equal, normalize_axis, same_dtype, tensor_arg
from compiler.ops.domain import FLOAT_DTYPES, INT_DTYPES, Domain, Draw
from compiler.ops.elemwise import FLOAT, require_kind
from compiler.ops.kernels.common import input_buffers
from compiler.ops.kernels.softmax import softmax_loops
from compiler.ops.registry import AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import same_shape_rule
from compiler.tir.compute import Epilogue, Index, KernelContext, TensorView
from compiler.tir.expr import Buffer, Const, PrimExpr, cast, intrin, ne, select
from compiler.tir.stmt import Stmt

# --- nn.prelu -----------------------------------------------------------------------------------


def _prelu_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.prelu"
    check_arity(types, 2, op)
    data, alpha = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    require_kind(data, FLOAT, op)
    axis = attrs["axis"]
    assert isinstance(axis, int)
    if not 0 <= axis < data.ndim:
        raise TypeRelationError(f"{op}: axis {axis} must be in [0, {data.ndim}) for data {data}")
    same_dtype(data, alpha, op)
    if alpha.ndim != 1 or not dims_equal(alpha.shape[0], data.shape[axis]):
        raise TypeRelationError(f"{op}: alpha {alpha} must be 1-D with the length of axis {axis} of data {data}")
    return data


def _prelu(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, alpha = arrays
    shape = [1] * x.ndim
    shape[int(attrs["axis"])] = -1
    x64 = x.astype(np.float64)
    return np.where(x64 > 0, x64, x64 * alpha.astype(np.float64).reshape(shape)).astype(x.dtype)


def _prelu_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    x = inputs[0][tuple(idx)]
    slope = inputs[1][idx[int(attrs["axis"])]]
    return select(x > Const(0.0, x.dtype), x, x * slope)


def _prelu_domain(d: Draw) -> Sample:
    shape = d.shape(min_rank=1, max_rank=4)
    axis = d.choice((min(1, len(shape) - 1), d.integer(0, len(shape) - 1)))
    dtype = d.dtype(FLOAT_DTYPES)
    return Sample((TensorType(shape, dtype), TensorType((shape[axis],), dtype)), {"axis": axis}, low=-3.0, high=3.0)


register(
    OpDef(
        name="nn.prelu",
        num_inputs=2,
        type_rel=_prelu_rel,
        pattern=OpPattern.BROADCAST,
        shape_func=same_shape_rule,
        reference=_prelu,
        compute=_prelu_compute,
        attrs=(AttrSpec("axis", "int", 1),),
        samples=(
            Sample((TensorType((2, 3, 4, 4), "float32"), TensorType((3,), "float32"))),
            Sample((TensorType((5, 4), "float32"), TensorType((4,), "float32")), {"axis": 1}),
            Sample((TensorType((3, 2), "float64"), TensorType((3,), "float64")), {"axis": 0}),
            Sample((TensorType((2, 3, 6), "float16"), TensorType((6,), "float16")), {"axis": 2}),
        ),
        domain=Domain(_prelu_domain),
    )
)


# --- nn.fast_softmax ----------------------------------------------------------------------------


def _fast_softmax_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.fast_softmax"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    require_kind(data, FLOAT, op)
    normalize_axis(int(attrs["axis"]), data.ndim, op)
    return data


def _softmax(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = arrays[0].astype(np.float64)
    axis = int(attrs["axis"])
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(arrays[0].dtype)


def _fast_softmax_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
) -> Stmt:
    (data,) = input_buffers(inputs, "nn.fast_softmax")
    axis = normalize_axis(int(attrs["axis"]), len(data.shape), "nn.fast_softmax")
    return softmax_loops(ctx, data, out, epilogue, axis, log=False)


def _fast_softmax_domain(d: Draw) -> Sample:
    shape = d.shape(min_rank=1, max_rank=4)
    axis = d.choice((-1, d.axis(len(shape))))
    return Sample((TensorType(shape, d.dtype(("float32", "float64"))),), {"axis": axis}, low=-5.0, high=5.0)


register(
    OpDef(
        name="nn.fast_softmax",
        num_inputs=1,
        type_rel=_fast_softmax_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        shape_func=same_shape_rule,
        reference=_softmax,
        kernel=_fast_softmax_kernel,
        attrs=(AttrSpec("axis", "int", -1),),
        samples=(
            Sample((TensorType((2, 6), "float32"),)),
            Sample((TensorType((3, 4, 2), "float32"),), {"axis": 1}, low=-20.0, high=20.0),
            Sample((TensorType((4, 3), "float64"),), {"axis": -2}),
        ),
        domain=Domain(_fast_softmax_domain, ulps=16.0, accumulates=True),
    )
)


# --- reinterpret --------------------------------------------------------------------------------


def _bit_width(dtype: str) -> int:
    return 1 if dtype == "bool" else np.dtype(dtype).itemsize * 8


def _reinterpret_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "reinterpret"
    check_arity(types, 1, op)
    x = tensor_arg(types, 0, op)
    dtype = str(attrs["dtype"])
    if not is_valid_dtype(dtype) or dtype == "":
        raise TypeRelationError(f'{op}: unknown target dtype "{dtype}" for {x}')
    if _bit_width(dtype) != _bit_width(x.dtype):
        raise TypeRelationError(f"{op}: {x} has {_bit_width(x.dtype)}-bit elements, {dtype} has {_bit_width(dtype)}")
    return TensorType(x.shape, dtype)


def _reinterpret(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = np.array(arrays[0], copy=True)  # contiguous, and still 0-d for a scalar
    return x.view(str(attrs["dtype"])).reshape(x.shape)


def _reinterpret_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    x = inputs[0][tuple(idx)]
    dtype = str(attrs["dtype"])
    return x if dtype == x.dtype else intrin("reinterpret", x, dtype=dtype)


_SAME_WIDTH = {
    8: ("int8", "uint8"),
    16: ("int16", "uint16", "float16"),
    32: ("int32", "uint32", "float32"),
    64: ("int64", "uint64", "float64"),
}


def _reinterpret_domain(d: Draw) -> Sample:
    source = d.dtype(FLOAT_DTYPES + INT_DTYPES)
    target = d.choice(_SAME_WIDTH[_bit_width(source)])
    # Wide random integers reach every bit, the sign and exponent bits included.
    return Sample((TensorType(d.shape(min_rank=0), source),), {"dtype": target}, low=-1e3, high=1e3,
                  int_high=d.choice((4, 1 << 16, 1 << 31)))


register(
    OpDef(
        name="reinterpret",
        num_inputs=1,
        type_rel=_reinterpret_rel,
        pattern=OpPattern.ELEMWISE,
        shape_func=same_shape_rule,
        reference=_reinterpret,
        compute=_reinterpret_compute,
        attrs=(AttrSpec("dtype", "dtype"),),
        samples=(
            Sample((np.array([1.0, -2.0, 0.0, -0.0, np.inf], np.float32),), {"dtype": "int32"}),
            Sample((np.array([0x3F800000, -1, 1, 0x7F800000], np.int32),), {"dtype": "float32"}),
            Sample((TensorType((2, 3), "float64"),), {"dtype": "uint64"}),
            Sample((np.array([-1, 127, -128], np.int8),), {"dtype": "uint8"}),
            Sample((np.array([0x3C00, 0x7BFF, 1], np.uint16),), {"dtype": "float16"}),
            Sample((TensorType((3,), "int16"),), {"dtype": "int16"}),
        ),
        domain=Domain(_reinterpret_domain),
    )
)


# --- cast_like ----------------------------------------------------------------------------------


def _cast_like_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "cast_like"
    check_arity(types, 2, op)
    data, like = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    return TensorType(data.shape, like.dtype)


def _cast_like(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    # astype truncates floats toward zero, like a C conversion of an in-range value.
    return np.asarray(arrays[0]).astype(arrays[1].dtype)


def _cast_like_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    x = inputs[0][tuple(idx)]
    assert isinstance(out_type, TensorType)
    # A bool is whether the value is non-zero (a C conversion to uint8_t would keep the low bits).
    if out_type.dtype == "bool" and x.dtype != "bool":
        return ne(x, Const(0, x.dtype))
    return cast(out_type.dtype, x)


def _cast_like_domain(d: Draw) -> Sample:
    dtypes = FLOAT_DTYPES + INT_DTYPES + ("bool",)
    source, target = d.dtype(dtypes), d.dtype(dtypes)
    like = TensorType(d.shape(min_rank=0), target)
    # Floats converted to integers stay in every integer dtype's range (C leaves others undefined).
    return Sample((TensorType(d.shape(min_rank=0), source), like), low=0.0, high=100.0, int_high=d.choice((4, 100)))


register(
    OpDef(
        name="cast_like",
        num_inputs=2,
        type_rel=_cast_like_rel,
        pattern=OpPattern.ELEMWISE,
        shape_func=same_shape_rule,
        reference=_cast_like,
        compute=_cast_like_compute,
        samples=(
            Sample((TensorType((2, 3), "float32"), TensorType((1,), "int32")), low=-9.0, high=9.0),
            Sample((TensorType((2, 3), "int32"), TensorType((), "float16"))),
            Sample((TensorType((4,), "float32"), TensorType((7, 2), "uint8")), low=0.0, high=250.0),
            Sample((TensorType((4,), "int8"), TensorType((4,), "bool"))),
            Sample((np.array([0.0, -0.5, 2.0], np.float32), TensorType((1,), "bool"))),
            Sample((TensorType((3,), "bool"), TensorType((3,), "float64"))),
        ),
        domain=Domain(_cast_like_domain),
    )
)
