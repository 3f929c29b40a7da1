"""nn.conv1d and nn.conv3d (compiler/ops/conv_nd.py): shapes, padding forms, layouts, groups,
mixed integer dtypes and errors; values against a textbook loop convolution written here."""

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
CONV1D = ops.get("nn.conv1d")
CONV3D = ops.get("nn.conv3d")


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


def loop_conv(x, w, stride, before, after, dilation, groups, dtype=np.float64):
    """Textbook N-d convolution on canonical (N, C, *S) data and (O, C/groups, *K) weights."""
    x, w = x.astype(dtype), w.astype(dtype)
    n_, c_, *sizes = x.shape
    o_, i_, *ks = w.shape
    outs = [(s + b + a - (k - 1) * d - 1) // st + 1 for s, b, a, k, d, st in zip(sizes, before, after, ks, dilation, stride)]
    out = np.zeros((n_, o_, *outs), dtype=dtype)
    per_group = o_ // groups
    for n, o in itertools.product(range(n_), range(o_)):
        g = o // per_group
        for pos in itertools.product(*(range(s) for s in outs)):
            acc = 0
            for c in range(i_):
                for tap in itertools.product(*(range(k) for k in ks)):
                    src = [p * st + k * d - b for p, st, k, d, b in zip(pos, stride, tap, dilation, before)]
                    if all(0 <= s < size for s, size in zip(src, sizes)):
                        acc += x[(n, g * i_ + c, *src)] * w[(o, c, *tap)]
            out[(n, o, *pos)] = acc
    return out


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


# --- conv1d -------------------------------------------------------------------------------------


def test_conv1d_matches_loops_with_stride_larger_than_kernel_padding_dilation_and_groups() -> None:
    x, w = rand(2, 4, 13), rand(6, 2, 2, seed=1)
    out = run(CONV1D, x, w, strides=[3], padding=[2, 1], dilation=[2], groups=2)
    expected = loop_conv(x, w, (3,), (2,), (1,), (2,), 2)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_conv1d_nwc_wio_is_a_permutation_of_ncw_oiw() -> None:
    x, w = rand(1, 3, 9), rand(4, 3, 3, seed=2)
    out = run(CONV1D, x.transpose(0, 2, 1), w.transpose(2, 1, 0), padding=[1], data_layout="NWC", kernel_layout="WIO")
    expected = loop_conv(x, w, (1,), (1,), (1,), (1,), 1)
    np.testing.assert_allclose(out, expected.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


def test_conv1d_depthwise_with_out_layout() -> None:
    x, w = rand(1, 3, 8), rand(6, 1, 3, seed=3)
    out = run(CONV1D, x, w, groups=3, out_layout="NWC")
    np.testing.assert_allclose(out, loop_conv(x, w, (1,), (0,), (0,), (1,), 3).transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


def test_conv1d_padding_one_value_pads_both_sides_two_values_are_left_right() -> None:
    data, weight = t(1, 3, 10), t(4, 3, 3)
    assert infer(CONV1D, data, weight) == t(1, 4, 8)
    assert infer(CONV1D, data, weight, padding=[2]) == t(1, 4, 12)
    assert infer(CONV1D, data, weight, padding=[2, 0]) == t(1, 4, 10)
    assert infer(CONV1D, data, weight, strides=[4], dilation=[2]) == t(1, 4, 2)


def test_conv1d_uint8_data_int8_weight_accumulates_exactly_into_int32() -> None:
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (1, 4, 9)).astype("uint8")
    w = rng.integers(-128, 128, (3, 4, 3)).astype("int8")
    out = run(CONV1D, x, w, padding=[1, 2], out_dtype="int32")
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, loop_conv(x, w, (1,), (1,), (2,), (1,), 1, dtype=np.int64))


def test_conv1d_int8_without_out_dtype_wraps_like_int8() -> None:
    x = np.full((1, 2, 3), 100, dtype="int8")
    w = np.full((1, 2, 3), 100, dtype="int8")
    out = run(CONV1D, x, w)
    assert out.dtype == np.int8 and out[0, 0, 0] == np.int64(60000).astype(np.int8)


def test_conv1d_propagates_unknown_batch_and_width() -> None:
    assert infer(CONV1D, t("?", 3, "?"), t(4, 3, 3)) == t("?", 4, "?")
    assert infer(CONV1D, t(1, "?", 8), t(4, 3, 3), channels=4, kernel_size=[3]) == t(1, 4, 6)


def test_conv_nd_accepts_a_weight_of_unknown_dims_as_tvm_does() -> None:
    # kernel_size stands for the weight's kernel dims; without it the output's are unknown too.
    assert infer(CONV1D, t(1, 3, 8), t("?", "?", "?"), channels=4, kernel_size=[3]) == t(1, 4, 6)
    assert infer(CONV3D, t(1, 2, 5, 6, 7), t(4, 2, 2, "?", 3)) == t(1, 4, 4, "?", 5)
    with pytest.raises(TypeRelationError, match=r"nn.conv3d: kernel_size=\[2, 2, 2\] does not match weight"):
        infer(CONV3D, t(1, 2, 5, 6, 7), t(4, 2, 2, "?", 3), kernel_size=[2, 2, 2])


def test_conv1d_errors_name_the_op_and_the_offending_input() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.conv1d: data Tensor\[\(1, 4, 8\), float32\] has 4 channels"):
        infer(CONV1D, t(1, 4, 8), t(4, 3, 3))
    with pytest.raises(TypeRelationError, match=r"nn.conv1d: padding needs 1 or 2 values, got \[1, 1, 1\]"):
        infer(CONV1D, t(1, 3, 8), t(4, 3, 3), padding=[1, 1, 1])
    with pytest.raises(TypeRelationError, match=r"nn.conv1d: unsupported data_layout 'NCHW'"):
        infer(CONV1D, t(1, 3, 8), t(4, 3, 3), data_layout="NCHW")
    with pytest.raises(TypeRelationError, match=r"kernel_size=\[5\] does not match weight"):
        infer(CONV1D, t(1, 3, 8), t(4, 3, 3), kernel_size=[5])
    with pytest.raises(TypeRelationError, match=r"channels=5 does not match weight"):
        infer(CONV1D, t(1, 3, 8), t(4, 3, 3), channels=5)
    with pytest.raises(TypeRelationError, match=r"window of 5 .* larger than the padded input 4"):
        infer(CONV1D, t(1, 3, 4), t(4, 3, 3), dilation=[2])
    with pytest.raises(TypeRelationError, match=r"6 output channels do not split into groups=4"):
        infer(CONV1D, t(1, 4, 8), t(6, 1, 3), groups=4)
    with pytest.raises(TypeRelationError, match=r"strides must be positive"):
        infer(CONV1D, t(1, 3, 8), t(4, 3, 3), strides=[0])


# --- conv3d -------------------------------------------------------------------------------------


def test_conv3d_matches_loops_with_strides_dilation_six_value_padding_and_groups() -> None:
    x, w = rand(1, 4, 5, 6, 7), rand(4, 2, 2, 1, 3, seed=5)
    out = run(CONV3D, x, w, strides=[2, 3, 1], padding=[1, 0, 2, 0, 1, 1], dilation=[2, 1, 1], groups=2)
    expected = loop_conv(x, w, (2, 3, 1), (1, 0, 2), (0, 1, 1), (2, 1, 1), 2)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_conv3d_ndhwc_dhwio_is_a_permutation_of_ncdhw_oidhw() -> None:
    x, w = rand(1, 2, 4, 5, 3), rand(3, 2, 2, 3, 1, seed=6)
    out = run(
        CONV3D, x.transpose(0, 2, 3, 4, 1), w.transpose(2, 3, 4, 1, 0), padding=[1, 0, 1],
        data_layout="NDHWC", kernel_layout="DHWIO",
    )
    expected = loop_conv(x, w, (1, 1, 1), (1, 0, 1), (1, 0, 1), (1, 1, 1), 1)
    np.testing.assert_allclose(out, expected.transpose(0, 2, 3, 4, 1), rtol=1e-5, atol=1e-5)


def test_conv3d_padding_forms_one_three_and_six_values() -> None:
    data, weight = t(1, 2, 6, 6, 6), t(3, 2, 3, 3, 3)
    assert infer(CONV3D, data, weight, padding=[1]) == t(1, 3, 6, 6, 6)
    assert infer(CONV3D, data, weight, padding=[1, 0, 2]) == t(1, 3, 6, 4, 8)
    assert infer(CONV3D, data, weight, padding=[1, 0, 2, 0, 0, 1]) == t(1, 3, 5, 4, 7)
    with pytest.raises(TypeRelationError, match=r"padding needs 1 or 3 or 6 values, got \[1, 1\]"):
        infer(CONV3D, data, weight, padding=[1, 1])


def test_conv3d_int8_data_uint8_weight_into_int32_is_exact() -> None:
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (1, 2, 3, 4, 4)).astype("int8")
    w = rng.integers(0, 256, (2, 2, 2, 2, 2)).astype("uint8")
    out = run(CONV3D, x, w, strides=[1, 2, 2], out_dtype="int32")
    np.testing.assert_array_equal(out, loop_conv(x, w, (1, 2, 2), (0,) * 3, (0,) * 3, (1,) * 3, 1, dtype=np.int64))


def test_conv3d_rejects_a_weight_of_the_wrong_rank() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.conv3d: weight Tensor\[\(3, 2, 3, 3\), float32\] does not have the 5 dims"):
        infer(CONV3D, t(1, 2, 6, 6, 6), t(3, 2, 3, 3))


# --- text and compiled ----------------------------------------------------------------------------

MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 3), float32], %w: Tensor[(3, 3, 4), float32], %v: Tensor[(2, 2, 2, 2, 2), float32]) {
  %0 = nn.conv1d(%x, %w, strides=[2], padding=[1, 2], dilation=[2], groups=1, channels=4, kernel_size=[3], data_layout="NWC", kernel_layout="WIO");
  %1 = nn.relu(%0);
  %2 = reshape(%1, newshape=[1, 2, 2, 2, 2]);
  nn.conv3d(%2, %v, padding=[1, 0, 0, 0, 1, 1], out_dtype="float32")
}
"""


def test_conv1d_and_conv3d_attrs_round_trip_through_text() -> None:
    mod = parse(MODEL)
    assert structural_equal(parse(astext(mod)), mod)
    text = astext(mod)
    assert 'padding=[1, 2]' in text and 'data_layout="NWC"' in text and "padding=[1, 0, 0, 0, 1, 1]" in text


def test_conv_model_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    from compiler.driver import export, lower
    from compiler.runtime.module import CompiledModule

    mod = parse(MODEL)
    rng = np.random.default_rng(8)
    inputs = {
        "x": rng.standard_normal((1, 8, 3)).astype(F32),
        "w": rng.standard_normal((3, 3, 4)).astype(F32),
        "v": rng.standard_normal((2, 2, 2, 2, 2)).astype(F32),
    }
    expected = run_main(mod, inputs)[0]
    export(lower(parse(MODEL)), tmp_path, "")
    result = CompiledModule(tmp_path).run(inputs)
    np.testing.assert_allclose(result.outputs[0], expected, rtol=1e-5, atol=1e-5)


def test_conv2d_and_dense_take_uint8_data_with_int8_weights_into_int32() -> None:
    rng = np.random.default_rng(10)
    x = rng.integers(0, 256, (1, 3, 5, 5)).astype("uint8")
    w = rng.integers(-128, 128, (2, 3, 3, 3)).astype("int8")
    out = run(ops.get("nn.conv2d"), x, w, padding=[1, 1], out_dtype="int32")
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, loop_conv(x, w, (1, 1), (1, 1), (1, 1), (1, 1), 1, dtype=np.int64))
    dense = ops.get("nn.dense")
    a = rng.integers(0, 256, (3, 16)).astype("uint8")
    b = rng.integers(-128, 128, (4, 16)).astype("int8")
    attrs = dense.make_attrs({"units": None, "out_dtype": "int32"})
    assert dense.type_rel([TensorType(a.shape, "uint8"), TensorType(b.shape, "int8")], attrs) == t(3, 4, dtype="int32")
    got = dense.reference([a, b], attrs)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64).T)
    assert got.dtype == np.int32


@pytest.mark.parametrize(
    "name",
    [
        "nn.conv1d", "nn.conv3d", "nn.conv1d_transpose", "nn.conv2d_transpose", "nn.conv3d_transpose",
        "nn.contrib_conv2d_NCHWc", "nn.contrib_depthwise_conv2d_NCHWc",
    ],
)
def test_convolution_domains_draw_calls_the_relation_and_reference_agree_on(name: str) -> None:
    import warnings

    from compiler.ops.domain import RandomDraw
    from tests.compiler.ops.samples import materialize

    op = ops.get(name)
    assert op.domain is not None
    for seed in range(60):
        sample = op.domain.draw(RandomDraw(seed))
        rng = np.random.default_rng(seed)
        values, types = zip(*(materialize(entry, sample, rng) for entry in sample.inputs))
        attrs = op.make_attrs(sample.attrs)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ty = op.type_rel(list(types), attrs)
            out = op.reference(list(values), attrs)
        assert isinstance(ty, TensorType) and out.shape == ty.shape and str(out.dtype) == ty.dtype, sample
