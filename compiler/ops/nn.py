"""nn operators: activations, bias, dense/matmul, softmax, flatten, pad and dropout.

Convolution, pooling and normalisation live in conv.py, pool.py and norm.py. Attribute names,
order and defaults are TVM's (`include/tvm/relay/attrs/nn.h`); output dtype is the data dtype
unless `out_dtype` says otherwise, and `?` dims propagate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, TupleType, Type, is_valid_dtype
from compiler.ops.common import (
    check_arity,
    dims_equal,
    normalize_axis,
    product,
    same_dtype,
    tensor_arg,
)
from compiler.ops.domain import (
    FLOAT_CHOICES,
    Domain,
    Draw,
    float_values,
    int_range,
    int_values,
    kind_dtype,
    tensor_shape,
)
from compiler.ops.elemwise import ANY_DTYPE, NUMERIC, dtype_kind, elementwise_compute
from compiler.ops.registry import (
    REQUIRED,
    AttrSpec,
    OpDef,
    OpPattern,
    Sample,
    TypeRel,
    TypeRelationError,
    register,
)
from compiler.ops import shape_rules as sr
from compiler.ops.shape_rules import same_shape_rule
from compiler.tir import expr as te
from compiler.ops.transform import reshape_compute
from compiler.tir.compute import Index, TensorView
from compiler.tir.expr import Const, PrimExpr, cast, logical_and, maximum, minimum, select

# The loop nests of the heavy ops (dense, matmul, batch_matmul, softmax).
from compiler.ops.kernels.common import input_buffers
from compiler.ops.kernels.matmul import batch_matmul_loops, matmul_loops
from compiler.ops.kernels.softmax import softmax_loops
from compiler.tir.compute import Epilogue, KernelContext
from compiler.tir.expr import Buffer
from compiler.tir.stmt import Stmt

F32 = "float32"


def result_dtype(attrs: Attrs, data: TensorType, op: str) -> str:
    """`out_dtype` when set, else the data dtype."""
    out = attrs["out_dtype"] or data.dtype
    if not is_valid_dtype(out):
        raise TypeRelationError(f"{op}: unknown out_dtype {out!r}")
    return out


def accumulator_dtype(dtype: np.dtype) -> np.dtype:
    """A wide type for numpy references to accumulate in before casting to the result dtype."""
    if np.issubdtype(dtype, np.floating):
        return np.dtype("float64")
    if np.issubdtype(dtype, np.unsignedinteger):
        return np.dtype("uint64")
    return np.dtype("int64")


def merge_dim(a: Dim, b: Dim) -> Dim:
    """The better-known of two dims already checked equal with `dims_equal`."""
    return b if a is ANY else a


def float_arg(types: Sequence[Type], index: int, op: str) -> TensorType:
    ty = tensor_arg(types, index, op)
    if not ty.dtype.startswith("float"):
        raise TypeRelationError(f"{op} expects a floating-point tensor, got {ty}")
    return ty


def _same_type_rel(op: str) -> TypeRel:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, op)
        return tensor_arg(types, 0, op)

    return rel


def numeric_input(d: Draw, shape: Sequence[int], dtype: str, wide: bool = True) -> object:
    """A sample input: a float tensor type, or signed integer values (up to a narrow dtype's
    extremes when `wide`)."""
    if dtype_kind(dtype) == "int":
        low, high = int_range(d, dtype) if wide else (-9, 9)
        return int_values(d, shape, dtype, low, high)
    return TensorType(tuple(shape), dtype)


def _relu_domain(d: Draw) -> Sample:
    dtype = kind_dtype(d, NUMERIC)
    return Sample((numeric_input(d, tensor_shape(d, empty=True), dtype),))


def _leaky_relu_domain(d: Draw) -> Sample:
    dtype = kind_dtype(d, NUMERIC)
    alpha = d.choice((0.25, 0.1, 0.0, 1.0, -0.5, 2.0, 1e-3))
    # Small integers: alpha (truncated to the dtype) times an extreme value would wrap.
    return Sample((numeric_input(d, tensor_shape(d, empty=True), dtype, wide=False),), {"alpha": alpha})


# --- activations ------------------------------------------------------------------------------

register(
    OpDef(
        name="nn.relu",
        num_inputs=1,
        type_rel=_same_type_rel("nn.relu"),
        pattern=OpPattern.ELEMWISE,
        shape_func=same_shape_rule,
        # np.asarray: np.maximum of a 0-d array is a numpy scalar.
        reference=lambda a, attrs: np.asarray(np.maximum(a[0], np.zeros((), a[0].dtype))),
        compute=elementwise_compute(lambda x: maximum(x, 0)),
        samples=(
            Sample((TensorType((2, 5), F32),)),
            Sample((np.array([-3, 0, 4], dtype="int32"),)),
        ),
        domain=Domain(_relu_domain),
    )
)


def _leaky_relu(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = a[0]
    # TVM multiplies by alpha cast to the data dtype (so integer tensors get alpha truncated).
    alpha = np.asarray(attrs["alpha"]).astype(x.dtype)
    return np.where(x > 0, x, x * alpha).astype(x.dtype)


def _leaky_relu_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    x = inputs[0][tuple(idx)]
    alpha = Const(np.asarray(attrs["alpha"]).astype(x.dtype).item(), x.dtype)
    return select(x > 0, x, x * alpha)


register(
    OpDef(
        name="nn.leaky_relu",
        num_inputs=1,
        type_rel=_same_type_rel("nn.leaky_relu"),
        pattern=OpPattern.ELEMWISE,
        shape_func=same_shape_rule,
        reference=_leaky_relu,
        compute=_leaky_relu_compute,
        attrs=(AttrSpec("alpha", "float", 0.25),),
        samples=(
            Sample((TensorType((3, 4), F32),)),
            Sample((TensorType((6,), F32),), {"alpha": 0.1}),
        ),
        domain=Domain(_leaky_relu_domain),
    )
)


# --- nn.bias_add --------------------------------------------------------------------------------


def _bias_add_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.bias_add"
    check_arity(types, 2, op)
    data, bias = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    same_dtype(data, bias, op)
    axis = normalize_axis(attrs["axis"], data.ndim, op)
    if bias.ndim != 1 or not dims_equal(bias.shape[0], data.shape[axis]):
        raise TypeRelationError(
            f"{op}: bias {bias} must be 1-D with the length of axis {attrs['axis']} of {data}"
        )
    return data


def _bias_add(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, bias = a
    axis = attrs["axis"] % data.ndim
    shape = [1] * data.ndim
    shape[axis] = -1
    return (data + bias.reshape(shape)).astype(data.dtype)


def _bias_add_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    data, bias = inputs
    axis = normalize_axis(attrs["axis"], data.ndim, "nn.bias_add")
    return data[tuple(idx)] + bias[idx[axis]]


def _bias_add_domain(d: Draw) -> Sample:
    dtype = kind_dtype(d, NUMERIC)
    shape = tensor_shape(d, min_rank=1, empty=True)
    axis = d.axis(len(shape))
    data = numeric_input(d, shape, dtype, wide=False)
    return Sample((data, numeric_input(d, (shape[axis],), dtype, wide=False)), {"axis": axis})


register(
    OpDef(
        name="nn.bias_add",
        num_inputs=2,
        type_rel=_bias_add_rel,
        pattern=OpPattern.BROADCAST,
        shape_func=same_shape_rule,
        reference=_bias_add,
        compute=_bias_add_compute,
        attrs=(AttrSpec("axis", "int", 1),),
        samples=(
            Sample((TensorType((2, 3, 4, 4), F32), TensorType((3,), F32))),
            Sample((TensorType((2, 5), F32), TensorType((5,), F32)), {"axis": -1}),
        ),
        domain=Domain(_bias_add_domain),
    )
)


# --- dense, matmul, batch_matmul ------------------------------------------------------------------


def _matmul_shape(
    data: TensorType, weight: TensorType, units: int | None, transpose_a: bool, transpose_b: bool, op: str
) -> tuple[Dim, ...]:
    """(..., M, K) x (K, N) -> (..., M, N), each side optionally transposed; `units` checks N."""
    if data.ndim < (2 if transpose_a else 1):
        raise TypeRelationError(f"{op}: data {data} has too few dims")
    if weight.ndim != 2:
        raise TypeRelationError(f"{op}: weight {weight} must be 2-D")
    out = list(data.shape)
    if transpose_a:
        k = data.shape[-2]
        out[-2] = data.shape[-1]
    else:
        k = data.shape[-1]
    wk, n = (weight.shape[1], weight.shape[0]) if transpose_b else weight.shape
    if not dims_equal(k, wk):
        raise TypeRelationError(f"{op}: reduction dims differ between data {data} and weight {weight}")
    if units is not None:
        if not dims_equal(units, n):
            raise TypeRelationError(f"{op}: units={units} does not match weight {weight}")
        n = units
    out[-1] = n
    return tuple(out)


def _matmul_rule(transposed: bool | None) -> sr.ShapeRule:
    """_matmul_shape over run-time dims: data's leading dims, M (transposed by transpose_a)
    and N from the weight (or `units`). `transposed` fixes transpose_a/transpose_b (dense:
    (False, True)); None reads them from the attrs (matmul)."""

    def rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
        data, weight = sr.dims(inputs[0]), sr.dims(inputs[1])
        transpose_a, transpose_b = (False, True) if transposed is not None else (attrs["transpose_a"], attrs["transpose_b"])
        out = list(data)
        if transpose_a:
            out[-2] = data[-1]
        out[-1] = weight[0] if transpose_b else weight[1]
        return [sr.fill(out_type, out)]

    return rule


def _batch_matmul_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    x, y = sr.dims(inputs[0]), sr.dims(inputs[1])
    batch = te.select(te.eq(x[0], 1), y[0], x[0])  # a batch of 1 broadcasts
    m = x[2] if attrs["transpose_a"] else x[1]
    n = y[1] if attrs["transpose_b"] else y[2]
    return [sr.fill(out_type, (batch, m, n))]


def _dense_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.dense"
    check_arity(types, 2, op)
    data, weight = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    # Data and weight dtypes may differ (uint8 x int8): both are cast to the output dtype.
    shape = _matmul_shape(data, weight, attrs["units"], False, True, op)
    return TensorType(shape, result_dtype(attrs, data, op))


def _matmul_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.matmul"
    check_arity(types, 2, op)
    data, weight = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    same_dtype(data, weight, op)
    shape = _matmul_shape(data, weight, attrs["units"], attrs["transpose_a"], attrs["transpose_b"], op)
    return TensorType(shape, result_dtype(attrs, data, op))


def _matmul(a: np.ndarray, b: np.ndarray, transpose_a: bool, transpose_b: bool, out: str) -> np.ndarray:
    acc = accumulator_dtype(a.dtype)
    a = a.astype(acc)
    b = b.astype(acc)
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b).astype(out)


def _out(a: Sequence[np.ndarray], attrs: Attrs) -> str:
    return attrs["out_dtype"] or str(a[0].dtype)


def _dense_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
) -> Stmt:
    data, weight = input_buffers(inputs, "nn.dense")
    return matmul_loops(ctx, data, weight, out, epilogue, transpose_a=False, transpose_b=True)


def _matmul_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
) -> Stmt:
    data, weight = input_buffers(inputs, "nn.matmul")
    return matmul_loops(ctx, data, weight, out, epilogue, attrs["transpose_a"], attrs["transpose_b"])


def _batch_matmul_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type, epilogue: Epilogue
) -> Stmt:
    x, y = input_buffers(inputs, "nn.batch_matmul")
    return batch_matmul_loops(ctx, x, y, out, epilogue, attrs["transpose_a"], attrs["transpose_b"])


def _matmul_dtypes(d: Draw) -> tuple[str, str]:
    """The operands' dtype and an out_dtype ("" or a wider one)."""
    dtype = d.choice(FLOAT_CHOICES + ("int8", "int32", "uint8", "int64"))
    if dtype_kind(dtype) == "int":
        return dtype, d.choice(("", "int32", "int64"))
    return dtype, d.choice(("", "", "float32", "float64"))


def _matmul_inputs(d: Draw, dtype: str, a: Sequence[int], b: Sequence[int]) -> tuple[object, object]:
    return numeric_input(d, a, dtype, wide=False), numeric_input(d, b, dtype, wide=False)


def gemm_extent(d: Draw, low: int = 1) -> int:
    """A matrix extent for the product kernels: mostly small, sometimes past one register tile
    (6 rows, 8 float32 lanes) or long enough for the lane-wise dot products (16 float32 lanes,
    64 int8 lanes) that the kernels switch to."""
    form = d.integer(0, 5)
    if form < 3:
        return d.integer(low, 6)
    if form < 5:
        return d.integer(7, 20)
    return d.choice((33, 65))


def _dense_domain(d: Draw) -> Sample:
    dtype, out_dtype = _matmul_dtypes(d)
    k, n = gemm_extent(d, low=0), gemm_extent(d)
    data = tensor_shape(d, min_rank=0, max_rank=2, max_dim=4, empty=True) + (k,)
    weight = (n, k)
    units = d.choice((None, n))
    return Sample(_matmul_inputs(d, dtype, data, weight), {"units": units, "out_dtype": out_dtype})


def _matmul_domain(d: Draw) -> Sample:
    dtype, out_dtype = _matmul_dtypes(d)
    transpose_a, transpose_b = d.boolean(), d.boolean()
    m, k, n = gemm_extent(d, low=0), gemm_extent(d, low=0), gemm_extent(d)
    lead = tensor_shape(d, min_rank=0, max_rank=1, max_dim=3)
    if transpose_a:
        data = lead + (k, m)
    else:
        data = (lead + (m, k)) if d.boolean() else (k,)  # 1-D data is a single row
    weight = (n, k) if transpose_b else (k, n)
    attrs = {
        "units": d.choice((None, n)),
        "out_dtype": out_dtype,
        "transpose_a": transpose_a,
        "transpose_b": transpose_b,
    }
    return Sample(_matmul_inputs(d, dtype, data, weight), attrs)


register(
    OpDef(
        name="nn.dense",
        num_inputs=2,
        type_rel=_dense_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=lambda a, attrs: _matmul(
            a[0].astype(_out(a, attrs)), a[1].astype(_out(a, attrs)), False, True, _out(a, attrs)
        ),
        kernel=_dense_kernel,
        extras={"dynamic_extents": True},
        shape_func=_matmul_rule(True),
        attrs=(AttrSpec("units", "int", REQUIRED, optional=True), AttrSpec("out_dtype", "dtype", "")),
        samples=(
            Sample((TensorType((4, 8), F32), TensorType((3, 8), F32)), {"units": None}),
            Sample((TensorType((2, 3, 5), F32), TensorType((4, 5), F32)), {"units": 4}),
            Sample(
                (TensorType((2, 6), "int8"), TensorType((3, 6), "int8")),
                {"units": None, "out_dtype": "int32"},
                int_high=5,
            ),
            Sample(
                (TensorType((3, 40), "uint8"), (np.arange(200) * 37 % 256 - 128).astype("int8").reshape(5, 40)),
                {"units": 5, "out_dtype": "int32"},
                int_high=120,
            ),
            Sample(
                (TensorType((2, 7), "int8"), TensorType((4, 7), "uint8")),
                {"units": None, "out_dtype": "int32"},
                int_high=100,
            ),
        ),
        domain=Domain(_dense_domain, ulps=16.0, accumulates=True),
    )
)

register(
    OpDef(
        name="nn.matmul",
        num_inputs=2,
        type_rel=_matmul_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        kernel=_matmul_kernel,
        extras={"dynamic_extents": True},
        shape_func=_matmul_rule(None),
        reference=lambda a, attrs: _matmul(
            a[0], a[1], attrs["transpose_a"], attrs["transpose_b"], _out(a, attrs)
        ),
        attrs=(
            AttrSpec("units", "int", REQUIRED, optional=True),
            AttrSpec("out_dtype", "dtype", ""),
            AttrSpec("transpose_a", "bool", False),
            AttrSpec("transpose_b", "bool", False),
        ),
        samples=(
            Sample((TensorType((4, 8), F32), TensorType((8, 3), F32)), {"units": None}),
            Sample(
                (TensorType((8, 4), F32), TensorType((3, 8), F32)),
                {"units": 3, "transpose_a": True, "transpose_b": True},
            ),
        ),
        domain=Domain(_matmul_domain, ulps=16.0, accumulates=True),
    )
)


def _batch_matmul_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.batch_matmul"
    check_arity(types, 2, op)
    x, y = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    same_dtype(x, y, op)
    if x.ndim != 3 or y.ndim != 3:
        raise TypeRelationError(f"{op} expects two 3-D tensors, got {x} and {y}")
    bx, by = x.shape[0], y.shape[0]
    if bx is ANY or by is ANY:
        other = by if bx is ANY else bx
        batch: Dim = other if other is not ANY and other != 1 else ANY
    elif bx == by or by == 1:
        batch = bx
    elif bx == 1:
        batch = by
    else:
        raise TypeRelationError(f"{op}: batch dims of {x} and {y} differ and neither is 1")
    m, kx = (x.shape[2], x.shape[1]) if attrs["transpose_a"] else (x.shape[1], x.shape[2])
    ky, n = (y.shape[2], y.shape[1]) if attrs["transpose_b"] else (y.shape[1], y.shape[2])
    if not dims_equal(kx, ky):
        raise TypeRelationError(f"{op}: reduction dims of {x} and {y} differ")
    return TensorType((batch, m, n), result_dtype(attrs, x, op))


def _batch_matmul_domain(d: Draw) -> Sample:
    dtype, out_dtype = _matmul_dtypes(d)
    transpose_a, transpose_b = d.boolean(), d.boolean()
    batch, m, k, n = d.integer(1, 3), gemm_extent(d, low=0), gemm_extent(d, low=0), gemm_extent(d)
    # Either batch may be 1 and broadcast against the other.
    batches = d.choice(((batch, batch), (1, batch), (batch, 1)))
    x = (batches[0], k, m) if transpose_a else (batches[0], m, k)
    y = (batches[1], n, k) if transpose_b else (batches[1], k, n)
    attrs = {"out_dtype": out_dtype, "transpose_a": transpose_a, "transpose_b": transpose_b}
    return Sample(_matmul_inputs(d, dtype, x, y), attrs)


register(
    OpDef(
        name="nn.batch_matmul",
        num_inputs=2,
        type_rel=_batch_matmul_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        kernel=_batch_matmul_kernel,
        extras={"dynamic_extents": True},
        shape_func=_batch_matmul_rule,
        reference=lambda a, attrs: _matmul(
            a[0], a[1], attrs["transpose_a"], attrs["transpose_b"], _out(a, attrs)
        ),
        attrs=(
            AttrSpec("out_dtype", "dtype", ""),
            AttrSpec("transpose_a", "bool", False),
            AttrSpec("transpose_b", "bool", False),
        ),
        samples=(
            Sample((TensorType((2, 3, 4), F32), TensorType((2, 5, 4), F32)), {"transpose_b": True}),
            Sample((TensorType((1, 4, 3), F32), TensorType((3, 4, 2), F32)), {"transpose_a": True}),
        ),
        domain=Domain(_batch_matmul_domain, ulps=16.0, accumulates=True),
    )
)


# --- softmax ------------------------------------------------------------------------------------


def _softmax_rel(op: str) -> TypeRel:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, op)
        data = float_arg(types, 0, op)
        normalize_axis(attrs["axis"], data.ndim, op)
        return data

    return rel


def _log_softmax(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = a[0].astype("float64")
    shifted = x - np.max(x, axis=attrs["axis"], keepdims=True)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=attrs["axis"], keepdims=True))).astype(a[0].dtype)


def _softmax_kernel(op: str, log: bool) -> Callable[..., Stmt]:
    def kernel(
        ctx: KernelContext, inputs: Sequence[TensorView], out: Buffer, attrs: Attrs, out_type: Type,
        epilogue: Epilogue,
    ) -> Stmt:
        (data,) = input_buffers(inputs, op)
        axis = normalize_axis(attrs["axis"], len(data.shape), op)
        return softmax_loops(ctx, data, out, epilogue, axis, log)

    return kernel


def _softmax_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, min_rank=1, empty=True)
    axis = d.axis(len(shape))
    # Other dims may be empty, the normalized one not: its maximum would not exist.
    at = axis % len(shape)
    shape = shape[:at] + (max(shape[at], 1),) + shape[at + 1 :]
    spread = d.choice((2.0, 10.0, 50.0))
    data = TensorType(shape, d.dtype(FLOAT_CHOICES))
    return Sample((data,), {"axis": axis}, low=-spread, high=spread)


register(
    OpDef(
        name="nn.softmax",
        num_inputs=1,
        type_rel=_softmax_rel("nn.softmax"),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        shape_func=same_shape_rule,
        kernel=_softmax_kernel("nn.softmax", log=False),
        extras={"dynamic_extents": True},
        reference=lambda a, attrs: np.exp(_log_softmax(a, attrs).astype("float64")).astype(a[0].dtype),
        attrs=(AttrSpec("axis", "int", -1),),
        samples=(Sample((TensorType((2, 6), F32),)), Sample((TensorType((3, 4, 2), F32),), {"axis": 1})),
        domain=Domain(_softmax_domain, ulps=16.0, accumulates=True),
    )
)

register(
    OpDef(
        name="nn.log_softmax",
        num_inputs=1,
        type_rel=_softmax_rel("nn.log_softmax"),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        shape_func=same_shape_rule,
        kernel=_softmax_kernel("nn.log_softmax", log=True),
        extras={"dynamic_extents": True},
        reference=_log_softmax,
        attrs=(AttrSpec("axis", "int", -1),),
        samples=(Sample((TensorType((2, 6), F32),)), Sample((TensorType((3, 4, 2), F32),), {"axis": 0})),
        domain=Domain(_softmax_domain, ulps=16.0, accumulates=True),
    )
)


# --- nn.batch_flatten -----------------------------------------------------------------------------


def _batch_flatten_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.batch_flatten"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    if data.ndim == 0:
        raise TypeRelationError(f"{op} needs a tensor with a batch dim, got {data}")
    return TensorType((data.shape[0], product(data.shape[1:])), data.dtype)


def _batch_flatten_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    shape = sr.dims(inputs[0])
    return [(shape[0], sr.product(shape[1:]))]


def _batch_flatten_domain(d: Draw) -> Sample:
    return Sample((TensorType(tensor_shape(d, min_rank=1, empty=True), kind_dtype(d, ANY_DTYPE)),))


register(
    OpDef(
        name="nn.batch_flatten",
        num_inputs=1,
        type_rel=_batch_flatten_rel,
        pattern=OpPattern.INJECTIVE,
        # The flattened size is spelled out: -1 cannot be inferred when the batch is empty.
        reference=lambda a, attrs: a[0].reshape(a[0].shape[0], int(np.prod(a[0].shape[1:], dtype=np.int64))),
        reshape_only=True,
        compute=reshape_compute("nn.batch_flatten"),
        shape_func=_batch_flatten_rule,
        samples=(Sample((TensorType((2, 3, 4), F32),)), Sample((TensorType((3,), F32),))),
        domain=Domain(_batch_flatten_domain),
    )
)


# --- nn.pad ---------------------------------------------------------------------------------------

PAD_MODES = ("constant", "edge", "reflect")


def _pad_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "nn.pad"
    check_arity(types, 2, op)
    data, value = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    if value.ndim != 0:
        raise TypeRelationError(f"{op}: the pad value must be a scalar, got {value}")
    width = attrs["pad_width"]
    if len(width) != data.ndim or any(len(w) != 2 for w in width):
        raise TypeRelationError(
            f"{op}: pad_width {[list(w) for w in width]} needs one [before, after] pair per dim of {data}"
        )
    mode = attrs["pad_mode"]
    if mode not in PAD_MODES:
        raise TypeRelationError(f"{op}: unknown pad_mode {mode!r} (expected one of {', '.join(PAD_MODES)})")
    out: list[Dim] = []
    for dim, (before, after) in zip(data.shape, width):
        if before < 0 or after < 0:
            raise TypeRelationError(f"{op}: pad_width must not be negative, got {[list(w) for w in width]}")
        if mode == "reflect" and dim is not ANY and max(before, after) >= dim:
            raise TypeRelationError(f"{op}: reflect padding of {before, after} needs a dim larger than {dim}")
        if mode == "edge" and dim == 0 and before + after:
            raise TypeRelationError(f"{op}: edge padding of an empty dim in {data}")
        out.append(ANY if dim is ANY else dim + before + after)
    return TensorType(tuple(out), data.dtype)


def _pad_rule(inputs: Sequence[sr.ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[sr.Dim, ...]]:
    pairs = zip(sr.dims(inputs[0]), attrs["pad_width"])
    return [tuple(sr.int64(d) + before + after for d, (before, after) in pairs)]


def _pad(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, value = a
    width = [tuple(w) for w in attrs["pad_width"]]
    mode = attrs["pad_mode"]
    if data.ndim == 0:
        return data.copy()  # nothing to pad (np.pad rejects an empty pad_width)
    if mode == "constant":
        return np.pad(data, width, mode="constant", constant_values=value.astype(data.dtype))
    return np.pad(data, width, mode=mode)


def _pad_source(i: PrimExpr, before: int, extent: int, mode: str) -> PrimExpr:
    """The input coordinate that output coordinate `i` copies in edge or reflect mode."""
    inner = i - before
    if mode == "edge":
        return maximum(minimum(inner, extent - 1), 0)
    # Reflect mirrors about the first and last element without repeating them; the type
    # relation keeps the padding shorter than the dim, so one mirroring suffices.
    mirrored = select(inner < 0, -inner, inner)
    return select(mirrored >= extent, 2 * (extent - 1) - mirrored, mirrored)


def _pad_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> PrimExpr:
    data, fill = inputs
    shape = data.shape  # a `?` extent is an int64 expression of the kernel's dim parameters
    width = attrs["pad_width"]
    mode = attrs["pad_mode"]
    if mode != "constant":
        return data[tuple(
            i if before == after == 0 else _pad_source(i, before, extent, mode)
            for i, extent, (before, after) in zip(idx, shape, width)
        )]
    inside: PrimExpr | None = None
    for i, extent, (before, after) in zip(idx, shape, width):
        for bound in ([i >= before] if before else []) + ([i < before + extent] if after else []):
            inside = bound if inside is None else logical_and(inside, bound)
    value = data[tuple(i - before for i, (before, _) in zip(idx, width))]
    # The load sits in a select branch, so it is only evaluated inside the data's bounds.
    return value if inside is None else select(inside, value, cast(data.dtype, fill[()]))


def _pad_domain(d: Draw) -> Sample:
    mode = d.choice(PAD_MODES)
    dtype = kind_dtype(d, ANY_DTYPE)
    shape = tensor_shape(d, empty=mode == "constant")
    width = []
    for extent in shape:
        # Reflection needs the padding shorter than the dim.
        most = min(3, extent - 1) if mode == "reflect" else 3
        width.append((d.integer(0, most), d.integer(0, most)))
    value = np.asarray(float_values(d, (), "float64", -3.0, 3.0)).astype(dtype)
    return Sample((TensorType(shape, dtype), value), {"pad_width": width, "pad_mode": mode})


register(
    OpDef(
        name="nn.pad",
        num_inputs=2,
        type_rel=_pad_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_pad,
        compute=_pad_compute,
        shape_func=_pad_rule,
        attrs=(AttrSpec("pad_width", "nested_ints"), AttrSpec("pad_mode", "str", "constant")),
        samples=(
            Sample(
                (TensorType((1, 2, 3, 3), F32), np.array(0.5, dtype=F32)),
                {"pad_width": [[0, 0], [0, 0], [1, 2], [2, 1]]},
            ),
            Sample(
                (TensorType((3, 4), F32), np.array(0.0, dtype=F32)),
                {"pad_width": [[1, 1], [2, 0]], "pad_mode": "edge"},
            ),
            Sample(
                (TensorType((3, 4), F32), np.array(0.0, dtype=F32)),
                {"pad_width": [[2, 1], [1, 3]], "pad_mode": "reflect"},
            ),
        ),
        domain=Domain(_pad_domain),
    )
)


# --- nn.dropout -----------------------------------------------------------------------------------


def _dropout_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 1, "nn.dropout")
    data = tensor_arg(types, 0, "nn.dropout")
    return TupleType((data, data))


def _dropout_domain(d: Draw) -> Sample:
    shape = tensor_shape(d, empty=True)
    return Sample((TensorType(shape, d.dtype(FLOAT_CHOICES)),), {"rate": d.choice((0.5, 0.1, 0.0, 0.9))})


register(
    OpDef(
        name="nn.dropout",
        num_inputs=1,
        type_rel=_dropout_rel,
        pattern=OpPattern.OPAQUE,
        # Inference semantics: the data passes through and the mask keeps everything.
        reference=lambda a, attrs: (a[0].copy(), np.ones_like(a[0])),
        shape_func=lambda inputs, attrs, out_type: [sr.dims(inputs[0])] * 2,  # the data and the mask
        attrs=(AttrSpec("rate", "float", 0.5),),
        samples=(Sample((TensorType((2, 3), F32),)), Sample((TensorType((4,), F32),), {"rate": 0.1})),
        domain=Domain(_dropout_domain),
    )
)
