"""Vision operators (TVM's relay.vision), each following TVM's topi kernel:

* multibox_prior: anchor boxes (xmin, ymin, xmax, ymax) for every pixel centre of a feature map:
  `num_sizes` boxes of each size at ratio 1, then `num_ratios - 1` boxes of sizes[0] at the other
  ratios; widths are scaled by H/W. OPAQUE in TVM; its element formula is a `compute` here.
* yolo_reorg: TVM's reorg reads its input at a flattened offset built from per-dimension
  indices that overflow their dims on purpose (darknet's reorg); we read the same offsets within
  each image. (TVM adds `b * stride * stride` whole images for batch b, reading past the input
  for a batch larger than one; we add `b` images.)
* get_valid_counts, non_max_suppression, multibox_transform_loc, all_class_non_max_suppression:
  OPAQUE sequential kernels (several with tuple results), loops written like TVM's hybrid/IR
  code. Differences, all where TVM reads or leaves undefined memory: valid counts and batch
  indices are clamped into range; rows TVM leaves unwritten are -1 (multibox_transform_loc) or
  0 (the ONNX rows of all_class_non_max_suppression past the detection count); NMS's index
  compaction never writes past num_anchors.
* roi_align (avg/max, NCHW/NHWC) and roi_pool: OUT_ELEMWISE_FUSABLE kernels with epilogues.

Box arithmetic (IoU, coordinates) is done in float64; sorting is a stable descending rank sort
(ties keep the lower index first, like TVM's std::stable_sort based argsort).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.types import ANY, TensorType, TupleType, Type
from compiler.ops.common import check_arity, row_major_index, static_dims, tensor_arg
from compiler.ops.domain import Domain, Draw
from compiler.ops.image import LoopOps, NumpyOps
from compiler.ops.kernels.common import buffer_dims, input_buffers
from compiler.ops.pool import lowest_value
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, Sample, TypeRelationError, register
from compiler.ops.shape_rules import Dim, ShapeArg, dims, fill, int64
from compiler.tir import expr as te
from compiler.tir.compute import Epilogue, Index, KernelContext, TensorView
from compiler.tir.stmt import Allocate, For, IfThenElse, LetStmt, Stmt, Store, seq

F32 = "float32"


def _floats(op: str, attrs: Attrs, name: str, length: int | None = None) -> tuple[float, ...]:
    value = attrs[name]
    if not isinstance(value, (tuple, list)) or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
        raise TypeRelationError(f"{op}: {name} must be a list of numbers, got {value!r}")
    if (length is not None and len(value) != length) or not value:
        raise TypeRelationError(f"{op}: {name} must have {length or 'at least 1'} values, got {len(value)}")
    return tuple(float(v) for v in value)


# --- multibox_prior -----------------------------------------------------------------------------


def _prior_half_extents(attrs: Attrs, h: int, w: int) -> list[tuple[float, float]]:
    """(half width, half height) of each anchor at a pixel, in TVM's order."""
    op = "vision.multibox_prior"
    sizes, ratios = _floats(op, attrs, "sizes"), _floats(op, attrs, "ratios")
    out = [(s * h / w / 2.0, s / 2.0) for s in sizes]
    for r in ratios[1:]:
        out.append((sizes[0] * h / w * math.sqrt(r) / 2.0, sizes[0] / math.sqrt(r) / 2.0))
    return out


def _prior_steps(attrs: Attrs, h: int, w: int) -> tuple[float, float, float, float]:
    op = "vision.multibox_prior"
    steps, offsets = _floats(op, attrs, "steps", 2), _floats(op, attrs, "offsets", 2)
    step_h = steps[0] if steps[0] > 0 else 1.0 / h
    step_w = steps[1] if steps[1] > 0 else 1.0 / w
    return step_h, step_w, offsets[0], offsets[1]


def _prior_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "vision.multibox_prior"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    if data.ndim != 4:
        raise TypeRelationError(f"{op} expects 4-D NCHW data, got {data}")
    if not data.dtype.startswith("float"):
        raise TypeRelationError(f"{op} expects float data, got {data}")
    sizes, ratios = _floats(op, attrs, "sizes"), _floats(op, attrs, "ratios")
    _floats(op, attrs, "steps", 2)
    _floats(op, attrs, "offsets", 2)
    if any(r <= 0 for r in ratios):
        raise TypeRelationError(f"{op}: ratios must be positive, got {ratios}")
    per_pixel = len(sizes) + len(ratios) - 1
    h, w = data.shape[2], data.shape[3]
    count = ANY if ANY in (h, w) else h * w * per_pixel  # type: ignore[operator]  # ints here
    return TensorType((1, count, 4), data.dtype)


def _prior_reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    h, w = a[0].shape[2:]
    extents = _prior_half_extents(attrs, h, w)
    step_h, step_w, off_h, off_w = _prior_steps(attrs, h, w)
    out = np.zeros((h, w, len(extents), 4))
    for i in range(h):
        for j in range(w):
            cy, cx = (i + off_h) * step_h, (j + off_w) * step_w
            for k, (hw, hh) in enumerate(extents):
                out[i, j, k] = (cx - hw, cy - hh, cx + hw, cy + hh)
    if attrs["clip"]:
        out = np.clip(out, 0.0, 1.0)
    return out.reshape(1, -1, 4).astype(a[0].dtype)


def _prior_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> te.PrimExpr:
    assert isinstance(out_type, TensorType)
    h, w = static_dims(inputs[0].shape, "vision.multibox_prior")[2:]
    extents = _prior_half_extents(attrs, h, w)
    step_h, step_w, off_h, off_w = _prior_steps(attrs, h, w)
    _, box, coord = idx
    i, j, k = row_major_index(box, (h, w, len(extents)))
    centre_y = (te.cast("float64", i) + off_h) * step_h
    centre_x = (te.cast("float64", j) + off_w) * step_w

    def pick(values: list[float]) -> te.PrimExpr:
        out: te.PrimExpr = te.const(values[-1], "float64")
        for n in reversed(range(len(values) - 1)):
            out = te.select(te.eq(k, n), te.const(values[n], "float64"), out)
        return out

    half_w, half_h = pick([e[0] for e in extents]), pick([e[1] for e in extents])
    value = te.select(te.eq(coord, 0), centre_x - half_w, te.select(
        te.eq(coord, 1), centre_y - half_h, te.select(te.eq(coord, 2), centre_x + half_w, centre_y + half_h)))
    if attrs["clip"]:
        value = te.minimum(te.maximum(value, 0.0), 1.0)
    return te.cast(out_type.dtype, value)


def _prior_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """One row per anchor: each pixel of the H x W map has len(sizes) + len(ratios) - 1."""
    _, _, h, w = dims(inputs[0], "data")
    per_pixel = len(attrs["sizes"]) + len(attrs["ratios"]) - 1
    return [fill(out_type, (1, int64(h) * w * per_pixel, 4))]


def _prior_domain(d: Draw) -> Sample:
    shape = (d.integer(1, 2), d.integer(1, 3), d.integer(1, 5), d.integer(1, 5))
    attrs = {
        "sizes": d.choice(([1.0], [0.5, 0.25], [0.3, 0.6, 0.9])),
        "ratios": d.choice(([1.0], [1.0, 2.0, 0.5], [2.0, 3.0])),
        "steps": d.choice(([-1.0, -1.0], [0.25, 0.125], [0.1, -1.0])),
        "offsets": d.choice(([0.5, 0.5], [0.0, 0.25])),
        "clip": d.boolean(),
    }
    return Sample((TensorType(shape, d.dtype(("float32", "float32", "float64", "float16"))),), attrs)


register(
    OpDef(
        name="vision.multibox_prior",
        num_inputs=1,
        type_rel=_prior_rel,
        pattern=OpPattern.OPAQUE,
        reference=_prior_reference,
        shape_func=_prior_shape_rule,
        compute=_prior_compute,
        attrs=(
            AttrSpec("sizes", "any", (1.0,)),
            AttrSpec("ratios", "any", (1.0,)),
            AttrSpec("steps", "any", (-1.0, -1.0)),
            AttrSpec("offsets", "any", (0.5, 0.5)),
            AttrSpec("clip", "bool", False),
        ),
        samples=(
            Sample((TensorType((1, 3, 4, 5), F32),)),
            Sample((TensorType((2, 8, 3, 3), F32),),
                   {"sizes": [0.4, 0.8], "ratios": [1.0, 2.0, 0.5], "steps": [0.3, -1.0], "offsets": [0.25, 0.5],
                    "clip": True}),
            Sample((TensorType((1, 1, 2, 6), "float64"),), {"sizes": [1.5], "ratios": [1.0, 4.0]}),
        ),
        domain=Domain(_prior_domain),
    )
)


# --- yolo_reorg ---------------------------------------------------------------------------------


def _reorg_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "vision.yolo_reorg"
    check_arity(types, 1, op)
    data = tensor_arg(types, 0, op)
    s = attrs["stride"]
    if s < 1:
        raise TypeRelationError(f"{op}: stride must be positive, got {s}")
    if data.ndim != 4:
        raise TypeRelationError(f"{op} expects 4-D NCHW data, got {data}")
    n, c, h, w = data.shape
    for dim, need, what in ((c, s * s, "channels"), (h, s, "height"), (w, s, "width")):
        if dim is not ANY and dim % need != 0:  # type: ignore[operator]  # an int here
            raise TypeRelationError(f"{op}: {what} {dim} of {data} is not a multiple of {need} (stride {s})")
    scaled = (
        ANY if c is ANY else c * s * s,  # type: ignore[operator]  # an int here
        ANY if h is ANY else h // s,  # type: ignore[operator]
        ANY if w is ANY else w // s,  # type: ignore[operator]
    )
    return TensorType((n,) + scaled, data.dtype)


def _reorg_source(b: object, flat: object, dims: tuple[int, int, int], s: int) -> tuple[object, ...]:
    """The input index (b, c, h, w) that output element number `flat` (within image b) reads."""
    c, h, w = dims
    out_c = c // (s * s)
    k, j, i = flat // (h * w), flat // w % h, flat % w  # type: ignore[operator]
    offset = k // out_c  # type: ignore[operator]
    source = (k % out_c) * (s * s * h * w) + (j * s + offset // s) * (s * w) + i * s + offset % s  # type: ignore[operator]
    return (b, source // (h * w), source // w % h, source % w)


def _reorg_reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    (data,) = a
    out_ty = _reorg_rel([TensorType(data.shape, str(data.dtype))], attrs)
    assert isinstance(out_ty, TensorType)
    n = data.shape[0]
    flat = np.arange(int(np.prod(data.shape[1:]))).reshape(1, -1)
    b = np.arange(n).reshape(-1, 1)
    index = _reorg_source(b, flat, data.shape[1:], attrs["stride"])
    return data[index].reshape(out_ty.shape)  # type: ignore[arg-type]  # static shape


def _reorg_compute(idx: Index, inputs: Sequence[TensorView], attrs: Attrs, out_type: Type) -> te.PrimExpr:
    (data,) = inputs
    assert isinstance(out_type, TensorType)
    dims = static_dims(data.shape, "vision.yolo_reorg")
    _, oc, oh, ow = static_dims(out_type.shape, "vision.yolo_reorg")
    b, c, y, x = idx
    flat = (c * oh + y) * ow + x
    return data[_reorg_source(b, flat, dims[1:], attrs["stride"])]  # type: ignore[index]  # PrimExprs


def _reorg_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """stride x stride blocks of pixels move into the channels."""
    n, c, h, w = dims(inputs[0], "data")
    s = int(attrs["stride"])
    return [fill(out_type, (n, int64(c) * (s * s), int64(h) // s, int64(w) // s))]


def _reorg_domain(d: Draw) -> Sample:
    s = d.choice((1, 2, 2, 3))
    shape = (d.integer(1, 2), s * s * d.integer(1, 3), s * d.integer(1, 3), s * d.integer(1, 3))
    return Sample((TensorType(shape, d.dtype(("float32", "int32", "float16", "uint8"))),), {"stride": s})


register(
    OpDef(
        name="vision.yolo_reorg",
        num_inputs=1,
        type_rel=_reorg_rel,
        pattern=OpPattern.INJECTIVE,
        reference=_reorg_reference,
        shape_func=_reorg_shape_rule,
        compute=_reorg_compute,
        attrs=(AttrSpec("stride", "int", 1),),
        samples=(
            Sample((TensorType((1, 4, 4, 6), F32),), {"stride": 2}),
            Sample((TensorType((2, 8, 2, 4), "int32"),), {"stride": 2}),
            Sample((TensorType((1, 9, 3, 3), F32),), {"stride": 3}),
            Sample((TensorType((1, 2, 3, 3), F32),)),
        ),
        domain=Domain(_reorg_domain),
    )
)


# --- get_valid_counts ---------------------------------------------------------------------------


def _valid_counts_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "vision.get_valid_counts"
    check_arity(types, 2, op)
    data, threshold = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    if data.ndim != 3:
        raise TypeRelationError(f"{op} expects 3-D data (batch, num_anchors, box_data), got {data}")
    if not data.dtype.startswith("float"):
        raise TypeRelationError(f"{op} expects float data, got {data}")
    if threshold.ndim != 0 or not threshold.dtype.startswith("float"):
        raise TypeRelationError(f"{op} expects a float scalar score_threshold, got {threshold}")
    length = data.shape[2]
    for name in ("id_index", "score_index"):
        index = attrs[name]
        if index >= 0 and length is not ANY and index >= length:  # type: ignore[operator]  # an int here
            raise TypeRelationError(f"{op}: {name} {index} is out of range for boxes of {length} values")
    if attrs["score_index"] < 0:
        raise TypeRelationError(f"{op}: score_index must be non-negative, got {attrs['score_index']}")
    b, n = data.shape[0], data.shape[1]
    return TupleType((TensorType((b,), "int32"), data, TensorType((b, n), "int32")))


def _valid_counts_reference(a: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    data, threshold = a
    batch, num, _ = data.shape
    counts = np.zeros(batch, "int32")
    boxes = np.full(data.shape, -1, data.dtype)
    indices = np.full((batch, num), -1, "int32")
    id_index, score_index = attrs["id_index"], attrs["score_index"]
    for i in range(batch):
        for j in range(num):
            valid = float(data[i, j, score_index]) > float(threshold)
            if valid and (id_index < 0 or data[i, j, id_index] >= 0):
                boxes[i, counts[i]] = data[i, j]
                indices[i, counts[i]] = j
                counts[i] += 1
    return counts, boxes, indices


def _valid_counts_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: tuple[te.Buffer, ...], attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    """Per image, one pass over the anchors copying each valid box to the next free row and
    clearing a row to -1 once the copy front has passed it (TVM's loop, sequential)."""
    data, threshold = input_buffers(inputs, "vision.get_valid_counts")
    counts, boxes, indices = out
    batch, num, length = buffer_dims(data)
    id_index, score_index = attrs["id_index"], attrs["score_index"]
    i, j, k = ctx.var("i"), ctx.var("j"), ctx.var("k")
    count = te.Buffer(ctx.fresh("count"), (1,), "int32", scope="local")
    zero = te.const(0)
    front = count[zero]
    valid = te.cast("float64", data[i, j, score_index]) > te.cast("float64", threshold[()])
    if id_index >= 0:
        valid = te.logical_and(valid, data[i, j, id_index] >= te.const(0, data.dtype))
    minus_one = te.const(-1.0 if data.dtype.startswith("float") else -1, data.dtype)
    copy = seq(
        For(k, zero, te.const(length), Store(boxes, (i, front, k), data[i, j, k])),
        Store(indices, (i, front), j),
        Store(count, (zero,), front + 1),
    )
    k2 = ctx.var("k")
    clear = seq(
        For(k2, zero, te.const(length), Store(boxes, (i, j, k2), minus_one)),
        Store(indices, (i, j), te.const(-1)),
    )
    per_anchor = seq(IfThenElse(valid, copy), IfThenElse(j >= front, clear))
    body = Allocate(count, seq(
        Store(count, (zero,), zero),
        For(j, zero, te.const(num), per_anchor),
        Store(counts, (i,), front),
    ))
    return For(i, zero, te.const(batch), body)


def _valid_counts_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """(batch,) counts, the boxes in data's shape, (batch, num_anchors) indices: fixed sizes
    whatever the count (rows past it are -1), so the shapes need no values."""
    data = dims(inputs[0], "data")
    return [(data[0],), data, (data[0], data[1])]


def _valid_counts_domain(d: Draw) -> Sample:
    shape = (d.integer(1, 2), d.integer(1, 7), d.choice((5, 6)))
    attrs = {"id_index": d.choice((0, -1, 0)), "score_index": d.choice((1, 1, 2))}
    threshold = np.array(d.choice((0.0, 0.3, 0.7)), "float32")
    dtype = d.dtype(("float32", "float32", "float64", "float16"))
    return Sample((TensorType(shape, dtype), threshold), attrs, low=-0.5, high=1.0)


register(
    OpDef(
        name="vision.get_valid_counts",
        num_inputs=2,
        type_rel=_valid_counts_rel,
        pattern=OpPattern.OPAQUE,
        reference=_valid_counts_reference,
        shape_func=_valid_counts_shape_rule,
        kernel=_valid_counts_kernel,
        attrs=(
            AttrSpec("score_threshold", "float", None, optional=True),
            AttrSpec("id_index", "int", 0),
            AttrSpec("score_index", "int", 1),
        ),
        samples=(
            Sample((TensorType((2, 6, 6), F32), np.array(0.2, F32)), low=-0.5, high=1.0),
            Sample((TensorType((1, 5, 5), "float64"), np.array(0.5, F32)), {"id_index": -1}, low=-0.5, high=1.0),
            Sample((TensorType((1, 4, 6), F32), np.array(0.0, F32)), {"score_index": 2, "id_index": 1},
                   low=-0.5, high=1.0),
        ),
        domain=Domain(_valid_counts_domain),
    )
)


# --- non_max_suppression ------------------------------------------------------------------------


def _nms_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "vision.non_max_suppression"
    check_arity(types, 5, op)
    data, valid, indices, max_out, iou = (tensor_arg(types, k, op) for k in range(5))
    if data.ndim != 3 or not data.dtype.startswith("float"):
        raise TypeRelationError(f"{op} expects 3-D float data (batch, num_anchors, box_data), got {data}")
    b, n, length = data.shape
    if valid.ndim != 1 or not valid.dtype.startswith("int"):
        raise TypeRelationError(f"{op} expects an integer valid_count of shape (batch,), got {valid}")
    # Without return_indices the indices are never read, and TVM's frontends (MXNet's
    # MultiBoxDetection, TFLite's detection post-process) pass the 1-D valid count for them.
    if attrs["return_indices"] and (indices.ndim != 2 or not indices.dtype.startswith("int")):
        raise TypeRelationError(f"{op} expects integer indices of shape (batch, num_anchors), got {indices}")
    if max_out.ndim != 0 or not max_out.dtype.startswith("int"):
        raise TypeRelationError(f"{op} expects an integer scalar max_output_size, got {max_out}")
    if iou.ndim != 0 or not iou.dtype.startswith("float"):
        raise TypeRelationError(f"{op} expects a float scalar iou_threshold, got {iou}")
    needed = max(attrs["coord_start"] + 4, attrs["score_index"] + 1, attrs["id_index"] + 1)
    if min(attrs["coord_start"], attrs["score_index"]) < 0 or (length is not ANY and needed > length):  # type: ignore[operator]
        raise TypeRelationError(
            f"{op}: coord_start {attrs['coord_start']}, score_index {attrs['score_index']} and id_index "
            f"{attrs['id_index']} do not fit boxes of {length} values")
    if attrs["return_indices"]:
        return TupleType((TensorType((b, n), "int32"), TensorType((b, 1), "int32")))
    return data


def _iou(a: Sequence[float], b: Sequence[float]) -> float:
    """TVM's IoU of two boxes given as two corners in any order (float64 arithmetic)."""
    al, ar = min(a[0], a[2]), max(a[0], a[2])
    at, ab = min(a[1], a[3]), max(a[1], a[3])
    bl, br = min(b[0], b[2]), max(b[0], b[2])
    bt, bb = min(b[1], b[3]), max(b[1], b[3])
    w = max(0.0, min(ar, br) - max(al, bl))
    h = max(0.0, min(ab, bb) - max(at, bt))
    area = h * w
    union = (ar - al) * (ab - at) + (br - bl) * (bb - bt) - area
    return 0.0 if union <= 0.0 else area / union


def _nms_reference(a: Sequence[np.ndarray], attrs: Attrs) -> object:
    data, valid_count, indices, max_out, iou_threshold = a
    batch, num, length = data.shape
    m, threshold = int(max_out), float(iou_threshold)
    top_k, cs, si, ii = attrs["top_k"], attrs["coord_start"], attrs["score_index"], attrs["id_index"]
    boxes = np.full(data.shape, -1.0)
    box_index = np.full((batch, num), -1, "int64")
    for i in range(batch):
        vc = min(max(int(valid_count[i]), 0), num)
        if threshold > 0:
            scores = data[i, :vc, si]
            order = sorted(range(vc), key=lambda j: (-float(scores[j]), j))  # stable, descending
            nkeep = top_k if 0 < top_k < vc else vc
            for j in range(nkeep):
                boxes[i, j] = data[i, order[j]]
                box_index[i, j] = order[j]
            kept = 0
            for j in range(vc):
                if kept == m:
                    boxes[i, j], box_index[i, j] = -1.0, -1
                elif boxes[i, j, si] > 0:
                    valid = True
                    for k in range(j):
                        other = boxes[i, k]
                        if not valid or other[si] <= 0 or (ii >= 0 and other[ii] < 0):
                            continue
                        if attrs["force_suppress"] or ii < 0 or boxes[i, j, ii] == other[ii]:
                            if _iou(boxes[i, j, cs:cs + 4], other[cs:cs + 4]) >= threshold:
                                valid = False
                    if valid:
                        kept += 1
                    else:
                        boxes[i, j], box_index[i, j] = -1.0, -1
        else:
            boxes[i, :vc] = data[i, :vc]
            box_index[i, :vc] = np.arange(vc)
        if attrs["return_indices"]:
            for j in range(vc):
                if box_index[i, j] >= 0:
                    box_index[i, j] = indices[i, box_index[i, j]]
    if attrs["return_indices"]:
        out = np.full((batch, num), -1, "int32")
        counts = np.zeros((batch, 1), "int32")
        for i in range(batch):
            front = 0
            for j in range(num):
                value = box_index[i, j]
                if value >= 0 and front < num:
                    out[i, front] = value
                    front += 1
                if (value > num or value < -num) and front < num:
                    out[i, front] = 0
                    front += 1
            counts[i, 0] = front
        return out, counts
    if attrs["invalid_to_bottom"]:
        moved = np.full(data.shape, -1.0)
        front = np.zeros(batch, "int64")
        for i in range(batch):
            for j in range(num):
                if boxes[i, j, 0] >= 0:
                    moved[i, front[i]] = boxes[i, j]
                    front[i] += 1
        boxes = moved
    return boxes.astype(data.dtype)


class _Counter:
    """A one-element int32 stack array used as a mutable scalar in a kernel."""

    def __init__(self, ctx: KernelContext, name: str):
        self.buffer = te.Buffer(ctx.fresh(name), (1,), "int32", scope="local")

    @property
    def value(self) -> te.PrimExpr:
        return self.buffer[te.const(0)]

    def set(self, value: te.ExprLike) -> Stmt:
        return Store(self.buffer, (te.const(0),), te.as_expr(value))


def _nms_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer | tuple[te.Buffer, ...], attrs: Attrs,
    out_type: Type, epilogue: Epilogue,
) -> Stmt:
    """TVM's NMS, one image at a time: a stable descending rank sort of the valid scores, top_k,
    then each box against the kept boxes before it; results compacted per the attributes."""
    data, valid_count, indices, max_out, iou_threshold = input_buffers(inputs, "vision.non_max_suppression")
    batch, num, length = buffer_dims(data)
    top_k, cs, si, ii = attrs["top_k"], attrs["coord_start"], attrs["score_index"], attrs["id_index"]
    zero, f64 = te.const(0), "float64"
    i = ctx.var("i")
    order = te.Buffer(ctx.fresh("order"), (num,), "int32")
    boxes = te.Buffer(ctx.fresh("nms_boxes"), (num, length), data.dtype)
    box_index = te.Buffer(ctx.fresh("nms_index"), (num,), "int32")
    vc, kept, rank, keep, front = (_Counter(ctx, name) for name in ("valid", "kept", "rank", "keep", "front"))
    minus_one = te.const(-1.0, data.dtype)

    def loop(name: str, extent: int, body: Callable[[te.Var], Stmt]) -> Stmt:
        var = ctx.var(name)
        return For(var, zero, te.const(extent), body(var))

    def clear(j: te.PrimExpr) -> Stmt:
        return seq(loop("k", length, lambda k: Store(boxes, (j, k), minus_one)), Store(box_index, (j,), te.const(-1)))

    def copy_row(j: te.PrimExpr, source: te.PrimExpr) -> Stmt:
        return seq(loop("k", length, lambda k: Store(boxes, (j, k), data[i, source, k])), Store(box_index, (j,), source))

    score = lambda j: data[i, j, si]  # noqa: E731
    # 1. order[r] = the anchor of rank r among the valid ones (ties keep anchor order).
    def ranked(j: te.Var) -> Stmt:
        def count(k: te.Var) -> Stmt:
            better = te.logical_or(score(k) > score(j), te.logical_and(te.eq(score(k), score(j)), k < j))
            return IfThenElse(te.logical_and(k < vc.value, better), rank.set(rank.value + 1))
        return IfThenElse(j < vc.value, seq(rank.set(0), loop("k", num, count), Store(order, (rank.value,), j)))

    nkeep = te.select(te.logical_and(te.const(top_k) > 0, te.const(top_k) < vc.value), te.const(top_k), vc.value)
    # 2. the sorted boxes, then suppression.
    def place_sorted(j: te.Var) -> Stmt:
        return IfThenElse(j < nkeep, copy_row(j, order[j]), IfThenElse(j < vc.value, clear(j)))

    def corners(j: te.PrimExpr) -> tuple[te.PrimExpr, ...]:
        x0, y0, x1, y1 = (te.cast(f64, boxes[j, cs + c]) for c in range(4))
        return te.minimum(x0, x1), te.minimum(y0, y1), te.maximum(x0, x1), te.maximum(y0, y1)

    def iou(j: te.PrimExpr, k: te.PrimExpr) -> te.PrimExpr:
        al, at, ar, ab = corners(j)
        bl, bt, br, bb = corners(k)
        w = te.maximum(te.minimum(ar, br) - te.maximum(al, bl), 0.0)
        h = te.maximum(te.minimum(ab, bb) - te.maximum(at, bt), 0.0)
        area = h * w
        union = (ar - al) * (ab - at) + (br - bl) * (bb - bt) - area
        return te.select(union <= 0.0, te.const(0.0, f64), area / union)

    threshold = te.cast(f64, iou_threshold[()])

    def suppress(j: te.Var) -> Stmt:
        def against(k: te.Var) -> Stmt:
            cond = te.logical_and(te.logical_and(k < j, te.ne(keep.value, 0)), boxes[k, si] > te.const(0.0, data.dtype))
            if ii >= 0:
                cond = te.logical_and(cond, boxes[k, ii] >= te.const(0.0, data.dtype))
                if not attrs["force_suppress"]:
                    cond = te.logical_and(cond, te.eq(boxes[j, ii], boxes[k, ii]))
            return IfThenElse(te.logical_and(cond, iou(j, k) >= threshold), keep.set(0))
        check = seq(keep.set(1), loop("k", num, against),
                    IfThenElse(te.eq(keep.value, 0), clear(j), kept.set(kept.value + 1)))
        body = IfThenElse(te.eq(kept.value, max_out[()]), clear(j),
                          IfThenElse(boxes[j, si] > te.const(0.0, data.dtype), check))
        return IfThenElse(j < vc.value, body)

    with_nms = seq(loop("j", num, ranked), loop("j", num, place_sorted), kept.set(0), loop("j", num, suppress))
    without = loop("j", num, lambda j: IfThenElse(j < vc.value, copy_row(j, j)))
    steps: list[Stmt] = [
        vc.set(te.maximum(te.minimum(valid_count[i], num), 0)),
        IfThenElse(threshold > 0.0, with_nms, without),
        loop("j", num, lambda j: IfThenElse(j >= vc.value, clear(j))),
    ]
    if attrs["return_indices"]:
        assert isinstance(out, tuple)
        out_index, out_count = out
        def original(j: te.Var) -> Stmt:
            return IfThenElse(te.logical_and(j < vc.value, box_index[j] >= 0),
                              Store(box_index, (j,), indices[i, box_index[j]]))
        def compact(j: te.Var) -> Stmt:
            value = box_index[j]
            room = front.value < num
            return seq(
                IfThenElse(te.logical_and(value >= 0, room),
                           seq(Store(out_index, (i, front.value), value), front.set(front.value + 1))),
                IfThenElse(te.logical_and(te.logical_or(value > num, value < -num), room),
                           seq(Store(out_index, (i, front.value), zero), front.set(front.value + 1))),
            )
        steps += [
            loop("j", num, original),
            loop("j", num, lambda j: Store(out_index, (i, j), te.const(-1))),
            front.set(0), loop("j", num, compact), Store(out_count, (i, zero), front.value),
        ]
    else:
        assert isinstance(out, te.Buffer)
        if attrs["invalid_to_bottom"]:
            def move(j: te.Var) -> Stmt:
                row = loop("k", length, lambda k: Store(out, (i, front.value, k), boxes[j, k]))
                return IfThenElse(boxes[j, 0] >= te.const(0.0, data.dtype), seq(row, front.set(front.value + 1)))
            steps += [
                loop("j", num, lambda j: loop("k", length, lambda k: Store(out, (i, j, k), minus_one))),
                front.set(0), loop("j", num, move),
            ]
        else:
            steps.append(loop("j", num, lambda j: loop("k", length, lambda k: Store(out, (i, j, k), boxes[j, k]))))
    body: Stmt = seq(*steps)
    for counter in (vc, kept, rank, keep, front):
        body = Allocate(counter.buffer, body)
    return Allocate(order, Allocate(boxes, Allocate(box_index, For(i, zero, te.const(batch), body))))


def _nms_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """data's shape, or (batch, num_anchors) indices and a (batch, 1) count with
    return_indices: the outputs are padded (with -1), so their shapes need no values."""
    data = dims(inputs[0], "data")
    if attrs["return_indices"]:
        return [(data[0], data[1]), (data[0], 1)]
    return [data]


def _nms_domain(d: Draw) -> Sample:
    batch, num, length = d.integer(1, 2), d.integer(1, 7), d.choice((5, 6, 6))
    rng = np.random.default_rng(d.integer(0, 1 << 30))
    dtype = d.choice(("float32", "float32", "float64"))
    data = rng.uniform(0.0, 1.0, (batch, num, length))
    data[:, :, 0] = rng.integers(-1, 3, (batch, num))  # class ids, some negative
    data[:, :, 1] = np.round(rng.uniform(-0.2, 1.0, (batch, num)), 1)  # scores with ties and <= 0
    valid = rng.integers(0, num + 1, batch).astype("int32")
    indices = rng.integers(0, num, (batch, num)).astype("int32")
    attrs = {
        "force_suppress": d.boolean(), "top_k": d.choice((-1, 1, 3)), "coord_start": length - 4,
        "score_index": 1, "id_index": d.choice((0, -1)), "return_indices": d.boolean(),
        "invalid_to_bottom": d.boolean(),
    }
    max_out = np.array(d.choice((-1, 0, 1, 2)), "int32")
    iou = np.array(d.choice((0.0, 0.3, 0.5, 0.9)), "float32")
    return Sample((data.astype(dtype), valid, indices, max_out, iou), attrs)


def _nms_sample_data() -> np.ndarray:
    # id, score, x0, y0, x1, y1: boxes 0/1 overlap heavily (IoU 0.81), 2 is class 1, 3 scores 0.
    return np.array([[
        [0, 0.9, 0.0, 0.0, 1.0, 1.0],
        [0, 0.8, 0.1, 0.1, 1.0, 1.0],
        [1, 0.7, 0.05, 0.0, 1.0, 1.1],
        [0, 0.0, 2.0, 2.0, 3.0, 3.0],
        [0, 0.6, 3.0, 3.0, 2.0, 2.0],
    ]], F32)


register(
    OpDef(
        name="vision.non_max_suppression",
        num_inputs=5,
        type_rel=_nms_rel,
        pattern=OpPattern.OPAQUE,
        reference=_nms_reference,
        shape_func=_nms_shape_rule,
        kernel=_nms_kernel,
        attrs=(
            AttrSpec("force_suppress", "bool", False),
            AttrSpec("top_k", "int", -1),
            AttrSpec("coord_start", "int", 2),
            AttrSpec("score_index", "int", 1),
            AttrSpec("id_index", "int", 0),
            AttrSpec("return_indices", "bool", True),
            AttrSpec("invalid_to_bottom", "bool", False),
        ),
        samples=(
            Sample((_nms_sample_data(), np.array([5], "int32"), np.array([[4, 3, 2, 1, 0]], "int32"),
                    np.array(-1, "int32"), np.array(0.5, F32))),
            Sample((_nms_sample_data(), np.array([4], "int32"), np.arange(5, dtype="int32").reshape(1, 5),
                    np.array(-1, "int32"), np.array(0.5, F32)),
                   {"return_indices": False, "force_suppress": True, "invalid_to_bottom": True}),
            Sample((_nms_sample_data().astype("float64"), np.array([5], "int32"),
                    np.arange(5, dtype="int32").reshape(1, 5), np.array(1, "int32"), np.array(0.3, F32)),
                   {"return_indices": False, "top_k": 2}),
            Sample((np.concatenate([_nms_sample_data()] * 2), np.array([3, 5], "int32"),
                    np.arange(10, dtype="int32").reshape(2, 5), np.array(-1, "int32"), np.array(0.0, F32)),
                   {"id_index": -1}),
        ),
        domain=Domain(_nms_domain),
    )
)


# --- roi_align and roi_pool -----------------------------------------------------------------------


def _roi_rel(op: str) -> Callable[[Sequence[Type], Attrs], Type]:
    def rel(types: Sequence[Type], attrs: Attrs) -> Type:
        check_arity(types, 2, op)
        data, rois = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
        if data.ndim != 4 or not data.dtype.startswith("float"):
            raise TypeRelationError(f"{op} expects 4-D float data, got {data}")
        if rois.ndim != 2 or rois.shape[1] not in (5, ANY) or not rois.dtype.startswith("float"):
            raise TypeRelationError(f"{op} expects float rois of shape (num_roi, 5), got {rois}")
        pooled = attrs["pooled_size"]
        if len(pooled) != 2 or min(pooled) < 1:
            raise TypeRelationError(f"{op}: pooled_size must be 2 positive sizes, got {list(pooled)}")
        if op == "vision.roi_align" and attrs["mode"] not in ("avg", "max"):
            raise TypeRelationError(f"{op}: unsupported mode {attrs['mode']!r}; expected 'avg' or 'max'")
        layout = attrs["layout"]
        if layout == "NCHW":
            return TensorType((rois.shape[0], data.shape[1]) + tuple(pooled), data.dtype)
        if layout == "NHWC" and op == "vision.roi_align":
            return TensorType((rois.shape[0],) + tuple(pooled) + (data.shape[3],), data.dtype)
        raise TypeRelationError(f"{op}: unsupported layout {layout!r}")

    return rel


def _align_geometry(ops_: type, roi: Sequence[object], attrs: Attrs) -> tuple[object, ...]:
    """Per roi: (start_h, start_w, roi_h, roi_w, grid_h, grid_w) in float64 / int."""
    scale = attrs["spatial_scale"]
    ph, pw = attrs["pooled_size"]
    start_w, start_h, end_w, end_h = (ops_.f64(v) * scale for v in roi[1:])  # type: ignore[attr-defined]
    roi_h = ops_.maximum(end_h - start_h, 1.0)  # type: ignore[attr-defined]  # malformed rois become 1x1
    roi_w = ops_.maximum(end_w - start_w, 1.0)  # type: ignore[attr-defined]
    if attrs["sample_ratio"] > 0:
        grid_h = grid_w = attrs["sample_ratio"]
    else:
        grid_h = ops_.to_int(ops_.ceil(roi_h / float(ph)))  # type: ignore[attr-defined]
        grid_w = ops_.to_int(ops_.ceil(roi_w / float(pw)))  # type: ignore[attr-defined]
    return start_h, start_w, roi_h, roi_w, grid_h, grid_w


def _sample_coordinate(ops_: type, start: object, extent: object, cell: object, sample: object, grid: object,
                       pooled: int) -> object:
    """start + (cell + (sample + 0.5) / grid) * extent / pooled: TVM's sample point, formed with
    an exact numerator and one division so that the compiled code (which may fuse a*b+c) rounds
    exactly like the reference."""
    numerator = ops_.f64(2 * (cell * grid + sample) + 1) * extent  # type: ignore[attr-defined,operator]
    return start + numerator / ops_.f64(2 * pooled * grid)  # type: ignore[attr-defined,operator]


def _bilinear_clamped(ops_: type, pixel: Callable[[object, object], object], y: object, x: object,
                      height: int, width: int) -> object:
    """TVM's roi_align sample: 0 beyond one pixel outside, else bilinear at the clamped point."""
    outside = ops_.either(ops_.either(y < -1.0, x < -1.0), ops_.either(y > float(height), x > float(width)))  # type: ignore[attr-defined,operator]
    y = ops_.minimum(ops_.maximum(y, 0.0), float(height - 1))  # type: ignore[attr-defined]
    x = ops_.minimum(ops_.maximum(x, 0.0), float(width - 1))  # type: ignore[attr-defined]
    y0, x0 = ops_.to_int(ops_.floor(y)), ops_.to_int(ops_.floor(x))  # type: ignore[attr-defined]
    y1, x1 = ops_.minimum(y0 + 1, height - 1), ops_.minimum(x0 + 1, width - 1)  # type: ignore[attr-defined,operator]
    dy, dx = y - ops_.f64(y0), x - ops_.f64(x0)  # type: ignore[attr-defined,operator]
    value = (pixel(y0, x0) * (1.0 - dx) * (1.0 - dy) + pixel(y0, x1) * dx * (1.0 - dy)  # type: ignore[operator]
             + pixel(y1, x0) * (1.0 - dx) * dy + pixel(y1, x1) * dx * dy)
    return ops_.where(outside, 0.0, value)  # type: ignore[attr-defined]


def _roi_batch(ops_: type, value: object, batch: int) -> object:
    """rois[:, 0] as an image index (clamped: TVM would read outside the batch)."""
    return ops_.maximum(ops_.minimum(ops_.to_int(ops_.f64(value)), batch - 1), 0)  # type: ignore[attr-defined]


def _roi_align_reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, rois = a
    x = np.transpose(data, (0, 3, 1, 2)) if attrs["layout"] == "NHWC" else data
    _, channels, height, width = x.shape
    ph, pw = attrs["pooled_size"]
    out = np.zeros((rois.shape[0], channels, ph, pw))
    for r in range(rois.shape[0]):
        n = int(_roi_batch(NumpyOps, rois[r, 0], x.shape[0]))
        start_h, start_w, roi_h, roi_w, grid_h, grid_w = _align_geometry(NumpyOps, list(rois[r]), attrs)
        count = float(int(grid_h) * int(grid_w))
        for i in range(ph):
            for j in range(pw):
                samples = []
                for iy in range(int(grid_h)):
                    for ix in range(int(grid_w)):
                        y = _sample_coordinate(NumpyOps, start_h, roi_h, i, iy, int(grid_h), ph)
                        xx = _sample_coordinate(NumpyOps, start_w, roi_w, j, ix, int(grid_w), pw)
                        samples.append(_bilinear_clamped(
                            NumpyOps, lambda yy, xi: x[n, :, yy, xi].astype(np.float64), y, xx, height, width))
                stacked = np.array(samples)
                out[r, :, i, j] = (stacked / count).sum(axis=0) if attrs["mode"] == "avg" else stacked.max(axis=0)
    out = out.astype(data.dtype)
    return np.transpose(out, (0, 2, 3, 1)) if attrs["layout"] == "NHWC" else out


def _roi_align_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    data, rois = input_buffers(inputs, "vision.roi_align")
    nhwc = attrs["layout"] == "NHWC"
    batch, channels, height, width = (buffer_dims(data)[p] for p in ((0, 3, 1, 2) if nhwc else (0, 1, 2, 3)))
    ph, pw = attrs["pooled_size"]
    num = buffer_dims(rois)[0]
    r, c, i, j, iy, ix = (ctx.var(name) for name in ("r", "c", "i", "j", "iy", "ix"))
    zero = te.const(0)
    n = ctx.var("n")
    geometry = _align_geometry(LoopOps, [rois[r, k] for k in range(5)], attrs)
    names = ("start_h", "start_w", "roi_h", "roi_w", "grid_h", "grid_w")
    lets = [(te.Var(ctx.fresh(name), g.dtype), g) for name, g in zip(names, geometry)  # type: ignore[union-attr]
            if isinstance(g, te.PrimExpr)]
    bound = {name: var for name, (var, _) in zip([nm for nm, g in zip(names, geometry) if isinstance(g, te.PrimExpr)], lets)}
    start_h, start_w, roi_h, roi_w = (bound[k] for k in names[:4])
    grid_h = bound.get("grid_h", te.const(attrs["sample_ratio"]))
    grid_w = bound.get("grid_w", te.const(attrs["sample_ratio"]))
    acc = te.Buffer(ctx.fresh("acc"), (1,), "float64", scope="local")
    y = _sample_coordinate(LoopOps, start_h, roi_h, i, iy, grid_h, ph)
    x = _sample_coordinate(LoopOps, start_w, roi_w, j, ix, grid_w, pw)

    def pixel(yy: object, xx: object) -> te.PrimExpr:
        index = (n, yy, xx, c) if nhwc else (n, c, yy, xx)
        return te.cast("float64", data[index])  # type: ignore[index]  # PrimExprs

    sample = _bilinear_clamped(LoopOps, pixel, y, x, height, width)
    count = te.cast("float64", grid_h * grid_w)
    avg = attrs["mode"] == "avg"
    update = acc[zero] + sample / count if avg else te.maximum(acc[zero], sample)  # type: ignore[operator]
    init = te.const(0.0 if avg else float(np.finfo(np.float64).min), "float64")
    idx = (r, i, j, c) if nhwc else (r, c, i, j)
    store = Store(out, idx, te.cast(out.dtype, epilogue(te.cast(out.dtype, acc[zero]), idx)))
    cell = Allocate(acc, seq(Store(acc, (zero,), init),
                             For(iy, zero, grid_h, For(ix, zero, grid_w, Store(acc, (zero,), update))), store))
    body: Stmt = For(c, zero, te.const(channels), For(i, zero, te.const(ph), For(j, zero, te.const(pw), cell)))
    for var, value in reversed(lets):
        body = LetStmt(var, value, body)
    body = LetStmt(n, _roi_batch(LoopOps, rois[r, 0], batch), body)  # type: ignore[arg-type]
    return For(r, zero, te.const(num), body)


def _roi_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """One pooled_size map per roi, with data's channels (NCHW or NHWC)."""
    data, rois = dims(inputs[0], "data"), dims(inputs[1], "rois")
    ph, pw = (int(p) for p in attrs["pooled_size"])
    if attrs["layout"] == "NCHW":
        return [fill(out_type, (rois[0], data[1], ph, pw))]
    return [fill(out_type, (rois[0], ph, pw, data[3]))]


def _roi_domain(op: str) -> Callable[[Draw], Sample]:
    def draw(d: Draw) -> Sample:
        n, c, h, w = d.integer(1, 2), d.integer(1, 3), d.integer(1, 7), d.integer(1, 7)
        layout = d.choice(("NCHW", "NHWC")) if op == "vision.roi_align" else "NCHW"
        scale = d.choice((1.0, 0.5, 0.25))
        rng = np.random.default_rng(d.integer(0, 1 << 30))
        num = d.integer(1, 4)
        # Corners on a 1/4 grid (exact under the dyadic scales), some outside the image.
        corners = rng.integers(-4, 4 * max(h, w) * 2 + 4, (num, 4)) / 4.0
        rois = np.concatenate([rng.integers(0, n, (num, 1)).astype(float), corners], axis=1)
        attrs: dict[str, object] = {"pooled_size": [d.integer(1, 3), d.integer(1, 3)], "spatial_scale": scale,
                                    "layout": layout}
        if op == "vision.roi_align":
            attrs["sample_ratio"] = d.choice((-1, 1, 2))
            attrs["mode"] = d.choice(("avg", "max"))
        shape = (n, c, h, w) if layout == "NCHW" else (n, h, w, c)
        dtype = d.choice(("float32", "float32", "float64"))
        return Sample((TensorType(shape, dtype), rois.astype(d.choice(("float32", dtype)))), attrs)

    return draw


_ROIS = np.array([[0, 0, 0, 7, 7], [1, 1.5, 2.25, 4.5, 6.0], [0, -2, 3, 1, 12], [1, 5, 5, 5, 5]], F32)

register(
    OpDef(
        name="vision.roi_align",
        num_inputs=2,
        type_rel=_roi_rel("vision.roi_align"),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=_roi_align_reference,
        shape_func=_roi_shape_rule,
        kernel=_roi_align_kernel,
        attrs=(
            AttrSpec("pooled_size", "ints", REQUIRED),
            AttrSpec("spatial_scale", "float", REQUIRED),
            AttrSpec("sample_ratio", "int", -1),
            AttrSpec("layout", "str", "NCHW"),
            AttrSpec("mode", "str", "avg"),
        ),
        samples=(
            Sample((TensorType((2, 3, 8, 8), F32), _ROIS), {"pooled_size": [2, 2], "spatial_scale": 1.0}),
            Sample((TensorType((2, 4, 4, 3), F32), _ROIS), {"pooled_size": [3, 2], "spatial_scale": 0.5,
                                                            "layout": "NHWC", "mode": "max", "sample_ratio": 2}),
            Sample((TensorType((2, 2, 5, 6), "float64"), _ROIS.astype("float64")),
                   {"pooled_size": [1, 3], "spatial_scale": 0.25, "sample_ratio": 1}),
        ),
        domain=Domain(_roi_domain("vision.roi_align"), ulps=64.0),
    )
)


def _pool_window(ops_: type, roi: Sequence[object], attrs: Attrs, i: object, j: object, height: int,
                 width: int) -> tuple[object, object, object, object]:
    """TVM's roi_pool bin (hstart, hend, wstart, wend): rounded roi corners, bins widened by
    1e-5 against rounding, clamped to the image."""
    scale = attrs["spatial_scale"]
    ph, pw = attrs["pooled_size"]
    start_w, start_h, end_w, end_h = (ops_.to_int(ops_.round(ops_.f64(v) * scale)) for v in roi[1:])  # type: ignore[attr-defined]
    roi_h = ops_.maximum(end_h - start_h + 1, 1)  # type: ignore[attr-defined,operator]
    roi_w = ops_.maximum(end_w - start_w + 1, 1)  # type: ignore[attr-defined,operator]

    def clamp(v: object, size: int) -> object:
        return ops_.minimum(ops_.maximum(v, 0), size)  # type: ignore[attr-defined]

    def edge(cell: object, extent: object, pooled: int) -> object:
        # cell * (extent / pooled) as one rounding of an exact product (immune to a*b+c fusing).
        return ops_.f64(cell * extent) / float(pooled)  # type: ignore[attr-defined,operator]

    hstart = clamp(ops_.to_int(ops_.floor(edge(i, roi_h, ph) + 1e-5)) + start_h, height)  # type: ignore[attr-defined,operator]
    wstart = clamp(ops_.to_int(ops_.floor(edge(j, roi_w, pw) + 1e-5)) + start_w, width)  # type: ignore[attr-defined,operator]
    hend = clamp(ops_.to_int(ops_.ceil(edge(i + 1, roi_h, ph) - 1e-5)) + start_h, height)  # type: ignore[attr-defined,operator]
    wend = clamp(ops_.to_int(ops_.ceil(edge(j + 1, roi_w, pw) - 1e-5)) + start_w, width)  # type: ignore[attr-defined,operator]
    return hstart, hend, wstart, wend


def _roi_pool_reference(a: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    data, rois = a
    _, channels, height, width = data.shape
    ph, pw = attrs["pooled_size"]
    out = np.zeros((rois.shape[0], channels, ph, pw), data.dtype)
    for r in range(rois.shape[0]):
        n = int(_roi_batch(NumpyOps, rois[r, 0], data.shape[0]))
        for i in range(ph):
            for j in range(pw):
                hs, he, ws, we = (int(v) for v in _pool_window(NumpyOps, list(rois[r]), attrs, i, j, height, width))
                if hs < he and ws < we:
                    out[r, :, i, j] = data[n, :, hs:he, ws:we].max(axis=(1, 2))
    return out


def _roi_pool_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: te.Buffer, attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    data, rois = input_buffers(inputs, "vision.roi_pool")
    batch, channels, height, width = buffer_dims(data)
    ph, pw = attrs["pooled_size"]
    r, c, i, j, y, x, n = (ctx.var(name) for name in ("r", "c", "i", "j", "y", "x", "n"))
    zero = te.const(0)
    window = _pool_window(LoopOps, [rois[r, k] for k in range(5)], attrs, i, j, height, width)
    hs, he, ws, we = (ctx.var(name) for name in ("hstart", "hend", "wstart", "wend"))
    acc = te.Buffer(ctx.fresh("acc"), (1,), data.dtype, scope="local")
    lowest = lowest_value(np.dtype(data.dtype))
    result = te.select(te.logical_and(hs < he, ws < we), acc[zero], te.const(0.0, data.dtype))
    idx = (r, c, i, j)
    cell = Allocate(acc, seq(
        Store(acc, (zero,), te.const(float(lowest), data.dtype)),
        For(y, hs, he - hs, For(x, ws, we - ws, Store(acc, (zero,), te.maximum(acc[zero], data[n, c, y, x])))),
        Store(out, idx, te.cast(out.dtype, epilogue(result, idx))),
    ))
    for var, value in reversed(list(zip((hs, he, ws, we), window))):
        cell = LetStmt(var, value, cell)  # type: ignore[arg-type]  # PrimExprs
    body = For(c, zero, te.const(channels), For(i, zero, te.const(ph), For(j, zero, te.const(pw), cell)))
    body = LetStmt(n, _roi_batch(LoopOps, rois[r, 0], batch), body)  # type: ignore[arg-type]
    return For(r, zero, te.const(rois.shape[0]), body)


register(
    OpDef(
        name="vision.roi_pool",
        num_inputs=2,
        type_rel=_roi_rel("vision.roi_pool"),
        pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
        reference=_roi_pool_reference,
        shape_func=_roi_shape_rule,
        kernel=_roi_pool_kernel,
        attrs=(
            AttrSpec("pooled_size", "ints", REQUIRED),
            AttrSpec("spatial_scale", "float", REQUIRED),
            AttrSpec("layout", "str", "NCHW"),
        ),
        samples=(
            Sample((TensorType((2, 3, 8, 8), F32), _ROIS), {"pooled_size": [2, 2], "spatial_scale": 1.0}),
            Sample((TensorType((2, 2, 5, 6), "float64"), _ROIS.astype("float64")),
                   {"pooled_size": [3, 2], "spatial_scale": 0.5}),
        ),
        domain=Domain(_roi_domain("vision.roi_pool")),
    )
)


# --- multibox_transform_loc -----------------------------------------------------------------------


def _transform_loc_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "vision.multibox_transform_loc"
    check_arity(types, 3, op)
    cls_prob, loc_pred, anchor = (tensor_arg(types, k, op) for k in range(3))
    if cls_prob.ndim != 3 or loc_pred.ndim != 2 or anchor.ndim != 3:
        raise TypeRelationError(
            f"{op} expects cls_prob (batch, classes, anchors), loc_pred (batch, anchors * 4) and anchor "
            f"(1, anchors, 4), got {cls_prob}, {loc_pred} and {anchor}")
    if not cls_prob.dtype.startswith("float") or len({cls_prob.dtype, loc_pred.dtype, anchor.dtype}) != 1:
        raise TypeRelationError(f"{op} expects float inputs of one dtype, got {cls_prob}, {loc_pred} and {anchor}")
    batch, _, num = cls_prob.shape
    if ANY not in (num, loc_pred.shape[1]) and loc_pred.shape[1] != num * 4:  # type: ignore[operator]
        raise TypeRelationError(f"{op}: loc_pred {loc_pred} needs 4 values for each of the {num} anchors")
    if ANY not in (num, anchor.shape[1]) and (anchor.shape[1] != num or anchor.shape[2] not in (4, ANY)):
        raise TypeRelationError(f"{op}: anchor {anchor} must be (1, {num}, 4)")
    _floats(op, attrs, "variances", 4)
    return TupleType((TensorType((batch, num, 6), cls_prob.dtype), TensorType((batch,), "int32")))


def _decode(ops_: type, anchor: Sequence[object], pred: Sequence[object], attrs: Attrs) -> list[object]:
    """TVM's SSD box decoding (center offsets scaled by the variances, exp sizes), in float64."""
    vx, vy, vw, vh = _floats("vision.multibox_transform_loc", attrs, "variances", 4)
    al, at, ar, ab = (ops_.f64(v) for v in anchor)  # type: ignore[attr-defined]
    px, py, pw, ph = (ops_.f64(v) for v in pred)  # type: ignore[attr-defined]
    aw, ah = ar - al, ab - at
    ax, ay = (al + ar) / 2.0, (at + ab) / 2.0
    ox, oy = px * vx * aw + ax, py * vy * ah + ay
    ow, oh = ops_.exp(pw * vw) * aw / 2.0, ops_.exp(ph * vh) * ah / 2.0  # type: ignore[attr-defined]
    corners = [ox - ow, oy - oh, ox + ow, oy + oh]
    if attrs["clip"]:
        corners = [ops_.maximum(ops_.minimum(v, 1.0), 0.0) for v in corners]  # type: ignore[attr-defined]
    return corners


def _threshold32(attrs: Attrs) -> float:
    return float(np.float32(attrs["threshold"]))  # TVM compares against a float32 constant


def _transform_loc_reference(a: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, np.ndarray]:
    cls_prob, loc_pred, anchor = a
    batch, classes, num = cls_prob.shape
    out = np.full((batch, num, 6), -1.0)
    counts = np.zeros(batch, "int32")
    for i in range(batch):
        for j in range(num):
            score, cls_id = -1.0, 0
            for k in range(1, classes):
                if float(cls_prob[i, k, j]) > score:
                    score, cls_id = float(cls_prob[i, k, j]), k
            if cls_id > 0 and score < _threshold32(attrs):
                cls_id = 0
            if cls_id > 0:
                box = _decode(NumpyOps, list(anchor[0, j]), list(loc_pred[i, 4 * j:4 * j + 4]), attrs)
                out[i, counts[i]] = [cls_id - 1.0, score] + box
                counts[i] += 1
    return out.astype(cls_prob.dtype), counts


def _transform_loc_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: tuple[te.Buffer, ...], attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    """Per image and anchor: the best non-background class, dropped under the threshold, then
    the decoded box written to the next row (rows past the count are -1; TVM leaves them unset)."""
    cls_prob, loc_pred, anchor = input_buffers(inputs, "vision.multibox_transform_loc")
    boxes, counts = out
    batch, classes, num = buffer_dims(cls_prob)
    i, j, k, q = ctx.var("i"), ctx.var("j"), ctx.var("k"), ctx.var("q")
    zero = te.const(0)
    count, best = _Counter(ctx, "count"), _Counter(ctx, "cls_id")
    score = te.Buffer(ctx.fresh("score"), (1,), "float64", scope="local")
    prob = te.cast("float64", cls_prob[i, k, j])
    scan = For(k, te.const(1), te.const(classes - 1), IfThenElse(
        prob > score[zero], seq(Store(score, (zero,), prob), best.set(k))))
    box = _decode(LoopOps, [anchor[0, j, c] for c in range(4)], [loc_pred[i, j * 4 + c] for c in range(4)], attrs)
    row = [te.cast("float64", best.value - 1), score[zero]] + box
    write = seq(*(Store(boxes, (i, count.value, c), te.cast(boxes.dtype, v)) for c, v in enumerate(row)),  # type: ignore[arg-type]
                count.set(count.value + 1))
    keep = te.logical_and(best.value > 0, score[zero] >= _threshold32(attrs))
    per_anchor = seq(Store(score, (zero,), te.const(-1.0, "float64")), best.set(0), scan, IfThenElse(keep, write))
    c = ctx.var("c")
    fill = For(q, zero, te.const(num), IfThenElse(q >= count.value, For(c, zero, te.const(6), Store(
        boxes, (i, q, c), te.const(-1.0, boxes.dtype)))))
    body = seq(count.set(0), For(j, zero, te.const(num), per_anchor), fill, Store(counts, (i,), count.value))
    return Allocate(count.buffer, Allocate(best.buffer, Allocate(score, For(i, zero, te.const(batch), body))))


def _transform_loc_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """(batch, anchors, 6) detections and (batch,) counts, from cls_prob's dims."""
    batch, _, num = dims(inputs[0], "cls_prob")
    return [fill(out_type, (batch, num, 6), 0), fill(out_type, (batch,), 1)]


def _transform_loc_domain(d: Draw) -> Sample:
    batch, classes, num = d.integer(1, 2), d.integer(1, 4), d.integer(1, 6)
    dtype = d.choice(("float32", "float32", "float64"))
    attrs = {"clip": d.boolean(), "threshold": d.choice((0.01, 0.5, 0.9)),
             "variances": d.choice(([0.1, 0.1, 0.2, 0.2], [1.0, 1.0, 1.0, 1.0]))}
    types = (TensorType((batch, classes, num), dtype), TensorType((batch, num * 4), dtype),
             TensorType((1, num, 4), dtype))
    return Sample(types, attrs, low=-0.25, high=1.0)


register(
    OpDef(
        name="vision.multibox_transform_loc",
        num_inputs=3,
        type_rel=_transform_loc_rel,
        pattern=OpPattern.OPAQUE,
        reference=_transform_loc_reference,
        shape_func=_transform_loc_shape_rule,
        kernel=_transform_loc_kernel,
        attrs=(
            AttrSpec("clip", "bool", True),
            AttrSpec("threshold", "float", 0.01),
            AttrSpec("variances", "any", (0.1, 0.1, 0.2, 0.2)),
        ),
        samples=(
            Sample((TensorType((2, 3, 5), F32), TensorType((2, 20), F32), TensorType((1, 5, 4), F32)),
                   {"threshold": 0.4}, low=-0.25, high=1.0),
            Sample((TensorType((1, 4, 6), "float64"), TensorType((1, 24), "float64"),
                    TensorType((1, 6, 4), "float64")),
                   {"clip": False, "variances": [0.2, 0.1, 0.5, 0.3]}, low=-0.25, high=1.0),
        ),
        domain=Domain(_transform_loc_domain),
    )
)


# --- all_class_non_max_suppression ----------------------------------------------------------------


def _scalar_arg(types: Sequence[Type], k: int, op: str, what: str, kind: str) -> None:
    ty = tensor_arg(types, k, op)
    # A one-element vector counts too; its length may be `?` (TVM does not check these shapes).
    if ty.shape not in ((), (1,), (ANY,)) or not ty.dtype.startswith(kind):
        raise TypeRelationError(f"{op} expects {what} as a {kind} scalar, got {ty}")


def _all_class_rel(types: Sequence[Type], attrs: Attrs) -> Type:
    op = "vision.all_class_non_max_suppression"
    check_arity(types, 5, op)
    boxes, scores = tensor_arg(types, 0, op), tensor_arg(types, 1, op)
    if boxes.ndim != 3 or boxes.shape[2] not in (4, ANY) or not boxes.dtype.startswith("float"):
        raise TypeRelationError(f"{op} expects float boxes of shape (batch, num_boxes, 4), got {boxes}")
    if scores.ndim != 3 or not scores.dtype.startswith("float"):
        raise TypeRelationError(f"{op} expects float scores of shape (batch, num_classes, num_boxes), got {scores}")
    _scalar_arg(types, 2, op, "max_output_boxes_per_class", "int")
    _scalar_arg(types, 3, op, "iou_threshold", "float")
    _scalar_arg(types, 4, op, "score_threshold", "float")
    batch, num = boxes.shape[0], boxes.shape[1]
    classes = scores.shape[1]
    if attrs["output_format"] == "onnx":
        total = ANY if ANY in (batch, classes, num) else batch * classes * num  # type: ignore[operator]
        return TupleType((TensorType((total, 3), "int64"), TensorType((1,), "int64")))
    if attrs["output_format"] == "tensorflow":
        per_batch = ANY if ANY in (classes, num) else classes * num  # type: ignore[operator]
        return TupleType((TensorType((batch, per_batch, 2), "int64"), TensorType((batch, per_batch), F32),
                          TensorType((batch,), "int64")))
    raise TypeRelationError(f"{op}: unsupported output_format {attrs['output_format']!r}; expected 'onnx' or 'tensorflow'")


def _all_class_select(boxes: np.ndarray, scores: np.ndarray, m: int, iou: float, threshold: float
                      ) -> list[list[tuple[int, float]]]:
    """Per (batch, class) row: the selected (box, score) pairs in selection order."""
    batch, classes, num = scores.shape
    rows = []
    for row in range(batch * classes):
        b, c = divmod(row, classes)
        s = [float(v) for v in scores[b, c]]
        order = sorted(range(num), key=lambda j: (-s[j], j))
        live = [s[j] for j in order]
        valid = sum(1 for v in live if v > threshold)
        limit = m if m > 0 else valid
        chosen: list[tuple[int, float]] = []
        if iou > 0 and valid > 0:
            for j in range(valid):
                if len(chosen) >= limit:
                    break
                if live[j] > -1.0:
                    chosen.append((order[j], s[order[j]]))
                    for k in range(j + 1, valid):
                        if live[k] > 0 and _iou(list(boxes[b, order[j]]), list(boxes[b, order[k]])) >= iou:
                            live[k] = -1.0
        rows.append(chosen)
    return rows


def _all_class_reference(a: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    boxes, scores, m, iou, threshold = a
    batch, classes, num = scores.shape
    rows = _all_class_select(boxes, scores, int(np.ravel(m)[0]), float(np.ravel(iou)[0]),
                             float(np.ravel(threshold)[0]))
    if attrs["output_format"] == "onnx":
        out = np.zeros((batch * classes * num, 3), "int64")
        front = 0
        for row, chosen in enumerate(rows):
            for box, _ in chosen:
                out[front] = (row // classes, row % classes, box)
                front += 1
        return out, np.array([front], "int64")
    indices = np.zeros((batch, classes * num, 2), "int64")
    picked = np.zeros((batch, classes * num), F32)
    totals = np.zeros(batch, "int64")
    for row, chosen in enumerate(rows):
        b, c = divmod(row, classes)
        for box, score in chosen:
            indices[b, totals[b]] = (c, box)
            picked[b, totals[b]] = score
            totals[b] += 1
    return indices, picked, totals


def _all_class_kernel(
    ctx: KernelContext, inputs: Sequence[TensorView], out: tuple[te.Buffer, ...], attrs: Attrs, out_type: Type,
    epilogue: Epilogue,
) -> Stmt:
    """Per (batch, class): a stable descending rank sort, the count over score_threshold, greedy
    selection invalidating later overlapping boxes; then the selections collected in order."""
    boxes, scores, max_out, iou_threshold, score_threshold = input_buffers(
        inputs, "vision.all_class_non_max_suppression")
    batch, classes, num = buffer_dims(scores)
    rows = batch * classes
    zero, f64 = te.const(0), "float64"

    def scalar(buffer: te.Buffer) -> te.PrimExpr:
        return buffer[()] if not buffer.shape else buffer[zero]

    def loop(name: str, extent: int, body: Callable[[te.Var], Stmt]) -> Stmt:
        var = ctx.var(name)
        return For(var, zero, te.const(extent), body(var))

    order = te.Buffer(ctx.fresh("order"), (num,), "int32")
    live = te.Buffer(ctx.fresh("live"), (num,), f64)
    selected = te.Buffer(ctx.fresh("selected"), (rows, num), "int32")
    selected_score = te.Buffer(ctx.fresh("selected_score"), (rows, num), f64)
    detections = te.Buffer(ctx.fresh("detections"), (rows,), "int32")
    rank, valid, chosen, front = (_Counter(ctx, name) for name in ("rank", "valid", "chosen", "front"))
    row = ctx.var("row")
    b, c = row // classes, row % classes
    score = lambda j: te.cast(f64, scores[b, c, j])  # noqa: E731

    def ranked(j: te.Var) -> Stmt:
        def count(k: te.Var) -> Stmt:
            better = te.logical_or(score(k) > score(j), te.logical_and(te.eq(score(k), score(j)), k < j))
            return IfThenElse(better, rank.set(rank.value + 1))
        return seq(rank.set(0), loop("k", num, count), Store(order, (rank.value,), j))

    def box(j: te.PrimExpr) -> tuple[te.PrimExpr, ...]:
        x0, y0, x1, y1 = (te.cast(f64, boxes[b, order[j], q]) for q in range(4))
        return te.minimum(x0, x1), te.minimum(y0, y1), te.maximum(x0, x1), te.maximum(y0, y1)

    def iou(j: te.PrimExpr, k: te.PrimExpr) -> te.PrimExpr:
        al, at, ar, ab = box(j)
        bl, bt, br, bb = box(k)
        w = te.maximum(te.minimum(ar, br) - te.maximum(al, bl), 0.0)
        h = te.maximum(te.minimum(ab, bb) - te.maximum(at, bt), 0.0)
        area = h * w
        union = (ar - al) * (ab - at) + (br - bl) * (bb - bt) - area
        return te.select(union <= 0.0, te.const(0.0, f64), area / union)

    m = te.cast("int32", scalar(max_out))
    limit = te.select(m > 0, m, valid.value)
    threshold = te.cast(f64, scalar(iou_threshold))

    def select_box(j: te.Var) -> Stmt:
        def invalidate(k: te.Var) -> Stmt:
            cond = te.logical_and(te.logical_and(k > j, k < valid.value), live[k] > 0.0)
            return IfThenElse(te.logical_and(cond, iou(j, k) >= threshold), Store(live, (k,), te.const(-1.0, f64)))
        take = seq(Store(selected, (row, chosen.value), order[j]), Store(selected_score, (row, chosen.value), live[j]),
                   chosen.set(chosen.value + 1), loop("k", num, invalidate))
        go = te.logical_and(te.logical_and(j < valid.value, chosen.value < limit), live[j] > -1.0)
        return IfThenElse(go, take)

    per_row = seq(
        loop("j", num, ranked),
        loop("j", num, lambda j: Store(live, (j,), score(order[j]))),
        valid.set(0),
        loop("j", num, lambda j: IfThenElse(live[j] > te.cast(f64, scalar(score_threshold)),
                                           valid.set(valid.value + 1))),
        chosen.set(0),
        IfThenElse(te.logical_and(threshold > 0.0, valid.value > 0), loop("j", num, select_box)),
        Store(detections, (row,), chosen.value),
    )
    nms = For(row, zero, te.const(rows), per_row)
    r2 = ctx.var("row")
    if attrs["output_format"] == "onnx":
        indices, total = out

        def emit(j: te.Var) -> Stmt:
            at = front.value + j
            values = (r2 // classes, r2 % classes, selected[r2, j])
            return IfThenElse(j < detections[r2], seq(*(Store(indices, (at, q), te.cast("int64", v))
                                                        for q, v in enumerate(values))))
        collect = seq(
            loop("i", rows * num, lambda i: seq(*(Store(indices, (i, q), te.const(0, "int64")) for q in range(3)))),
            front.set(0),
            For(r2, zero, te.const(rows), seq(loop("j", num, emit), front.set(front.value + detections[r2]))),
            Store(total, (zero,), te.cast("int64", front.value)),
        )
    else:
        indices, picked, totals = out
        bb, cc = ctx.var("b"), ctx.var("c")
        source = bb * classes + cc

        def emit_tf(j: te.Var) -> Stmt:
            at = front.value + j
            return IfThenElse(j < detections[source], seq(
                Store(indices, (bb, at, zero), te.cast("int64", cc)),
                Store(indices, (bb, at, te.const(1)), te.cast("int64", selected[source, j])),
                Store(picked, (bb, at), te.cast(F32, selected_score[source, j])),
            ))
        per_batch = seq(
            loop("i", classes * num, lambda i: seq(
                Store(indices, (bb, i, zero), te.const(0, "int64")), Store(indices, (bb, i, te.const(1)),
                                                                          te.const(0, "int64")),
                Store(picked, (bb, i), te.const(0.0, F32)))),
            front.set(0),
            For(cc, zero, te.const(classes), seq(loop("j", num, emit_tf), front.set(front.value + detections[source]))),
            Store(totals, (bb,), te.cast("int64", front.value)),
        )
        collect = For(bb, zero, te.const(batch), per_batch)
    body: Stmt = seq(nms, collect)
    for counter in (rank, valid, chosen, front):
        body = Allocate(counter.buffer, body)
    for buffer in (order, live, selected, selected_score, detections):
        body = Allocate(buffer, body)
    return body


def _all_class_shape_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[Dim, ...]]:
    """Room for every (batch, class, box) selection: ONNX's (batch * classes * boxes, 3) rows
    and a (1,) count, or TensorFlow's per batch (classes * boxes) pairs, scores and a count."""
    boxes, scores = dims(inputs[0], "boxes"), dims(inputs[1], "scores")
    batch, num, classes = boxes[0], boxes[1], scores[1]
    if attrs["output_format"] == "onnx":
        return [fill(out_type, (int64(batch) * classes * num, 3), 0), (1,)]
    per_batch = int64(classes) * num
    return [fill(out_type, (batch, per_batch, 2), 0), fill(out_type, (batch, per_batch), 1), (batch,)]


def _all_class_domain(d: Draw) -> Sample:
    batch, classes, num = d.integer(1, 2), d.integer(1, 3), d.integer(1, 6)
    rng = np.random.default_rng(d.integer(0, 1 << 30))
    dtype = d.choice(("float32", "float32", "float64"))
    boxes = rng.uniform(0.0, 1.0, (batch, num, 4)).astype(dtype)
    scores = np.round(rng.uniform(-0.3, 1.0, (batch, classes, num)), 1).astype(dtype)  # ties and negatives
    m = np.array(d.choice((-1, 0, 1, 2)), d.choice(("int64", "int32")))
    iou = np.array(d.choice((0.0, 0.2, 0.5, 0.9)), "float32")
    threshold = np.array(d.choice((-0.5, 0.0, 0.3)), "float32")
    return Sample((boxes, scores, m, iou, threshold), {"output_format": d.choice(("onnx", "tensorflow"))})


def _all_class_sample(fmt: str, m: int, iou: float, threshold: float) -> Sample:
    boxes = np.array([[[0, 0, 1, 1], [0.1, 0.1, 1, 1], [2, 2, 3, 3], [0, 0, 0.5, 0.5]],
                      [[0, 0, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1], [5, 5, 6, 6]]], F32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.1], [0.2, 0.3, 0.3, 0.0]],
                       [[0.5, 0.6, 0.7, 0.8], [-0.5, 0.9, 0.0, 0.4]]], F32)
    return Sample((boxes, scores, np.array(m, "int64"), np.array(iou, F32), np.array(threshold, F32)),
                  {"output_format": fmt})


register(
    OpDef(
        name="vision.all_class_non_max_suppression",
        num_inputs=5,
        type_rel=_all_class_rel,
        pattern=OpPattern.OPAQUE,
        reference=_all_class_reference,
        shape_func=_all_class_shape_rule,
        kernel=_all_class_kernel,
        attrs=(AttrSpec("output_format", "str", "onnx"),),
        samples=(
            _all_class_sample("onnx", 10, 0.5, 0.05),
            _all_class_sample("onnx", 1, 0.3, -1.0),
            _all_class_sample("tensorflow", 0, 0.5, 0.15),
            _all_class_sample("tensorflow", 2, 0.0, 0.0),
        ),
        domain=Domain(_all_class_domain),
    )
)
