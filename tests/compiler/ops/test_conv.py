"""nn.conv2d (compiler/ops/conv.py): shapes, layouts, groups and errors; values against a direct
nested-loop convolution written here."""

from __future__ import annotations

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.conv import conv2d_geometry
from compiler.ops.registry import OpPattern, TypeRelationError

F32 = "float32"
CONV = ops.get("nn.conv2d")


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(data: Type, weight: Type, **attrs: object) -> Type:
    return CONV.type_rel([data, weight], CONV.make_attrs(attrs))


def conv(x: np.ndarray, w: np.ndarray, **attrs: object) -> np.ndarray:
    a = CONV.make_attrs(attrs)
    ty = CONV.type_rel([TensorType(x.shape, str(x.dtype)), TensorType(w.shape, str(w.dtype))], a)
    out = CONV.reference([x, w], a)
    assert isinstance(ty, TensorType) and out.shape == ty.shape and str(out.dtype) == ty.dtype
    return out


def direct_conv(x: np.ndarray, w: np.ndarray, stride=(1, 1), pad=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """Textbook NCHW / OIHW convolution, one output element at a time."""
    n_, c_, h_, w_ = x.shape
    o_, i_, kh_, kw_ = w.shape
    top, left, bottom, right = pad
    oh = (h_ + top + bottom - (kh_ - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (w_ + left + right - (kw_ - 1) * dilation[1] - 1) // stride[1] + 1
    per_group = o_ // groups
    out = np.zeros((n_, o_, oh, ow))
    for n in range(n_):
        for o in range(o_):
            g = o // per_group
            for y in range(oh):
                for z in range(ow):
                    acc = 0.0
                    for c in range(i_):
                        for ky in range(kh_):
                            for kx in range(kw_):
                                row = y * stride[0] + ky * dilation[0] - top
                                col = z * stride[1] + kx * dilation[1] - left
                                if 0 <= row < h_ and 0 <= col < w_:
                                    acc += x[n, g * i_ + c, row, col] * w[o, c, ky, kx]
                    out[n, o, y, z] = acc
    return out


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def test_conv2d_matches_direct_convolution_with_padding_stride_dilation_and_groups() -> None:
    x, w = rand(2, 4, 7, 6), rand(6, 2, 3, 2, seed=1)
    out = conv(x, w, strides=[2, 1], padding=[1, 0, 2, 1], dilation=[1, 2], groups=2)
    expected = direct_conv(x, w, stride=(2, 1), pad=(1, 0, 2, 1), dilation=(1, 2), groups=2)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_conv2d_depthwise_has_one_input_channel_per_group() -> None:
    x, w = rand(1, 3, 5, 5), rand(6, 1, 3, 3, seed=2)  # channel multiplier 2
    out = conv(x, w, padding=[1, 1], groups=3)
    np.testing.assert_allclose(out, direct_conv(x, w, pad=(1, 1, 1, 1), groups=3), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("data_layout", "kernel_layout", "data_perm", "kernel_perm"),
    [
        ("NHWC", "HWIO", (0, 2, 3, 1), (2, 3, 1, 0)),
        ("NHWC", "OHWI", (0, 2, 3, 1), (0, 2, 3, 1)),
        ("NCHW", "IHWO", (0, 1, 2, 3), (1, 2, 3, 0)),
    ],
)
def test_conv2d_layouts_are_permutations_of_nchw_oihw(
    data_layout, kernel_layout, data_perm, kernel_perm
) -> None:
    x, w = rand(1, 3, 6, 5), rand(4, 3, 3, 2, seed=3)
    expected = direct_conv(x, w, pad=(1, 0, 1, 0))
    out = conv(
        np.transpose(x, data_perm),
        np.transpose(w, kernel_perm),
        padding=[1, 0],
        data_layout=data_layout,
        kernel_layout=kernel_layout,
    )
    np.testing.assert_allclose(out, np.transpose(expected, data_perm), rtol=1e-4, atol=1e-5)


def test_conv2d_depthwise_hwoi_kernel_in_nhwc() -> None:
    x, w = rand(1, 4, 4, 3), rand(3, 3, 3, 1, seed=4)  # HWOI: (KH, KW, C, 1)
    out = conv(x, w, padding=[1], groups=3, data_layout="NHWC", kernel_layout="HWOI")
    expected = direct_conv(
        np.transpose(x, (0, 3, 1, 2)), np.transpose(w, (2, 3, 0, 1)), pad=(1, 1, 1, 1), groups=3
    )
    np.testing.assert_allclose(out, np.transpose(expected, (0, 2, 3, 1)), rtol=1e-4, atol=1e-5)


def test_conv2d_out_layout_reorders_the_result() -> None:
    assert infer(t(1, 8, 8, 3), t(3, 3, 3, 16), data_layout="NHWC", kernel_layout="HWIO") == t(1, 6, 6, 16)
    assert infer(
        t(1, 8, 8, 3), t(3, 3, 3, 16), data_layout="NHWC", kernel_layout="HWIO", out_layout="NCHW"
    ) == t(1, 16, 6, 6)


def test_conv2d_padding_forms_one_two_and_four_values() -> None:
    data, weight = t(1, 3, 8, 8), t(4, 3, 3, 3)
    assert infer(data, weight, padding=[1]) == t(1, 4, 8, 8)
    assert infer(data, weight, padding=[1, 0]) == t(1, 4, 8, 6)
    assert infer(data, weight, padding=[0, 0, 2, 1]) == t(1, 4, 8, 7)
    g = conv2d_geometry(data, weight, CONV.make_attrs({"padding": [1, 2]}))
    assert g.padding == (1, 2, 1, 2)


def test_conv2d_propagates_unknown_batch_and_spatial_dims() -> None:
    assert infer(t("?", 3, 8, 8), t(4, 3, 3, 3), padding=[1, 1]) == t("?", 4, 8, 8)
    assert infer(t(1, 3, "?", 8), t(4, 3, 3, 3), strides=[2, 2]) == t(1, 4, "?", 3)
    assert infer(t(1, "?", 8, 8), t(4, 3, 3, 3), channels=4) == t(1, 4, 6, 6)


def test_conv2d_accepts_a_weight_of_unknown_dims_as_tvm_does() -> None:
    # kernel_size stands for the weight's kernel dims; without it the output's are unknown too.
    assert infer(t(1, 3, 8, 8), t("?", "?", "?", "?"), kernel_size=[3, 3], channels=4) == t(1, 4, 6, 6)
    assert infer(t(1, 3, 8, 8), t(4, 3, "?", 3)) == t(1, 4, "?", 6)
    with pytest.raises(TypeRelationError, match=r"kernel_size=\[3, 3\] does not match weight"):
        infer(t(1, 3, 8, 8), t(4, 3, "?", 2), kernel_size=[3, 3])


def test_conv2d_int8_with_int32_out_dtype() -> None:
    x = np.full((1, 2, 3, 3), 100, dtype="int8")
    w = np.full((1, 2, 3, 3), 100, dtype="int8")
    out = conv(x, w, out_dtype="int32")
    np.testing.assert_array_equal(out, np.full((1, 1, 1, 1), 180000))


def test_conv2d_reports_input_channels_that_do_not_match_the_weight() -> None:
    with pytest.raises(TypeRelationError) as info:
        infer(t(1, 4, 8, 8), t(8, 3, 3, 3), groups=1)
    message = str(info.value)
    assert "nn.conv2d" in message and "Tensor[(1, 4, 8, 8), float32]" in message and "groups=1" in message


def test_conv2d_checks_channels_and_kernel_size_against_the_weight() -> None:
    with pytest.raises(TypeRelationError, match=r"channels=5 does not match weight Tensor\[\(4, 3, 3, 3\)"):
        infer(t(1, 3, 8, 8), t(4, 3, 3, 3), channels=5)
    with pytest.raises(TypeRelationError, match=r"kernel_size=\[5, 5\] does not match weight"):
        infer(t(1, 3, 8, 8), t(4, 3, 3, 3), kernel_size=[5, 5])
    assert infer(t(1, 3, 8, 8), t(4, 3, 3, 3), channels=4, kernel_size=[3, 3]) == t(1, 4, 6, 6)


def test_conv2d_rejects_bad_groups_layouts_and_oversized_windows() -> None:
    with pytest.raises(TypeRelationError, match="do not split into groups=2"):
        infer(t(1, 4, 8, 8), t(3, 2, 3, 3), groups=2)
    with pytest.raises(TypeRelationError, match="unsupported data_layout 'NCHW4c'"):
        infer(t(1, 1, 8, 8, 4), t(4, 4, 3, 3), data_layout="NCHW4c")
    with pytest.raises(TypeRelationError, match="unsupported kernel_layout 'OIHX'"):
        infer(t(1, 4, 8, 8), t(4, 4, 3, 3), kernel_layout="OIHX")
    with pytest.raises(TypeRelationError, match="height window of 5"):
        infer(t(1, 3, 4, 8), t(4, 3, 3, 3), dilation=[2, 1])
    with pytest.raises(TypeRelationError, match="padding needs 1, 2 or 4 values"):
        infer(t(1, 3, 8, 8), t(4, 3, 3, 3), padding=[1, 1, 1])
    with pytest.raises(TypeRelationError, match="strides must be positive"):
        infer(t(1, 3, 8, 8), t(4, 3, 3, 3), strides=[0, 1])
    with pytest.raises(TypeRelationError, match="expects 4-D data and weight"):
        infer(t(3, 8, 8), t(4, 3, 3, 3))


def test_conv2d_is_out_elemwise_fusable_with_tvm_defaults() -> None:
    assert CONV.pattern is OpPattern.OUT_ELEMWISE_FUSABLE
    attrs = CONV.make_attrs({})
    assert attrs["strides"] == (1, 1) and attrs["padding"] == (0, 0) and attrs["groups"] == 1
    assert attrs["data_layout"] == "NCHW" and attrs["kernel_layout"] == "OIHW" and attrs["channels"] is None
    assert [s.name for s in CONV.attrs] == [
        "strides",
        "padding",
        "dilation",
        "groups",
        "channels",
        "kernel_size",
        "data_layout",
        "kernel_layout",
        "out_layout",
        "out_dtype",
    ]


@pytest.mark.parametrize("groups", [1, 2])
def test_reference_gathering_windows_in_bands_of_rows_gives_the_textbook_result(
    monkeypatch: pytest.MonkeyPatch, groups: int
) -> None:
    import compiler.ops.conv as conv_module

    monkeypatch.setattr(conv_module, "_WINDOW_BYTES", 1)  # one output row per matrix product
    x, w = rand(2, 4, 7, 6, seed=1), rand(6, 4 // groups, 3, 2, seed=2)

    got = conv(x, w, strides=[2, 1], padding=[1, 0, 2, 1], dilation=[1, 2], groups=groups)

    want = direct_conv(x, w, stride=(2, 1), pad=(1, 0, 2, 1), dilation=(1, 2), groups=groups)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_reference_pointwise_and_depthwise_convolutions_give_the_textbook_result() -> None:
    x = rand(1, 6, 5, 5, seed=3)
    pointwise, depthwise = rand(4, 6, 1, 1, seed=4), rand(6, 1, 3, 3, seed=5)

    np.testing.assert_allclose(conv(x, pointwise), direct_conv(x, pointwise), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(conv(x, depthwise, padding=[1, 1, 1, 1], groups=6),
                               direct_conv(x, depthwise, pad=(1, 1, 1, 1), groups=6), rtol=1e-5, atol=1e-6)
