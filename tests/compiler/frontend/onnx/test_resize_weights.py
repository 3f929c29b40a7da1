"""compiler.frontend.onnx.resize_weights: Resize along one axis as a weight matrix."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.frontend.onnx.resize_weights import axis_weights


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_scale_one_with_half_pixel_is_the_identity(mode: str) -> None:
    weights, outside = axis_weights(6, 6, 1.0, mode=mode, transform="half_pixel")
    np.testing.assert_allclose(weights, np.eye(6), atol=1e-12)
    assert not outside.any()


@pytest.mark.parametrize(("mode", "antialias"), [("linear", False), ("cubic", False), ("linear", True), ("cubic", True)])
def test_every_row_sums_to_one(mode: str, antialias: bool) -> None:
    weights, _ = axis_weights(9, 4, 0.45, mode=mode, transform="half_pixel", antialias=antialias)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0)


def test_linear_upsampling_by_two_interpolates_between_neighbours() -> None:
    weights, _ = axis_weights(2, 4, 2.0, mode="linear", transform="asymmetric")
    np.testing.assert_allclose(weights @ np.array([0.0, 8.0]), [0.0, 4.0, 8.0, 8.0])


def test_antialias_widens_the_kernel_when_downscaling() -> None:
    plain, _ = axis_weights(8, 2, 0.25, mode="linear", transform="half_pixel")
    wide, _ = axis_weights(8, 2, 0.25, mode="linear", transform="half_pixel", antialias=True)
    assert (plain[0] > 0).sum() == 2
    assert (wide[0] > 0).sum() > 2


def test_crop_and_resize_marks_rows_mapped_outside_the_input() -> None:
    weights, outside = axis_weights(4, 3, 0.75, mode="linear", transform="tf_crop_and_resize", roi=(-0.5, 0.5))
    assert outside.tolist() == [True, False, False]
    assert not weights[0].any()
