"""Quantized CNNs as TVM's TFLite and PyTorch frontends print them (the Builder of
tests/e2e/tvm_printed.py, no spans).

* `qmobilenet_v2_tflite`: a full-integer (int8, per-channel) TFLite MobileNet-v2: `qnn.quantize`
  of the float input; NHWC `qnn.conv2d` with HWIO kernels (HWOI and `groups` for the depthwise
  one), int8 weights, per-channel kernel scales as `meta[relay.Constant]` vectors and
  `out_dtype="int32"`; `nn.bias_add(..., axis=3)` of an int32 bias; `qnn.requantize` from the
  per-channel product scales (axis=3) to int8; the fused relu6 as `clip` to the quantized
  [0, 6]; an inverted-residual block closed by `qnn.add`; the average pool as `cast` to int32,
  `nn.avg_pool2d` and `cast` back; `reshape`; `qnn.dense` (per-tensor) with `units`; and the
  int8 logits `qnn.dequantize`d.
* `qmobilenet_v1_tflite_uint8`: an older uint8 TFLite model: uint8 input, per-tensor kernel
  scales and non-zero kernel zero points, requantize without an axis, the quantized softmax as
  dequantize, `nn.softmax`, `qnn.quantize` to 1/256.
* `qresnet_pytorch`: a PyTorch (fbgemm) quantized ResNet basic block: `qnn.quantize(...,
  out_dtype="uint8", axis=1)`; uint8 x int8 `qnn.conv2d` with per-tensor scales as `0.01f`
  literals and zero points as `114` literals; the float bias quantized in the graph
  (`qnn.quantize(%bias, s_in * s_w, 0, out_dtype="int32", axis=0)`); `qnn.requantize(...,
  axis=1, out_dtype="int32")`, `clip` and `cast` to uint8 (what `_do_bias_and_requantize`
  emits); `qnn.add` then `clip` for add_relu; the adaptive average pool with the int32 upcast;
  `nn.batch_flatten`, `qnn.dense`, `qnn.dequantize`.

Both return (the quantized logits, their dequantized values). Scales are chosen so that each
layer's integers use a good part of their range (the tests check they are not saturated).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tests.e2e.tvm_printed import Builder, Printed, Value, _pair


@dataclass(frozen=True)
class QValue:
    """A quantized tensor with its scale and zero point."""

    value: Value
    scale: float
    zero_point: int


def _f(value: float) -> float:
    """A float32 value as TVM prints it (6 significant digits), so numbers here equal the text's."""
    return float(f"{np.float32(value):g}")


def _scales(b: Builder, values: np.ndarray) -> Value:
    return b.constant(np.array([_f(v) for v in values], "float32"))


def _out_scale(in_scale: float, w_scale: float, fan_in: int) -> float:
    """An output scale that puts the accumulator's typical magnitude (about sqrt(fan_in) times
    ~30 input steps times ~70 weight steps) at ~40 output steps."""
    return _f(in_scale * w_scale * math.sqrt(fan_in) * 30 * 70 / 40)


# ----------------------------------------------------------------------------------------------
# TFLite, int8 per-channel, NHWC


def _tflite_conv(b: Builder, x: QValue, out_ch: int, k: int, stride: int = 1, depthwise: bool = False,
                 relu6: bool = True, dtype: str = "int8") -> QValue:
    """CONV_2D / DEPTHWISE_CONV_2D: int8 with per-channel kernel scales (zero point 0), or
    uint8 with one kernel scale and zero point (the older quantized models)."""
    n, h, w, c = x.value.shape
    out_ch = c if depthwise else out_ch
    shape = (k, k, c, 1) if depthwise else (k, k, c, out_ch)
    if dtype == "int8":
        kernel = b.rng.integers(-127, 128, shape).astype("int8")
        w_zp, w_scales = 0, np.array([_f(s) for s in b.rng.uniform(0.004, 0.012, out_ch)], "float32")
        lowest, highest = -128, 127
    else:
        w_zp = int(b.rng.integers(110, 140))
        kernel = np.clip(b.rng.normal(w_zp, 45, shape), 0, 255).astype("uint8")
        w_scales = np.full(out_ch, _f(b.rng.uniform(0.004, 0.012)), "float32")
        lowest, highest = 0, 255
    weight = b.weight(f"_param_{len(b.weights) + 1}", shape, array=kernel)
    oh, ow = (h + stride - 1) // stride, (w + stride - 1) // stride
    total = max((oh - 1) * stride + k - h, 0)
    pad = [total // 2, total // 2, total - total // 2, total - total // 2]
    attrs = [f"strides={_pair([stride, stride])}"] if stride != 1 else []
    attrs.append(f"padding={_pair(pad)}")
    if depthwise:
        attrs.append(f"groups={c}")
    attrs += [f"channels={out_ch}", f"kernel_size={_pair([k, k])}", 'data_layout="NHWC"',
              f'kernel_layout="{"HWOI" if depthwise else "HWIO"}"', 'out_dtype="int32"']
    per_channel = dtype == "int8"
    kernel_scale = _scales(b, w_scales) if per_channel else b.scalar(float(w_scales[0]))
    args = [x.value, weight, b.scalar(x.zero_point, "int32"), b.scalar(w_zp, "int32"), b.scalar(x.scale),
            kernel_scale]
    acc = b.call("qnn.conv2d", args, (n, oh, ow, out_ch), ", ".join(attrs), dtype="int32")
    bias = b.weight(f"_param_{len(b.weights) + 1}", (out_ch,),
                    array=b.rng.integers(-3000, 3000, out_ch).astype("int32"))
    acc = b.call("nn.bias_add", [acc, bias], acc.shape, "axis=3", dtype="int32")
    fan_in = k * k * (1 if depthwise else c)
    out_scale = _out_scale(x.scale, float(w_scales.mean()), fan_in)
    if relu6:
        zp = lowest
    else:
        zp = int(b.rng.integers(-10, 10)) if dtype == "int8" else int(b.rng.integers(120, 136))
    products = (np.float32(x.scale) * w_scales).astype("float32")
    input_scale = _scales(b, products) if per_channel else b.scalar(_f(float(products[0])))
    y = b.call("qnn.requantize", [acc, input_scale, b.scalar(0, "int32"), b.scalar(out_scale),
                                  b.scalar(zp, "int32")], acc.shape,
               f'{"axis=3, " if per_channel else ""}out_dtype="{dtype}"', dtype=dtype)
    if relu6:
        top = min(highest, zp + round(6.0 / out_scale))
        y = b.call("clip", [y], y.shape, f"a_min={zp}f, a_max={top}f", dtype=dtype)
    return QValue(y, out_scale, zp)


def _qadd(b: Builder, x: QValue, y: QValue, dtype: str) -> QValue:
    scale = _f(max(x.scale, y.scale) * 1.3)
    zp = int(b.rng.integers(-5, 5)) if dtype == "int8" else int(b.rng.integers(3, 8))  # before a relu
    args = [x.value, y.value, b.scalar(x.scale), b.scalar(x.zero_point, "int32"), b.scalar(y.scale),
            b.scalar(y.zero_point, "int32"), b.scalar(scale), b.scalar(zp, "int32")]
    return QValue(b.call("qnn.add", args, x.value.shape, dtype=dtype), scale, zp)


def qmobilenet_v2_tflite(weights: str = "constants") -> Printed:
    b = Builder("qmobilenet_v2_tflite", weights, seed=31, spans=False)
    image = b.input("input", (1, 16, 16, 3))
    x = QValue(b.call("qnn.quantize", [image, b.scalar(0.0235), b.scalar(-1, "int32")], image.shape,
                      'out_dtype="int8"', dtype="int8"), 0.0235, -1)
    x = _tflite_conv(b, x, 8, 3, stride=2)
    # the inverted residual: expand 1x1, depthwise 3x3, linear project 1x1, add
    y = _tflite_conv(b, x, 16, 1)
    y = _tflite_conv(b, y, 0, 3, depthwise=True)
    y = _tflite_conv(b, y, 8, 1, relu6=False)
    x = _qadd(b, y, x, "int8")
    n, h, w, c = x.value.shape
    pooled = b.call("cast", [x.value], x.value.shape, 'dtype="int32"', dtype="int32")
    pooled = b.call("nn.avg_pool2d", [pooled], (n, 1, 1, c),
                    f'pool_size=[{h}, {w}], padding=[0, 0, 0, 0], layout="NHWC"', dtype="int32")
    pooled = b.call("cast", [pooled], pooled.shape, 'dtype="int8"', dtype="int8")
    flat = b.call("reshape", [pooled], (1, c), f"newshape=[1, {c}]", dtype="int8")
    fc = b.weight(f"_param_{len(b.weights) + 1}", (10, c), array=b.rng.integers(-127, 128, (10, c)).astype("int8"))
    w_scale = 0.01
    acc = b.call("qnn.dense", [flat, fc, b.scalar(x.zero_point, "int32"), b.scalar(0, "int32"),
                               b.scalar(x.scale), b.scalar(w_scale)], (1, 10), 'units=10, out_dtype="int32"',
                 dtype="int32")
    bias = b.weight(f"_param_{len(b.weights) + 1}", (10,), array=b.rng.integers(-500, 500, 10).astype("int32"))
    acc = b.call("nn.bias_add", [acc, bias], acc.shape, dtype="int32")
    out_scale, zp = _out_scale(x.scale, w_scale, c), 3
    logits = b.call("qnn.requantize", [acc, b.scalar(_f(x.scale * w_scale)), b.scalar(0, "int32"),
                                       b.scalar(out_scale), b.scalar(zp, "int32")], acc.shape,
                    'out_dtype="int8"', dtype="int8")
    real = b.call("qnn.dequantize", [logits, b.scalar(out_scale), b.scalar(zp, "int32")], logits.shape)
    return b.finish(b.tuple([logits, real]))


# ----------------------------------------------------------------------------------------------
# PyTorch (fbgemm), uint8 activations, int8 per-tensor weights, NCHW


def _requantize_to_uint8(b: Builder, acc: Value, scale_in: float, fan_in: int, relu: bool) -> QValue:
    """_do_bias_and_requantize: requantize to int32, clip at the output zero point (with relu)
    or 0, cast to uint8."""
    scale, zp = _out_scale(scale_in, 1.0, fan_in), int(b.rng.integers(50, 80))
    y = b.call("qnn.requantize", [acc, b.scalar(scale_in), b.scalar(0, "int32"), b.scalar(scale),
                                  b.scalar(zp, "int32")], acc.shape, 'axis=1, out_dtype="int32"', dtype="int32")
    y = b.call("clip", [y], y.shape, f"a_min={zp if relu else 0}f, a_max=255f", dtype="int32")
    return QValue(b.call("cast", [y], y.shape, 'dtype="uint8"', dtype="uint8"), scale, zp)


def _torch_conv(b: Builder, x: QValue, name: str, out_ch: int, relu: bool) -> QValue:
    n, c, h, w = x.value.shape
    weight = b.weight(f"{name}_weight", (out_ch, c, 3, 3),
                      array=b.rng.integers(-127, 128, (out_ch, c, 3, 3)).astype("int8"))
    w_scale = _f(b.rng.uniform(0.004, 0.012))
    args = [x.value, weight, b.scalar(x.zero_point, "int32"), b.scalar(0, "int32"), b.scalar(x.scale),
            b.scalar(w_scale)]
    acc = b.call("qnn.conv2d", args, (n, out_ch, h, w),
                 f'padding=[1, 1, 1, 1], channels={out_ch}, kernel_size=[3, 3], out_dtype="int32"', dtype="int32")
    product = _f(x.scale * w_scale)
    bias = b.weight(f"{name}_bias", (out_ch,), scale=0.05)
    qbias = b.call("qnn.quantize", [bias, b.scalar(product), b.scalar(0, "int32")], (out_ch,),
                   'out_dtype="int32", axis=0', dtype="int32")
    acc = b.call("nn.bias_add", [acc, qbias], acc.shape, dtype="int32")
    return _requantize_to_uint8(b, acc, product, c * 9, relu)


def qresnet_pytorch(weights: str = "constants") -> Printed:
    b = Builder("qresnet_pytorch", weights, seed=32, spans=False)
    image = b.input("input", (1, 3, 16, 16))
    x = QValue(b.call("qnn.quantize", [image, b.scalar(0.0186), b.scalar(114, "int32")], image.shape,
                      'out_dtype="uint8", axis=1', dtype="uint8"), 0.0186, 114)
    x = _torch_conv(b, x, "conv1", 8, relu=True)
    y = _torch_conv(b, x, "layer1.0.conv1", 8, relu=True)
    y = _torch_conv(b, y, "layer1.0.conv2", 8, relu=False)
    s = _qadd(b, y, x, "uint8")
    x = QValue(b.call("clip", [s.value], s.value.shape, f"a_min={s.zero_point}f, a_max=255f", dtype="uint8"),
               s.scale, s.zero_point)
    n, c = x.value.shape[:2]
    pooled = b.call("cast", [x.value], x.value.shape, 'dtype="int32"', dtype="int32")
    pooled = b.call("nn.adaptive_avg_pool2d", [pooled], (n, c, 1, 1), "output_size=[1, 1]", dtype="int32")
    pooled = b.call("cast", [pooled], pooled.shape, 'dtype="uint8"', dtype="uint8")
    flat = b.call("nn.batch_flatten", [pooled], (n, c), dtype="uint8")
    fc = b.weight("fc_weight", (10, c), array=b.rng.integers(-127, 128, (10, c)).astype("int8"))
    w_scale = 0.008
    acc = b.call("qnn.dense", [flat, fc, b.scalar(x.zero_point, "int32"), b.scalar(0, "int32"),
                               b.scalar(x.scale), b.scalar(w_scale)], (n, 10), 'units=10, out_dtype="int32"',
                 dtype="int32")
    product = _f(x.scale * w_scale)
    qbias = b.call("qnn.quantize", [b.weight("fc_bias", (10,), scale=0.05), b.scalar(product),
                                    b.scalar(0, "int32")], (10,), 'out_dtype="int32", axis=0', dtype="int32")
    acc = b.call("nn.bias_add", [acc, qbias], acc.shape, dtype="int32")
    logits = _requantize_to_uint8(b, acc, product, c, relu=False)
    real = b.call("qnn.dequantize", [logits.value, b.scalar(logits.scale), b.scalar(logits.zero_point, "int32")],
                  logits.value.shape)
    return b.finish(b.tuple([logits.value, real]))


def qmobilenet_v1_tflite_uint8(weights: str = "constants") -> Printed:
    """An older uint8 TFLite MobileNet v1 (per-tensor scales, non-zero kernel zero points, uint8
    input), ending as the frontend converts a quantized SOFTMAX: dequantize, nn.softmax,
    quantize to scale 1/256."""
    b = Builder("qmobilenet_v1_tflite_uint8", weights, seed=33, spans=False)
    image = b.input("input", (1, 16, 16, 3), "uint8", high=256)
    x = QValue(image, 0.0078125, 128)
    x = _tflite_conv(b, x, 8, 3, stride=2, dtype="uint8")
    x = _tflite_conv(b, x, 0, 3, depthwise=True, dtype="uint8")
    x = _tflite_conv(b, x, 16, 1, dtype="uint8")
    n, h, w, c = x.value.shape
    pooled = b.call("cast", [x.value], x.value.shape, 'dtype="int32"', dtype="int32")
    pooled = b.call("nn.avg_pool2d", [pooled], (n, 1, 1, c),
                    f'pool_size=[{h}, {w}], padding=[0, 0, 0, 0], layout="NHWC"', dtype="int32")
    pooled = b.call("cast", [pooled], pooled.shape, 'dtype="uint8"', dtype="uint8")
    logits = _tflite_conv(b, QValue(pooled, x.scale, x.zero_point), 10, 1, relu6=False, dtype="uint8")
    flat = b.call("reshape", [logits.value], (1, 10), "newshape=[1, 10]", dtype="uint8")
    real = b.call("qnn.dequantize", [flat, b.scalar(logits.scale), b.scalar(logits.zero_point, "int32")], (1, 10))
    probs = b.call("nn.softmax", [real], (1, 10), "axis=1")
    q = b.call("qnn.quantize", [probs, b.scalar(0.00390625), b.scalar(0, "int32")], (1, 10),
               'out_dtype="uint8"', dtype="uint8")
    return b.finish(b.tuple([q, real]))


MODELS: dict[str, Callable[[str], Printed]] = {
    "qmobilenet_v2_tflite": qmobilenet_v2_tflite,
    "qmobilenet_v1_tflite_uint8": qmobilenet_v1_tflite_uint8,
    "qresnet_pytorch": qresnet_pytorch,
}
BLAS_MODELS = ("qmobilenet_v2_tflite",)
