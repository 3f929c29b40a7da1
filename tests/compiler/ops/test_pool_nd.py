"""1-D/3-D window pools and adaptive pools (compiler/ops/pool_nd.py): output sizes, padding
forms, layouts and TVM's adaptive windows, against element-by-element numpy written here."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import OpPattern, TypeRelationError
from tests.compiler.ops.relay_models import assert_round_trips, compiled_matches_interpreter

F32 = "float32"
LOWEST = np.finfo(np.float32).min


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(name: str, data: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel([data], op.make_attrs(attrs))


def run(name: str, x: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    a = op.make_attrs(attrs)
    ty = op.type_rel([TensorType(x.shape, str(x.dtype))], a)
    out = op.reference([x], a)
    assert isinstance(ty, TensorType) and out.shape == ty.shape and str(out.dtype) == ty.dtype
    return out


def windowed(x, kind, k, s, before, after, d=None, ceil=False, include_pad=False):
    """Channels-first pooling over any number of spatial axes, one output at a time."""
    spatial = x.ndim - 2
    d = d or (1,) * spatial
    sizes = x.shape[2:]
    outs = []
    for n, kk, ss, dd, b, e in zip(sizes, k, s, d, before, after):
        room = n + b + e - (kk - 1) * dd - 1 + (ss - 1 if ceil else 0)
        outs.append(room // ss + 1)
    out = np.zeros(x.shape[:2] + tuple(outs))
    for pos in itertools.product(*(range(o) for o in outs)):
        taps = [[p * ss - b + i * dd for i in range(kk)] for p, ss, b, kk, dd in zip(pos, s, before, k, d)]
        inside = [c for c in itertools.product(*taps) if all(0 <= ci < n for ci, n in zip(c, sizes))]
        padded = [
            c for c in itertools.product(*taps)
            if all(-b <= ci < n + e for ci, n, b, e in zip(c, sizes, before, after))
        ]
        for n_, c_ in itertools.product(range(x.shape[0]), range(x.shape[1])):
            vals = [x[(n_, c_) + c] for c in inside]
            if kind == "max":
                out[(n_, c_) + pos] = max(vals) if vals else LOWEST
            else:
                count = len(padded) if include_pad else len(inside)
                out[(n_, c_) + pos] = sum(vals) / max(count, 1)
    return out


def test_pool1d_output_width_follows_tvm_formula() -> None:
    assert infer("nn.max_pool1d", t(2, 3, 8), pool_size=[2], strides=[2]) == t(2, 3, 4)
    assert infer("nn.avg_pool1d", t(1, 2, 8), pool_size=[3], strides=[2], ceil_mode=True) == t(1, 2, 4)
    assert infer("nn.avg_pool1d", t(1, 2, 8), pool_size=[3], strides=[2]) == t(1, 2, 3)
    assert infer("nn.max_pool1d", t(1, 9, 2), pool_size=[3], dilation=[2], layout="NWC") == t(1, 5, 2)
    assert infer("nn.max_pool1d", t(1, 9, 2), pool_size=[2], layout="NWC", out_layout="NCW") == t(1, 2, 8)


def test_pool3d_padding_forms_one_three_and_six_values() -> None:
    x = t(1, 2, 4, 5, 6)
    assert infer("nn.max_pool3d", x, pool_size=[3], padding=[1]) == t(1, 2, 4, 5, 6)
    assert infer("nn.max_pool3d", x, pool_size=[3], padding=[0, 1, 2]) == t(1, 2, 2, 5, 8)
    assert infer("nn.max_pool3d", x, pool_size=[3], padding=[0, 1, 2, 1, 0, 0]) == t(1, 2, 3, 4, 6)
    assert infer("nn.max_pool3d", t(1, 4, 5, 6, 2), pool_size=[2, 2, 2], layout="NDHWC") == t(1, 3, 4, 5, 2)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("ceil", [False, True])
@pytest.mark.parametrize("include_pad", [False, True])
def test_pool1d_matches_windowed_reference(kind: str, ceil: bool, include_pad: bool) -> None:
    x = np.random.default_rng(1).normal(size=(2, 3, 9)).astype(F32)
    attrs: dict[str, object] = {"pool_size": [3], "strides": [2], "padding": [1, 2], "ceil_mode": ceil}
    if kind == "avg":
        attrs["count_include_pad"] = include_pad
    got = run(f"nn.{kind}_pool1d", x, **attrs)
    want = windowed(x, kind, (3,), (2,), (1,), (2,), ceil=ceil, include_pad=include_pad)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool3d_matches_windowed_reference_with_dilation_and_asymmetric_padding(kind: str) -> None:
    x = np.random.default_rng(2).normal(size=(1, 2, 5, 4, 6)).astype(F32)
    attrs = {
        "pool_size": [2, 3, 2], "strides": [2, 1, 3], "dilation": [1, 1, 2],
        "padding": [1, 0, 1, 0, 2, 1], "ceil_mode": True,
    }
    got = run(f"nn.{kind}_pool3d", x, **attrs)
    want = windowed(x, kind, (2, 3, 2), (2, 1, 3), (1, 0, 1), (0, 2, 1), d=(1, 1, 2), ceil=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_pool3d_channels_last_equals_channels_first() -> None:
    x = np.random.default_rng(3).normal(size=(1, 3, 4, 5, 2)).astype(F32)
    first = run("nn.avg_pool3d", x, pool_size=[2], padding=[1], count_include_pad=True)
    last = run("nn.avg_pool3d", np.transpose(x, (0, 2, 3, 4, 1)), pool_size=[2], padding=[1],
               count_include_pad=True, layout="NDHWC")
    np.testing.assert_allclose(np.transpose(last, (0, 4, 1, 2, 3)), first)


def test_integer_avg_pool1d_truncates() -> None:
    x = np.array([[[1, 2, 2, 5]]], dtype="int32")
    np.testing.assert_array_equal(run("nn.avg_pool1d", x, pool_size=[2], strides=[2]), [[[1, 3]]])


def test_max_pool1d_window_in_the_padding_gives_lowest_value() -> None:
    x = np.ones((1, 1, 2), dtype=F32)
    out = run("nn.max_pool1d", x, pool_size=[1], padding=[1])
    assert out[0, 0, 0] == LOWEST and out[0, 0, 1] == 1


def test_adaptive_windows_are_floor_start_and_ceil_end() -> None:
    x = np.arange(10, dtype=F32).reshape(1, 1, 10)
    # out=4 over 10: [0,3) [2,5) [5,8) [7,10): neighbouring windows overlap.
    want_avg = [np.mean(x[0, 0, a:b]) for a, b in [(0, 3), (2, 5), (5, 8), (7, 10)]]
    np.testing.assert_allclose(run("nn.adaptive_avg_pool1d", x, output_size=[4])[0, 0], want_avg)
    np.testing.assert_array_equal(run("nn.adaptive_max_pool1d", x, output_size=[4])[0, 0], [2, 4, 7, 9])


def test_adaptive_pool_larger_than_input_overlaps_windows() -> None:
    x = np.array([[[1, 5, 3]]], dtype=F32)
    # out=5 over 3: [0,1) [0,2) [1,2) [1,3) [2,3).
    np.testing.assert_array_equal(run("nn.adaptive_max_pool1d", x, output_size=[5])[0, 0], [1, 5, 5, 5, 3])
    np.testing.assert_allclose(run("nn.adaptive_avg_pool1d", x, output_size=[5])[0, 0], [1, 3, 5, 4, 3])


def test_adaptive_pool2d_matches_per_window_numpy_in_nhwc() -> None:
    x = np.random.default_rng(4).normal(size=(2, 7, 5, 3)).astype(F32)
    got = run("nn.adaptive_avg_pool2d", x, output_size=[3, 2], layout="NHWC")
    assert got.shape == (2, 3, 2, 3)
    for i, j in itertools.product(range(3), range(2)):
        rows = slice((i * 7) // 3, -(-((i + 1) * 7) // 3))
        cols = slice((j * 5) // 2, -(-((j + 1) * 5) // 2))
        np.testing.assert_allclose(got[:, i, j, :], x[:, rows, cols, :].mean(axis=(1, 2)), rtol=1e-6)


def test_adaptive_output_size_empty_one_or_each() -> None:
    x = t(1, 2, 4, 5, 6)
    assert infer("nn.adaptive_avg_pool3d", x) == x
    assert infer("nn.adaptive_max_pool3d", x, output_size=[2]) == t(1, 2, 2, 2, 2)
    assert infer("nn.adaptive_max_pool3d", x, output_size=[1, 2, 3]) == t(1, 2, 1, 2, 3)
    assert infer("nn.adaptive_avg_pool2d", t("?", 3, "?", 8), output_size=[2]) == t("?", 3, 2, 2)
    assert infer("nn.adaptive_avg_pool1d", t(1, "?", 3), layout="NWC") == t(1, "?", 3)


def test_pool_shapes_propagate_unknown_dims() -> None:
    assert infer("nn.max_pool1d", t("?", 3, "?"), pool_size=[2]) == t("?", 3, "?")
    assert infer("nn.avg_pool3d", t(1, "?", 4, "?", 4), pool_size=[2]) == t(1, "?", 3, "?", 3)


def test_pool_nd_errors_name_the_op_and_the_problem() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.max_pool1d expects 3-D data"):
        infer("nn.max_pool1d", t(1, 2, 3, 4), pool_size=[2])
    with pytest.raises(TypeRelationError, match=r"nn.max_pool3d: padding needs 1, 3 or 6 values"):
        infer("nn.max_pool3d", t(1, 2, 4, 4, 4), pool_size=[2], padding=[1, 1])
    with pytest.raises(TypeRelationError, match=r"nn.avg_pool3d: pool_size needs 1 or 3 values"):
        infer("nn.avg_pool3d", t(1, 2, 4, 4, 4), pool_size=[2, 2])
    with pytest.raises(TypeRelationError, match=r"nn.avg_pool1d: the width window of 5"):
        infer("nn.avg_pool1d", t(1, 2, 3), pool_size=[3], dilation=[2])
    with pytest.raises(TypeRelationError, match=r"nn.max_pool1d: strides must be at least 1"):
        infer("nn.max_pool1d", t(1, 2, 3), pool_size=[1], strides=[0])
    with pytest.raises(TypeRelationError, match=r"nn.max_pool1d: unsupported layout 'NCHW'"):
        infer("nn.max_pool1d", t(1, 2, 3), pool_size=[1], layout="NCHW")
    with pytest.raises(TypeRelationError, match=r"nn.adaptive_avg_pool2d: output_size needs 0, 1 or 2 values"):
        infer("nn.adaptive_avg_pool2d", t(1, 2, 3, 3), output_size=[1, 2, 3])
    with pytest.raises(TypeRelationError, match=r"nn.adaptive_max_pool1d: output_size must be positive"):
        infer("nn.adaptive_max_pool1d", t(1, 2, 3), output_size=[0])


def test_pool_nd_attrs_and_patterns_follow_tvm() -> None:
    pool1d = ops.get("nn.avg_pool1d").make_attrs({"pool_size": [2]})
    assert (pool1d["strides"], pool1d["padding"], pool1d["layout"]) == ((1,), (0,), "NCW")
    pool3d = ops.get("nn.max_pool3d").make_attrs({"pool_size": [2]})
    assert (pool3d["dilation"], pool3d["layout"]) == ((1, 1, 1), "NCDHW")
    assert ops.get("nn.adaptive_avg_pool3d").make_attrs({})["layout"] == "NCDHW"
    for name in ("nn.max_pool1d", "nn.avg_pool3d", "nn.adaptive_max_pool2d", "nn.adaptive_avg_pool1d"):
        assert ops.get(name).pattern == OpPattern.OUT_ELEMWISE_FUSABLE


MODEL = """def @main(%x: Tensor[(1, 4, 9), float32], %v: Tensor[(1, 2, 5, 6, 4), float32]) {
  %0 = nn.avg_pool1d(%x, pool_size=[3], strides=[2], padding=[1, 1], count_include_pad=True);
  %1 = nn.relu(%0);
  %2 = nn.adaptive_max_pool1d(%1, output_size=[3]);
  %3 = nn.max_pool3d(%v, pool_size=[2, 2, 2], strides=[2, 2, 2], padding=[0, 1, 1, 1, 0, 0], ceil_mode=True);
  %4 = nn.adaptive_avg_pool3d(%3, output_size=[2, 1, 2], layout="NCDHW");
  (%2, %4)
}
"""


def test_model_with_nd_and_adaptive_pools_compiles_and_matches_interpreter(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    inputs = {"x": rng.normal(size=(1, 4, 9)).astype(F32), "v": rng.normal(size=(1, 2, 5, 6, 4)).astype(F32)}
    compiled_matches_interpreter(MODEL, inputs, tmp_path)


@pytest.mark.parametrize("call", [
    "nn.max_pool1d(%x, pool_size=[3], strides=[2], padding=[1, 2], layout=\"NWC\", ceil_mode=True)",
    "nn.avg_pool1d(%x, pool_size=[2], dilation=[2], count_include_pad=True)",
    "nn.max_pool3d(%v, pool_size=[2, 1, 2], padding=[0, 1, 1, 1, 0, 0], out_layout=\"NDHWC\")",
    "nn.avg_pool3d(%v, pool_size=[2], strides=[1, 2, 2], ceil_mode=True)",
    "nn.adaptive_avg_pool1d(%x, output_size=[3])",
    "nn.adaptive_max_pool1d(%x)",
    "nn.adaptive_avg_pool2d(%w, output_size=[2, 3], layout=\"NHWC\")",
    "nn.adaptive_max_pool2d(%w, output_size=[1])",
    "nn.adaptive_avg_pool3d(%v, output_size=[1, 2, 3])",
    "nn.adaptive_max_pool3d(%v, output_size=[2], layout=\"NDHWC\")",
])
def test_pool_nd_attrs_round_trip_through_the_printer(call: str) -> None:
    assert_round_trips(
        "def @main(%x: Tensor[(1, 4, 9), float32], %w: Tensor[(1, 4, 6, 5), float32], "
        f"%v: Tensor[(1, 2, 5, 6, 4), float32]) {{\n  {call}\n}}\n"
    )


# --- channel-blocked layouts (NCW4c, NCHW8c, NCDHW8c) -----------------------------------------


def blocked(x: np.ndarray, factor: int) -> np.ndarray:
    """Channels-first -> channel-blocked: (N, C/factor, *spatial, factor)."""
    n, c, *spatial = x.shape
    split = x.reshape(n, c // factor, factor, *spatial)
    return np.moveaxis(split, 2, -1)


def unblocked(x: np.ndarray) -> np.ndarray:
    n, outer, *spatial, inner = x.shape
    return np.moveaxis(x, -1, 2).reshape(n, outer * inner, *spatial)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool1d_in_ncw4c_pools_width_per_channel(kind: str) -> None:
    x = np.random.default_rng(21).normal(size=(2, 8, 7)).astype(F32)
    out = run(f"nn.{kind}_pool1d", blocked(x, 4), pool_size=[3], strides=[2], padding=[1], layout="NCW4c")
    assert out.shape == (2, 2, 4, 4)
    np.testing.assert_allclose(unblocked(out), windowed(x, kind, (3,), (2,), (1,), (1,)), rtol=1e-5, atol=1e-6)


def test_pool3d_in_ncdhw8c_pools_depth_height_and_width_per_channel() -> None:
    x = np.random.default_rng(22).normal(size=(1, 8, 3, 4, 5)).astype(F32)
    out = run("nn.avg_pool3d", blocked(x, 8), pool_size=[2], strides=[2], layout="NCDHW8c", ceil_mode=True)
    expected = windowed(x, "avg", (2, 2, 2), (2, 2, 2), (0, 0, 0), (0, 0, 0), ceil=True)
    np.testing.assert_allclose(unblocked(out), expected, rtol=1e-5, atol=1e-6)


def test_adaptive_pool2d_in_nchw8c_keeps_the_blocks() -> None:
    x = np.random.default_rng(23).normal(size=(1, 16, 5, 4)).astype(F32)
    out = run("nn.adaptive_avg_pool2d", blocked(x, 8), output_size=[1, 1], layout="NCHW8c")
    assert out.shape == (1, 2, 1, 1, 8)
    np.testing.assert_allclose(unblocked(out), x.mean(axis=(2, 3), keepdims=True), rtol=1e-5)
    assert infer("nn.adaptive_max_pool3d", t(1, "?", 4, 4, 4, 8), output_size=[2], layout="NCDHW8c") == t(
        1, "?", 2, 2, 2, 8
    )


def test_blocked_pool_nd_errors_name_the_op_and_the_problem() -> None:
    with pytest.raises(TypeRelationError, match="nn.max_pool1d: layout 'NCW2w' splits the pooled axis W"):
        infer("nn.max_pool1d", t(1, 2, 4, 2), pool_size=[2], layout="NCW2w")
    with pytest.raises(TypeRelationError, match="nn.adaptive_avg_pool3d: layout 'NCDH2dW' splits the pooled axis D"):
        infer("nn.adaptive_avg_pool3d", t(1, 2, 2, 4, 2, 4), layout="NCDH2dW")
    with pytest.raises(TypeRelationError, match="nn.avg_pool3d: axis c of layout NCDHW8c has size 3, expected 8"):
        infer("nn.avg_pool3d", t(1, 2, 4, 4, 4, 3), pool_size=[2], layout="NCDHW8c")
    with pytest.raises(TypeRelationError, match=r"nn.adaptive_max_pool1d expects 4-D data, got .* for layout NCW4c"):
        infer("nn.adaptive_max_pool1d", t(1, 8, 4), layout="NCW4c")
    with pytest.raises(TypeRelationError, match="nn.max_pool1d: axis C of size 6 cannot be split by 4"):
        infer("nn.max_pool1d", t(1, 6, 4), pool_size=[2], out_layout="NCW4c")


BLOCKED_MODEL = """def @main(%x: Tensor[(1, 8, 9), float32], %v: Tensor[(1, 16, 3, 4, 4), float32]) {
  %0 = layout_transform(%x, src_layout="NCW", dst_layout="NCW4c");
  %1 = nn.max_pool1d(%0, pool_size=[3], strides=[2], padding=[1], layout="NCW4c");
  %2 = nn.adaptive_avg_pool1d(%1, output_size=[2], layout="NCW4c");
  %3 = layout_transform(%v, src_layout="NCDHW", dst_layout="NCDHW8c");
  %4 = nn.avg_pool3d(%3, pool_size=[2, 2, 2], strides=[1, 2, 2], padding=[1], layout="NCDHW8c", out_layout="NCDHW");
  %5 = nn.adaptive_max_pool3d(%3, output_size=[1, 2, 2], layout="NCDHW8c");
  (%2, %4, %5)
}
"""


def test_model_with_blocked_nd_pools_compiles_and_matches_interpreter(tmp_path: Path) -> None:
    rng = np.random.default_rng(24)
    inputs = {"x": rng.normal(size=(1, 8, 9)).astype(F32), "v": rng.normal(size=(1, 16, 3, 4, 4)).astype(F32)}
    got = compiled_matches_interpreter(BLOCKED_MODEL, inputs, tmp_path)
    expected = windowed(inputs["v"], "avg", (2, 2, 2), (1, 2, 2), (1, 1, 1), (1, 1, 1))
    np.testing.assert_allclose(got[1], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("call", [
    'nn.max_pool1d(%x, pool_size=[3], strides=[2], padding=[1], layout="NCW4c")',
    'nn.adaptive_avg_pool2d(%w, output_size=[1, 1], layout="NCHW8c")',
    'nn.max_pool3d(%v, pool_size=[2], layout="NCDHW8c", out_layout="NCDHW")',
])
def test_blocked_pool_nd_attrs_round_trip_through_the_printer(call: str) -> None:
    assert_round_trips(
        "def @main(%x: Tensor[(1, 2, 9, 4), float32], %w: Tensor[(1, 2, 6, 5, 8), float32], "
        f"%v: Tensor[(1, 1, 5, 6, 4, 8), float32]) {{\n  {call}\n}}\n"
    )
