"""nn.conv{1,2,3}d_transpose (compiler/ops/conv_transpose.py): TVM's output-size formula,
output_padding, groups, layouts, mixed integer dtypes and errors; values against a scatter loop
written here and against the adjoint of the forward convolution."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.parser.printer import astext
from compiler.ir.structural import structural_equal
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import TypeRelationError
from compiler.parser import parse
from compiler.runtime.interpreter import run_main

F32 = "float32"
T1 = ops.get("nn.conv1d_transpose")
T2 = ops.get("nn.conv2d_transpose")
T3 = ops.get("nn.conv3d_transpose")


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(op: ops.OpDef, data: Type, weight: Type, **attrs: object) -> Type:
    return op.type_rel([data, weight], op.make_attrs(attrs))


def run(op: ops.OpDef, x: np.ndarray, w: np.ndarray, **attrs: object) -> np.ndarray:
    a = op.make_attrs(attrs)
    ty = op.type_rel([TensorType(x.shape, str(x.dtype)), TensorType(w.shape, str(w.dtype))], a)
    out = op.reference([x, w], a)
    assert isinstance(ty, TensorType) and out.shape == ty.shape and str(out.dtype) == ty.dtype
    return out


def scatter(x, w, stride, before, after, out_pad, dilation, groups, dtype=np.float64):
    """Each input element adds w * x to the outputs i*stride + k*dilation - before (canonical
    (N, C, *S) data, (C, O/groups, *K) weight)."""
    x, w = x.astype(dtype), w.astype(dtype)
    n_, c_, *sizes = x.shape
    _, og, *ks = w.shape
    cg = c_ // groups
    outs = [(s - 1) * st + (k - 1) * d + 1 - b - a + p for s, st, k, d, b, a, p in zip(sizes, stride, ks, dilation, before, after, out_pad)]
    out = np.zeros((n_, og * groups, *outs), dtype=dtype)
    for n, c in itertools.product(range(n_), range(c_)):
        g = c // cg
        for pos in itertools.product(*(range(s) for s in sizes)):
            for o in range(og):
                for tap in itertools.product(*(range(k) for k in ks)):
                    dst = [p * st + k * d - b for p, st, k, d, b in zip(pos, stride, tap, dilation, before)]
                    if all(0 <= q < e for q, e in zip(dst, outs)):
                        out[(n, g * og + o, *dst)] += x[(n, c, *pos)] * w[(c, o, *tap)]
    return out


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def test_conv2d_transpose_output_size_is_tvms_formula() -> None:
    # stride*(S-1) + (K-1)*dilation + 1 - pad_before - pad_after + output_padding
    assert infer(T2, t(1, 3, 4, 5), t(3, 2, 3, 3), strides=[2, 2], padding=[1, 1], output_padding=[1, 1]) == t(1, 2, 8, 10)
    assert infer(T2, t(1, 3, 4, 5), t(3, 2, 3, 3), strides=[3, 1], padding=[1, 0, 0, 2], dilation=[2, 1]) == t(1, 2, 13, 5)
    assert infer(T1, t(1, 3, 5), t(3, 2, 3), strides=[2], padding=[1]) == t(1, 2, 9)
    assert infer(T1, t(1, 3, 5), t(3, 2, 3), strides=[2], padding=[1, 0]) == t(1, 2, 10)
    assert infer(T3, t(1, 2, 3, 3, 3), t(2, 1, 2, 2, 2), strides=[2, 2, 2], padding=[1, 0, 0]) == t(1, 1, 4, 6, 6)


def test_conv1d_transpose_matches_scatter_with_stride_above_kernel_dilation_and_output_padding() -> None:
    x, w = rand(2, 4, 5), rand(4, 3, 2, seed=1)
    out = run(T1, x, w, strides=[3], padding=[0, 1], output_padding=[2], dilation=[2], groups=2)
    np.testing.assert_allclose(out, scatter(x, w, (3,), (0,), (1,), (2,), (2,), 2), rtol=1e-5, atol=1e-5)
    assert out.shape == (2, 6, 16)


def test_conv2d_transpose_matches_scatter_with_groups_and_asymmetric_padding() -> None:
    x, w = rand(1, 4, 3, 4), rand(4, 2, 2, 3, seed=2)
    out = run(T2, x, w, strides=[3, 2], padding=[1, 0, 0, 2], output_padding=[2, 1], groups=2)
    expected = scatter(x, w, (3, 2), (1, 0), (0, 2), (2, 1), (1, 1), 2)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_conv2d_transpose_is_the_adjoint_of_conv2d() -> None:
    # <conv2d(y, w), x> == <y, conv2d_transpose(x, w)> for the same strides and padding.
    conv = ops.get("nn.conv2d")
    y, w = rand(1, 2, 9, 8, seed=3), rand(3, 2, 3, 3, seed=4)  # OIHW for conv2d is IOHW of the transpose's view
    attrs = {"strides": [2, 2], "padding": [1, 1]}
    fwd = conv.reference([y, w], conv.make_attrs(attrs))
    x = rand(*fwd.shape, seed=5)
    back = T2.reference([x, w], T2.make_attrs({**attrs, "output_padding": [0, 1]}))
    assert back.shape == y.shape
    np.testing.assert_allclose(np.sum(fwd.astype(np.float64) * x), np.sum(y.astype(np.float64) * back), rtol=1e-4)


def test_conv3d_transpose_ndhwc_with_dhwoi_weight() -> None:
    x, w = rand(1, 2, 3, 2, 2), rand(2, 3, 2, 1, 2, seed=6)  # canonical NCDHW, IODHW
    out = run(
        T3, x.transpose(0, 2, 3, 4, 1), w.transpose(2, 3, 4, 1, 0), strides=[1, 3, 2], padding=[0, 1, 0, 1, 0, 0],
        data_layout="NDHWC", kernel_layout="DHWOI",
    )
    expected = scatter(x, w, (1, 3, 2), (0, 1, 0), (1, 0, 0), (0, 0, 0), (1, 1, 1), 1)
    np.testing.assert_allclose(out, expected.transpose(0, 2, 3, 4, 1), rtol=1e-5, atol=1e-5)


def test_conv2d_transpose_uint8_data_int8_weight_into_int32_is_exact() -> None:
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (1, 3, 3, 3)).astype("uint8")
    w = rng.integers(-128, 128, (3, 2, 3, 3)).astype("int8")
    out = run(T2, x, w, strides=[2, 2], padding=[1], out_dtype="int32")
    assert out.dtype == np.int32
    expected = scatter(x, w, (2, 2), (1, 1), (1, 1), (0, 0), (1, 1), 1, dtype=np.int64)
    np.testing.assert_array_equal(out, expected)


def test_grouped_transpose_has_groups_times_the_weights_output_channels() -> None:
    assert infer(T2, t(1, 4, 3, 3), t(4, 1, 2, 2), groups=4) == t(1, 4, 4, 4)
    assert infer(T2, t(1, 4, 3, 3), t(4, 1, 2, 2), groups=4, channels=4, kernel_size=[2, 2]) == t(1, 4, 4, 4)


def test_transpose_propagates_unknown_batch_and_spatial_dims() -> None:
    assert infer(T2, t("?", 3, "?", 4), t(3, 2, 3, 3), strides=[2, 2]) == t("?", 2, "?", 9)


def test_transpose_accepts_a_weight_of_unknown_dims_as_tvm_does() -> None:
    assert infer(T2, t(1, 3, 4, 4), t("?", "?", "?", "?"), channels=2, kernel_size=[3, 3]) == t(1, 2, 6, 6)
    assert infer(T2, t(1, 3, 4, 4), t(3, 2, 3, "?"), strides=[2, 2]) == t(1, 2, 9, "?")


def test_transpose_errors_name_the_op_and_the_offending_input() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.conv2d_transpose: data Tensor\[\(1, 4, 3, 3\), float32\] has 4 channels but weight"):
        infer(T2, t(1, 4, 3, 3), t(3, 2, 3, 3))
    with pytest.raises(TypeRelationError, match=r"channels=5 does not match weight"):
        infer(T2, t(1, 3, 3, 3), t(3, 2, 3, 3), channels=5)
    with pytest.raises(TypeRelationError, match=r"output_padding must be non-negative"):
        infer(T1, t(1, 3, 5), t(3, 2, 3), output_padding=[-1])
    with pytest.raises(TypeRelationError, match=r"padding \[3\] leaves no output along axis W"):
        infer(T1, t(1, 3, 1), t(3, 2, 2), padding=[3])
    with pytest.raises(TypeRelationError, match=r"unsupported kernel_layout 'OIDHW'"):
        infer(T2, t(1, 3, 3, 3), t(3, 2, 3, 3), kernel_layout="OIDHW")
    with pytest.raises(TypeRelationError, match=r"3 input channels do not split into groups=2"):
        infer(T1, t(1, 3, 5), t(3, 2, 3), groups=2)


MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4, 3, 3), float32], %w: Tensor[(4, 1, 3, 3), float32], %v: Tensor[(2, 2, 2), float32]) {
  %0 = nn.conv2d_transpose(%x, %w, channels=2, kernel_size=[3, 3], strides=[2, 2], output_padding=[1, 1], padding=[1, 1, 1, 1], groups=2);
  %1 = nn.relu(%0);
  %2 = reshape(%1, newshape=[1, 2, 36]);
  nn.conv1d_transpose(%2, %v, strides=[3], padding=[1, 2], kernel_layout="IOW")
}
"""


def test_transpose_attrs_round_trip_through_text() -> None:
    mod = parse(MODEL)
    assert structural_equal(parse(astext(mod)), mod)
    assert "output_padding=[1, 1]" in astext(mod)


def test_transpose_model_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    from compiler.driver import export, lower
    from compiler.runtime.module import CompiledModule

    mod = parse(MODEL)
    rng = np.random.default_rng(9)
    inputs = {
        "x": rng.standard_normal((1, 4, 3, 3)).astype(F32),
        "w": rng.standard_normal((4, 1, 3, 3)).astype(F32),
        "v": rng.standard_normal((2, 2, 2)).astype(F32),
    }
    expected = run_main(mod, inputs)[0]
    export(lower(parse(MODEL)), tmp_path, "")
    result = CompiledModule(tmp_path).run(inputs)
    np.testing.assert_allclose(result.outputs[0], expected, rtol=1e-5, atol=1e-5)


def test_conv3d_transpose_attrs_round_trip_through_text() -> None:
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 2, 3, 2), float32], %w: Tensor[(1, 2, 2, 2, 2), float32]) {
  nn.conv3d_transpose(%x, %w, channels=4, kernel_size=[1, 2, 2], strides=[2, 1, 3], output_padding=[1, 0, 2], padding=[0, 1, 0, 0, 0, 1], dilation=[1, 2, 1], groups=2, data_layout="NDHWC", kernel_layout="DHWIO", out_dtype="float64")
}
"""
    mod = parse(text)
    assert structural_equal(parse(astext(mod)), mod)
    assert mod.main.body.checked_type == TensorType((1, 4, 3, 9, 4), "float64")
