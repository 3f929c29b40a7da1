"""Spatial rearrangements (compiler/ops/space.py): mirror padding, depth/space blocks,
space/batch blocks, TVM's upsampling coordinates and interpolation, dilation, and their type
errors; each against numpy written element by element here."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import OpPattern, TypeRelationError
from compiler.tir import expr as te
from compiler.tir.simplify import simplify_expr
from tests.compiler.ops.relay_models import assert_round_trips, compiled_matches_interpreter

F32 = "float32"


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


def test_mirror_pad_symmetric_repeats_the_edge_and_reflect_does_not() -> None:
    x = np.array([1, 2, 3], dtype=F32)
    np.testing.assert_array_equal(run("nn.mirror_pad", x, pad_width=[[2, 3]]), [2, 1, 1, 2, 3, 3, 2, 1])
    np.testing.assert_array_equal(
        run("nn.mirror_pad", x, pad_width=[[2, 2]], mode="REFLECT"), [3, 2, 1, 2, 3, 2, 1]
    )


def test_mirror_pad_limits_follow_the_mode() -> None:
    assert infer("nn.mirror_pad", t(3, "?"), pad_width=[[3, 3], [5, 1]]) == t(9, "?")
    with pytest.raises(TypeRelationError, match=r"nn.mirror_pad: REFLECT padding of \(3, 0\) needs a dim of at least"):
        infer("nn.mirror_pad", t(3), pad_width=[[3, 0]], mode="REFLECT")
    with pytest.raises(TypeRelationError, match=r"nn.mirror_pad: SYMMETRIC padding of \(0, 4\)"):
        infer("nn.mirror_pad", t(3), pad_width=[[0, 4]])
    with pytest.raises(TypeRelationError, match=r"nn.mirror_pad: unknown mode 'EDGE'"):
        infer("nn.mirror_pad", t(3), pad_width=[[0, 1]], mode="EDGE")
    with pytest.raises(TypeRelationError, match=r"nn.mirror_pad: pad_width .* one \[before, after\] pair per dim"):
        infer("nn.mirror_pad", t(3, 2), pad_width=[[0, 1]])


def test_depth_to_space_dcr_and_crd_channel_orders() -> None:
    b, c_out = 2, 2
    x = np.arange(1 * 8 * 2 * 3, dtype=F32).reshape(1, 8, 2, 3)
    dcr = run("nn.depth_to_space", x, block_size=b)
    crd = run("nn.depth_to_space", x, block_size=b, mode="CRD")
    assert dcr.shape == crd.shape == (1, 2, 4, 6)
    for c, y, xx in itertools.product(range(c_out), range(4), range(6)):
        i, j = y % b, xx % b
        assert dcr[0, c, y, xx] == x[0, (i * b + j) * c_out + c, y // b, xx // b]
        assert crd[0, c, y, xx] == x[0, c * b * b + i * b + j, y // b, xx // b]


def test_space_to_depth_inverts_dcr_depth_to_space_in_both_layouts() -> None:
    x = np.random.default_rng(0).normal(size=(2, 3, 6, 9)).astype(F32)
    packed = run("nn.space_to_depth", x, block_size=3)
    assert packed.shape == (2, 27, 2, 3)
    np.testing.assert_array_equal(run("nn.depth_to_space", packed, block_size=3), x)
    nhwc = np.transpose(x, (0, 2, 3, 1))
    packed_nhwc = run("nn.space_to_depth", nhwc, block_size=3, layout="NHWC")
    np.testing.assert_array_equal(np.transpose(packed_nhwc, (0, 3, 1, 2)), packed)


def test_subpixel_errors() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.depth_to_space: 6 channels .* not divisible by block_size\^2 = 4"):
        infer("nn.depth_to_space", t(1, 6, 2, 2), block_size=2)
    with pytest.raises(TypeRelationError, match=r"nn.space_to_depth: width 5 .* not divisible by block_size 2"):
        infer("nn.space_to_depth", t(1, 6, 2, 5), block_size=2)
    with pytest.raises(TypeRelationError, match=r"nn.depth_to_space: unknown mode 'CDR'"):
        infer("nn.depth_to_space", t(1, 4, 2, 2), block_size=2, mode="CDR")
    assert infer("nn.depth_to_space", t("?", 8, "?", 3), block_size=2) == t("?", 2, "?", 6)


def space_to_batch_by_hand(x, block, pads, value):
    """TensorFlow's definition: output batch (offset, n), spatial y reads padded y*b + offset."""
    m = len(block)
    padded = np.pad(x, [(0, 0)] + [tuple(p) for p in pads] + [(0, 0)] * (x.ndim - 1 - m), constant_values=value)
    batch = x.shape[0]
    out_spatial = [s // b for s, b in zip(padded.shape[1 : 1 + m], block)]
    out = np.zeros([batch * int(np.prod(block))] + out_spatial + list(x.shape[1 + m :]), dtype=x.dtype)
    for offset in itertools.product(*(range(b) for b in block)):
        flat = int(np.ravel_multi_index(offset, block))
        for n in range(batch):
            for pos in itertools.product(*(range(s) for s in out_spatial)):
                src = tuple(p * b + o for p, b, o in zip(pos, block, offset))
                out[(flat * batch + n,) + pos] = padded[(n,) + src]
    return out


def test_space_to_batch_nd_matches_tensorflow_definition() -> None:
    x = np.random.default_rng(1).normal(size=(2, 3, 5, 2)).astype(F32)
    got = run("nn.space_to_batch_nd", x, block_shape=[2, 3], paddings=[[1, 0], [2, 2]], pad_value=7.5)
    np.testing.assert_array_equal(got, space_to_batch_by_hand(x, (2, 3), [[1, 0], [2, 2]], 7.5))


def test_batch_to_space_nd_inverts_space_to_batch_nd_and_crops() -> None:
    x = np.random.default_rng(2).normal(size=(2, 3, 5, 2)).astype(F32)
    pads = [[1, 0], [2, 2]]
    batched = run("nn.space_to_batch_nd", x, block_shape=[2, 3], paddings=pads)
    back = run("nn.batch_to_space_nd", batched, block_shape=[2, 3], crops=pads)
    np.testing.assert_array_equal(back, x)


def test_space_batch_errors() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.space_to_batch_nd: padded spatial dim 0 .* \(5\) is not"):
        infer("nn.space_to_batch_nd", t(1, 4, 4), block_shape=[2, 2], paddings=[[1, 0], [0, 0]])
    with pytest.raises(TypeRelationError, match=r"nn.batch_to_space_nd: batch 3 .* not divisible by the 4 blocks"):
        infer("nn.batch_to_space_nd", t(3, 2, 2), block_shape=[2, 2], crops=[[0, 0], [0, 0]])
    with pytest.raises(TypeRelationError, match=r"nn.batch_to_space_nd: crops .* needs one \[before, after\] pair"):
        infer("nn.batch_to_space_nd", t(4, 2, 2), block_shape=[2, 2], crops=[[0, 0]])
    assert infer("nn.space_to_batch_nd", t("?", 4, "?", 3), block_shape=[2, 2], paddings=[[0, 0], [0, 0]]) == t(
        "?", 2, "?", 3)


def test_upsampling_nearest_repeats_and_sizes_round() -> None:
    x = np.arange(6, dtype=F32).reshape(1, 1, 2, 3)
    got = run("nn.upsampling", x, scale_h=2.0, scale_w=2.0)
    np.testing.assert_array_equal(got, np.repeat(np.repeat(x, 2, axis=2), 2, axis=3))
    assert infer("nn.upsampling", t(1, 3, 5, 5), scale_h=1.5, scale_w=0.5) == t(1, 3, 8, 2)  # round(7.5) = 8
    assert infer("nn.upsampling", t(1, 5, 5, 3), scale_h=1.3, scale_w=2.0, layout="NHWC") == t(1, 6, 10, 3)


def test_upsampling_bilinear_asymmetric_and_align_corners_coordinates() -> None:
    x = np.array([0.0, 10.0, 20.0], dtype=F32).reshape(1, 1, 1, 3)
    # asymmetric: output x reads input x * 3/6; the last positions clamp to the edge.
    asym = run("nn.upsampling", x, scale_h=1.0, scale_w=2.0, method="bilinear")[0, 0, 0]
    np.testing.assert_allclose(asym, [0, 5, 10, 15, 20, 20], rtol=1e-6)
    # align_corners: output x reads input x * 2/5, so both ends are exact.
    aligned = run("nn.upsampling", x, scale_h=1.0, scale_w=2.0, method="bilinear", align_corners=True)[0, 0, 0]
    np.testing.assert_allclose(aligned, [0, 4, 8, 12, 16, 20], rtol=1e-6)


def test_upsampling_bicubic_reproduces_a_linear_ramp_inside_and_clamps_at_edges() -> None:
    ramp = np.arange(8, dtype="float64").reshape(1, 1, 1, 8)
    got = run("nn.upsampling", ramp, scale_h=1.0, scale_w=2.0, method="bicubic")[0, 0, 0]
    # The cubic kernel with alpha=-0.5 is exact on linear data away from the clamped edges.
    np.testing.assert_allclose(got[2:12], np.arange(2, 12) / 2, atol=1e-12)
    t_half = 0.5
    w = [-0.5 * (t_half**3 - 2 * t_half**2 + t_half), 1.5 * t_half**3 - 2.5 * t_half**2 + 1,
         -1.5 * t_half**3 + 2 * t_half**2 + 0.5 * t_half, 0.5 * t_half**3 - 0.5 * t_half**2]
    # Output 1 sits halfway between inputs 0 and 1; input -1 clamps to input 0.
    assert got[1] == pytest.approx(w[0] * 0 + w[1] * 0 + w[2] * 1 + w[3] * 2)


def test_upsampling3d_half_pixel_nearest_and_trilinear() -> None:
    x = np.arange(2 * 2 * 2, dtype=F32).reshape(1, 1, 2, 2, 2)
    near = run("nn.upsampling3d", x, scale_d=2.0, scale_h=2.0, scale_w=2.0)
    # TVM rounds half_pixel coordinates -0.25, 0.25, 0.75, 1.25 down (not to the nearest).
    pick = [0, 0, 0, 1]
    np.testing.assert_array_equal(near, x[:, :, pick][:, :, :, pick][:, :, :, :, pick])
    asym = run("nn.upsampling3d", x, scale_d=2.0, scale_h=2.0, scale_w=2.0,
               coordinate_transformation_mode="asymmetric")
    np.testing.assert_array_equal(asym, x.repeat(2, 2).repeat(2, 3).repeat(2, 4))
    tri = run("nn.upsampling3d", x, scale_d=1.0, scale_h=1.0, scale_w=2.0, method="trilinear")
    # half_pixel: output w reads (w + 0.5) / 2 - 0.5 -> -0.25, 0.25, 0.75, 1.25 (clamped).
    np.testing.assert_allclose(tri[0, 0, 0, 0], [0, 0.25, 0.75, 1], rtol=1e-6)


def test_upsampling_errors() -> None:
    with pytest.raises(TypeRelationError, match=r"nn.upsampling: unknown method 'trilinear'"):
        infer("nn.upsampling", t(1, 1, 2, 2), scale_h=2.0, scale_w=2.0, method="trilinear")
    with pytest.raises(TypeRelationError, match=r"nn.upsampling3d: unknown coordinate_transformation_mode 'x'"):
        infer("nn.upsampling3d", t(1, 1, 2, 2, 2), scale_d=1.0, scale_h=1.0, scale_w=1.0,
              coordinate_transformation_mode="x")
    with pytest.raises(TypeRelationError, match=r"nn.upsampling expects 4-D data"):
        infer("nn.upsampling", t(1, 2, 2), scale_h=2.0, scale_w=2.0)
    with pytest.raises(TypeRelationError, match=r"nn.upsampling: scales .* shrink .* to an empty output"):
        infer("nn.upsampling", t(1, 1, 1, 2), scale_h=0.2, scale_w=1.0)


def test_dilate_inserts_the_dilation_value_between_elements() -> None:
    x = np.array([[1, 2], [3, 4]], dtype="int32")
    got = run("nn.dilate", x, strides=[2, 3], dilation_value=9.0)
    want = np.full((3, 4), 9, dtype="int32")
    want[::2, ::3] = x
    np.testing.assert_array_equal(got, want)
    assert infer("nn.dilate", t("?", 4), strides=[2, 2]) == t("?", 7)
    with pytest.raises(TypeRelationError, match=r"nn.dilate: strides \[2\] need one value per dim"):
        infer("nn.dilate", t(2, 2), strides=[2])


def test_space_attrs_and_patterns_follow_tvm() -> None:
    assert ops.get("nn.depth_to_space").make_attrs({})["block_size"] == 1
    assert ops.get("nn.mirror_pad").make_attrs({"pad_width": [[0, 0]]})["mode"] == "SYMMETRIC"
    up = ops.get("nn.upsampling3d").make_attrs({"scale_d": 1.0, "scale_h": 1.0, "scale_w": 1.0})
    assert (up["layout"], up["method"], up["coordinate_transformation_mode"]) == ("NCDHW", "nearest_neighbor",
                                                                                  "half_pixel")
    s2b = ops.get("nn.space_to_batch_nd").make_attrs({"paddings": [[0, 0], [0, 0]]})
    assert (s2b["block_shape"], s2b["pad_value"]) == ((1, 1), 0.0)
    for name in ("nn.mirror_pad", "nn.depth_to_space", "nn.space_to_depth", "nn.space_to_batch_nd",
                 "nn.batch_to_space_nd", "nn.upsampling", "nn.upsampling3d", "nn.dilate"):
        assert ops.get(name).pattern == OpPattern.INJECTIVE


MODEL = """def @main(%x: Tensor[(1, 4, 3, 4), float32], %v: Tensor[(1, 2, 2, 2, 3), float32]) {
  %0 = nn.mirror_pad(%x, pad_width=[[0, 0], [0, 0], [1, 2], [2, 0]], mode="REFLECT");
  %1 = nn.depth_to_space(%0, block_size=2, mode="CRD");
  %2 = nn.space_to_depth(%1, block_size=2);
  %3 = nn.space_to_batch_nd(%2, block_shape=[2, 2], paddings=[[0, 0], [0, 0]], pad_value=1f);
  %4 = nn.batch_to_space_nd(%3, block_shape=[2, 2], crops=[[1, 1], [0, 2]]);
  %5 = nn.upsampling(%4, scale_h=1.5f, scale_w=2f, method="bicubic");
  %6 = nn.dilate(%5, strides=[1, 1, 2, 1], dilation_value=-1f);
  %7 = nn.upsampling3d(%v, scale_d=2f, scale_h=1.5f, scale_w=1f, method="trilinear");
  (%6, nn.relu(%7))
}
"""


def test_model_with_space_ops_compiles_and_matches_interpreter(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    inputs = {"x": rng.normal(size=(1, 4, 3, 4)).astype(F32), "v": rng.normal(size=(1, 2, 2, 2, 3)).astype(F32)}
    compiled_matches_interpreter(MODEL, inputs, tmp_path)


@pytest.mark.parametrize("call", [
    'nn.mirror_pad(%x, pad_width=[[0, 0], [1, 1], [2, 0], [0, 3]], mode="REFLECT")',
    'nn.depth_to_space(%x, block_size=2, layout="NHWC", mode="CRD")',
    "nn.space_to_depth(%x, block_size=2)",
    "nn.space_to_batch_nd(%x, block_shape=[2, 2], paddings=[[0, 2], [1, 1]], pad_value=2.5f)",
    "nn.batch_to_space_nd(%x, block_shape=[2], crops=[[1, 0]])",
    'nn.upsampling(%x, scale_h=2f, scale_w=1.5f, method="bilinear", align_corners=True)',
    'nn.upsampling3d(%v, scale_d=2f, scale_h=2f, scale_w=0.5f, coordinate_transformation_mode="asymmetric")',
    "nn.dilate(%x, strides=[1, 2, 2, 1], dilation_value=1f)",
])
def test_space_attrs_round_trip_through_the_printer(call: str) -> None:
    assert_round_trips(
        "def @main(%x: Tensor[(4, 4, 4, 4), float32], %v: Tensor[(1, 2, 2, 2, 4), float32]) {\n"
        f"  {call}\n}}\n"
    )


def test_upsampling_shape_rule_rounds_halves_to_even_as_the_relation_does() -> None:
    rule = ops.get("nn.upsampling").shape_func
    assert rule is not None
    for h, w in itertools.product(range(2, 8), (3, 5, 7)):
        for scale_h, scale_w in ((1.5, 0.5), (2.5, 1.3), (0.5, 2.5)):
            attrs = {"scale_h": scale_h, "scale_w": scale_w, "layout": "NHWC"}
            expected = infer("nn.upsampling", t(1, h, w, 2), **attrs)
            inputs = [tuple(te.const(d, "int64") for d in (1, h, w, 2))]
            out_type = TensorType((ANY,) * 4, F32)
            (got,) = rule(inputs, ops.get("nn.upsampling").make_attrs(attrs), out_type)
            folded = [simplify_expr(te.as_expr(d)) for d in got]
            assert all(isinstance(d, te.Const) for d in folded)
            values = tuple(int(d.value) for d in folded)  # type: ignore[attr-defined]  # Consts, checked
            assert TensorType(values, F32) == expected, (h, w, scale_h, scale_w)
