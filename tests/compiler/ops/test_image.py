"""Image operators (compiler/ops/image.py): TVM's coordinate transforms, rounding rules and
interpolation kernels checked against values worked out by hand, plus the type errors, a Relay
text model compiled end to end, and attribute round trips through the printer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.parser.printer import astext
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.registry import OpPattern, TypeRelationError
from compiler.parser import parse

F32 = "float32"


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def run(name: str, *arrays: np.ndarray, **attrs: object) -> np.ndarray:
    op = ops.get(name)
    a = op.make_attrs(attrs)
    ty = op.type_rel([TensorType(x.shape, str(x.dtype)) for x in arrays], a)
    out = op.reference(list(arrays), a)
    assert isinstance(ty, TensorType) and out.shape == ty.shape and str(out.dtype) == ty.dtype
    return out


def row(*values: float, dtype: str = F32) -> np.ndarray:
    """A (1, 1, W) NCW image."""
    return np.array(values, dtype=dtype).reshape(1, 1, -1)


# --- resize -----------------------------------------------------------------------------------


def test_resize1d_linear_half_pixel_clamps_at_both_edges() -> None:
    # in_x = (x + 0.5) * 4/8 - 0.5 = -0.25, 0.25, ..., 3.25; the taps clamp to [0, 3].
    out = run("image.resize1d", row(0, 10, 20, 30), size=[8])
    np.testing.assert_allclose(out.ravel(), [0, 2.5, 7.5, 12.5, 17.5, 22.5, 27.5, 30])


def test_nearest_rounding_methods_pick_their_pixels() -> None:
    x = row(0, 1, 2, 3, 4, 5)
    # asymmetric 6 -> 4: in_x = 0, 1.5, 3, 4.5.
    picks = {
        "round": [0, 2, 3, 5],
        "floor": [0, 1, 3, 4],
        "ceil": [0, 2, 3, 5],
        "round_prefer_floor": [0, 1, 3, 4],
        "round_prefer_ceil": [0, 2, 3, 5],
        "": [0, 1, 3, 4],  # floor unless align_corners
    }
    for rounding, expected in picks.items():
        out = run("image.resize1d", x, size=[4], method="nearest_neighbor",
                  coordinate_transformation_mode="asymmetric", rounding_method=rounding)
        assert out.ravel().tolist() == expected, rounding


def test_nearest_default_rounding_is_round_for_align_corners() -> None:
    # align_corners 4 -> 3: in_x = 0, 1.5, 3; "" rounds 1.5 away from zero.
    out = run("image.resize1d", row(0, 1, 2, 3), size=[3], method="nearest_neighbor",
              coordinate_transformation_mode="align_corners", rounding_method="")
    assert out.ravel().tolist() == [0, 2, 3]


def test_resize2d_nearest_asymmetric_integer_upscale_divides_and_ignores_rounding() -> None:
    x = np.arange(4, dtype=F32).reshape(1, 1, 2, 2)
    out = run("image.resize2d", x, size=[4, 4], method="nearest_neighbor",
              coordinate_transformation_mode="asymmetric", rounding_method="round")
    assert out[0, 0, 0].tolist() == [0, 0, 1, 1]
    # resize1d has no such shortcut: round(0.5) = 1, round(1.5) = 2 -> clamped to 1.
    out1 = run("image.resize1d", row(0, 1), size=[4], method="nearest_neighbor",
               coordinate_transformation_mode="asymmetric", rounding_method="round")
    assert out1.ravel().tolist() == [0, 1, 1, 1]


def test_half_pixel_variants_differ_only_where_documented() -> None:
    x = row(0, 10, 20)
    # pytorch_half_pixel with one output reads coordinate 0; half_pixel reads the centre.
    pt = run("image.resize1d", x, size=[1], coordinate_transformation_mode="pytorch_half_pixel")
    hp = run("image.resize1d", x, size=[1], coordinate_transformation_mode="half_pixel")
    assert pt.ravel().tolist() == [0] and hp.ravel().tolist() == [10]
    # tf_half_pixel_for_nn: in_x = (x + 0.5) * 3/2 = 0.75, 2.25 -> floor 0, 2.
    nn = run("image.resize1d", x, size=[2], method="nearest_neighbor",
             coordinate_transformation_mode="tf_half_pixel_for_nn", rounding_method="floor")
    assert nn.ravel().tolist() == [0, 20]


def test_align_corners_with_one_output_reads_the_first_pixel() -> None:
    out = run("image.resize1d", row(5, 6, 7), size=[1], coordinate_transformation_mode="align_corners")
    assert out.ravel().tolist() == [5]


def test_tf_crop_and_resize_extrapolates_outside_the_image() -> None:
    # in_x = -0.5*2 + x * 1.5*2/2 = -1, 0.5, 2.
    out = run("image.resize1d", row(1, 2, 3), size=[3], roi=[-0.5, 1.0], extrapolation_value=-7.0,
              coordinate_transformation_mode="tf_crop_and_resize")
    np.testing.assert_allclose(out.ravel(), [-7, 1.5, 3])
    # One output samples the roi's centre.
    centre = run("image.resize1d", row(1, 2, 3), size=[1], roi=[0.0, 1.0],
                 coordinate_transformation_mode="tf_crop_and_resize")
    assert centre.ravel().tolist() == [2]


def test_resize3d_tf_crop_and_resize_never_extrapolates_depth_like_tvm() -> None:
    x = np.array([1, 2], dtype=F32).reshape(1, 1, 2, 1, 1)
    # Depth reads roi[2] and roi[5]: centre 5 lies outside, yet the clamped last slice is read.
    out = run("image.resize3d", x, size=[1, 1, 1], roi=[0.0, 0.0, 5.0, 0.0, 0.0, 5.0],
              coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-1.0)
    assert out.ravel().tolist() == [2]


def test_cubic_weights_match_the_spline_by_hand() -> None:
    # align_corners 4 -> 7: in_x = x/2; at x=1, t=0.5 and alpha=-0.5 give weights
    # (-0.0625, 0.5625, 0.5625, -0.0625) on taps -1 (clamped to 0), 0, 1, 2 = pixels (0, 0, 1, 0).
    x = row(0, 1, 0, 0)
    out = run("image.resize1d", x, size=[7], method="cubic", coordinate_transformation_mode="align_corners")
    assert out.ravel()[1] == pytest.approx(0.5625)
    # cubic_exclude drops the tap at -1 and renormalizes by 1.0625.
    out = run("image.resize1d", x, size=[7], method="cubic", cubic_exclude=1,
              coordinate_transformation_mode="align_corners")
    assert out.ravel()[1] == pytest.approx(0.5625 / 1.0625)
    # alpha=-0.75 at t=0.5: w3 = -1.25*0.125 + 1.5*0.25 + 0.75*0.5 = 0.59375.
    out = run("image.resize1d", row(0, 1, 0, 0), size=[7], method="cubic", cubic_alpha=-0.75,
              coordinate_transformation_mode="align_corners")
    assert out.ravel()[1] == pytest.approx(0.59375)


def test_resize2d_bilinear_in_nhwc_matches_a_direct_computation() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (2, 3, 4, 5)).astype(F32)  # NHWC
    out = run("image.resize2d", x, size=[5, 7], layout="NHWC", coordinate_transformation_mode="align_corners")
    expected = np.zeros((2, 5, 7, 5))
    for i in range(5):
        for j in range(7):
            y, xx = i * 2 / 4, j * 3 / 6
            y0, x0 = int(np.floor(y)), int(np.floor(xx))
            y1, x1 = min(y0 + 1, 2), min(x0 + 1, 3)
            dy, dx = y - y0, xx - x0
            expected[:, i, j] = ((x[:, y0, x0] * (1 - dx) + x[:, y0, x1] * dx) * (1 - dy)
                                 + (x[:, y1, x0] * (1 - dx) + x[:, y1, x1] * dx) * dy)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_integer_resize_truncates_and_out_dtype_changes_the_result_type() -> None:
    out = run("image.resize1d", row(0, 3, dtype="int32"), size=[4], coordinate_transformation_mode="align_corners")
    assert out.dtype == np.int32 and out.ravel().tolist() == [0, 1, 2, 3]
    out = run("image.resize1d", row(0, 1, dtype="int32"), size=[3], out_dtype="float32",
              coordinate_transformation_mode="align_corners")
    assert out.dtype == np.float32 and out.ravel().tolist() == [0, 0.5, 1]


def test_resize_types_follow_layout_and_keep_unknown_batch() -> None:
    assert infer("image.resize2d", TensorType((ANY, 3, 4, 5), F32), size=[8, 9]) == TensorType((ANY, 3, 8, 9), F32)
    assert infer("image.resize2d", TensorType((1, 4, 5, 3), "uint8"), size=[8, 9], layout="NHWC") == TensorType(
        (1, 8, 9, 3), "uint8")
    assert infer("image.resize1d", TensorType((1, 7, 2), F32), size=[3], layout="NWC", out_dtype="float64") == (
        TensorType((1, 3, 2), "float64"))
    assert infer("image.resize3d", TensorType((1, 2, 3, 4, 5), F32), size=[6, 7, 8]) == TensorType(
        (1, 2, 6, 7, 8), F32)


def test_resize_type_errors_name_the_problem() -> None:
    x = TensorType((1, 3, 4, 5), F32)
    with pytest.raises(TypeRelationError, match="image.resize2d expects 4-D data"):
        infer("image.resize2d", TensorType((3, 4, 5), F32), size=[2, 2])
    with pytest.raises(TypeRelationError, match="size must be 2 positive integers"):
        infer("image.resize2d", x, size=[2])
    with pytest.raises(TypeRelationError, match="unsupported layout"):
        infer("image.resize2d", x, size=[2, 2], layout="NCW")
    with pytest.raises(TypeRelationError, match="unsupported method 'bilinear'"):
        infer("image.resize2d", x, size=[2, 2], method="bilinear")
    with pytest.raises(TypeRelationError, match="unsupported coordinate_transformation_mode"):
        infer("image.resize2d", x, size=[2, 2], coordinate_transformation_mode="corners")
    with pytest.raises(TypeRelationError, match="unsupported rounding_method"):
        infer("image.resize2d", x, size=[2, 2], rounding_method="trunc")
    with pytest.raises(TypeRelationError, match="roi must have 4 values"):
        infer("image.resize2d", x, size=[2, 2], roi=[0.0, 1.0], coordinate_transformation_mode="tf_crop_and_resize")
    with pytest.raises(TypeRelationError, match="unknown out_dtype"):
        infer("image.resize2d", x, size=[2, 2], out_dtype="float8")


def test_resize_attrs_and_pattern_follow_tvm() -> None:
    op = ops.get("image.resize2d")
    assert op.pattern == OpPattern.INJECTIVE
    defaults = {s.name: s.default for s in op.attrs}
    assert defaults["layout"] == "NCHW" and defaults["method"] == "linear"
    assert defaults["coordinate_transformation_mode"] == "half_pixel" and defaults["rounding_method"] == "round"
    assert defaults["cubic_alpha"] == -0.5 and defaults["cubic_exclude"] == 0
    assert ops.get("image.resize1d").make_attrs({"size": [2]})["layout"] == "NCW"
    assert ops.get("image.resize3d").make_attrs({"size": [2, 2, 2]})["layout"] == "NCDHW"


# --- text round trip and end to end --------------------------------------------------------------

RESIZE_MODEL = """
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 3, 4), float32]) -> Tensor[(1, 2, 6, 3), float32] {
  %0 = image.resize2d(%x, size=[6, 3], roi=[0f, 0f, 0f, 0f], method="cubic", coordinate_transformation_mode="align_corners", rounding_method="", cubic_alpha=-0.75f, cubic_exclude=1, out_dtype="");
  nn.relu(%0)
}
"""


def test_resize_attrs_round_trip_through_the_printer() -> None:
    first = parse(RESIZE_MODEL)
    text = astext(first)
    assert 'coordinate_transformation_mode="align_corners"' in text and "cubic_alpha=-0.75f" in text
    again = parse(text)
    call = again["main"].body.args[0]
    assert call.attrs["cubic_exclude"] == 1 and tuple(call.attrs["roi"]) == (0.0, 0.0, 0.0, 0.0)
    assert astext(again) == text


@pytest.mark.parametrize(("call", "shape"), [
    ('image.resize1d(%x, size=[5], roi=[0.25f, 0.75f], layout="NWC", method="nearest_neighbor", '
     'coordinate_transformation_mode="tf_crop_and_resize", rounding_method="floor", extrapolation_value=2.5f)',
     "(1, 4, 3)"),
    ('image.resize3d(%x, size=[2, 3, 4], layout="NDHWC", coordinate_transformation_mode="asymmetric", '
     'out_dtype="float64")', "(1, 2, 2, 2, 3)"),
])
def test_resize1d_and_resize3d_attrs_round_trip(call: str, shape: str) -> None:
    text = f'#[version = "0.0.5"]\ndef @main(%x: Tensor[{shape}, float32]) {{\n  {call}\n}}\n'
    printed = astext(parse(text))
    assert astext(parse(printed)) == printed
    for fragment in call.replace("%x, ", "").split(", ")[1:]:
        assert fragment.rstrip(")") in printed


def _compile_and_run(text: str, inputs: dict[str, np.ndarray], tmp_path: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    from compiler.driver import export, lower
    from compiler.runtime.interpreter import run_main
    from compiler.runtime.module import CompiledModule

    mod = parse(text)
    expected = run_main(mod, inputs)
    export(lower(mod), tmp_path, text)
    result = CompiledModule(tmp_path).run(inputs)
    return list(result.outputs), expected


def test_resize_model_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    x = np.random.default_rng(1).uniform(-1, 1, (1, 2, 3, 4)).astype(F32)
    actual, expected = _compile_and_run(RESIZE_MODEL, {"x": x}, tmp_path)
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-5, atol=1e-6)


# --- crop_and_resize ------------------------------------------------------------------------------


def crop(x: np.ndarray, boxes: list[list[float]], indices: list[int], **attrs: object) -> np.ndarray:
    return run("image.crop_and_resize", x, np.array(boxes, dtype=F32), np.array(indices, dtype="int32"), **attrs)


def test_crop_and_resize_maps_box_corners_onto_the_crop() -> None:
    x = np.arange(9, dtype=F32).reshape(1, 1, 3, 3)
    whole = crop(x, [[0, 0, 1, 1]], [0], crop_size=[3, 3])
    np.testing.assert_array_equal(whole, x)
    quarter = crop(x, [[0, 0, 0.5, 0.5]], [0], crop_size=[2, 2])
    np.testing.assert_array_equal(quarter[0, 0], [[0, 1], [3, 4]])


def test_crop_and_resize_extrapolates_and_uses_the_centre_for_size_one() -> None:
    x = np.arange(9, dtype=F32).reshape(1, 1, 3, 3)
    # in_y = -1 + y = -1, 0, 1; a width of 1 samples the box's centre column x = 1.
    out = crop(x, [[-0.5, 0, 0.5, 1]], [0], crop_size=[3, 1], extrapolation_value=-5.0)
    assert out.ravel().tolist() == [-5, 1, 4]


def test_crop_and_resize_nearest_rounds_halves_up_and_reads_the_indexed_image() -> None:
    x = np.stack([np.arange(9, dtype=F32).reshape(1, 3, 3), 100 + np.arange(9, dtype=F32).reshape(1, 3, 3)])
    # in = 0.5 * y: rows/cols 0 and 0.5 -> 0 and 1.
    near = crop(x, [[0, 0, 0.25, 0.25]], [1], crop_size=[2, 2], method="nearest_neighbor")
    assert near[0, 0].tolist() == [[100, 101], [103, 104]]
    bilinear = crop(x, [[0, 0, 0.25, 0.25]], [0], crop_size=[2, 2])
    assert bilinear[0, 0].tolist() == [[0, 0.5], [1.5, 2]]


def test_crop_and_resize_types_and_errors() -> None:
    x = TensorType((2, 5, 6, 3), F32)
    boxes, ind = TensorType((ANY, 4), F32), TensorType((7,), "int32")
    assert infer("image.crop_and_resize", x, boxes, ind, crop_size=[2, 3], layout="NHWC") == TensorType(
        (7, 2, 3, 3), F32)
    with pytest.raises(TypeRelationError, match="float boxes of shape"):
        infer("image.crop_and_resize", x, TensorType((7, 3), F32), ind, crop_size=[2, 3])
    with pytest.raises(TypeRelationError, match="disagree on the number of boxes"):
        infer("image.crop_and_resize", x, TensorType((6, 4), F32), ind, crop_size=[2, 3])
    with pytest.raises(TypeRelationError, match="integer box_indices"):
        infer("image.crop_and_resize", x, boxes, TensorType((7,), F32), crop_size=[2, 3])
    with pytest.raises(TypeRelationError, match="unsupported method 'linear'"):
        infer("image.crop_and_resize", x, boxes, ind, crop_size=[2, 3], method="linear")


# --- grid_sample and affine_grid ------------------------------------------------------------------


def sample_at(data: np.ndarray, points: list[tuple[float, float]], **attrs: object) -> list[float]:
    """grid_sample of an NCHW image at normalized (x, y) points laid out as a 1 x len row."""
    grid = np.array(points, dtype=F32).T.reshape(1, 2, 1, len(points))
    return run("image.grid_sample", data, grid, **attrs).ravel().tolist()


def test_grid_sample_align_corners_maps_the_extremes() -> None:
    x = np.array([[1, 2], [3, 4]], dtype=F32).reshape(1, 1, 2, 2)
    assert sample_at(x, [(0, 0), (-1, -1), (1, 1)]) == [2.5, 1, 4]
    # Without align_corners -1 is the outer edge: (-0.5, -0.5), a quarter of pixel (0, 0).
    assert sample_at(x, [(0, 0), (-1, -1)], align_corners=False) == [2.5, 0.25]
    assert sample_at(x, [(-1, -1)], align_corners=False, padding_mode="border") == [1]


def test_grid_sample_padding_modes_outside_the_image() -> None:
    x = np.array([0, 10, 40], dtype=F32).reshape(1, 1, 1, 3)
    # g = 2 -> x = 3: reflected at 2 back to 1, clipped to 2, or zero.
    assert sample_at(x, [(2.0, -1.0)], padding_mode="reflection") == [10]
    assert sample_at(x, [(2.0, -1.0)], padding_mode="border") == [40]
    assert sample_at(x, [(2.0, -1.0)], padding_mode="zeros") == [0]
    # Far away reflections keep folding: x = 7 is 3 spans of 2 plus 1, an odd count: 2 - 1 = 1.
    assert sample_at(x, [(6.0, -1.0)], padding_mode="reflection") == [10]


def test_grid_sample_nearest_rounds_halves_to_even() -> None:
    x = np.array([0, 10, 40], dtype=F32).reshape(1, 1, 1, 3)
    # x = 0.5 -> 0 and x = 1.5 -> 2.
    assert sample_at(x, [(-0.5, -1.0), (0.5, -1.0)], method="nearest") == [0, 40]


def test_grid_sample_bicubic_uses_pytorch_weights() -> None:
    x = np.array([0, 1, 0], dtype=F32).reshape(1, 1, 1, 3)
    # x = 0.5: taps -1..2 weigh (far(1.5), near(0.5), near(0.5), far(1.5)); near(0.5) = 0.59375.
    assert sample_at(x, [(-0.5, -1.0)], method="bicubic") == pytest.approx([0.59375])


def test_grid_sample_3d_trilinear_at_the_centre_averages_the_cube() -> None:
    x = np.arange(8, dtype=F32).reshape(1, 1, 2, 2, 2)
    grid = np.zeros((1, 3, 1, 1, 1), dtype=F32)
    out = run("image.grid_sample", x, grid, layout="NCDHW")
    assert out.ravel().tolist() == [3.5]


def test_grid_sample_types_and_errors() -> None:
    assert infer("image.grid_sample", TensorType((ANY, 3, 4, 5), F32), TensorType((2, 2, 7, 8), F32)) == TensorType(
        (2, 3, 7, 8), F32)
    with pytest.raises(TypeRelationError, match="grid must have shape"):
        infer("image.grid_sample", TensorType((2, 3, 4, 5), F32), TensorType((2, 3, 7, 8), F32))
    with pytest.raises(TypeRelationError, match="unsupported layout 'NHWC'"):
        infer("image.grid_sample", TensorType((2, 3, 4, 5), F32), TensorType((2, 2, 7, 8), F32), layout="NHWC")
    with pytest.raises(TypeRelationError, match="unsupported method 'bicubic'"):
        infer("image.grid_sample", TensorType((1, 1, 2, 2, 2), F32), TensorType((1, 3, 1, 1, 1), F32),
              layout="NCDHW", method="bicubic")
    with pytest.raises(TypeRelationError, match="disagree on the batch"):
        infer("image.grid_sample", TensorType((2, 3, 4, 5), F32), TensorType((3, 2, 7, 8), F32))


def test_affine_grid_spans_minus_one_to_one_and_applies_theta() -> None:
    theta = np.array([[[1, 0, 0], [0, 1, 0]], [[2, 0, 0.5], [0, 0, 1]]], dtype=F32)
    out = run("image.affine_grid", theta, target_shape=[2, 3])
    np.testing.assert_allclose(out[0, 0], [[-1, 0, 1], [-1, 0, 1]], atol=1e-6)
    np.testing.assert_allclose(out[0, 1], [[-1, -1, -1], [1, 1, 1]], atol=1e-6)
    np.testing.assert_allclose(out[1, 0], [[-1.5, 0.5, 2.5]] * 2, atol=1e-6)
    np.testing.assert_allclose(out[1, 1], np.ones((2, 3)))
    # TVM's step is (2 - 1e-7)/(n - 1): the last point falls just short of 1.
    assert out[0, 0, 0, 2] < 1.0


def test_affine_grid_types_and_errors() -> None:
    assert infer("image.affine_grid", TensorType((ANY, 2, 3), F32), target_shape=[4, 5]) == TensorType(
        (ANY, 2, 4, 5), F32)
    with pytest.raises(TypeRelationError, match="shape \\(N, 2, 3\\)"):
        infer("image.affine_grid", TensorType((1, 3, 3), F32), target_shape=[4, 5])
    with pytest.raises(TypeRelationError, match="greater than 1"):
        infer("image.affine_grid", TensorType((1, 2, 3), F32), target_shape=[1, 5])


SAMPLING_MODEL = """
#[version = "0.0.5"]
def @main(%theta: Tensor[(1, 2, 3), float32], %x: Tensor[(1, 3, 4, 5), float32], %boxes: Tensor[(2, 4), float32], %ind: Tensor[(2), int32]) {
  %0 = image.affine_grid(%theta, target_shape=[3, 4]);
  %1 = image.grid_sample(%x, %0, method="bicubic", padding_mode="reflection", align_corners=False);
  %2 = image.crop_and_resize(%x, %boxes, %ind, crop_size=[2, 3], method="nearest_neighbor", extrapolation_value=-1f);
  (%1, %2)
}
"""


def test_sampling_attrs_round_trip_through_the_printer() -> None:
    text = astext(parse(SAMPLING_MODEL))
    assert 'padding_mode="reflection"' in text and "align_corners=False" in text and "target_shape=[3, 4]" in text
    assert "extrapolation_value=-1.0f" in text and 'method="nearest_neighbor"' in text
    assert astext(parse(text)) == text


def test_sampling_model_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    inputs = {
        "theta": rng.uniform(-1.5, 1.5, (1, 2, 3)).astype(F32),
        "x": rng.uniform(-1, 1, (1, 3, 4, 5)).astype(F32),
        "boxes": np.array([[0.1, -0.2, 0.9, 0.7], [0.5, 0.5, 1.3, 1.0]], dtype=F32),
        "ind": np.zeros(2, dtype="int32"),
    }
    actual, expected = _compile_and_run(SAMPLING_MODEL, inputs, tmp_path)
    assert len(actual) == 2
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
