"""SSD detectors as TVM's frontends print them (the Builder of tests/e2e/tvm_printed.py).

* `ssd_mxnet`: the form `relay.frontend.from_mxnet` gives GluonCV's / the legacy SSD symbol: a
  small conv backbone; per feature level a 3x3 class conv and a 3x3 box conv, each `transpose`d
  to NHWC and `nn.batch_flatten`ed, and `vision.multibox_prior` anchors, flattened too; the
  levels `concatenate`d; class scores `reshape`d to (0, -1, classes), `transpose`d to
  (batch, classes, anchors) and `nn.softmax`ed on axis 1; then MultiBoxDetection as the frontend
  converts it: `vision.multibox_transform_loc` and `vision.non_max_suppression(%boxes, %count,
  %count, -1, 0.5f, force_suppress=True, top_k=..., return_indices=False)` (the valid count is
  passed for the indices too, as TVM's frontend does; NMS does not read it without
  return_indices). MXNet's converters set no spans; padding keeps MXNet's 2-value form.
* `ssd_tflite`: the TFLite SSD-MobileNet tail as `convert_detection_postprocess` prints it:
  box encodings reordered from (y, x, h, w) by split/concatenate, anchors as a constant in
  (l, t, r, b) form, `vision.multibox_transform_loc` with `clip=False` and the variances
  1 / (x, y, w, h)_scale, NMS with `max_output_size` and `top_k`, `vision.get_valid_counts(...,
  0f)`, a `strided_slice` of the top rows, `split` into the six fields, and the
  (boxes, classes, scores, count) outputs.
* `ssd_tflite_tvm08`: the same tail as TVM 0.8 printed it: `threshold=-inff`, and the NMS and
  get_valid_counts attributes as `meta[relay.attrs.*][0]` entries of the metadata section.

* `nms_v5_tflite`: TFLite's NON_MAX_SUPPRESSION_V5 (get_valid_counts, NMS returning indices,
  squeeze, strided_slice, take).

All are static-shaped, so all compile.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

import numpy as np

from tests.e2e.tvm_printed import Builder, Printed, Value, _pair, relu


def _conv(b: Builder, x: Value, name: str, out_ch: int, k: int = 3, stride: int = 1) -> Value:
    """mx.sym.Convolution with a bias, as _mx_conv2d converts it (2-value padding)."""
    n, c, h, w = x.shape
    pad = k // 2
    weight = b.weight(f"{name}_weight", (out_ch, c, k, k))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    attrs = ([f"strides={_pair([stride, stride])}"] if stride != 1 else []) + [
        f"padding={_pair([pad, pad])}", f"channels={out_ch}", f"kernel_size={_pair([k, k])}"]
    y = b.call("nn.conv2d", [x, weight], (n, out_ch, oh, ow), ", ".join(attrs))
    return b.call("nn.bias_add", [y, b.weight(f"{name}_bias", (out_ch,))], y.shape)


def _floats(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:g}f" for v in values) + "]"


def _flatten(b: Builder, x: Value) -> Value:
    return b.call("nn.batch_flatten", [x], (x.shape[0], int(np.prod(x.shape[1:]))))


def _nhwc_flat(b: Builder, x: Value) -> Value:
    n, c, h, w = x.shape
    return _flatten(b, b.call("transpose", [x], (n, h, w, c), "axes=[0, 2, 3, 1]"))


def _concat(b: Builder, parts: Sequence[Value]) -> Value:
    pair = b.tuple(parts)
    return b.call("concatenate", [pair], (parts[0].shape[0], sum(p.shape[1] for p in parts)), "axis=1")


def ssd_mxnet(weights: str = "constants") -> Printed:
    b = Builder("ssd_mxnet", weights, seed=21, spans=False)
    x = b.input("data", (1, 3, 32, 32))
    y = relu(b, _conv(b, x, "conv1", 8, stride=2))
    level1 = relu(b, _conv(b, y, "conv2", 16, stride=2))  # 8x8
    level2 = relu(b, _conv(b, level1, "conv3", 16, stride=2))  # 4x4
    classes = 4  # three object classes and the background
    levels = [(level1, [0.2, 0.272], [1.0, 2.0, 0.5]), (level2, [0.37, 0.447], [1.0, 2.0, 0.5])]
    locs, clss, anchors = [], [], []
    for i, (feature, sizes, ratios) in enumerate(levels):
        per_pixel = len(sizes) + len(ratios) - 1
        locs.append(_nhwc_flat(b, _conv(b, feature, f"multibox_loc_pred{i}", per_pixel * 4)))
        clss.append(_nhwc_flat(b, _conv(b, feature, f"multibox_cls_pred{i}", per_pixel * classes)))
        _, _, h, w = feature.shape
        prior = b.call("vision.multibox_prior", [feature], (1, h * w * per_pixel, 4),
                       f"sizes={_floats(sizes)}, ratios={_floats(ratios)}")
        anchors.append(_flatten(b, prior))
    loc_preds = _concat(b, locs)
    cls_preds = _concat(b, clss)
    num = cls_preds.shape[1] // classes
    cls_preds = b.call("reshape", [cls_preds], (1, num, classes), f"newshape=[0, -1, {classes}]")
    cls_preds = b.call("transpose", [cls_preds], (1, classes, num), "axes=[0, 2, 1]")
    anchor_boxes = b.call("reshape", [_concat(b, anchors)], (1, num, 4), "newshape=[0, -1, 4]")
    cls_prob = b.call("nn.softmax", [cls_preds], cls_preds.shape, "axis=1")
    boxes, count = Value("", (1, num, 6)), Value("", (1,), "int32")
    decoded = b.call_tuple("vision.multibox_transform_loc", [cls_prob, loc_preds, anchor_boxes], [boxes, count])
    args = [b.get(decoded, 0), b.get(decoded, 1), b.get(decoded, 1), b.scalar(-1, "int32"), b.scalar(0.5)]
    return b.finish(b.call("vision.non_max_suppression", args, (1, num, 6),
                           "force_suppress=True, top_k=64, return_indices=False"))


def _yxhw_anchors(rng: np.random.Generator, num: int) -> np.ndarray:
    """SSD anchors as TFLite stores them: (y centre, x centre, height, width)."""
    centres = rng.uniform(0.1, 0.9, (num, 2))
    return np.concatenate([centres, rng.uniform(0.1, 0.4, (num, 2))], axis=1).astype("float32")


def ssd_tflite(weights: str = "constants") -> Printed:
    """TFLite_Detection_PostProcess after the class logits' `sigmoid` (SSD-MobileNet's tail)."""
    b = Builder("ssd_tflite", weights, seed=22, spans=False)
    num, classes, max_detections = 48, 3, 10
    loc = b.input("box_encodings", (1, num, 4))
    logits = b.input("class_predictions", (1, num, classes + 1))
    scores = b.call("sigmoid", [logits], logits.shape)  # the graph's logistic before the post-process
    # box encodings (y, x, h, w) -> (x, y, w, h)
    column = Value("", (1, num, 1))
    parts = b.call_tuple("split", [loc], [column] * 4, "indices_or_sections=4, axis=2")
    loc = b.call("concatenate", [b.tuple([b.get(parts, k) for k in (1, 0, 3, 2)])], (1, num, 4), "axis=2")
    # anchors (yc, xc, h, w) -> (l, t, r, b)
    anchors = b.weight("_param_1", (num, 4), array=_yxhw_anchors(b.rng, num))
    half = Value("", (num, 1))
    a = b.call_tuple("split", [anchors], [half] * 4, "indices_or_sections=4, axis=1")
    h3, h1 = b.get(a, 3), b.get(a, 1)
    w_neg = b.call("multiply", [h3, b.scalar(-0.5)], half.shape)
    h2, h0 = b.get(a, 2), b.get(a, 0)
    h_neg = b.call("multiply", [h2, b.scalar(-0.5)], half.shape)
    w_pos = b.call("multiply", [h3, b.scalar(0.5)], half.shape)
    h_pos = b.call("multiply", [h2, b.scalar(0.5)], half.shape)
    ltrb = [b.call("add", [h1, w_neg], half.shape), b.call("add", [h0, h_neg], half.shape),
            b.call("add", [h1, w_pos], half.shape), b.call("add", [h0, h_pos], half.shape)]
    anchors = b.call("concatenate", [b.tuple(ltrb)], (num, 4), "axis=1")
    cls_pred = b.call("transpose", [scores], (1, classes + 1, num), "axes=[0, 2, 1]")
    loc = b.call("reshape", [loc], (1, num * 4), f"newshape=[1, {num * 4}]")
    anchors = b.call("expand_dims", [anchors], (1, num, 4), "axis=0")
    boxes, count = Value("", (1, num, 6)), Value("", (1,), "int32")
    decoded = b.call_tuple("vision.multibox_transform_loc", [cls_pred, loc, anchors], [boxes, count],
                           f"clip=False, threshold=0.3f, variances={_floats([0.1, 0.1, 0.2, 0.2])}")
    args = [b.get(decoded, 0), b.get(decoded, 1), b.get(decoded, 1), b.scalar(max_detections, "int32"),
            b.scalar(0.6)]
    kept = b.call("vision.non_max_suppression", args, (1, num, 6), f"top_k={num}, return_indices=False")
    counted = b.call_tuple("vision.get_valid_counts", [kept, b.scalar(0.0)],
                           [Value("", (1,), "int32"), Value("", (1, num, 6)), Value("", (1, num), "int32")])
    top = b.call("strided_slice", [b.get(counted, 1)], (1, max_detections, 6),
                 f"begin=[0, 0, 0], end=[1, {max_detections}, 6], strides=[1], axes=None")
    field = Value("", (1, max_detections, 1))
    fields = b.call_tuple("split", [top], [field] * 6, "indices_or_sections=6, axis=2")
    corners = b.tuple([b.get(fields, k) for k in (3, 2, 5, 4)])
    cls_ids, best = b.get(fields, 0), b.get(fields, 1)
    out_boxes = b.call("concatenate", [corners], (1, max_detections, 4), "axis=2")
    cls_ids = b.call("reshape", [cls_ids], (1, max_detections), "newshape=[1, -1]")
    best = b.call("reshape", [best], (1, max_detections), "newshape=[1, -1]")
    return b.finish(b.tuple([out_boxes, cls_ids, best, b.get(counted, 0)]))


def _attrs_into_metadata(text: str, nodes: dict[str, dict[str, str]]) -> str:
    """Add one `relay.attrs.*` node per key to the text's metadata section (made if missing)."""
    body, _, section = text.partition("#[metadata]\n")
    graph = json.loads(section) if section else {
        "root": 1, "nodes": [{"type_key": ""}, {"type_key": "Map", "keys": [], "data": []}],
        "b64ndarrays": [], "attrs": {"tvm_version": "0.8.0"}}
    root = graph["nodes"][graph["root"]]
    for key, fields in nodes.items():
        root["keys"].append(key)
        root["data"].append(len(graph["nodes"]))
        graph["nodes"].append({"type_key": "Array", "data": [len(graph["nodes"]) + 1]})
        graph["nodes"].append({"type_key": key, "attrs": fields})
    return body.rstrip("\n") + "\n\n#[metadata]\n" + json.dumps(graph, indent=2) + "\n"


def ssd_tflite_tvm08(weights: str = "constants") -> Printed:
    """ssd_tflite as TVM 0.8 printed it: the attributes of vision.non_max_suppression and
    vision.get_valid_counts as `meta[relay.attrs.*][0]` (the printer's fallback when a call's
    attrs are not of its op's registered attrs type)."""
    printed = ssd_tflite(weights)
    text = printed.text.replace("top_k=48, return_indices=False)", "meta[relay.attrs.NonMaximumSuppressionAttrs][0])")
    text = text.replace("threshold=0.3f", "threshold=-inff")  # TVM 0.8 passed -inf: every anchor decoded
    text = re.sub(r"(vision\.get_valid_counts\(%\d+, 0f /\* ty=float32 \*/)\)",
                  r"\1, meta[relay.attrs.GetValidCountsAttrs][0])", text)
    text = _attrs_into_metadata(text, {
        "relay.attrs.NonMaximumSuppressionAttrs": {
            "coord_start": "2", "force_suppress": "0", "id_index": "0", "invalid_to_bottom": "0",
            "return_indices": "0", "score_index": "1", "top_k": "48"},
        "relay.attrs.GetValidCountsAttrs": {"id_index": "0", "score_index": "1"},
    })
    assert text.count("meta[relay.attrs.") == 2
    return Printed("ssd_tflite_tvm08", text, printed.inputs, printed.weights, printed.weights_form)


def nms_v5_tflite(weights: str = "constants") -> Printed:
    """TFLite's NON_MAX_SUPPRESSION_V5 as convert_nms_v5 prints it: scores and boxes
    concatenated to (1, N, 5), `vision.get_valid_counts` with id_index=-1 and score_index=0,
    NMS returning indices (coord_start=1), then the selected indices, their scores and the
    count. (`weights` is unused: the model has none.)"""
    b = Builder("nms_v5_tflite", weights, seed=23, spans=False)
    num, max_out = 24, 6
    boxes = b.input("boxes", (num, 4))
    scores = b.input("scores", (num,))
    column = b.call("expand_dims", [scores], (num, 1), "axis=-1")
    data = b.call("concatenate", [b.tuple([column, boxes])], (num, 5), "axis=-1")
    data = b.call("expand_dims", [data], (1, num, 5), "axis=0")
    counted = b.call_tuple("vision.get_valid_counts", [data, b.scalar(0.2)],
                           [Value("", (1,), "int32"), Value("", (1, num, 5)), Value("", (1, num), "int32")],
                           "id_index=-1, score_index=0")
    args = [b.get(counted, 1), b.get(counted, 0), b.get(counted, 2), b.scalar(max_out, "int32"), b.scalar(0.4)]
    kept = b.call_tuple("vision.non_max_suppression", args,
                        [Value("", (1, num), "int32"), Value("", (1, 1), "int32")],
                        "force_suppress=True, coord_start=1, score_index=0, id_index=-1")
    selected = b.call("squeeze", [b.get(kept, 0)], (num,), "axis=[0]", dtype="int32")
    selected = b.call("strided_slice", [selected], (max_out,),
                      f"begin=[0], end=[{max_out}], strides=[1], axes=None", dtype="int32")
    count = b.call("squeeze", [b.get(kept, 1)], (1,), "axis=[1]", dtype="int32")
    chosen = b.call("take", [scores, selected], (max_out,), "axis=0")
    return b.finish(b.tuple([selected, chosen, count]))


MODELS: dict[str, Callable[[str], Printed]] = {
    "ssd_mxnet": ssd_mxnet, "ssd_tflite": ssd_tflite, "ssd_tflite_tvm08": ssd_tflite_tvm08,
    "nms_v5_tflite": nms_v5_tflite}
BLAS_MODELS = ("ssd_mxnet",)
