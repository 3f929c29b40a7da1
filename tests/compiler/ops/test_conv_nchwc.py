"""nn.contrib_conv2d_NCHWc and nn.contrib_depthwise_conv2d_NCHWc (compiler/ops/conv_nchwc.py),
and layout_transform between plain and channel-blocked layouts: blocking written out by hand
here (reshape + transpose), convolution values against nn.conv2d on the unblocked tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.parser.printer import astext
from compiler.ir.structural import structural_equal
from compiler.ir.types import ANY, TensorType
from compiler.ops.conv_nchwc import packed_block
from compiler.ops.registry import TypeRelationError
from compiler.parser import parse
from compiler.runtime.interpreter import run_main

F32 = "float32"
NCHWC = ops.get("nn.contrib_conv2d_NCHWc")
DEPTHWISE = ops.get("nn.contrib_depthwise_conv2d_NCHWc")
CONV2D = ops.get("nn.conv2d")
LT = ops.get("layout_transform")


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def block_data(x: np.ndarray, bn: int) -> np.ndarray:
    """NCHW -> NCHW[bn]c: element (n, c, h, w) moves to (n, c // bn, h, w, c % bn)."""
    n, c, h, w = x.shape
    return x.reshape(n, c // bn, bn, h, w).transpose(0, 1, 3, 4, 2)


def unblock_data(x: np.ndarray) -> np.ndarray:
    n, cb, h, w, bn = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, cb * bn, h, w)


def block_kernel(w: np.ndarray, ibn: int, obn: int) -> np.ndarray:
    """OIHW -> OIHW[ibn]i[obn]o: (o, i, h, w) moves to (o // obn, i // ibn, h, w, i % ibn, o % obn)."""
    o, i, kh, kw = w.shape
    return w.reshape(o // obn, obn, i // ibn, ibn, kh, kw).transpose(0, 2, 4, 5, 3, 1)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def run(op: ops.OpDef, inputs: list[np.ndarray], **attrs: object) -> np.ndarray:
    a = op.make_attrs(attrs)
    ty = op.type_rel([TensorType(x.shape, str(x.dtype)) for x in inputs], a)
    out = op.reference(inputs, a)
    assert isinstance(ty, TensorType) and out.shape == ty.shape and str(out.dtype) == ty.dtype
    return out


# --- layout_transform -----------------------------------------------------------------------------


@pytest.mark.parametrize("bn", [4, 8, 16])
def test_layout_transform_blocks_and_unblocks_channels(bn: int) -> None:
    x = rand(2, 16, 3, 2)
    blocked = run(LT, [x], src_layout="NCHW", dst_layout=f"NCHW{bn}c")
    np.testing.assert_array_equal(blocked, block_data(x, bn))
    np.testing.assert_array_equal(run(LT, [blocked], src_layout=f"NCHW{bn}c", dst_layout="NCHW"), x)


def test_layout_transform_blocks_kernels_as_oihw8i8o_and_back() -> None:
    w = rand(16, 8, 3, 3)
    blocked = run(LT, [w], src_layout="OIHW", dst_layout="OIHW8i8o")
    assert blocked.shape == (2, 1, 3, 3, 8, 8)
    np.testing.assert_array_equal(blocked, block_kernel(w, 8, 8))
    np.testing.assert_array_equal(run(LT, [blocked], src_layout="OIHW8i8o", dst_layout="OIHW"), w)


def test_layout_transform_reblocks_between_factors() -> None:
    x = rand(1, 8, 2, 2)
    four = block_data(x, 4)
    np.testing.assert_array_equal(run(LT, [four], src_layout="NCHW4c", dst_layout="NCHW8c"), block_data(x, 8))


def test_layout_transform_rejects_channels_the_block_does_not_divide() -> None:
    with pytest.raises(TypeRelationError, match=r"axis C of size 6 cannot be split by 4 for NCHW4c"):
        LT.type_rel([t(1, 6, 2, 2)], LT.make_attrs({"src_layout": "NCHW", "dst_layout": "NCHW4c"}))


# --- contrib_conv2d_NCHWc -----------------------------------------------------------------------


def test_conv2d_nchwc_equals_conv2d_on_the_unblocked_tensors() -> None:
    x, w = rand(2, 8, 7, 6), rand(16, 8, 2, 3, seed=1)
    attrs = {"strides": [3, 2], "padding": [1, 0, 2, 1], "dilation": [2, 1]}
    expected = CONV2D.reference([x, w], CONV2D.make_attrs(attrs))
    out = run(
        NCHWC, [block_data(x, 4), block_kernel(w, 4, 8)], **attrs, channels=16, kernel_size=[2, 3],
        data_layout="NCHW4c", kernel_layout="OIHW4i8o", out_layout="NCHW8c",
    )
    np.testing.assert_allclose(out, block_data(expected, 8), rtol=1e-5, atol=1e-5)


def test_conv2d_nchwc_uint8_int8_into_int32_is_exact() -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (1, 8, 4, 4)).astype("uint8")
    w = rng.integers(-128, 128, (8, 8, 3, 3)).astype("int8")
    expected = loop_conv2d(x.astype(np.int64), w.astype(np.int64), pad=1)
    out = run(
        NCHWC, [block_data(x, 8), block_kernel(w, 8, 8)], padding=[1, 1], channels=8, kernel_size=[3, 3],
        data_layout="NCHW8c", kernel_layout="OIHW8i8o", out_layout="NCHW8c", out_dtype="int32",
    )
    assert out.dtype == np.int32
    np.testing.assert_array_equal(unblock_data(out), expected)


def loop_conv2d(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    n_, c_, h_, w_ = x.shape
    o_, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h_ + 2 * pad - kh + 1, w_ + 2 * pad - kw + 1
    out = np.zeros((n_, o_, oh, ow), dtype=x.dtype)
    for y in range(oh):
        for z in range(ow):
            out[:, :, y, z] = np.einsum("nchw,ochw->no", xp[:, :, y : y + kh, z : z + kw], w)
    return out


def test_conv2d_nchwc_needs_channels_and_kernel_size_like_tvm() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.contrib_conv2d_NCHWc: channels and kernel_size must be set"):
        NCHWC.type_rel([t(1, 1, 4, 4, 8), t(1, 1, 3, 3, 8, 8)], NCHWC.make_attrs({"data_layout": "NCHW8c", "kernel_layout": "OIHW8i8o"}))


def test_conv2d_nchwc_checks_the_blocked_shapes() -> None:
    attrs = {"channels": 8, "kernel_size": [3, 3], "data_layout": "NCHW8c", "kernel_layout": "OIHW8i8o"}
    with pytest.raises(TypeRelationError, match=r"axis c of layout NCHW8c has size 4, expected 8"):
        NCHWC.type_rel([t(1, 1, 4, 4, 4), t(1, 1, 3, 3, 8, 8)], NCHWC.make_attrs(attrs))
    with pytest.raises(TypeRelationError, match=r"data Tensor\[\(1, 2, 4, 4, 8\), float32\] has 16 channels"):
        NCHWC.type_rel([t(1, 2, 4, 4, 8), t(1, 1, 3, 3, 8, 8)], NCHWC.make_attrs(attrs))
    with pytest.raises(TypeRelationError, match=r"axis C of size 8 cannot be split by 16 for NCHW16c"):
        NCHWC.type_rel([t(1, 1, 4, 4, 8), t(1, 1, 3, 3, 8, 8)], NCHWC.make_attrs({**attrs, "out_layout": "NCHW16c"}))


def test_conv2d_nchwc_propagates_unknown_batch() -> None:
    attrs = {"channels": 8, "kernel_size": [3, 3], "data_layout": "NCHW8c", "kernel_layout": "OIHW8i8o"}
    assert NCHWC.type_rel([t("?", 1, 4, 4, 8), t(1, 1, 3, 3, 8, 8)], NCHWC.make_attrs(attrs)) == t("?", 1, 2, 2, 8)


def test_nchwc_convolutions_accept_unknown_data_and_weight_dims() -> None:
    attrs = {"channels": 8, "kernel_size": [3, 3], "data_layout": "NCHW8c", "kernel_layout": "OIHW8i8o"}
    unknown_weight = t("?", "?", "?", "?", "?", "?")
    assert NCHWC.type_rel([t("?", "?", "?", 4, 8), unknown_weight], NCHWC.make_attrs(attrs)) == t("?", 1, "?", 2, 8)
    depthwise = {**attrs, "groups": 8, "kernel_layout": "OIHW1i8o"}
    # The channel count of `?` data cannot contradict groups.
    assert DEPTHWISE.type_rel([t("?", "?", 5, 5, 8), unknown_weight], DEPTHWISE.make_attrs(depthwise)) == t(
        "?", 1, 3, 3, 8)


# --- contrib_depthwise_conv2d_NCHWc -------------------------------------------------------------


def test_depthwise_nchwc_equals_grouped_conv2d_with_channel_multiplier() -> None:
    x, w = rand(1, 8, 6, 7), rand(16, 1, 2, 2, seed=3)  # multiplier 2
    attrs = {"strides": [3, 2], "padding": [0, 1], "dilation": [2, 2], "groups": 8}
    expected = CONV2D.reference([x, w], CONV2D.make_attrs(attrs))
    out = run(
        DEPTHWISE, [block_data(x, 4), block_kernel(w, 1, 8)], **attrs, data_layout="NCHW4c",
        kernel_layout="OIHW1i8o", out_layout="NCHW8c",
    )
    np.testing.assert_allclose(out, block_data(expected, 8), rtol=1e-5, atol=1e-5)


def test_depthwise_nchwc_requires_groups_equal_to_the_input_channels() -> None:
    with pytest.raises(TypeRelationError, match=r"depthwise convolution needs groups equal to the 8 input channels"):
        DEPTHWISE.type_rel(
            [t(1, 1, 4, 4, 8), t(1, 1, 3, 3, 4, 8)],
            DEPTHWISE.make_attrs({"groups": 2, "data_layout": "NCHW8c", "kernel_layout": "OIHW4i8o"}),
        )


# --- text and compiled ----------------------------------------------------------------------------

MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 5, 5), float32], %w: Tensor[(16, 8, 3, 3), float32], %d: Tensor[(2, 1, 3, 3, 1, 8), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW8c");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OIHW8i8o");
  %2 = nn.contrib_conv2d_NCHWc(%0, %1, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3], data_layout="NCHW8c", kernel_layout="OIHW8i8o", out_layout="NCHW8c");
  %3 = nn.relu(%2);
  %4 = nn.contrib_depthwise_conv2d_NCHWc(%3, %d, strides=[2, 2], padding=[1, 1, 1, 1], groups=16, channels=16, kernel_size=[3, 3], data_layout="NCHW8c", kernel_layout="OIHW1i8o", out_layout="NCHW8c");
  layout_transform(%4, src_layout="NCHW8c", dst_layout="NCHW")
}
"""


def test_nchwc_attrs_round_trip_through_text() -> None:
    mod = parse(MODEL)
    assert structural_equal(parse(astext(mod)), mod)
    assert 'kernel_layout="OIHW1i8o"' in astext(mod)


def test_nchwc_model_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    from compiler.driver import export, lower
    from compiler.runtime.module import CompiledModule

    mod = parse(MODEL)
    inputs = {"x": rand(1, 8, 5, 5, seed=4), "w": rand(16, 8, 3, 3, seed=5), "d": rand(2, 1, 3, 3, 1, 8, seed=6)}
    expected = run_main(mod, inputs)[0]
    assert expected.shape == (1, 16, 3, 3)
    export(lower(parse(MODEL)), tmp_path, "")
    result = CompiledModule(tmp_path).run(inputs)
    np.testing.assert_allclose(result.outputs[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("attrs", "expected"), [
    ({"data_layout": "NCHW", "kernel_layout": "OHWI16o", "out_layout": "NCHW"}, (16, True)),
    ({"data_layout": "NCHW", "kernel_layout": "OIHW8o", "out_layout": ""}, (8, False)),
    ({"data_layout": "NCHW8c", "kernel_layout": "OIHW8i8o", "out_layout": "NCHW8c"}, None),
    ({"data_layout": "NCHW", "kernel_layout": "OIHW", "out_layout": "NCHW"}, None),
    ({"data_layout": "NCHW", "kernel_layout": "OHWI16o", "out_layout": "NHWC"}, None),
    ({"data_layout": "NCHW16c", "kernel_layout": "OHWI16o", "out_layout": "NCHW16c"}, (16, True)),
    ({"data_layout": "NCHW8c", "kernel_layout": "OHWI16o", "out_layout": ""}, None),  # out is NCHW8c
    ({"data_layout": "NCHW8c", "kernel_layout": "OHWI16o", "out_layout": "NCHW"}, (16, True)),
    ({"data_layout": "NCHW", "kernel_layout": "OHWI16o", "out_layout": "NCHW16c"}, (16, True)),
    ({"data_layout": "NCHW", "kernel_layout": "OHWI16o", "out_layout": "NCHW8c"}, None),
    ({"data_layout": "NCHW16c", "kernel_layout": "OIHW16o", "out_layout": "NCHW16c"}, None),
])
def test_packed_block_takes_nchw_or_channel_blocked_data_and_an_output_blocked_as_the_weight(
    attrs: dict[str, str], expected: tuple[int, bool] | None
) -> None:
    assert packed_block(attrs) == expected  # type: ignore[arg-type]  # the three keys it reads


def test_conv2d_nchwc_on_nchw_data_checks_the_weight_block_against_its_layout() -> None:
    attrs = NCHWC.make_attrs({"channels": 16, "kernel_size": [3, 3], "data_layout": "NCHW",
                              "kernel_layout": "OHWI16o", "out_layout": "NCHW"})
    assert NCHWC.type_rel([t(1, 4, 6, 6), t(1, 3, 3, 4, 16)], attrs) == t(1, 16, 4, 4)
    with pytest.raises(TypeRelationError, match=r"axis o of layout OHWI16o has size 8, expected 16"):
        NCHWC.type_rel([t(1, 4, 6, 6), t(2, 3, 3, 4, 8)], attrs)
