"""Image operators: image.resize1d/2d/3d, image.crop_and_resize, image.grid_sample,
image.affine_grid. All INJECTIVE, as in TVM: each output element reads a few input pixels.

Semantics follow TVM's topi image kernels, including their quirks:

* Source coordinates per `coordinate_transformation_mode` (half_pixel, align_corners,
  asymmetric, pytorch_half_pixel, tf_half_pixel_for_nn, tf_crop_and_resize with `roi`);
  nearest-neighbour indices per `rounding_method` ("" means round for align_corners, floor
  otherwise; floor/ceil add/subtract 1e-5; round halves away from zero), clamped to the image.
  resize2d's nearest_neighbor + asymmetric with an integer upscale factor uses integer
  division and ignores the rounding method (TVM's int-div shortcut); resize1d/3d do not.
* linear: lerp of the clamped neighbours; cubic: 4 clamped taps with TVM's spline weights
  (`cubic_alpha`), with `cubic_exclude` zeroing taps outside the image and renormalizing.
* tf_crop_and_resize returns `extrapolation_value` where a checked source coordinate lies
  outside [0, size-1]. TVM's resize3d checks only H and W (its depth check is overwritten),
  reads the depth roi from roi[2]/roi[5] and W from roi[0]/roi[3], and its cubic_exclude
  depth weights are the *width* weights masked against the height: all reproduced here.
* Where TVM divides by zero (align_corners or crop boxes with an output size of 1) we use the
  defined limit: coordinate 0 for align_corners, the box centre for crop_and_resize (TF's rule).

Coordinates and interpolation are computed in float64 (TVM uses float32), and coordinates are
formed so that every product is exact and only one division rounds: the compiled C (where gcc
may fuse a*b+c) then picks exactly the pixels the reference picks. Each formula is written once,
against a tiny arithmetic interface (`NumpyOps` for the reference over index grids, `LoopOps`
for the loop IR), so the two cannot drift apart; tests/compiler/ops/test_image.py checks the
formulas against values computed by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.common import check_arity, static_dims, tensor_arg
from compiler.ops.domain import Domain, Draw
from compiler.ops.kernels.common import place
from compiler.ops.layout import from_canonical, plain_positions, to_canonical
from compiler.ops.nn import result_dtype
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim as ShapeDim
from compiler.ops.shape_rules import ShapeArg, ShapeRule, dims, fill
from compiler.tir import expr as te
from compiler.tir.compute import Index, TensorView

F32 = "float32"
F64 = "float64"

METHODS = ("nearest_neighbor", "linear", "cubic")
MODES = (
    "half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
ROUNDINGS = ("", "round", "floor", "ceil", "round_prefer_floor", "round_prefer_ceil")
EPSILON = 1e-5  # TVM's nudge before floor/ceil rounding


# --- the arithmetic interface the formulas are written against ----------------------------------


class NumpyOps:
    """Evaluates a formula over numpy arrays of output coordinates (the reference)."""

    @staticmethod
    def f64(x: object) -> np.ndarray:
        return np.asarray(x, dtype=np.float64)

    @staticmethod
    def floor(x: np.ndarray) -> np.ndarray:
        return np.floor(x)

    @staticmethod
    def ceil(x: np.ndarray) -> np.ndarray:
        return np.ceil(x)

    @staticmethod
    def round(x: np.ndarray) -> np.ndarray:
        """Halves away from zero, like C's round (numpy's rounds them to even)."""
        t = np.trunc(x)
        return t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0.0)

    @staticmethod
    def nearbyint(x: np.ndarray) -> np.ndarray:
        return np.rint(x)

    @staticmethod
    def to_int(x: np.ndarray) -> np.ndarray:
        return np.asarray(x).astype(np.int64)

    @staticmethod
    def where(cond: object, a: object, b: object) -> np.ndarray:
        return np.where(cond, a, b)

    @staticmethod
    def minimum(a: object, b: object) -> np.ndarray:
        return np.minimum(a, b)

    @staticmethod
    def maximum(a: object, b: object) -> np.ndarray:
        return np.maximum(a, b)

    @staticmethod
    def both(a: object, b: object) -> np.ndarray:
        return np.logical_and(a, b)

    @staticmethod
    def either(a: object, b: object) -> np.ndarray:
        return np.logical_or(a, b)

    @staticmethod
    def abs(x: np.ndarray) -> np.ndarray:
        return np.abs(x)

    @staticmethod
    def eq(a: object, b: object) -> np.ndarray:
        return np.equal(a, b)

    @staticmethod
    def exp(x: np.ndarray) -> np.ndarray:
        return np.exp(x)


class LoopOps:
    """Builds the same formula as loop-IR expressions (the compiled code)."""

    @staticmethod
    def f64(x: te.ExprLike) -> te.PrimExpr:
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return te.const(float(x), F64)
        return te.cast(F64, x)

    @staticmethod
    def floor(x: te.PrimExpr) -> te.PrimExpr:
        return te.intrin("floor", x)

    @staticmethod
    def ceil(x: te.PrimExpr) -> te.PrimExpr:
        return te.intrin("ceil", x)

    @staticmethod
    def round(x: te.PrimExpr) -> te.PrimExpr:
        return te.intrin("round", x)

    @staticmethod
    def nearbyint(x: te.PrimExpr) -> te.PrimExpr:
        f = te.intrin("floor", x)
        d = x - f
        even = te.eq(te.intrin("floor", f * 0.5) * 2.0, f)
        return te.select(d > 0.5, f + 1.0, te.select(d < 0.5, f, te.select(even, f, f + 1.0)))

    @staticmethod
    def to_int(x: te.PrimExpr) -> te.PrimExpr:
        return te.cast("int32", x)

    @staticmethod
    def where(cond: te.ExprLike, a: te.ExprLike, b: te.ExprLike) -> te.PrimExpr:
        return te.select(cond, a, b)

    @staticmethod
    def minimum(a: te.ExprLike, b: te.ExprLike) -> te.PrimExpr:
        return te.minimum(a, b)

    @staticmethod
    def maximum(a: te.ExprLike, b: te.ExprLike) -> te.PrimExpr:
        return te.maximum(a, b)

    @staticmethod
    def both(a: te.ExprLike, b: te.ExprLike) -> te.PrimExpr:
        return te.logical_and(a, b)

    @staticmethod
    def either(a: te.ExprLike, b: te.ExprLike) -> te.PrimExpr:
        return te.logical_or(a, b)

    @staticmethod
    def abs(x: te.PrimExpr) -> te.PrimExpr:
        return te.intrin("fabs", x)

    @staticmethod
    def eq(a: te.ExprLike, b: te.ExprLike) -> te.PrimExpr:
        return te.eq(a, b)  # (PrimExpr's own == is identity)

    @staticmethod
    def exp(x: te.PrimExpr) -> te.PrimExpr:
        return te.intrin("exp", x)


Ops = type[NumpyOps] | type[LoopOps]
Load = Callable[[tuple[object, ...]], object]  # canonical index -> element (in the data dtype)


def _clamp(ops: Ops, i: object, size: int) -> object:
    return ops.maximum(ops.minimum(i, size - 1), 0)


def _product(values: Sequence[object]) -> object:
    out = values[0]
    for v in values[1:]:
        out = out * v  # type: ignore[operator]  # arrays or PrimExprs
    return out


def _sum(values: Sequence[object]) -> object:
    out = values[0]
    for v in values[1:]:
        out = out + v  # type: ignore[operator]  # arrays or PrimExprs
    return out


# --- resize ---------------------------------------------------------------------------------


def source_coordinate(ops: Ops, o: object, size: int, target: int, mode: str, start: float, end: float) -> object:
    """The float64 source coordinate of output position `o` (an int array or int expression)."""
    if mode == "half_pixel" or (mode == "pytorch_half_pixel" and target > 1):
        return ops.f64((2 * o + 1) * size - target) / float(2 * target)  # type: ignore[operator]
    if mode == "pytorch_half_pixel":
        return ops.f64(o) * 0.0
    if mode == "align_corners":
        if target == 1:
            return ops.f64(o) * 0.0
        return ops.f64(o * (size - 1)) / float(target - 1)  # type: ignore[operator]
    if mode == "asymmetric":
        return ops.f64(o * size) / float(target)  # type: ignore[operator]
    if mode == "tf_half_pixel_for_nn":
        return ops.f64((2 * o + 1) * size) / float(2 * target)  # type: ignore[operator]
    if mode == "tf_crop_and_resize":
        last = ops.f64(size - 1)  # `size` may be a run-time extent
        if target == 1:
            return ops.f64(o) * 0.0 + 0.5 * (start + end) * last
        return ops.f64(o) * ((end - start) * last) / float(target - 1) + start * last
    raise AssertionError(mode)


def nearest_index(ops: Ops, x: object, rounding: str) -> object:
    if rounding == "round":
        return ops.to_int(ops.round(x))
    if rounding == "round_prefer_floor":
        return ops.to_int(ops.ceil(x - 0.5))  # type: ignore[operator]
    if rounding == "round_prefer_ceil":
        return ops.to_int(ops.floor(x + 0.5))  # type: ignore[operator]
    if rounding == "floor":
        return ops.to_int(ops.floor(x + EPSILON))  # type: ignore[operator]
    if rounding == "ceil":
        return ops.to_int(ops.ceil(x - EPSILON))  # type: ignore[operator]
    raise AssertionError(rounding)


def cubic_weights(t: object, alpha: float) -> list[object]:
    t2 = t * t  # type: ignore[operator]
    t3 = t2 * t
    return [
        (t3 - t2 * 2.0 + t) * alpha,
        t3 * (alpha + 2) - t2 * (3 + alpha) + 1.0,
        t2 * (3 + 2 * alpha) - t3 * (alpha + 2) - t * alpha,
        t2 * alpha - t3 * alpha,
    ]


def _int_div_factor(size: int, target: int) -> int | None:
    """TVM's resize2d shortcut: an integer upscale factor divides instead of scaling."""
    if target % size != 0:
        return None
    factor = target // size
    return factor if factor <= 1 / (EPSILON * size + EPSILON) else None


def _int_div_applies(ops: Ops, size: object, target: int) -> object:
    """`_int_div_factor(size, target) is not None` for a size known at run time."""
    size = ops.maximum(size, 1)
    whole = ops.eq(te.as_expr(target) % size, 0)  # type: ignore[arg-type]  # only ever run-time sizes
    factor = ops.f64(te.as_expr(target) // size)  # type: ignore[arg-type]
    return ops.both(whole, factor <= ops.f64(1.0) / (ops.f64(size) * EPSILON + EPSILON))  # type: ignore[operator]


def _resize_value(
    ops: Ops, load: Load, n: object, c: object, outs: Sequence[object], sizes: Sequence[int],
    targets: Sequence[int], attrs: Attrs,
) -> object:
    """The float64 value of the output element at canonical (n, c, *outs)."""
    k = len(sizes)
    method, mode = attrs["method"], attrs["coordinate_transformation_mode"]
    roi = tuple(attrs["roi"] or (0.0,) * (2 * k))
    # Which roi entries each axis reads: TVM's 3-D version reads depth from [2]/[5], W from [0]/[3].
    roi_pairs = {1: [(0, 1)], 2: [(0, 2), (1, 3)], 3: [(2, 5), (1, 4), (0, 3)]}[k]
    coords = [
        source_coordinate(ops, o, s, t, mode, float(roi[a]), float(roi[b]))
        for o, s, t, (a, b) in zip(outs, sizes, targets, roi_pairs)
    ]
    taps: list[list[tuple[object, object]]] = []  # per axis: (index, weight) pairs
    if method == "nearest_neighbor":
        rounding = attrs["rounding_method"] or ("round" if mode == "align_corners" else "floor")
        for axis, (x, o, s, t) in enumerate(zip(coords, outs, sizes, targets)):
            index = nearest_index(ops, x, rounding)
            if k == 2 and mode == "asymmetric" and isinstance(s, int):
                factor = _int_div_factor(s, t)
                index = o // factor if factor is not None else index  # type: ignore[operator]
            elif k == 2 and mode == "asymmetric":
                # An input size known only at run time: the shortcut is taken where the run's
                # size makes it apply, as TVM's build for that size would.
                factor = ops.maximum(te.as_expr(t) // ops.maximum(s, 1), 1)  # type: ignore[arg-type]
                index = ops.where(_int_div_applies(ops, s, t), o // factor, index)  # type: ignore[operator]
            taps.append([(_clamp(ops, index, s), None)])
        value = ops.f64(load((n, c) + tuple(i for ((i, _),) in taps)))
    else:
        for x, s in zip(coords, sizes):
            fl = ops.floor(x)
            base, frac = ops.to_int(fl), x - fl  # type: ignore[operator]
            if method == "linear":
                taps.append([(_clamp(ops, base, s), 1.0 - frac), (_clamp(ops, base + 1, s), frac)])  # type: ignore[operator]
                continue
            weights = cubic_weights(frac, attrs["cubic_alpha"])
            taps.append([(_clamp(ops, base + (i - 1), s), w) for i, w in enumerate(weights)])  # type: ignore[operator]
        if method == "cubic" and attrs["cubic_exclude"]:
            _exclude_outside(ops, taps, coords, sizes)
        terms = []
        for combo in np.ndindex(*(len(t) for t in taps)):
            chosen = [taps[axis][j] for axis, j in enumerate(combo)]
            pixel = ops.f64(load((n, c) + tuple(i for i, _ in chosen)))
            terms.append(_product([pixel] + [w for _, w in chosen]))
        value = _sum(terms)
    if mode == "tf_crop_and_resize":
        checked = list(zip(coords, sizes))[-2:]  # TVM checks W (and H), never depth
        outside = None
        for x, s in checked:
            bad = ops.either(x < 0.0, x > ops.f64(s - 1))  # type: ignore[operator]
            outside = bad if outside is None else ops.either(outside, bad)
        value = ops.where(outside, ops.f64(attrs["extrapolation_value"]), value)
    return value


def _exclude_outside(ops: Ops, taps: list[list[tuple[object, object]]], coords: Sequence[object], sizes: Sequence[int]) -> None:
    """Zero the cubic weights of taps outside the image and renormalize each axis's weights."""
    k = len(sizes)
    bases = [ops.to_int(ops.floor(x)) for x in coords]

    def masked(axis_of_base: int, size: int, weights: list[object]) -> list[object]:
        base = bases[axis_of_base]
        return [
            ops.where(ops.either(base + (i - 1) < 0, base + i > size), 0.0, w)  # type: ignore[operator]
            for i, w in enumerate(weights)
        ]

    original = [[w for _, w in axis_taps] for axis_taps in taps]
    new = [masked(a, sizes[a], original[a]) for a in range(k)]
    if k == 3:
        # TVM's depth weights: the width weights, masked by the width base against the height.
        new[0] = masked(2, sizes[1], original[2])
    for axis in range(k):
        total = _sum(new[axis])
        taps[axis] = [(i, w / total) for (i, _), w in zip(taps[axis], new[axis])]  # type: ignore[operator]


_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


def _resize_layout(op: str, k: int, attrs: Attrs) -> tuple[int, ...]:
    return plain_positions(attrs["layout"], "NC" + _SPATIAL[k], op, "layout")


def _check_choice(op: str, attrs: Attrs, name: str, options: Sequence[str]) -> None:
    if attrs[name] not in options:
        raise TypeRelationError(f"{op}: unsupported {name} {attrs[name]!r}; expected one of {', '.join(map(repr, options))}")


def _floats(op: str, value: object, name: str) -> tuple[float, ...]:
    if value is None:
        return ()
    if not isinstance(value, (tuple, list)) or any(
        isinstance(v, bool) or not isinstance(v, (int, float)) for v in value
    ):
        raise TypeRelationError(f"{op}: {name} must be a list of numbers, got {value!r}")
    return tuple(float(v) for v in value)


def _sizes(op: str, value: object, name: str, k: int) -> tuple[int, ...]:
    if value is None or len(value) != k or any(v < 1 for v in value):  # type: ignore[arg-type]
        raise TypeRelationError(f"{op}: {name} must be {k} positive integers, got {value!r}")
    return tuple(value)  # type: ignore[arg-type]


def _numeric(op: str, ty: TensorType, what: str) -> None:
    if ty.dtype == "bool":
        raise TypeRelationError(f"{op}: {what} must be numeric, got {ty}")


def _resize_rel(op: str, k: int) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 1, op)
        data = tensor_arg(types, 0, op)
        if data.ndim != k + 2:
            raise TypeRelationError(f"{op} expects {k + 2}-D data, got {data}")
        _numeric(op, data, "data")
        positions = _resize_layout(op, k, attrs)
        size = _sizes(op, attrs["size"], "size", k)
        _check_choice(op, attrs, "method", METHODS)
        _check_choice(op, attrs, "coordinate_transformation_mode", MODES)
        _check_choice(op, attrs, "rounding_method", ROUNDINGS)
        roi = _floats(op, attrs["roi"], "roi")
        if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and roi and len(roi) != 2 * k:
            raise TypeRelationError(f"{op}: roi must have {2 * k} values, got {len(roi)}")
        canonical = to_canonical(data.shape, positions)
        out = from_canonical(canonical[:2] + size, positions)
        return TensorType(out, result_dtype(attrs, data, op))

    return rel


def _resize_shape(op: str, k: int) -> ShapeRule:
    """Batch and channels from the data, the spatial dims from `size`."""

    def rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
        positions = _resize_layout(op, k, attrs)
        canonical = to_canonical(dims(inputs[0], "data"), positions)
        return [fill(out_type, from_canonical((*canonical[:2], *attrs["size"]), positions))]

    return rule


def _resize_reference(op: str, k: int) -> Callable[[Sequence[np.ndarray], Attrs], np.ndarray]:
    def reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
        data = a[0]
        out_ty = _resize_rel(op, k)([TensorType(data.shape, str(data.dtype))], attrs)
        assert isinstance(out_ty, TensorType)
        positions = _resize_layout(op, k, attrs)
        x = np.transpose(data, positions)
        targets = tuple(attrs["size"])
        grid = np.indices(x.shape[:2] + targets)
        value = _resize_value(
            NumpyOps, lambda idx: x[idx], grid[0], grid[1], tuple(grid[2:]), x.shape[2:], targets, attrs
        )
        out = np.asarray(value).astype(out_ty.dtype)
        return np.transpose(out, np.argsort(positions))

    return reference


def _resize_compute(op: str, k: int) -> Callable[..., te.PrimExpr]:
    def compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> te.PrimExpr:
        (data,) = inputs
        assert isinstance(out_type, TensorType)
        positions = _resize_layout(op, k, attrs)
        # The input's spatial sizes enter the index arithmetic as they are: constants, or the
        # kernel's run-time extents for `?` dims (an image of any size resized to `size`).
        sizes = tuple(to_canonical(tuple(data.shape), positions)[2:])
        canon = to_canonical(tuple(idx), positions)

        def load(index: tuple[object, ...]) -> te.PrimExpr:
            return data[place(index, positions)]  # type: ignore[arg-type]  # PrimExprs

        value = _resize_value(LoopOps, load, canon[0], canon[1], canon[2:], sizes, tuple(attrs["size"]), attrs)
        return te.cast(out_type.dtype, value)  # type: ignore[arg-type]  # a PrimExpr

    return compute


def _resize_domain(k: int) -> Callable[[Draw], Sample]:
    layouts = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}[k]

    def draw(d: Draw) -> Sample:
        method = d.choice(METHODS)
        mode = d.choice(MODES)
        dtype = d.dtype(("float32", "float32", "float64", "float16") if method != "nearest_neighbor"
                        else ("float32", "float64", "float16", "int32", "uint8", "int8"))
        max_in = 4 if k == 3 else 6
        sizes = [d.integer(1, max_in) for _ in range(k)]
        targets = [d.choice((1, s, 2 * s, d.integer(1, 7))) for s in sizes]
        exclude = d.choice((0, 1)) if method == "cubic" else 0
        roi_values = (0.0, 0.25, 0.5, 1.0) if exclude else (-0.5, 0.0, 0.25, 0.5, 1.0, 1.25)
        if k == 3 and exclude:
            sizes[1] = max(sizes[1], sizes[2])  # TVM's depth weights test W's base against H
        n, c = d.integer(1, 2), d.integer(1, 3)
        layout = d.choice(layouts)
        positions = plain_positions(layout, "NC" + _SPATIAL[k], "draw", "layout")
        shape = from_canonical((n, c) + tuple(sizes), positions)
        attrs: dict[str, object] = {
            "size": targets, "layout": layout, "method": method, "coordinate_transformation_mode": mode,
        }
        if method == "nearest_neighbor":
            attrs["rounding_method"] = d.choice(ROUNDINGS)
        if method == "cubic":
            attrs["cubic_alpha"] = d.choice((-0.5, -0.75))
            attrs["cubic_exclude"] = exclude
        if mode == "tf_crop_and_resize":
            attrs["roi"] = [d.choice(roi_values) for _ in range(2 * k)]
            # A negative value has no unsigned result (C and numpy disagree on the conversion).
            attrs["extrapolation_value"] = d.choice((0.0, 2.5) if dtype.startswith("uint") else (0.0, -1.0, 2.5))
        if dtype.startswith("float") and d.boolean():
            attrs["out_dtype"] = d.choice(("float32", "float64"))
        return Sample((TensorType(shape, dtype),), attrs, int_high=100)

    return draw


_RESIZE_ATTRS = (
    AttrSpec("size", "ints", REQUIRED),
    AttrSpec("roi", "any", None, optional=True),
    AttrSpec("layout", "str", REQUIRED),  # replaced per op below
    AttrSpec("method", "str", "linear"),
    AttrSpec("coordinate_transformation_mode", "str", "half_pixel"),
    AttrSpec("rounding_method", "str", "round"),
    AttrSpec("cubic_alpha", "float", -0.5),
    AttrSpec("cubic_exclude", "int", 0),
    AttrSpec("extrapolation_value", "float", 0.0),
    AttrSpec("out_dtype", "dtype", ""),
)


def _resize_attrs(layout: str) -> tuple[AttrSpec, ...]:
    return tuple(AttrSpec("layout", "str", layout) if s.name == "layout" else s for s in _RESIZE_ATTRS)


def _resize_samples(k: int) -> tuple[Sample, ...]:
    chan_first = {1: "NCW", 2: "NCHW", 3: "NCDHW"}[k]
    chan_last = {1: "NWC", 2: "NHWC", 3: "NDHWC"}[k]
    small = (1, 2) + (3, 4, 5)[:k]
    last = (1,) + (3, 4, 5)[:k] + (2,)
    up = tuple(2 * s + 1 for s in small[2:])
    down = tuple(max(1, s - 2) for s in small[2:])
    double = tuple(2 * s for s in small[2:])
    roi = [0.1, 0.0, -0.2][:k] + [0.9, 1.2, 0.8][:k]
    samples = [
        Sample((TensorType(small, F32),), {"size": up, "layout": chan_first}),
        Sample((TensorType(small, F32),), {"size": down, "method": "nearest_neighbor", "rounding_method": ""}),
        Sample((TensorType(last, F32),), {"size": up, "layout": chan_last, "method": "cubic",
                                          "coordinate_transformation_mode": "align_corners"}),
        Sample((TensorType(small, "float64"),), {"size": up, "method": "cubic", "cubic_exclude": 1,
                                                 "cubic_alpha": -0.75,
                                                 "coordinate_transformation_mode": "pytorch_half_pixel"}),
        Sample((TensorType(small, F32),), {"size": up, "roi": roi, "extrapolation_value": -1.0,
                                           "coordinate_transformation_mode": "tf_crop_and_resize"}),
        Sample((TensorType(small, "uint8"),), {"size": double, "method": "nearest_neighbor",
                                               "coordinate_transformation_mode": "asymmetric"},
               int_high=255),
        Sample((TensorType(small, "int32"),), {"size": up, "method": "nearest_neighbor",
                                               "coordinate_transformation_mode": "tf_half_pixel_for_nn",
                                               "rounding_method": "round_prefer_ceil"}, int_high=50),
        Sample((TensorType(small, "float16"),), {"size": up, "out_dtype": "float32",
                                                 "coordinate_transformation_mode": "asymmetric"}),
        Sample((TensorType(small, F32),), {"size": (1,) * k, "method": "linear",
                                           "coordinate_transformation_mode": "align_corners"}),
    ]
    return tuple(samples)


for _k, _layout in ((1, "NCW"), (2, "NCHW"), (3, "NCDHW")):
    _name = f"image.resize{_k}d"
    register(
        OpDef(
            name=_name,
            num_inputs=1,
            type_rel=_resize_rel(_name, _k),
            pattern=OpPattern.INJECTIVE,
            reference=_resize_reference(_name, _k),
            compute=_resize_compute(_name, _k),
            shape_func=_resize_shape(_name, _k),
            attrs=_resize_attrs(_layout),
            samples=_resize_samples(_k),
            domain=Domain(_resize_domain(_k), ulps=32.0),
        )
    )


# --- crop_and_resize --------------------------------------------------------------------------


def _crop_value(
    ops: Ops, load: Load, box: Callable[[object, int], object], box_index: object, b: object, c: object,
    outs: Sequence[object], sizes: Sequence[int], targets: Sequence[int], attrs: Attrs,
) -> object:
    """The float64 value of crop `b` at (c, y, x): TVM's crop-box coordinates, rounding halves
    away from zero for nearest_neighbor, `extrapolation_value` outside the image."""
    y1, x1, y2, x2 = (ops.f64(box(b, k)) for k in range(4))
    coords = []
    for o, s, t, start, end in zip(outs, sizes, targets, (y1, x1), (y2, x2)):
        if t > 1:
            # (end - start) and the integer product are exact, so only the division rounds.
            coords.append(start * float(s - 1) + (end - start) * ops.f64(o * (s - 1)) / float(t - 1))  # type: ignore[operator]
        else:
            coords.append((start + end) * (0.5 * (s - 1)))  # type: ignore[operator]  # the box centre
    if attrs["method"] == "nearest_neighbor":
        index = tuple(_clamp(ops, ops.to_int(ops.round(x)), s) for x, s in zip(coords, sizes))
        value = ops.f64(load((box_index, c) + index))
    else:
        taps = []
        for x, s in zip(coords, sizes):
            fl = ops.floor(x)
            base, frac = ops.to_int(fl), x - fl  # type: ignore[operator]
            taps.append([(_clamp(ops, base, s), 1.0 - frac), (_clamp(ops, base + 1, s), frac)])  # type: ignore[operator]
        terms = []
        for combo in np.ndindex(2, 2):
            (iy, wy), (ix, wx) = taps[0][combo[0]], taps[1][combo[1]]
            terms.append(ops.f64(load((box_index, c, iy, ix))) * wy * wx)  # type: ignore[operator]
        value = _sum(terms)
    outside = None
    for x, s in zip(coords, sizes):
        bad = ops.either(x < 0.0, x > float(s - 1))  # type: ignore[operator]
        outside = bad if outside is None else ops.either(outside, bad)
    return ops.where(outside, ops.f64(attrs["extrapolation_value"]), value)


def _crop_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "image.crop_and_resize"
    check_arity(types, 3, op)
    data, boxes, indices = (tensor_arg(types, i, op) for i in range(3))
    if data.ndim != 4:
        raise TypeRelationError(f"{op} expects 4-D data, got {data}")
    _numeric(op, data, "data")
    positions = plain_positions(attrs["layout"], "NCHW", op, "layout")
    if boxes.ndim != 2 or boxes.shape[1] not in (4, ANY) or not boxes.dtype.startswith("float"):
        raise TypeRelationError(f"{op} expects float boxes of shape (num_boxes, 4), got {boxes}")
    if indices.ndim != 1 or not indices.dtype.startswith(("int", "uint")):
        raise TypeRelationError(f"{op} expects integer box_indices of shape (num_boxes,), got {indices}")
    num = boxes.shape[0] if boxes.shape[0] is not ANY else indices.shape[0]
    if ANY not in (boxes.shape[0], indices.shape[0]) and boxes.shape[0] != indices.shape[0]:
        raise TypeRelationError(f"{op}: boxes {boxes} and box_indices {indices} disagree on the number of boxes")
    crop = _sizes(op, attrs["crop_size"], "crop_size", 2)
    _check_choice(op, attrs, "method", ("bilinear", "nearest_neighbor"))
    c = to_canonical(data.shape, positions)[1]
    return TensorType(from_canonical((num, c) + crop, positions), result_dtype(attrs, data, op))


def _crop_shape(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
    """One crop per box, the data's channels, `crop_size` pixels."""
    positions = plain_positions(attrs["layout"], "NCHW", "image.crop_and_resize", "layout")
    channels = to_canonical(dims(inputs[0], "data"), positions)[1]
    num_boxes = dims(inputs[1], "boxes")[0]
    return [fill(out_type, from_canonical((num_boxes, channels, *attrs["crop_size"]), positions))]


def _crop_reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, boxes, indices = a
    out_ty = _crop_rel([TensorType(x.shape, str(x.dtype)) for x in a], attrs)
    assert isinstance(out_ty, TensorType)
    positions = plain_positions(attrs["layout"], "NCHW", "image.crop_and_resize", "layout")
    x = np.transpose(data, positions)
    crop = tuple(attrs["crop_size"])
    grid = np.indices((boxes.shape[0], x.shape[1]) + crop)
    box_index = np.clip(indices.astype(np.int64), 0, x.shape[0] - 1)[grid[0]]
    value = _crop_value(
        NumpyOps, lambda idx: x[idx], lambda b, k: boxes[b, k], box_index, grid[0], grid[1],
        tuple(grid[2:]), x.shape[2:], crop, attrs,
    )
    return np.transpose(np.asarray(value).astype(out_ty.dtype), np.argsort(positions))


def _crop_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> te.PrimExpr:
    data, boxes, indices = inputs
    assert isinstance(out_type, TensorType)
    positions = plain_positions(attrs["layout"], "NCHW", "image.crop_and_resize", "layout")
    dims = to_canonical(static_dims(data.shape, "image.crop_and_resize"), positions)
    b, c, y, x = to_canonical(tuple(idx), positions)
    box_index = _clamp(LoopOps, te.cast("int32", indices[b]), dims[0])

    def load(index: tuple[object, ...]) -> te.PrimExpr:
        return data[place(index, positions)]  # type: ignore[arg-type]  # PrimExprs

    value = _crop_value(
        LoopOps, load, lambda bb, k: boxes[bb, k], box_index, b, c, (y, x), dims[2:],
        tuple(attrs["crop_size"]), attrs,
    )
    return te.cast(out_type.dtype, value)  # type: ignore[arg-type]  # a PrimExpr


def _crop_domain(d: Draw) -> Sample:
    method = d.choice(("bilinear", "nearest_neighbor"))
    dtype = d.dtype(("float32", "float64", "float16") if method == "bilinear" else ("float32", "int32", "uint8"))
    n, c, h, w = d.integer(1, 3), d.integer(1, 3), d.integer(1, 6), d.integer(1, 6)
    layout = d.choice(("NCHW", "NHWC"))
    shape = (n, c, h, w) if layout == "NCHW" else (n, h, w, c)
    num = d.integer(1, 4)
    rng = np.random.default_rng(d.integer(0, 1 << 30))
    # Box corners on a 1/8 grid from -0.25 to 1.25: inside, on the border and outside the image.
    boxes = (rng.integers(-2, 11, (num, 4)) / 8.0).astype(d.choice(("float32", "float64")))
    indices = rng.integers(0, n, num).astype("int32")
    crop = [d.choice((1, 2, 3, d.integer(1, 7))) for _ in range(2)]
    extrapolation = d.choice((0.0, 2.5) if dtype == "uint8" else (0.0, -1.0, 2.5))
    attrs = {"crop_size": crop, "layout": layout, "method": method, "extrapolation_value": extrapolation}
    return Sample((TensorType(shape, dtype), boxes, indices), attrs, int_high=100)


_CROP_BOXES = np.array([[0.0, 0.0, 1.0, 1.0], [-0.25, 0.1, 0.6, 1.2], [0.5, 0.75, 0.25, 0.0]], dtype=F32)

register(
    OpDef(
        name="image.crop_and_resize",
        num_inputs=3,
        type_rel=_crop_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_crop_reference,
        compute=_crop_compute,
        shape_func=_crop_shape,
        attrs=(
            AttrSpec("crop_size", "ints", REQUIRED),
            AttrSpec("layout", "str", "NCHW"),
            AttrSpec("method", "str", "bilinear"),
            AttrSpec("extrapolation_value", "float", 0.0),
            AttrSpec("out_dtype", "dtype", ""),
        ),
        samples=(
            Sample((TensorType((2, 3, 5, 6), F32), _CROP_BOXES, np.array([0, 1, 1], dtype="int32")),
                   {"crop_size": [4, 3]}),
            Sample((TensorType((2, 5, 6, 3), F32), _CROP_BOXES, np.array([1, 0, 1], dtype="int32")),
                   {"crop_size": [1, 5], "layout": "NHWC", "method": "nearest_neighbor",
                    "extrapolation_value": -1.0}),
            Sample((TensorType((1, 2, 4, 4), "uint8"), _CROP_BOXES.astype("float64"), np.zeros(3, "int32")),
                   {"crop_size": [3, 3], "method": "nearest_neighbor", "extrapolation_value": 7.0}, int_high=255),
            Sample((TensorType((1, 2, 4, 4), "float16"), _CROP_BOXES, np.zeros(3, "int64")),
                   {"crop_size": [2, 2], "out_dtype": "float32"}),
        ),
        domain=Domain(_crop_domain),
    )
)


# --- grid_sample and affine_grid ------------------------------------------------------------------


def _unnormalize(ops: Ops, g: object, size: int, align_corners: bool) -> object:
    """A grid value in [-1, 1] as a pixel coordinate (TVM's formulas, exact for float32 grids)."""
    if align_corners:
        return (ops.f64(g) + 1.0) * float(size - 1) / 2.0  # type: ignore[operator]
    return (ops.f64(g) + 1.0) * float(size) / 2.0 - 0.5  # type: ignore[operator]


def _reflect(ops: Ops, x: object, size: int, align_corners: bool) -> object:
    """Fold a coordinate back into the image by reflecting at its borders, as TVM does."""
    span, corner = (size - 1, 0.0) if align_corners else (size, -0.5)
    if span == 0:
        return x * 0.0  # type: ignore[operator]  # a one-pixel image (TVM would divide by zero)
    distance = ops.abs(x - corner)  # type: ignore[operator]
    times = ops.to_int(distance) // span
    extra = distance - ops.f64(times * span)
    folded = ops.where(ops.eq(times % 2, 0), extra + corner, (float(span) + corner) - extra)
    inside = ops.both(x >= corner, x <= float(span) + corner)  # type: ignore[operator]
    return ops.where(inside, x, folded)


def _clip(ops: Ops, x: object, size: int) -> object:
    return ops.minimum(ops.maximum(x, 0.0), float(size - 1))


def _bicubic_weights(f: object) -> list[object]:
    a = -0.75  # PyTorch's (and TVM's) bicubic coefficient

    def near(t: object) -> object:
        return (t * (a + 2) - (a + 3)) * t * t + 1.0  # type: ignore[operator]

    def far(t: object) -> object:
        return ((t * a - 5 * a) * t + 8 * a) * t - 4 * a  # type: ignore[operator]

    return [far(f + 1.0), near(f), near(1.0 - f), far(2.0 - f)]  # type: ignore[operator]


def _grid_value(
    ops: Ops, load: Load, gload: Callable[[int], object], n: object, c: object, sizes: Sequence[int], attrs: Attrs,
) -> object:
    """The float64 value of grid_sample's output element whose grid entries `gload(k)` holds
    (k = 0 for x, 1 for y, 2 for z); `sizes` are the input's spatial sizes (D,) H, W."""
    k = len(sizes)
    method, padding, align = attrs["method"], attrs["padding_mode"], attrs["align_corners"]
    coords = [_unnormalize(ops, gload(k - 1 - axis), s, align) for axis, s in enumerate(sizes)]

    def pixel(index: Sequence[object]) -> object:
        inside = None
        for i, s in zip(index, sizes):
            ok = ops.both(i >= 0, i < s)  # type: ignore[operator]
            inside = ok if inside is None else ops.both(inside, ok)
        clamped = tuple(_clamp(ops, i, s) for i, s in zip(index, sizes))
        return ops.where(inside, ops.f64(load((n, c) + clamped)), 0.0)

    if method == "bicubic":
        taps = []
        for x, s in zip(coords, sizes):
            fl = ops.floor(x)
            base, frac = ops.to_int(fl), x - fl  # type: ignore[operator]
            indices = []
            for i in range(4):
                index = base + (i - 1)  # type: ignore[operator]
                if padding == "reflection":
                    index = ops.to_int(_clip(ops, _reflect(ops, ops.f64(index), s, align), s))
                elif padding == "border":
                    index = _clamp(ops, index, s)
                indices.append(index)
            taps.append(list(zip(indices, _bicubic_weights(frac))))
        rows = [_sum([pixel((iy, ix)) * wx for ix, wx in taps[1]]) for iy, _ in taps[0]]  # type: ignore[operator]
        return _sum([r * wy for r, (_, wy) in zip(rows, taps[0])])  # type: ignore[operator]
    if padding == "reflection":
        coords = [_clip(ops, _reflect(ops, x, s, align), s) for x, s in zip(coords, sizes)]
    elif padding == "border":
        coords = [_clip(ops, x, s) for x, s in zip(coords, sizes)]
    if method == "nearest":
        return pixel(tuple(ops.to_int(ops.nearbyint(x)) for x in coords))
    corners = []
    for x in coords:
        base = ops.to_int(ops.floor(x))
        frac = x - ops.f64(base)  # type: ignore[operator]
        corners.append([(base, 1.0 - frac), (base + 1, frac)])  # type: ignore[operator]
    terms = []
    for combo in np.ndindex(*(2,) * k):
        chosen = [corners[axis][j] for axis, j in enumerate(combo)]
        terms.append(_product([pixel(tuple(i for i, _ in chosen))] + [w for _, w in chosen]))
    return _sum(terms)


def _grid_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "image.grid_sample"
    check_arity(types, 2, op)
    data, grid = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    if data.ndim not in (4, 5):
        raise TypeRelationError(f"{op} expects 4-D or 5-D data, got {data}")
    k = data.ndim - 2
    expected_layout = "NCHW" if k == 2 else "NCDHW"
    if attrs["layout"] != expected_layout:
        raise TypeRelationError(f"{op}: unsupported layout {attrs['layout']!r} for {data}; expected {expected_layout!r}")
    if not data.dtype.startswith("float") or not grid.dtype.startswith("float"):
        raise TypeRelationError(f"{op} expects float data and grid, got {data} and {grid}")
    if grid.ndim != data.ndim or grid.shape[1] not in (k, ANY):
        raise TypeRelationError(f"{op}: grid must have shape (N, {k}, ...) for {data}, got {grid}")
    if ANY not in (data.shape[0], grid.shape[0]) and data.shape[0] != grid.shape[0]:
        raise TypeRelationError(f"{op}: data {data} and grid {grid} disagree on the batch")
    _check_choice(op, attrs, "method", ("bilinear", "nearest", "bicubic") if k == 2 else ("bilinear", "nearest"))
    _check_choice(op, attrs, "padding_mode", ("zeros", "border", "reflection"))
    batch = data.shape[0] if data.shape[0] is not ANY else grid.shape[0]
    return TensorType((batch, data.shape[1]) + tuple(grid.shape[2:]), data.dtype)


def _grid_shape(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
    """The data's batch and channels, sampled at the grid's points."""
    data, grid = dims(inputs[0], "data"), dims(inputs[1], "grid")
    return [fill(out_type, (data[0], data[1], *grid[2:]))]


def _grid_reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, grid = a
    out_ty = _grid_rel([TensorType(x.shape, str(x.dtype)) for x in a], attrs)
    assert isinstance(out_ty, TensorType)
    index = np.indices((data.shape[0], data.shape[1]) + grid.shape[2:])
    n, c, spatial = index[0], index[1], tuple(index[2:])
    value = _grid_value(
        NumpyOps, lambda idx: data[idx], lambda k: grid[(n, k) + spatial], n, c, data.shape[2:], attrs
    )
    return np.asarray(value).astype(out_ty.dtype)


def _grid_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> te.PrimExpr:
    data, grid = inputs
    assert isinstance(out_type, TensorType)
    sizes = static_dims(data.shape, "image.grid_sample")[2:]
    n, c, spatial = idx[0], idx[1], tuple(idx[2:])
    value = _grid_value(
        LoopOps, lambda i: data[tuple(i)], lambda k: grid[(n, k) + spatial], n, c, sizes, attrs,
    )
    return te.cast(out_type.dtype, value)  # type: ignore[arg-type]  # a PrimExpr


def _grid_domain(d: Draw) -> Sample:
    k = d.choice((2, 2, 3))
    method = d.choice(("bilinear", "nearest", "bicubic") if k == 2 else ("bilinear", "nearest"))
    n, c = d.integer(1, 2), d.integer(1, 3)
    sizes = tuple(d.integer(1, 5) for _ in range(k))
    out = tuple(d.integer(1, 5) for _ in range(k))
    dtype = d.dtype(("float32", "float32", "float64", "float16"))
    attrs = {
        "method": method, "layout": "NCHW" if k == 2 else "NCDHW",
        "padding_mode": d.choice(("zeros", "border", "reflection")), "align_corners": d.boolean(),
    }
    # Grid values reach past [-1, 1] so that padding and reflection (several times) happen.
    spread = d.choice((1.0, 1.5, 4.0))
    return Sample((TensorType((n, c) + sizes, dtype), TensorType((n, k) + out, dtype)), attrs,
                  low=-spread, high=spread)


register(
    OpDef(
        name="image.grid_sample",
        num_inputs=2,
        type_rel=_grid_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_grid_reference,
        compute=_grid_compute,
        shape_func=_grid_shape,
        attrs=(
            AttrSpec("method", "str", "bilinear"),
            AttrSpec("layout", "str", "NCHW"),
            AttrSpec("padding_mode", "str", "zeros"),
            AttrSpec("align_corners", "bool", True),
        ),
        samples=(
            Sample((TensorType((2, 3, 4, 5), F32), TensorType((2, 2, 3, 6), F32)), {}, low=-1.3, high=1.3),
            Sample((TensorType((1, 2, 4, 5), F32), TensorType((1, 2, 5, 3), F32)),
                   {"method": "nearest", "padding_mode": "border", "align_corners": False}, low=-1.3, high=1.3),
            Sample((TensorType((1, 2, 4, 5), "float64"), TensorType((1, 2, 4, 4), "float64")),
                   {"method": "bicubic", "padding_mode": "reflection"}, low=-3.0, high=3.0),
            Sample((TensorType((1, 2, 4, 5), F32), TensorType((1, 2, 4, 4), F32)),
                   {"method": "bicubic", "padding_mode": "reflection", "align_corners": False}, low=-3.0, high=3.0),
            Sample((TensorType((1, 2, 3, 4, 5), F32), TensorType((1, 3, 2, 3, 4), F32)),
                   {"layout": "NCDHW", "padding_mode": "reflection", "align_corners": False}, low=-2.5, high=2.5),
            Sample((TensorType((1, 1, 3, 4, 2), "float16"), TensorType((1, 3, 2, 2, 2), "float16")),
                   {"layout": "NCDHW", "method": "nearest"}, low=-1.2, high=1.2),
        ),
        domain=Domain(_grid_domain, ulps=64.0),
    )
)


def _affine_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "image.affine_grid"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    if data.ndim != 3 or data.shape[1] not in (2, ANY) or data.shape[2] not in (3, ANY):
        raise TypeRelationError(f"{op} expects affine matrices of shape (N, 2, 3), got {data}")
    if not data.dtype.startswith("float"):
        raise TypeRelationError(f"{op} expects float matrices, got {data}")
    target = attrs["target_shape"]
    if target is None or len(target) != 2 or any(t <= 1 for t in target):
        raise TypeRelationError(f"{op}: target_shape must be 2 sizes greater than 1, got {target!r}")
    return TensorType((data.shape[0], 2) + tuple(target), data.dtype)


def _affine_shape(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[ShapeDim, ...]]:
    """One (x, y) grid of `target_shape` per matrix."""
    return [fill(out_type, (dims(inputs[0], "data")[0], 2, *attrs["target_shape"]))]


def _affine_value(ops: Ops, theta: Callable[[int], object], i: object, j: object, target: Sequence[int], dtype: str) -> object:
    """TVM's align_corners grid: steps of (2 - 1e-7)/(size - 1) (as constants of the data dtype)
    from -1, then theta @ (x, y, 1)."""
    y_step, x_step = (float(np.asarray((2.0 - 1e-7) / (t - 1), dtype=dtype)) for t in target)
    y = ops.f64(i) * y_step - 1.0  # type: ignore[operator]
    x = ops.f64(j) * x_step - 1.0  # type: ignore[operator]
    return ops.f64(theta(0)) * x + ops.f64(theta(1)) * y + ops.f64(theta(2))  # type: ignore[operator]


def _affine_reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    (data,) = a
    target = tuple(attrs["target_shape"])
    n, dim, i, j = np.indices((data.shape[0], 2) + target)
    value = _affine_value(NumpyOps, lambda k: data[n, dim, k], i, j, target, str(data.dtype))
    return np.asarray(value).astype(data.dtype)


def _affine_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> te.PrimExpr:
    (data,) = inputs
    n, dim, i, j = idx
    value = _affine_value(LoopOps, lambda k: data[n, dim, k], i, j, tuple(attrs["target_shape"]), data.dtype)
    return te.cast(data.dtype, value)  # type: ignore[arg-type]  # a PrimExpr


def _affine_domain(d: Draw) -> Sample:
    target = [d.choice((2, 3, d.integer(2, 8))) for _ in range(2)]
    dtype = d.dtype(("float32", "float32", "float64", "float16"))
    return Sample((TensorType((d.integer(1, 3), 2, 3), dtype),), {"target_shape": target})


register(
    OpDef(
        name="image.affine_grid",
        num_inputs=1,
        type_rel=_affine_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_affine_reference,
        compute=_affine_compute,
        shape_func=_affine_shape,
        attrs=(AttrSpec("target_shape", "ints", REQUIRED),),
        samples=(
            Sample((TensorType((2, 2, 3), F32),), {"target_shape": [4, 5]}),
            Sample((TensorType((1, 2, 3), "float64"),), {"target_shape": [2, 7]}),
            Sample((TensorType((1, 2, 3), "float16"),), {"target_shape": [3, 3]}),
        ),
        domain=Domain(_affine_domain),
    )
)
