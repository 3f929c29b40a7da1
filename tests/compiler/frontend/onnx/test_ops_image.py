"""compiler.frontend.onnx.ops_image: Resize and GridSample against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import UnsupportedError
from compiler.frontend.onnx import from_onnx
from tests.compiler.frontend.onnx.onnx_models import assert_matches_ort, single_node

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


def test_resize_with_antialias_is_unsupported() -> None:
    init = {"roi": EMPTY, "scales": np.array([1, 1, 0.5, 0.5], dtype="float32")}
    with pytest.raises(UnsupportedError, match="antialias"):
        from_onnx(single_node("Resize", {"x": X}, initializers=init, opset=19, mode="linear", antialias=1))


@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_bilinear(align_corners: int) -> None:
    grid = RNG.uniform(-1, 1, size=(1, 3, 4, 2)).astype("float32")
    m = single_node("GridSample", {"x": X, "g": grid}, opset=20, align_corners=align_corners)
    assert_matches_ort(m, {"x": X, "g": grid}, rtol=1e-4, atol=1e-5)
