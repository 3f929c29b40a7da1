"""SSD detectors as TVM's MXNet and TFLite frontends print them (tests/e2e/tvm_printed_detection.py)
parse, round-trip, type to their `ty=` comments, compile and match the interpreter; the decoded
detections are checked against numpy written here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.ir.structural import structural_equal
from compiler.parser import parse
from tests.e2e.printed_checks import (assert_outputs_match, assert_round_trips_with_printed_types,
                                      compile_and_run, interpret)
from tests.e2e.tvm_printed import WEIGHT_FORMS
from tests.e2e.tvm_printed_detection import BLAS_MODELS, MODELS, ssd_tflite

# The TVM 0.8 spellings compute what their newer siblings do: one weight form is enough.
BUILDS = [(name, form, "c") for name in MODELS for form in WEIGHT_FORMS
          if not (name.endswith("_tvm08") and form == "params")] + [
    (name, "constants", "cblas, c") for name in BLAS_MODELS]


@pytest.mark.parametrize("form", WEIGHT_FORMS)
@pytest.mark.parametrize("name", list(MODELS))
def test_detector_parses_round_trips_and_types_as_printed(name: str, form: str) -> None:
    assert_round_trips_with_printed_types(MODELS[name](form))


@pytest.mark.parametrize(("name", "form", "target"), BUILDS)
def test_compiled_detector_matches_the_interpreter(name: str, form: str, target: str, tmp_path: Path) -> None:
    printed = MODELS[name](form)
    want = interpret(printed, tmp_path, printed.make_inputs(seed=7))
    assert_outputs_match(compile_and_run(tmp_path, target), want)


def test_ssd_mxnet_keeps_detections_and_suppresses_overlaps(tmp_path: Path) -> None:
    """Not a vacuous comparison: some anchors survive the threshold and NMS, some are dropped."""
    printed = MODELS["ssd_mxnet"]("constants")
    (out,) = interpret(printed, tmp_path, printed.make_inputs(seed=7)).values()
    kept = out[0, :, 0] >= 0
    assert 0 < kept.sum() < out.shape[1]
    assert (np.diff(out[0, kept, 1]) <= 0).all()  # in descending score order
    # NMS (without invalid_to_bottom) leaves a suppressed box's row as -1 in its sorted place.
    assert (out[0, ~kept] == -1).all() and not kept[: np.flatnonzero(kept)[-1]].all()


def _ssd_tflite_numpy(loc: np.ndarray, logits: np.ndarray, anchors: np.ndarray) -> tuple[np.ndarray, ...]:
    """The detection post-process with TFLite's semantics: decode, best class, threshold 0.3,
    greedy same-class NMS at IoU 0.6, at most 10 detections."""
    scores = 1 / (1 + np.exp(-logits[0].astype(np.float64)))
    yc, xc, h, w = anchors.T.astype(np.float64)
    dy, dx, dh, dw = loc[0].T.astype(np.float64)
    cy, cx = dy * 0.1 * h + yc, dx * 0.1 * w + xc
    hh, hw = np.exp(dh * 0.2) * h / 2, np.exp(dw * 0.2) * w / 2
    boxes = np.stack([cx - hw, cy - hh, cx + hw, cy + hh], axis=1)  # l, t, r, b
    cls = scores[:, 1:].argmax(axis=1)
    best = scores[np.arange(len(cls)), cls + 1]
    order = [j for j in np.argsort(-best, kind="stable") if best[j] >= 0.3]

    def iou(a: np.ndarray, b: np.ndarray) -> float:
        inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / union if union > 0 else 0.0

    kept: list[int] = []
    for j in order:
        if len(kept) < 10 and all(cls[k] != cls[j] or iou(boxes[k], boxes[j]) < 0.6 for k in kept):
            kept.append(j)
    out_boxes = np.full((10, 4), -1.0)
    out_cls, out_scores = np.full(10, -1.0), np.full(10, -1.0)
    for row, j in enumerate(kept):
        out_boxes[row] = boxes[j][[1, 0, 3, 2]]  # t, l, b, r as TFLite returns them
        out_cls[row], out_scores[row] = cls[j], best[j]
    return out_boxes, out_cls, out_scores, len(kept)


def test_compiled_ssd_tflite_matches_numpy(tmp_path: Path) -> None:
    printed = ssd_tflite("constants")
    inputs = printed.make_inputs(seed=7)
    interpret(printed, tmp_path, inputs)
    got = compile_and_run(tmp_path, "c")
    boxes, cls, scores, count = _ssd_tflite_numpy(inputs["box_encodings"], inputs["class_predictions"],
                                                  printed.weights["_param_1"])
    assert got["out3"].tolist() == [count] and 0 < count
    np.testing.assert_allclose(got["out0"][0], boxes, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["out1"][0], cls)
    np.testing.assert_allclose(got["out2"][0], scores, rtol=1e-5)


@pytest.mark.parametrize("form", WEIGHT_FORMS)
def test_attributes_printed_as_metadata_mean_what_the_inline_ones_do(form: str) -> None:
    inline, meta = MODELS["ssd_tflite"](form), MODELS["ssd_tflite_tvm08"](form)
    assert "meta[relay.attrs.NonMaximumSuppressionAttrs][0]" in meta.text
    assert structural_equal(parse(inline.text.replace("threshold=0.3f", "threshold=-inff")), parse(meta.text))


def test_compiled_nms_v5_selects_what_greedy_nms_selects(tmp_path: Path) -> None:
    printed = MODELS["nms_v5_tflite"]("constants")
    inputs = printed.make_inputs(seed=5)
    interpret(printed, tmp_path, inputs)
    got = compile_and_run(tmp_path, "c")
    boxes, scores = inputs["boxes"].astype(np.float64), inputs["scores"]

    def iou(a: np.ndarray, b: np.ndarray) -> float:
        (al, ar), (at, ab) = sorted(a[[0, 2]]), sorted(a[[1, 3]])
        (bl, br), (bt, bb) = sorted(b[[0, 2]]), sorted(b[[1, 3]])
        inter = max(0.0, min(ar, br) - max(al, bl)) * max(0.0, min(ab, bb) - max(at, bt))
        union = (ar - al) * (ab - at) + (br - bl) * (bb - bt) - inter
        return inter / union if union > 0 else 0.0

    kept: list[int] = []
    for j in sorted(np.flatnonzero(scores > 0.2), key=lambda j: -scores[j]):
        if len(kept) < 6 and all(iou(boxes[k], boxes[j]) < 0.4 for k in kept):
            kept.append(j)
    count = int(got["out2"][0])
    assert count == len(kept) > 0
    assert got["out0"][:count].tolist() == kept and (got["out0"][count:] == -1).all()
    np.testing.assert_array_equal(got["out1"][:count], scores[kept])
