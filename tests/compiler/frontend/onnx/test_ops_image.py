"""compiler.frontend.onnx.ops_image: Resize and GridSample against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx import from_onnx
from tests.compiler.frontend.onnx.onnx_models import assert_matches_ort, interpret, single_node

RNG = np.random.default_rng(11)
X = RNG.standard_normal((1, 2, 4, 5)).astype("float32")
EMPTY = np.array([], dtype="float32")


@pytest.mark.parametrize(("mode", "transform"), [
    ("nearest", "asymmetric"), ("linear", "half_pixel"), ("linear", "align_corners"), ("cubic", "half_pixel"),
])
def test_resize_to_sizes(mode: str, transform: str) -> None:
    init = {"roi": EMPTY, "scales": EMPTY, "sizes": np.array([1, 2, 8, 7], dtype="int64")}
    m = single_node("Resize", {"x": X}, initializers=init, opset=19, mode=mode,
                    coordinate_transformation_mode=transform)
    assert_matches_ort(m, {"x": X}, rtol=1e-4, atol=1e-5)


def test_resize_by_integer_scales() -> None:
    init = {"roi": EMPTY, "scales": np.array([1, 1, 2, 2], dtype="float32")}
    assert_matches_ort(single_node("Resize", {"x": X}, initializers=init, opset=19, mode="nearest"), {"x": X})


@pytest.mark.parametrize(("mode", "attrs"), [
    ("linear", {}), ("cubic", {}), ("linear", {"antialias": 1}), ("cubic", {"antialias": 1}),
    ("linear", {"coordinate_transformation_mode": "half_pixel_symmetric"}),
    ("cubic", {"exclude_outside": 1, "cubic_coeff_a": -0.5}),
])
def test_resize_by_non_integer_scales_maps_coordinates_with_the_given_scale(mode: str, attrs: dict) -> None:
    # 5 * 0.7 = 3.5 rounds down to 3 outputs, still mapped with the scale 0.7 (not 3 / 5).
    init = {"roi": EMPTY, "scales": np.array([1, 1, 1.6, 0.7], dtype="float32")}
    m = single_node("Resize", {"x": X}, initializers=init, opset=19, mode=mode, **attrs)
    assert_matches_ort(m, {"x": X}, rtol=1e-4, atol=1e-5)


def test_align_corners_by_a_rounded_scale_follows_the_onnx_reference() -> None:
    # ONNX's reference divides by the unrounded output length (0.7 * 5 - 1), onnxruntime by the
    # rounded one (3 - 1); the backend tests follow the reference, and so do we.
    init = {"roi": EMPTY, "scales": np.array([1, 1, 1.6, 0.7], dtype="float32")}
    m = single_node("Resize", {"x": X}, initializers=init, opset=19, mode="cubic",
                    coordinate_transformation_mode="align_corners")
    (want,) = ReferenceEvaluator(m).run(None, {"x": X})
    np.testing.assert_allclose(interpret(m, {"x": X})[0], want, rtol=1e-5, atol=1e-5)


def test_resize_keeping_the_aspect_ratio_along_chosen_axes() -> None:
    init = {"roi": EMPTY, "scales": EMPTY, "sizes": np.array([3, 9], dtype="int64")}
    m = single_node("Resize", {"x": X}, initializers=init, opset=19, mode="nearest", axes=[2, 3],
                    keep_aspect_ratio_policy="not_larger")
    assert_matches_ort(m, {"x": X})


def test_resize_of_the_channel_axis() -> None:
    init = {"roi": EMPTY, "scales": np.array([3.0], dtype="float32")}
    m = single_node("Resize", {"x": X}, initializers=init, opset=19, mode="linear", axes=[1])
    assert_matches_ort(m, {"x": X}, rtol=1e-5, atol=1e-6)


def test_nearest_asymmetric_resize_rounds_as_its_nearest_mode_asks() -> None:
    init = {"roi": EMPTY, "scales": np.array([1, 1, 3, 3], dtype="float32")}
    m = single_node("Resize", {"x": X}, initializers=init, opset=19, mode="nearest",
                    coordinate_transformation_mode="asymmetric", nearest_mode="round_prefer_ceil")
    assert_matches_ort(m, {"x": X})


def test_resize_of_integers_by_a_rounded_scale_is_unsupported() -> None:
    init = {"roi": EMPTY, "scales": np.array([1, 1, 0.7, 0.7], dtype="float32")}
    ints = X.astype("int32")
    with pytest.raises(UnsupportedError, match="resizing int32 data"):
        from_onnx(single_node("Resize", {"x": ints}, initializers=init, opset=19, mode="nearest"))


@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_bilinear(align_corners: int) -> None:
    grid = RNG.uniform(-1, 1, size=(1, 3, 4, 2)).astype("float32")
    m = single_node("GridSample", {"x": X, "g": grid}, opset=20, align_corners=align_corners)
    assert_matches_ort(m, {"x": X, "g": grid}, rtol=1e-4, atol=1e-5)
