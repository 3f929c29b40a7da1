"""ONNX image ops: Resize (onto image.resize1d/2d/3d) and GridSample (image.grid_sample)."""

from __future__ import annotations

import math

import numpy as np

from compiler.frontend.onnx.context import Converted, NodeContext
from compiler.frontend.onnx.registry import converter

_RESIZE_OPS = {1: "image.resize1d", 2: "image.resize2d", 3: "image.resize3d"}
_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
_METHODS = {"nearest": "nearest_neighbor", "linear": "linear", "cubic": "cubic"}


@converter("Resize", (13, 18, 19))
def _resize(ctx: NodeContext) -> Converted:
    shape = ctx.static_shape(0)
    rank = len(shape)
    spatial = rank - 2
    if spatial not in _RESIZE_OPS:
        raise ctx.unsupported(f"resizing a rank-{rank} tensor")
    if ctx.int_attr("antialias", 0):
        raise ctx.unsupported("antialias")
    if ctx.str_attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise ctx.unsupported("keep_aspect_ratio_policy other than stretch")
    axes = ctx.ints_attr("axes") or list(range(rank))
    axes = [a + rank if a < 0 else a for a in axes]
    sizes = list(shape)
    if ctx.has_input(3):
        given = [int(v) for v in np.asarray(ctx.const_input(3, "sizes")).reshape(-1)]
        for axis, size in zip(axes, given):
            sizes[axis] = size
    elif ctx.has_input(2):
        scales = [float(v) for v in np.asarray(ctx.const_input(2, "scales")).reshape(-1)]
        for axis, scale in zip(axes, scales):
            sizes[axis] = int(math.floor(shape[axis] * scale))
    else:
        raise ctx.unsupported("neither scales nor sizes given")
    if sizes[:2] != list(shape[:2]):
        raise ctx.unsupported("resizing the batch or channel axis")
    mode = ctx.str_attr("mode", "nearest")
    transform = ctx.str_attr("coordinate_transformation_mode", "half_pixel")
    if transform == "half_pixel_symmetric":
        raise ctx.unsupported("coordinate_transformation_mode half_pixel_symmetric")
    roi = None
    if transform == "tf_crop_and_resize":
        values = [float(v) for v in np.asarray(ctx.const_input(1, "roi")).reshape(-1)]
        half = len(values) // 2
        roi = tuple(values[2:half] + values[half + 2:])
    return ctx.op(
        _RESIZE_OPS[spatial], ctx.input(0), size=tuple(sizes[2:]), roi=roi, layout=_LAYOUTS[spatial],
        method=_METHODS[mode], coordinate_transformation_mode=transform,
        rounding_method=ctx.str_attr("nearest_mode", "round_prefer_floor") if mode == "nearest" else "",
        cubic_alpha=ctx.float_attr("cubic_coeff_a", -0.75), cubic_exclude=ctx.int_attr("exclude_outside", 0),
        extrapolation_value=ctx.float_attr("extrapolation_value", 0.0),
    )


_GRID_METHODS = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest", "bicubic": "bicubic",
                 "cubic": "bicubic"}


@converter("GridSample", (16, 20, 22))
def _grid_sample(ctx: NodeContext) -> Converted:
    if ctx.rank(0) != 4:
        raise ctx.unsupported("grid sampling of other than 4-D data")
    mode = ctx.str_attr("mode", "linear" if ctx.since >= 20 else "bilinear")
    # ONNX's grid is (N, H, W, 2); ours takes the coordinate axis second.
    grid = ctx.op("transpose", ctx.input(1), axes=(0, 3, 1, 2))
    return ctx.op("image.grid_sample", ctx.input(0), grid, method=_GRID_METHODS[mode],
                  padding_mode=ctx.str_attr("padding_mode", "zeros"),
                  align_corners=bool(ctx.int_attr("align_corners", 0)))
