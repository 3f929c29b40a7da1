"""ONNX image ops: Resize (onto image.resize1d/2d/3d where they compute what ONNX does, else
as constant weight matrices per axis, resize_weights.py) and GridSample (image.grid_sample)."""

from __future__ import annotations

import math

import numpy as np

from compiler.frontend.onnx.context import Converted, NodeContext
from compiler.frontend.onnx.registry import converter
from compiler.frontend.onnx.resize_weights import axis_weights
from compiler.ir.expr import Expr

_RESIZE_OPS = {1: "image.resize1d", 2: "image.resize2d", 3: "image.resize3d"}
_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
_METHODS = {"nearest": "nearest_neighbor", "linear": "linear", "cubic": "cubic"}


@converter("Resize", (13, 18, 19))
def _resize(ctx: NodeContext) -> Converted:
    shape = ctx.static_shape(0)
    rank = len(shape)
    axes = [a + rank if a < 0 else a for a in (ctx.ints_attr("axes") or list(range(rank)))]
    policy = ctx.str_attr("keep_aspect_ratio_policy", "stretch")
    sizes, scales = list(shape), [1.0] * rank
    if ctx.has_input(3):
        given = [int(v) for v in np.asarray(ctx.const_input(3, "sizes")).reshape(-1)]
        for axis, size in zip(axes, given):
            sizes[axis], scales[axis] = size, size / shape[axis]
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise ctx.unsupported(f"keep_aspect_ratio_policy {policy!r}")
            chosen = (min if policy == "not_larger" else max)(scales[a] for a in axes)
            for axis in axes:
                # ONNX rounds half up here.
                scales[axis], sizes[axis] = chosen, int(chosen * shape[axis] + 0.5)
    elif ctx.has_input(2):
        given_scales = [float(v) for v in np.asarray(ctx.const_input(2, "scales")).reshape(-1)]
        for axis, scale in zip(axes, given_scales):
            sizes[axis], scales[axis] = int(math.floor(shape[axis] * scale)), scale
    else:
        raise ctx.unsupported("neither scales nor sizes given")
    mode = ctx.str_attr("mode", "nearest")
    if mode not in _METHODS:
        raise ctx.unsupported(f"mode {mode!r}")
    transform = ctx.str_attr("coordinate_transformation_mode", "half_pixel")
    roi = [0.0] * rank + [1.0] * rank
    if transform == "tf_crop_and_resize":
        values = [float(v) for v in np.asarray(ctx.const_input(1, "roi")).reshape(-1)]
        for k, axis in enumerate(axes):
            roi[axis], roi[rank + axis] = values[k], values[len(axes) + k]
    spatial = rank - 2
    by_op = (
        spatial in _RESIZE_OPS and sizes[:2] == list(shape[:2]) and policy == "stretch"
        and not ctx.int_attr("antialias", 0) and transform != "half_pixel_symmetric"
        # Our resize maps coordinates with out/in; ONNX with the given scale, which differs when
        # the output size was rounded down.
        and all(sizes[a] == scales[a] * shape[a] for a in range(2, rank))
        # At integer scales our nearest/asymmetric resize floors whatever the rounding asks, as
        # TVM's does.
        and not (mode == "nearest" and transform == "asymmetric"
                 and ctx.str_attr("nearest_mode", "round_prefer_floor") != "floor")
    )
    if not by_op:
        return _resize_by_matrices(ctx, shape, sizes, scales, roi, mode, transform)
    return ctx.op(
        _RESIZE_OPS[spatial], ctx.input(0), size=tuple(sizes[2:]),
        roi=tuple(roi[2:rank] + roi[rank + 2:]) if transform == "tf_crop_and_resize" else None,
        layout=_LAYOUTS[spatial], method=_METHODS[mode], coordinate_transformation_mode=transform,
        rounding_method=ctx.str_attr("nearest_mode", "round_prefer_floor") if mode == "nearest" else "",
        cubic_alpha=ctx.float_attr("cubic_coeff_a", -0.75), cubic_exclude=ctx.int_attr("exclude_outside", 0),
        extrapolation_value=ctx.float_attr("extrapolation_value", 0.0),
    )


def _resize_by_matrices(ctx: NodeContext, shape: tuple[int, ...], sizes: list[int], scales: list[float],
                        roi: list[float], mode: str, transform: str) -> Expr:
    """Resize as one product per resized axis with its constant weight matrix (resize_weights.py)."""
    x = ctx.input(0)
    dtype = ctx.dtype(0)
    if not dtype.startswith("float"):
        raise ctx.unsupported(f"resizing {dtype} data where our resize op cannot follow ONNX's coordinates")
    rank = len(shape)
    fill = ctx.float_attr("extrapolation_value", 0.0)
    current = list(shape)
    for axis in range(rank):
        unchanged = (sizes[axis] == shape[axis] and math.isclose(scales[axis], 1.0)
                     and (roi[axis], roi[rank + axis]) == (0.0, 1.0))
        if unchanged:
            continue
        weights, outside = axis_weights(
            shape[axis], sizes[axis], scales[axis], mode=mode, transform=transform,
            nearest_mode=ctx.str_attr("nearest_mode", "round_prefer_floor"),
            cubic_a=ctx.float_attr("cubic_coeff_a", -0.75), exclude_outside=bool(ctx.int_attr("exclude_outside", 0)),
            antialias=bool(ctx.int_attr("antialias", 0)), roi=(roi[axis], roi[rank + axis]),
        )
        # The axis moved last, the product over it, and moved back.
        order = [a for a in range(rank) if a != axis] + [axis]
        moved = ctx.op("transpose", x, axes=tuple(order)) if axis != rank - 1 else x
        rows = int(np.prod([current[a] for a in order[:-1]]))
        flat = ctx.op("reshape", moved, newshape=(rows, shape[axis]))
        out = ctx.op("nn.dense", flat, ctx.const(weights.astype(dtype)), units=sizes[axis])
        if outside.any():
            out = ctx.op("add", out, ctx.const((outside * fill).astype(dtype)))
        current[axis] = sizes[axis]
        out = ctx.op("reshape", out, newshape=tuple(current[a] for a in order))
        inverse = tuple(int(i) for i in np.argsort(order))
        x = ctx.op("transpose", out, axes=inverse) if axis != rank - 1 else out
    return x


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
