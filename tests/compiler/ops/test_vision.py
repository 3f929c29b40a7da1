"""Vision operators (compiler/ops/vision.py) against loops written here from TVM's definitions,
their type errors, a Relay text model compiled end to end, and attribute round trips."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.backend.shape_func import lower_shape_func
from compiler.parser.printer import astext
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import OpPattern, TypeRelationError
from compiler.parser import parse
from tests.compiler.backend.test_shape_func import run as run_shape_func

F32 = "float32"


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def run(name: str, *arrays: np.ndarray, **attrs: object) -> object:
    op = ops.get(name)
    a = op.make_attrs(attrs)
    op.type_rel([TensorType(x.shape, str(x.dtype)) for x in arrays], a)
    return op.reference(list(arrays), a)


# --- multibox_prior -------------------------------------------------------------------------------


def test_multibox_prior_places_boxes_at_pixel_centres() -> None:
    out = run("vision.multibox_prior", np.zeros((1, 1, 2, 2), F32), sizes=[0.5])
    # Centres at (0.25, 0.25), (0.25, 0.75), ...; half extents 0.25 (H == W).
    np.testing.assert_allclose(out[0], [[0, 0, 0.5, 0.5], [0.5, 0, 1, 0.5], [0, 0.5, 0.5, 1], [0.5, 0.5, 1, 1]])


def test_multibox_prior_orders_sizes_then_ratios_and_scales_width_by_h_over_w() -> None:
    data = np.zeros((1, 1, 1, 2), F32)  # H/W = 1/2
    out = run("vision.multibox_prior", data, sizes=[0.4, 0.2], ratios=[1.0, 4.0], steps=[1.0, 0.5],
              offsets=[0.0, 0.0])
    assert out.shape == (1, 2 * 3, 4)
    # First pixel: centre (0, 0). Sizes 0.4, 0.2 at ratio 1, then 0.4 at ratio 4.
    hw = [0.4 * 0.5 / 2, 0.2 * 0.5 / 2, 0.4 * 0.5 * math.sqrt(4) / 2]
    hh = [0.2, 0.1, 0.4 / math.sqrt(4) / 2]
    expected = [[-w, -h, w, h] for w, h in zip(hw, hh)]
    np.testing.assert_allclose(out[0, :3], expected, rtol=1e-6)
    # The second pixel's centre moves by the x step only.
    np.testing.assert_allclose(out[0, 3, [0, 2]], [0.5 - hw[0], 0.5 + hw[0]], rtol=1e-6)


def test_multibox_prior_clip_keeps_boxes_in_the_unit_square() -> None:
    out = run("vision.multibox_prior", np.zeros((1, 1, 2, 2), F32), sizes=[1.5], clip=True)
    assert out.min() == 0.0 and out.max() == 1.0


def test_multibox_prior_types_and_errors() -> None:
    assert infer("vision.multibox_prior", TensorType((4, 3, 5, 6), F32), sizes=[1.0, 0.5], ratios=[1.0, 2.0]) == (
        TensorType((1, 5 * 6 * 3, 4), F32))
    assert infer("vision.multibox_prior", TensorType((1, 3, ANY, 6), F32)) == TensorType((1, ANY, 4), F32)
    with pytest.raises(TypeRelationError, match="expects 4-D NCHW data"):
        infer("vision.multibox_prior", TensorType((3, 5, 6), F32))
    with pytest.raises(TypeRelationError, match="steps must have 2 values"):
        infer("vision.multibox_prior", TensorType((1, 3, 5, 6), F32), steps=[0.1])
    with pytest.raises(TypeRelationError, match="ratios must be positive"):
        infer("vision.multibox_prior", TensorType((1, 3, 5, 6), F32), ratios=[1.0, 0.0])
    assert ops.get("vision.multibox_prior").pattern == OpPattern.OPAQUE


# --- yolo_reorg -----------------------------------------------------------------------------------


def darknet_reorg(x: np.ndarray, s: int) -> np.ndarray:
    """darknet's reorg (forward=0), element by element."""
    n, c, h, w = x.shape
    flat = x.ravel()
    out_c = c // (s * s)
    out = np.zeros(x.size, x.dtype)
    count = 0
    for b in range(n):
        for k in range(c):
            for j in range(h):
                for i in range(w):
                    c2, offset = k % out_c, k // out_c
                    w2, h2 = i * s + offset % s, j * s + offset // s
                    out[count] = flat[w2 + w * s * (h2 + h * s * (c2 + out_c * b))]
                    count += 1
    return out.reshape(n, c * s * s, h // s, w // s)


@pytest.mark.parametrize(("shape", "stride"), [((1, 4, 4, 6), 2), ((2, 8, 2, 4), 2), ((1, 9, 6, 3), 3), ((1, 2, 3, 3), 1)])
def test_yolo_reorg_matches_darknet(shape: tuple[int, ...], stride: int) -> None:
    x = np.arange(np.prod(shape), dtype=F32).reshape(shape)
    np.testing.assert_array_equal(run("vision.yolo_reorg", x, stride=stride), darknet_reorg(x, stride))


def test_yolo_reorg_types_and_errors() -> None:
    assert infer("vision.yolo_reorg", TensorType((ANY, 8, 4, 6), F32), stride=2) == TensorType((ANY, 32, 2, 3), F32)
    with pytest.raises(TypeRelationError, match="channels 6 .* not a multiple of 4"):
        infer("vision.yolo_reorg", TensorType((1, 6, 4, 4), F32), stride=2)
    with pytest.raises(TypeRelationError, match="height 3 .* not a multiple of 2"):
        infer("vision.yolo_reorg", TensorType((1, 4, 3, 4), F32), stride=2)
    with pytest.raises(TypeRelationError, match="stride must be positive"):
        infer("vision.yolo_reorg", TensorType((1, 4, 4, 4), F32), stride=0)


# --- get_valid_counts -----------------------------------------------------------------------------


def test_get_valid_counts_moves_valid_boxes_up_and_marks_the_rest() -> None:
    data = np.array([[[0, 0.9, 1, 1, 2, 2], [1, 0.1, 0, 0, 1, 1], [-1, 0.8, 3, 3, 4, 4], [2, 0.5, 5, 5, 6, 6]]], F32)
    counts, boxes, indices = run("vision.get_valid_counts", data, np.array(0.3, F32))
    # Anchor 1 scores too low; anchor 2 has a negative class id.
    assert counts.tolist() == [2]
    np.testing.assert_array_equal(boxes[0, :2], data[0, [0, 3]])
    assert (boxes[0, 2:] == -1).all() and indices.tolist() == [[0, 3, -1, -1]]
    # id_index=-1 ignores the class id; the threshold is strict.
    counts, _, indices = run("vision.get_valid_counts", data, np.array(0.5, F32), id_index=-1)
    assert counts.tolist() == [2] and indices.tolist() == [[0, 2, -1, -1]]


def test_get_valid_counts_types_and_errors() -> None:
    data = TensorType((2, 7, 6), F32)
    scalar = TensorType((), F32)
    out = infer("vision.get_valid_counts", data, scalar)
    assert out.fields == (TensorType((2,), "int32"), data, TensorType((2, 7), "int32"))  # type: ignore[union-attr]
    with pytest.raises(TypeRelationError, match="3-D data"):
        infer("vision.get_valid_counts", TensorType((7, 6), F32), scalar)
    with pytest.raises(TypeRelationError, match="float scalar score_threshold"):
        infer("vision.get_valid_counts", data, TensorType((1,), F32))
    with pytest.raises(TypeRelationError, match="score_index 6 is out of range"):
        infer("vision.get_valid_counts", data, scalar, score_index=6)


# --- non_max_suppression --------------------------------------------------------------------------

# id, score, x0, y0, x1, y1. Box 1 overlaps box 0 with IoU 0.81; box 2 (class 1) overlaps box 0
# with IoU 0.8676; box 3 scores 0; box 4 has its corners swapped and overlaps nothing.
NMS_BOXES = np.array([[
    [0, 0.9, 0.0, 0.0, 1.0, 1.0],
    [0, 0.8, 0.1, 0.1, 1.0, 1.0],
    [1, 0.7, 0.05, 0.0, 1.0, 1.1],
    [0, 0.0, 2.0, 2.0, 3.0, 3.0],
    [0, 0.6, 3.0, 3.0, 2.0, 2.0],
]], F32)


def nms(valid: int, indices: list[int], max_out: int = -1, iou: float = 0.5, **attrs: object) -> object:
    return run("vision.non_max_suppression", NMS_BOXES, np.array([valid], "int32"),
               np.array([indices], "int32"), np.array(max_out, "int32"), np.array(iou, F32), **attrs)


def test_nms_suppresses_same_class_overlaps_and_maps_indices() -> None:
    out, count = nms(5, [4, 3, 2, 1, 0])
    # Sorted: 0, 1, 2, 4, 3. Box 1 goes; box 2 is another class; box 3 (score 0) is kept as is.
    assert out.tolist() == [[4, 2, 0, 1, -1]] and count.tolist() == [[4]]
    out, count = nms(5, [0, 1, 2, 3, 4], force_suppress=True)
    assert out.tolist() == [[0, 4, 3, -1, -1]] and count.tolist() == [[3]]


def test_nms_max_output_size_and_top_k() -> None:
    out, count = nms(5, [0, 1, 2, 3, 4], max_out=1)
    assert out.tolist() == [[0, -1, -1, -1, -1]] and count.tolist() == [[1]]
    out, _ = nms(5, [0, 1, 2, 3, 4], top_k=2)  # only boxes 0 and 1 enter; 1 is suppressed
    assert out.tolist() == [[0, -1, -1, -1, -1]]


def test_nms_boxes_output_and_invalid_to_bottom() -> None:
    boxes = nms(4, [0, 1, 2, 3], return_indices=False, force_suppress=True)
    expected = np.full((5, 6), -1, F32)
    expected[0], expected[3] = NMS_BOXES[0, 0], NMS_BOXES[0, 3]
    np.testing.assert_array_equal(boxes[0], expected)
    moved = nms(4, [0, 1, 2, 3], return_indices=False, force_suppress=True, invalid_to_bottom=True)
    np.testing.assert_array_equal(moved[0, :2], NMS_BOXES[0, [0, 3]])
    assert (moved[0, 2:] == -1).all()


def test_nms_without_threshold_keeps_the_valid_boxes_in_place() -> None:
    out, count = nms(3, [4, 3, 2, 1, 0], iou=0.0)
    assert out.tolist() == [[4, 3, 2, -1, -1]] and count.tolist() == [[3]]
    # TVM's compaction also emits a 0 after every index beyond num_anchors.
    out, count = nms(3, [9, 8, 7, 6, 5], iou=0.0)
    assert out.tolist() == [[9, 0, 8, 0, 7]] and count.tolist() == [[5]]


def test_nms_types_and_errors() -> None:
    data, valid, ind = TensorType((2, 7, 6), F32), TensorType((2,), "int32"), TensorType((2, 7), "int32")
    scalars = (TensorType((), "int32"), TensorType((), F32))
    out = infer("vision.non_max_suppression", data, valid, ind, *scalars)
    assert out.fields == (TensorType((2, 7), "int32"), TensorType((2, 1), "int32"))  # type: ignore[union-attr]
    assert infer("vision.non_max_suppression", data, valid, ind, *scalars, return_indices=False) == data
    with pytest.raises(TypeRelationError, match="do not fit boxes of 6 values"):
        infer("vision.non_max_suppression", data, valid, ind, *scalars, coord_start=3)
    with pytest.raises(TypeRelationError, match="float scalar iou_threshold"):
        infer("vision.non_max_suppression", data, valid, ind, scalars[0], scalars[0])


def test_nms_without_return_indices_takes_the_valid_count_for_indices_as_tvm_frontends_pass_it() -> None:
    # MXNet's MultiBoxDetection and TFLite's detection post-process call
    # non_max_suppression(boxes, count, count, ...): the indices are unread then.
    data, valid = TensorType((2, 7, 6), F32), TensorType((2,), "int32")
    scalars = (TensorType((), "int32"), TensorType((), F32))
    assert infer("vision.non_max_suppression", data, valid, valid, *scalars, return_indices=False) == data
    with pytest.raises(TypeRelationError, match="integer indices of shape"):
        infer("vision.non_max_suppression", data, valid, valid, *scalars)
    boxes = run("vision.non_max_suppression", NMS_BOXES, np.array([4], "int32"), np.array([4], "int32"),
                np.array(-1, "int32"), np.array(0.5, F32), return_indices=False, force_suppress=True)
    np.testing.assert_array_equal(boxes, nms(4, [0, 1, 2, 3], return_indices=False, force_suppress=True))


# --- roi_align and roi_pool -----------------------------------------------------------------------

RAMP = np.arange(16, dtype=F32).reshape(1, 1, 4, 4)  # value = 4 * y + x


def rois(*rows: list[float]) -> np.ndarray:
    return np.array(rows, F32)


def test_roi_align_samples_bin_centres_bilinearly() -> None:
    # One 3x3 bin with one sample at its centre (1.5, 1.5).
    out = run("vision.roi_align", RAMP, rois([0, 0, 0, 3, 3]), pooled_size=[1, 1], spatial_scale=1.0, sample_ratio=1)
    assert out.ravel().tolist() == [7.5]
    # The adaptive grid is ceil(3 / 1) = 3 samples a side, at 0.5, 1.5, 2.5: max at (2.5, 2.5).
    out = run("vision.roi_align", RAMP, rois([0, 0, 0, 3, 3]), pooled_size=[1, 1], spatial_scale=1.0, mode="max")
    assert out.ravel().tolist() == [12.5]
    # spatial_scale halves the roi to (1, 1)-(3, 3): centre (2, 2). A malformed roi becomes 1x1:
    # start (1, 1), centre (1.5, 1.5).
    out = run("vision.roi_align", RAMP, rois([0, 2, 2, 6, 6], [0, 2, 2, 1, 1]), pooled_size=[1, 1],
              spatial_scale=0.5, sample_ratio=1)
    assert out.ravel().tolist() == [10, 7.5]


def test_roi_align_is_zero_beyond_one_pixel_outside_and_clamps_within() -> None:
    out = run("vision.roi_align", RAMP, rois([0, 10, 10, 12, 12], [0, 3.5, 3.5, 4.5, 4.5]), pooled_size=[1, 1],
              spatial_scale=1.0, sample_ratio=1)
    # Centre (11, 11) is outside; centre (4, 4) is within one pixel, so it reads the clamped (3, 3).
    assert out.ravel().tolist() == [0, 15]


def test_roi_align_nhwc_matches_nchw() -> None:
    data = np.random.default_rng(4).uniform(-1, 1, (2, 3, 6, 5)).astype(F32)
    boxes = rois([1, 0.5, 1, 4, 5.5], [0, 2, 0, 3, 2])
    nchw = run("vision.roi_align", data, boxes, pooled_size=[2, 3], spatial_scale=1.0)
    nhwc = run("vision.roi_align", data.transpose(0, 2, 3, 1), boxes, pooled_size=[2, 3], spatial_scale=1.0,
               layout="NHWC")
    np.testing.assert_allclose(nhwc, nchw.transpose(0, 2, 3, 1), rtol=1e-6)


def test_roi_pool_takes_the_max_of_each_bin_with_rounded_corners() -> None:
    out = run("vision.roi_pool", RAMP, rois([0, 0, 0, 3, 3]), pooled_size=[2, 2], spatial_scale=1.0)
    assert out[0, 0].tolist() == [[5, 7], [13, 15]]
    # Corners round halves away from zero: 0.5 -> 1 and 2.5 -> 3.
    out = run("vision.roi_pool", RAMP, rois([0, 0.5, 0.5, 2.5, 1.4]), pooled_size=[1, 1], spatial_scale=1.0)
    assert out.ravel().tolist() == [7]
    # A bin clamped to nothing is 0.
    out = run("vision.roi_pool", RAMP, rois([0, 10, 10, 12, 12]), pooled_size=[1, 1], spatial_scale=1.0)
    assert out.ravel().tolist() == [0]


def test_roi_types_and_errors() -> None:
    data, boxes = TensorType((2, 3, 8, 8), F32), TensorType((ANY, 5), F32)
    assert infer("vision.roi_align", data, boxes, pooled_size=[2, 3], spatial_scale=1.0) == TensorType(
        (ANY, 3, 2, 3), F32)
    assert infer("vision.roi_align", TensorType((2, 8, 8, 3), F32), boxes, pooled_size=[2, 3], spatial_scale=1.0,
                 layout="NHWC") == TensorType((ANY, 2, 3, 3), F32)
    assert infer("vision.roi_pool", data, boxes, pooled_size=[2, 2], spatial_scale=1.0) == TensorType(
        (ANY, 3, 2, 2), F32)
    with pytest.raises(TypeRelationError, match="rois of shape \\(num_roi, 5\\)"):
        infer("vision.roi_align", data, TensorType((4, 4), F32), pooled_size=[2, 2], spatial_scale=1.0)
    with pytest.raises(TypeRelationError, match="unsupported mode 'sum'"):
        infer("vision.roi_align", data, boxes, pooled_size=[2, 2], spatial_scale=1.0, mode="sum")
    with pytest.raises(TypeRelationError, match="unsupported layout 'NHWC'"):
        infer("vision.roi_pool", data, boxes, pooled_size=[2, 2], spatial_scale=1.0, layout="NHWC")
    assert ops.get("vision.roi_align").pattern == OpPattern.OUT_ELEMWISE_FUSABLE


ROI_MODEL = """
#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 8, 8), float32], %rois: Tensor[(3, 5), float32], %cls: Tensor[(2, 3, 4), float32],
          %loc: Tensor[(2, 16), float32], %anchor: Tensor[(1, 4, 4), float32]) {
  %0 = vision.roi_align(%x, %rois, pooled_size=[2, 2], spatial_scale=0.5f, sample_ratio=2, mode="max");
  %1 = vision.roi_pool(%x, %rois, pooled_size=[3, 3], spatial_scale=1f);
  %2 = sigmoid(%cls);
  %3 = vision.multibox_transform_loc(%2, %loc, %anchor, threshold=0.6f, variances=[0.1f, 0.2f, 0.3f, 0.4f]);
  (nn.relu(%0), %1, %3.0, %3.1)
}
"""


def test_roi_model_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    text = astext(parse(ROI_MODEL))
    assert 'mode="max"' in text and "sample_ratio=2" in text and astext(parse(text)) == text
    inputs = {
        "x": np.random.default_rng(5).uniform(-1, 1, (2, 3, 8, 8)).astype(F32),
        "rois": rois([0, 0, 0, 7, 7], [1, 1.5, 2.5, 6, 4], [1, 5, 5, 2, 2]),
        "cls": np.random.default_rng(6).uniform(-2, 2, (2, 3, 4)).astype(F32),
        "loc": np.random.default_rng(7).uniform(-1, 1, (2, 16)).astype(F32),
        "anchor": np.random.default_rng(8).uniform(0, 1, (1, 4, 4)).astype(F32),
    }
    actual, expected = _compile_and_run(ROI_MODEL, inputs, tmp_path)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


# --- multibox_transform_loc -------------------------------------------------------------------------


def test_multibox_transform_loc_decodes_the_best_class_above_threshold() -> None:
    # Two anchors, background + two classes. Anchor 0: class 2 wins (0.7); anchor 1: class 1
    # wins with 0.3, below the threshold, so it is dropped.
    cls_prob = np.array([[[0.1, 0.6], [0.2, 0.3], [0.7, 0.1]]], F32)
    anchor = np.array([[[0.2, 0.2, 0.6, 0.4], [0, 0, 1, 1]]], F32)
    loc = np.array([[1.0, -1.0, 0.0, np.log(2.0) / 0.2, 0, 0, 0, 0]], F32)
    out, count = run("vision.multibox_transform_loc", cls_prob, loc, anchor, threshold=0.5)
    assert count.tolist() == [1]
    # centre (0.4, 0.3) moved by (1 * 0.1 * 0.4, -1 * 0.1 * 0.2); width 0.4; height 0.2 * 2.
    cx, cy, hw, hh = 0.4 + 0.04, 0.3 - 0.02, 0.2, 0.2
    np.testing.assert_allclose(out[0, 0], [1, 0.7, cx - hw, cy - hh, cx + hw, cy + hh], rtol=1e-5)
    assert (out[0, 1] == -1).all()
    # With clip the corners stay in [0, 1].
    wide = np.array([[0.0, 0.0, 5.0, 5.0, 0, 0, 0, 0]], F32)
    out, _ = run("vision.multibox_transform_loc", cls_prob, wide, anchor, threshold=0.5)
    assert out[0, 0, 2:].min() >= 0 and out[0, 0, 2:].max() <= 1


def test_multibox_transform_loc_types_and_errors() -> None:
    cls, loc, anchor = TensorType((2, 3, 5), F32), TensorType((2, 20), F32), TensorType((1, 5, 4), F32)
    out = infer("vision.multibox_transform_loc", cls, loc, anchor)
    assert out.fields == (TensorType((2, 5, 6), F32), TensorType((2,), "int32"))  # type: ignore[union-attr]
    with pytest.raises(TypeRelationError, match="4 values for each of the 5 anchors"):
        infer("vision.multibox_transform_loc", cls, TensorType((2, 16), F32), anchor)
    with pytest.raises(TypeRelationError, match="variances must have 4 values"):
        infer("vision.multibox_transform_loc", cls, loc, anchor, variances=[0.1, 0.2])


# --- all_class_non_max_suppression ------------------------------------------------------------------

AC_BOXES = np.array([[[0, 0, 1, 1], [0.1, 0.1, 1, 1], [2, 2, 3, 3], [0, 0, 0.5, 0.5]],
                     [[0, 0, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1], [5, 5, 6, 6]]], F32)
AC_SCORES = np.array([[[0.9, 0.8, 0.7, 0.1], [0.2, 0.3, 0.3, 0.0]],
                      [[0.5, 0.6, 0.7, 0.8], [-0.5, 0.9, 0.0, 0.4]]], F32)


def all_class(m: int, iou: float, threshold: float, fmt: str = "onnx") -> object:
    return run("vision.all_class_non_max_suppression", AC_BOXES, AC_SCORES, np.array(m, "int64"),
               np.array(iou, F32), np.array(threshold, F32), output_format=fmt)


def test_all_class_nms_onnx_rows_are_batch_class_box_in_score_order() -> None:
    indices, total = all_class(10, 0.5, 0.05)
    # b0c0: box 1 overlaps box 0 (IoU 0.81); box 3 only 0.25. b0c1: ties keep box order (1 before
    # 2); score 0 is not above 0.05. b1c0: box 1 is box 0 with swapped corners (IoU 1).
    expected = [[0, 0, 0], [0, 0, 2], [0, 0, 3], [0, 1, 1], [0, 1, 2], [1, 0, 3], [1, 0, 2], [1, 1, 1], [1, 1, 3]]
    assert total.tolist() == [9]
    assert indices[:9].tolist() == expected and (indices[9:] == 0).all()


def test_all_class_nms_limits_per_class_and_needs_a_positive_iou_threshold() -> None:
    indices, total = all_class(1, 0.3, -1.0)
    assert indices[:int(total[0])].tolist() == [[0, 0, 0], [0, 1, 1], [1, 0, 3], [1, 1, 1]]
    _, total = all_class(10, 0.0, 0.0)
    assert total.tolist() == [0]


def test_all_class_nms_tensorflow_format_collects_per_batch_with_scores() -> None:
    indices, scores, totals = all_class(0, 0.5, 0.15, fmt="tensorflow")  # 0: no per-class limit
    assert totals.tolist() == [4, 4]
    assert indices[0, :4].tolist() == [[0, 0], [0, 2], [1, 1], [1, 2]]
    np.testing.assert_allclose(scores[0, :4], [0.9, 0.7, 0.3, 0.3])
    assert (indices[0, 4:] == 0).all() and (scores[0, 4:] == 0).all()


def test_all_class_nms_types_and_errors() -> None:
    boxes, scores = TensorType((2, 5, 4), F32), TensorType((2, 3, 5), F32)
    scalars = (TensorType((), "int64"), TensorType((), F32), TensorType((1,), F32))
    onnx = infer("vision.all_class_non_max_suppression", boxes, scores, *scalars)
    assert onnx.fields == (TensorType((30, 3), "int64"), TensorType((1,), "int64"))  # type: ignore[union-attr]
    tf = infer("vision.all_class_non_max_suppression", boxes, scores, *scalars, output_format="tensorflow")
    assert tf.fields == (TensorType((2, 15, 2), "int64"), TensorType((2, 15), F32),  # type: ignore[union-attr]
                         TensorType((2,), "int64"))
    with pytest.raises(TypeRelationError, match="unsupported output_format 'tf'"):
        infer("vision.all_class_non_max_suppression", boxes, scores, *scalars, output_format="tf")
    with pytest.raises(TypeRelationError, match="max_output_boxes_per_class as a int scalar"):
        infer("vision.all_class_non_max_suppression", boxes, scores, TensorType((), F32), *scalars[1:])
    with pytest.raises(TypeRelationError, match="score_threshold as a float scalar"):
        infer("vision.all_class_non_max_suppression", boxes, scores, *scalars[:2], TensorType((2,), F32))


def test_all_class_nms_accepts_dynamic_dims_everywhere() -> None:
    dynamic = (TensorType((ANY, ANY, ANY), F32), TensorType((ANY, ANY, ANY), F32),
               TensorType((ANY,), "int64"), TensorType((ANY,), F32), TensorType((ANY,), F32))
    onnx = infer("vision.all_class_non_max_suppression", *dynamic)
    assert onnx.fields == (TensorType((ANY, 3), "int64"), TensorType((1,), "int64"))  # type: ignore[union-attr]


def test_all_class_nms_shape_function_makes_room_for_every_batch_class_and_box() -> None:
    text = (
        '#[version = "0.0.5"]\n'
        "def @main(%boxes: Tensor[(?, ?, 4), float32], %scores: Tensor[(?, ?, ?), float32]) {\n"
        '  %0 = vision.all_class_non_max_suppression(%boxes, %scores, 3i64, 0.5f, 0.05f, output_format="onnx");\n'
        '  %1 = vision.all_class_non_max_suppression(%boxes, %scores, 3i64, 0.5f, 0.05f, output_format="tensorflow");\n'
        "  (%0.0, %0.1, %1.0, %1.1, %1.2)\n}\n"
    )
    shape_func = lower_shape_func(parse(text).main, "shape_func_all_class_nms")
    got = run_shape_func(shape_func.prim_func, [2, 7, 4], [2, 3, 7])
    assert got == [[42, 3], [1], [2, 21, 2], [2, 21], [2]]


ALL_CLASS_MODEL = """
#[version = "0.0.5"]
def @main(%boxes: Tensor[(2, 4, 4), float32], %scores: Tensor[(2, 2, 4), float32]) {
  %0 = vision.all_class_non_max_suppression(%boxes, %scores, 3i64, 0.5f, 0.05f, output_format="onnx");
  %1 = vision.all_class_non_max_suppression(%boxes, %scores, 0i64, 0.4f, 0f, output_format="tensorflow");
  (%0.0, %0.1, %1.0, %1.1, %1.2)
}
"""


def test_all_class_model_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    text = astext(parse(ALL_CLASS_MODEL))
    assert 'output_format="tensorflow"' in text and astext(parse(text)) == text
    inputs = {"boxes": AC_BOXES, "scores": AC_SCORES}
    actual, expected = _compile_and_run(ALL_CLASS_MODEL, inputs, tmp_path)
    assert len(actual) == 5
    for a, e in zip(actual, expected):
        np.testing.assert_array_equal(a, e)


# --- text round trip and end to end --------------------------------------------------------------

VISION_MODEL = """
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 4, 6), float32]) {
  %0 = vision.yolo_reorg(%x, stride=2);
  %1 = vision.multibox_prior(%x, sizes=[0.3f, 0.6f], ratios=[1f, 2f], steps=[-1f, 0.2f], offsets=[0.5f, 0.25f], clip=True);
  %2 = reshape(%0, newshape=[1, 32, 6]);
  %3 = vision.get_valid_counts(%2, 0.1f, id_index=-1, score_index=2);
  %4 = %3.1;
  %5 = vision.non_max_suppression(%4, %3.0, %3.2, 3, 0.4f, force_suppress=True, coord_start=1, id_index=-1);
  (%0, %1, %3.0, nn.relu(%4), %3.2, %5.0, %5.1)
}
"""


def _compile_and_run(text: str, inputs: dict[str, np.ndarray], tmp_path: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    from compiler.driver import export, lower
    from compiler.runtime.interpreter import run_main
    from compiler.runtime.module import CompiledModule

    mod = parse(text)
    expected = run_main(mod, inputs)
    export(lower(mod), tmp_path, text)
    return list(CompiledModule(tmp_path).run(inputs).outputs), expected


def test_vision_attrs_round_trip_through_the_printer() -> None:
    text = astext(parse(VISION_MODEL))
    assert "stride=2" in text and "sizes=[0.3f, 0.6f]" in text and "clip=True" in text
    assert "id_index=-1, score_index=2" in text and "force_suppress=True, coord_start=1, id_index=-1" in text
    assert astext(parse(text)) == text


def test_vision_model_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    x = np.random.default_rng(3).uniform(-1, 1, (1, 8, 4, 6)).astype(F32)
    actual, expected = _compile_and_run(VISION_MODEL, {"x": x}, tmp_path)
    assert len(actual) == len(expected) == 7
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
