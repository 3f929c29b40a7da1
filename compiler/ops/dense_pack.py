"""nn.contrib_dense_pack: nn.dense with a weight packed in column blocks, as x86's AlterOpLayout
rewrites dense (`layout_transform(%w, src_layout="NC", dst_layout="NC8n")` feeding
`nn.contrib_dense_pack(%x, %packed, units=None, out_dtype="float32", weight_layout="NC8n")`).

Data is (..., K). The weight is NC[b]n: (N/b, K, b), output unit `n = outer * b + inner`, or,
for the int8 VNNI form, NC[b]n[c]c: (N/b, K/c, b, c), input `k = K_outer * c + k_inner`. The
result is (..., N) = data . unpacked_weight^T in `out_dtype` (default: data's), both operands
cast to it first, as nn.dense does. TVM's relation reads N as weight.shape[0] * weight.shape[2]
and takes the packing from the weight's rank; here `weight_layout` is also checked against the
weight's shape, so a weight packed differently from what the attribute says is reported, not
misread.

Two extensions of TVM's op, both inputs TVM refuses or never makes, so TVM's own uses read the
same: data may have leading dims (as nn.dense's), and `units` may be less than the weight's
N: the weight was padded with zero units to whole blocks (AlterOpLayout does this for a 500-unit
dense packed in blocks of 16) and the result keeps the first `units` columns.

The kernel reads the NC[b]n weight in place as the panels of the register-blocked product
(compiler/ops/kernels/gemm.py), so a weight packed at compile time costs nothing per call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, Dim, TensorType, Type
from compiler.ops.common import check_arity, dims_equal, tensor_arg
from compiler.ops.domain import Domain, Draw, int_values
from compiler.ops.kernels.common import input_buffers
from compiler.ops.kernels.matmul import packed_dense_loops
from compiler.ops.layout import Layout, parse_layout, transform_array
from compiler.ops.nn import accumulator_dtype, gemm_extent, result_dtype
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim as Dim_, ShapeArg, ShapeRuleError, dims, fill
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, KernelContext, TensorView
from compiler.tir.stmt import Stmt

OP = "nn.contrib_dense_pack"
F32 = "float32"
NC = parse_layout("NC", OP)


def packed_layout(weight: TensorType, text: str) -> Layout:
    """`weight_layout`, checked to describe `weight`: NC[b]n for a 3-D weight, NC[b]n[c]c for a
    4-D one, with b (and c) the weight's inner dims."""
    if weight.ndim not in (3, 4):
        raise TypeRelationError(f"{OP}: weight {weight} must be 3-D (N/b, K, b) or 4-D (N/b, K/c, b, c)")
    layout = parse_layout(text, OP)
    inner = weight.shape[2:]
    expected = "NC" + "".join(f"{'?' if d is ANY else d}{letter}" for d, letter in zip(inner, "nc"))
    factors = [factor for _, factor in layout.axes[2:]]
    shape_ok = [letter for letter, _ in layout.axes] == ["N", "C", "n", "c"][: weight.ndim] and all(
        d is ANY or d == f for d, f in zip(inner, factors)
    )
    if not shape_ok:
        raise TypeRelationError(
            f"{OP}: weight_layout {text!r} does not describe the packed weight {weight}; expected {expected!r}"
        )
    return layout


def _rel(types: Sequence[Type], attrs: Attrs) -> Type:
    check_arity(types, 2, OP)
    data, weight = tensor_arg(types, 0, OP), tensor_arg(types, 1, OP)
    if data.ndim < 1:
        raise TypeRelationError(f"{OP}: data {data} must have an axis of input units")
    layout = packed_layout(weight, attrs["weight_layout"])
    outer, k_outer = weight.shape[0], weight.shape[1]
    block = layout.axes[2][1]
    k_block = layout.axes[3][1] if weight.ndim == 4 else 1
    assert block is not None and k_block is not None
    k: Dim = ANY if k_outer is ANY else k_outer * k_block
    if not dims_equal(data.shape[-1], k):
        raise TypeRelationError(f"{OP}: data {data} has {data.shape[-1]} input units but the weight {weight} has {k}")
    n: Dim = ANY if outer is ANY else outer * block
    units = attrs["units"]
    if units is not None:
        # Fewer units than the weight holds: the rest is padding to a whole block.
        if units < 1 or (n is not ANY and not n - block < units <= n):
            raise TypeRelationError(
                f"{OP}: units={units} does not fit the {n} units of weight {weight} "
                f"(at most {n}, and fewer only by the padding of its last block of {block})"
            )
        n = units
    return TensorType((*data.shape[:-1], n), result_dtype(attrs, data, OP))


def _shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim_, ...]]:
    """(data's leading dims, `units` or weight blocks x block size)."""
    data, weight = dims(inputs[0], "data"), dims(inputs[1], "weight")
    block = parse_layout(attrs["weight_layout"], OP).axes[2][1]
    if block is None:
        raise ShapeRuleError(f"weight_layout {attrs['weight_layout']!r} has no block size")
    units = attrs["units"]
    return [fill(out_type, (*data[:-1], weight[0] * block if units is None else units))]


def _reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, weight = a
    out = attrs["out_dtype"] or str(data.dtype)
    layout = packed_layout(TensorType(weight.shape, str(weight.dtype)), attrs["weight_layout"])
    unpacked = transform_array(weight, layout, NC)
    acc = accumulator_dtype(np.dtype(out))
    if attrs["units"] is not None:
        unpacked = unpacked[: attrs["units"]]
    x, w = data.astype(out).astype(acc), unpacked.astype(out).astype(acc)
    return np.matmul(x, w.T).astype(out)


def _kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    data, weight = input_buffers(inputs, OP)
    return packed_dense_loops(ctx, data, weight, out, epilogue)


def _integers(d: Draw, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    low = 0 if dtype.startswith("uint") else -9
    return int_values(d, shape, dtype, low, 9 if d.boolean() else int(np.iinfo(dtype).max))


def _domain(d: Draw) -> Sample:
    vnni = d.boolean()
    block = d.choice((1, 2, 4, 8, 16))
    k_block = d.choice((1, 2, 4)) if vnni else 1
    m, outer = gemm_extent(d), d.integer(1, 3)
    k = k_block * d.integer(1, 10)
    weight_shape = (outer, k // k_block, block, k_block) if vnni else (outer, k, block)
    layout = f"NC{block}n" + (f"{k_block}c" if vnni else "")
    form = d.choice(("float", "float", "int", "mixed"))
    # A weight padded to whole blocks keeps fewer units than it holds.
    units = d.choice((None, outer * block, outer * block - d.integer(0, block - 1)))
    data_shape = d.choice(((), (2,))) + (m, k)
    if form == "float":
        dtype = d.choice(("float32", "float32", "float64", "float16"))
        out_dtype = d.choice(("", dtype, "float64" if dtype != "float64" else ""))
        inputs: tuple[object, ...] = (TensorType(data_shape, dtype), TensorType(weight_shape, dtype))
    elif form == "int":
        dtype = d.choice(("int8", "int32"))
        out_dtype = "int32" if dtype == "int8" else d.choice(("", "int64"))
        inputs = (int_values(d, data_shape, dtype, -9, 9), int_values(d, weight_shape, dtype, -9, 9))
    else:
        # VNNI's form: uint8 activations, int8 weights, int32 accumulation.
        out_dtype = "int32"
        inputs = (_integers(d, data_shape, "uint8"), _integers(d, weight_shape, "int8"))
    return Sample(inputs, {"units": units, "out_dtype": out_dtype, "weight_layout": layout})


register(
    OpDef(
        name=OP,
        num_inputs=2,
        type_rel=_rel,
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        shape_func=_shape_rule,
        reference=_reference,
        kernel=_kernel,
        # Each result row reads only its own data row: a `?` batch runs the static kernel per row.
        extras={"batch_rows": lambda attrs, rank: True},
        attrs=(
            AttrSpec("units", "int", REQUIRED, optional=True),
            AttrSpec("out_dtype", "dtype", ""),
            AttrSpec("weight_layout", "str", "NC"),
        ),
        samples=(
            Sample((TensorType((2, 5), F32), TensorType((2, 5, 8), F32)), {"units": None, "weight_layout": "NC8n"}),
            Sample(
                (TensorType((7, 3), "float64"), TensorType((3, 3, 1), "float64")),
                {"units": 3, "out_dtype": "float64", "weight_layout": "NC1n"},
            ),
            Sample(
                (TensorType((1, 16), F32), TensorType((1, 16, 16), F32)),
                {"units": None, "out_dtype": "float32", "weight_layout": "NC16n"},
            ),
            Sample(
                (TensorType((3, 8), "uint8"), (np.arange(128) * 37 % 256 - 128).astype("int8").reshape(2, 2, 8, 4)),
                {"units": None, "out_dtype": "int32", "weight_layout": "NC8n4c"},
                int_high=200,
            ),
            Sample(
                (TensorType((2, 7, 9), F32), TensorType((2, 9, 16), F32)),
                {"units": 27, "weight_layout": "NC16n"},
            ),
            Sample(
                (TensorType((2, 6), "int8"), TensorType((1, 6, 4), "int8")),
                {"units": 4, "out_dtype": "int32", "weight_layout": "NC4n"},
                int_high=100,
            ),
        ),
        domain=Domain(_domain, ulps=16.0, accumulates=True),
    )
)
