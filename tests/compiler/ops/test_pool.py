"""2-D pools (compiler/ops/pool.py): output sizes incl. ceil_mode, padding semantics, layouts;
values against a window-by-window computation written here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import AttrError, OpPattern, TypeRelationError
from tests.compiler.ops.relay_models import assert_round_trips, compiled_matches_interpreter

F32 = "float32"
LOWEST = np.finfo(np.float32).min


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(name: str, data: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel([data], op.make_attrs(attrs))


def pool(name: str, x: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    a = op.make_attrs(attrs)
    ty = op.type_rel([TensorType(x.shape, str(x.dtype))], a)
    out = op.reference([x], a)
    assert isinstance(ty, TensorType) and out.shape == ty.shape and str(out.dtype) == ty.dtype
    return out


def windowed(x, kind, k, s=(1, 1), pad=(0, 0, 0, 0), d=(1, 1), ceil=False, include_pad=False):
    """NCHW pooling one output element at a time, listing each window's taps explicitly."""
    n_, c_, h_, w_ = x.shape
    top, left, bottom, right = pad

    def extent(size, lo, hi, kk, ss, dd):
        room = size + lo + hi - (kk - 1) * dd - 1 + (ss - 1 if ceil else 0)
        return room // ss + 1

    oh, ow = extent(h_, top, bottom, k[0], s[0], d[0]), extent(w_, left, right, k[1], s[1], d[1])
    out = np.zeros((n_, c_, oh, ow))
    for y in range(oh):
        for z in range(ow):
            rows = [y * s[0] - top + i * d[0] for i in range(k[0])]
            cols = [z * s[1] - left + j * d[1] for j in range(k[1])]
            inside = [(r, c) for r in rows for c in cols if 0 <= r < h_ and 0 <= c < w_]
            for n in range(n_):
                for ch in range(c_):
                    vals = [x[n, ch, r, c] for r, c in inside]
                    if kind == "max":
                        out[n, ch, y, z] = max(vals) if vals else LOWEST
                    else:
                        if include_pad:
                            count = sum(
                                1
                                for r in rows
                                for c in cols
                                if -top <= r < h_ + bottom and -left <= c < w_ + right
                            )
                        else:
                            count = len(inside)
                        out[n, ch, y, z] = sum(vals) / max(count, 1)
    return out


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def test_max_pool_with_padding_ignores_the_padding() -> None:
    x = -np.abs(rand(1, 2, 5, 5)) - 1.0  # all negative, so a zero pad value would show
    out = pool("nn.max_pool2d", x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1])
    np.testing.assert_allclose(out, windowed(x, "max", (3, 3), (2, 2), (1, 1, 1, 1)), rtol=1e-6)
    assert out.max() < -1.0


def test_avg_pool_excludes_or_includes_padding_in_the_count() -> None:
    x = np.ones((1, 1, 4, 4), dtype=F32)
    excl = pool("nn.avg_pool2d", x, pool_size=[3, 3], padding=[1, 1])
    incl = pool("nn.avg_pool2d", x, pool_size=[3, 3], padding=[1, 1], count_include_pad=True)
    np.testing.assert_allclose(excl, np.ones((1, 1, 4, 4)))
    assert incl[0, 0, 0, 0] == pytest.approx(4 / 9) and incl[0, 0, 0, 1] == pytest.approx(6 / 9)
    assert incl[0, 0, 1, 1] == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("include_pad", [False, True])
def test_pools_match_windowed_reference_with_ceil_mode_dilation_and_asymmetric_padding(
    kind, include_pad
) -> None:
    x = rand(2, 3, 7, 6, seed=5)
    attrs: dict[str, object] = {
        "pool_size": [3, 2],
        "strides": [2, 3],
        "padding": [1, 0, 0, 1],
        "dilation": [1, 2],
        "ceil_mode": True,
    }
    if kind == "avg":
        attrs["count_include_pad"] = include_pad
    out = pool(f"nn.{kind}_pool2d", x, **attrs)
    expected = windowed(x, kind, (3, 2), (2, 3), (1, 0, 0, 1), (1, 2), ceil=True, include_pad=include_pad)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_ceil_mode_adds_the_partial_last_window() -> None:
    assert infer("nn.max_pool2d", t(1, 1, 6, 6), pool_size=[3, 3], strides=[2, 2]) == t(1, 1, 2, 2)
    assert infer("nn.max_pool2d", t(1, 1, 6, 6), pool_size=[3, 3], strides=[2, 2], ceil_mode=True) == t(
        1, 1, 3, 3
    )
    x = np.arange(36, dtype=F32).reshape(1, 1, 6, 6)
    out = pool("nn.avg_pool2d", x, pool_size=[3, 3], strides=[2, 2], ceil_mode=True)
    # The last window covers rows/cols 4..5 only: its average is over those 2 x 2 elements.
    assert out[0, 0, 2, 2] == pytest.approx(np.mean([28, 29, 34, 35]))


def test_window_that_starts_in_the_padding_gives_lowest_value_or_zero() -> None:
    # Like TVM, windows are not dropped when they start in the bottom/right padding.
    x = np.ones((1, 1, 4, 4), dtype=F32)
    attrs = {"pool_size": [1, 1], "strides": [2, 2], "padding": [0, 0, 1, 1]}
    mx = pool("nn.max_pool2d", x, **attrs)
    avg = pool("nn.avg_pool2d", x, **attrs)
    assert mx.shape == (1, 1, 3, 3)
    assert mx[0, 0, 2, 2] == LOWEST and mx[0, 0, 1, 1] == 1.0
    assert avg[0, 0, 2, 2] == 0.0 and avg[0, 0, 0, 0] == 1.0


def test_pools_in_nhwc_layout() -> None:
    x = rand(1, 5, 4, 3, seed=7)  # NHWC
    out = pool("nn.max_pool2d", x, pool_size=[2, 2], layout="NHWC")
    expected = windowed(np.transpose(x, (0, 3, 1, 2)), "max", (2, 2))
    np.testing.assert_allclose(out, np.transpose(expected, (0, 2, 3, 1)))
    assert infer("nn.avg_pool2d", t(1, 5, 4, 3), pool_size=[2, 2], layout="NHWC", out_layout="NCHW") == t(
        1, 3, 4, 3
    )


def test_integer_avg_pool_truncates() -> None:
    x = np.array([[[[1, 2], [2, 2]]]], dtype="int32")
    assert pool("nn.avg_pool2d", x, pool_size=[2, 2])[0, 0, 0, 0] == 1


def test_pool_shapes_propagate_unknown_dims() -> None:
    assert infer("nn.max_pool2d", t("?", 3, 8, 8), pool_size=[2, 2], strides=[2, 2]) == t("?", 3, 4, 4)
    assert infer("nn.avg_pool2d", t(1, 3, "?", 8), pool_size=[2, 2]) == t(1, 3, "?", 7)
    assert infer("nn.global_avg_pool2d", t("?", 3, "?", "?")) == t("?", 3, 1, 1)


def test_global_pools_reduce_height_and_width() -> None:
    x = rand(2, 3, 4, 5, seed=8)
    np.testing.assert_allclose(pool("nn.global_avg_pool2d", x)[:, :, 0, 0], x.mean(axis=(2, 3)), rtol=1e-5)
    np.testing.assert_allclose(pool("nn.global_max_pool2d", x)[:, :, 0, 0], x.max(axis=(2, 3)))
    nhwc = np.transpose(x, (0, 2, 3, 1))
    np.testing.assert_allclose(
        pool("nn.global_max_pool2d", nhwc, layout="NHWC")[:, 0, 0, :], x.max(axis=(2, 3))
    )
    assert infer("nn.global_avg_pool2d", t(2, 4, 5, 3), layout="NHWC") == t(2, 1, 1, 3)


def test_pool_errors_name_the_op_and_the_problem() -> None:
    with pytest.raises(AttrError, match="requires attribute pool_size"):
        ops.get("nn.max_pool2d").make_attrs({})
    with pytest.raises(TypeRelationError, match=r"nn.avg_pool2d: the width window of 5"):
        infer("nn.avg_pool2d", t(1, 1, 8, 4), pool_size=[5, 5])
    with pytest.raises(TypeRelationError, match="nn.max_pool2d: unsupported layout 'NCW'"):
        infer("nn.max_pool2d", t(1, 1, 8), pool_size=[2, 2], layout="NCW")
    with pytest.raises(
        TypeRelationError, match=r"nn.global_max_pool2d expects 4-D data, got Tensor\[\(1, 8\)"
    ):
        infer("nn.global_max_pool2d", t(1, 8))


def test_pool_attrs_and_patterns_follow_tvm() -> None:
    names = [s.name for s in ops.get("nn.avg_pool2d").attrs]
    assert names == [
        "pool_size",
        "strides",
        "dilation",
        "padding",
        "layout",
        "out_layout",
        "ceil_mode",
        "count_include_pad",
    ]
    for name in ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d"):
        assert ops.get(name).pattern is OpPattern.OUT_ELEMWISE_FUSABLE


# --- channel-blocked layouts (NCHW8c), as x86's AlterOpLayout leaves them ---------------------


def blocked(x: np.ndarray, factor: int) -> np.ndarray:
    """NCHW -> NCHW[factor]c: (N, C/factor, H, W, factor), channel = outer * factor + inner."""
    n, c, h, w = x.shape
    return x.reshape(n, c // factor, factor, h, w).transpose(0, 1, 3, 4, 2)


def unblocked(x: np.ndarray) -> np.ndarray:
    n, outer, h, w, inner = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, outer * inner, h, w)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_nchw8c_pools_height_and_width_while_the_channel_blocks_ride_along(kind: str) -> None:
    x = rand(2, 16, 7, 6, seed=11)
    attrs: dict[str, object] = {"pool_size": [3, 3], "strides": [2, 2], "padding": [1, 1, 1, 1]}
    out = pool(f"nn.{kind}_pool2d", blocked(x, 8), layout="NCHW8c", **attrs)
    assert out.shape == (2, 2, 4, 3, 8)
    expected = windowed(x, kind, (3, 3), (2, 2), (1, 1, 1, 1))
    np.testing.assert_allclose(unblocked(out), expected, rtol=1e-5, atol=1e-6)


def test_global_pools_in_nchw8c_reduce_each_channel_of_each_block() -> None:
    x = rand(1, 16, 3, 5, seed=12)
    avg = pool("nn.global_avg_pool2d", blocked(x, 8), layout="NCHW8c")
    mx = pool("nn.global_max_pool2d", blocked(x, 8), layout="NCHW8c")
    assert avg.shape == mx.shape == (1, 2, 1, 1, 8)
    np.testing.assert_allclose(unblocked(avg)[:, :, 0, 0], x.mean(axis=(2, 3)), rtol=1e-5)
    np.testing.assert_array_equal(unblocked(mx)[:, :, 0, 0], x.max(axis=(2, 3)))


def test_blocked_out_layout_regroups_the_channels() -> None:
    x = rand(1, 8, 4, 4, seed=13)
    out = pool("nn.max_pool2d", blocked(x, 4), pool_size=[2, 2], strides=[2, 2], layout="NCHW4c",
               out_layout="NHWC")
    np.testing.assert_array_equal(out, np.transpose(windowed(x, "max", (2, 2), (2, 2)), (0, 2, 3, 1)))
    assert infer("nn.avg_pool2d", t(1, 16, 6, 6), pool_size=[2, 2], out_layout="NCHW8c") == t(1, 2, 5, 5, 8)
    assert infer("nn.global_avg_pool2d", t(2, 1, 3, 3, 8), layout="NCHW8c", out_layout="NCHW2c") == t(
        2, 4, 1, 1, 2
    )


def test_blocked_pool_shapes_propagate_unknown_dims() -> None:
    assert infer("nn.max_pool2d", t("?", "?", 8, 8, 8), pool_size=[2, 2], strides=[2, 2], layout="NCHW8c") == t(
        "?", "?", 4, 4, 8
    )
    assert infer("nn.global_max_pool2d", t(1, 2, "?", "?", "?"), layout="NCHW8c") == t(1, 2, 1, 1, 8)


def test_blocked_layout_errors_name_the_op_and_the_problem() -> None:
    with pytest.raises(TypeRelationError, match="nn.max_pool2d: axis c of layout NCHW8c has size 4, expected 8"):
        infer("nn.max_pool2d", t(1, 2, 8, 8, 4), pool_size=[2, 2], layout="NCHW8c")
    with pytest.raises(
        TypeRelationError, match="nn.avg_pool2d: layout 'NCHW2h' splits the pooled axis H, which cannot be split"
    ):
        infer("nn.avg_pool2d", t(1, 4, 4, 8, 2), pool_size=[2, 2], layout="NCHW2h")
    with pytest.raises(TypeRelationError, match="nn.global_avg_pool2d: axis C of size 6 cannot be split by 8"):
        infer("nn.global_avg_pool2d", t(1, 6, 4, 4), out_layout="NCHW8c")
    with pytest.raises(
        TypeRelationError,
        match=r"nn.max_pool2d expects 5-D data, got Tensor\[\(1, 16, 8, 8\), float32\] for layout NCHW8c",
    ):
        infer("nn.max_pool2d", t(1, 16, 8, 8), pool_size=[2, 2], layout="NCHW8c")
    with pytest.raises(TypeRelationError, match="nn.max_pool2d: layout 'NCHW8d' splits axis D, which it does not"):
        infer("nn.max_pool2d", t(1, 2, 8, 8, 8), pool_size=[2, 2], layout="NCHW8d")


BLOCKED_MODEL = """def @main(%x: Tensor[(1, 16, 9, 9), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW8c");
  %1 = nn.max_pool2d(%0, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1], layout="NCHW8c");
  %2 = nn.avg_pool2d(%1, pool_size=[2, 2], padding=[1, 1], layout="NCHW8c", count_include_pad=True);
  %3 = nn.relu(%2);
  %4 = nn.global_avg_pool2d(%3, layout="NCHW8c");
  %5 = nn.global_max_pool2d(%1, layout="NCHW8c", out_layout="NCHW");
  %6 = layout_transform(%4, src_layout="NCHW8c", dst_layout="NCHW");
  (%6, %5)
}
"""


def test_model_with_nchw8c_pools_compiles_and_matches_interpreter_and_numpy(tmp_path: Path) -> None:
    x = rand(1, 16, 9, 9, seed=14)
    got = compiled_matches_interpreter(BLOCKED_MODEL, {"x": x}, tmp_path)
    first = windowed(x, "max", (3, 3), (2, 2), (1, 1, 1, 1))
    second = np.maximum(windowed(first, "avg", (2, 2), pad=(1, 1, 1, 1), include_pad=True), 0)
    np.testing.assert_allclose(got[0], second.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], first.max(axis=(2, 3), keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("call", [
    'nn.max_pool2d(%b, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1], layout="NCHW8c")',
    'nn.avg_pool2d(%b, pool_size=[2, 2], layout="NCHW8c", out_layout="NCHW", count_include_pad=True)',
    'nn.global_avg_pool2d(%b, layout="NCHW8c")',
    'nn.global_max_pool2d(%b, layout="NCHW8c", out_layout="NHWC")',
])
def test_blocked_pool_attrs_round_trip_through_the_printer(call: str) -> None:
    assert_round_trips(f"def @main(%b: Tensor[(1, 2, 6, 6, 8), float32]) {{\n  {call}\n}}\n")
