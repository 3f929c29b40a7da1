"""Small public-model architectures as TVM prints them: Relay text to feed the whole stack.

Each `<model>(weights=...)` function returns a `Printed`: Relay text in the exact style of
`mod.astext()` after `relay.frontend.from_pytorch` (a `/* ty=... */` comment after every call,
the PyTorch frontend's `span=aten::<op>_<k>:0:0` in it, non-default attributes only, in the order
TVM declares them, `units=None` on dense, `%1 = nn.batch_norm(...); %2 = %1.0;`, free tuples
bound to their own `%N`, scalars as `0.5f /* ty=float32 */`), with its weights either

* as parameters of @main (`weights="params"`: what from_pytorch prints before bind_params_by_name;
  the weights are then inputs of the compiled model), or
* as `meta[relay.Constant][i] /* ty=... */` with a `#[metadata]` section
  (`weights="constants"`: what a module with bound params prints).

The output shape of every call is computed here, independently of the compiler, and written in
its `ty=` comment; @main's declared return type makes the parser's type inference check the end
of that chain. Only the metadata JSON comes from the compiler (`encode_metadata`), which writes
TVM's node-graph layout.

Sizes are tiny (1x3x32x32 images, 8-32 channels, sequence 8, hidden 16) so that every model
compiles and runs in seconds, but each keeps its architecture's characteristic operators.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from compiler.ir.device import VirtualDevice
from compiler.parser.metadata import encode_metadata

WEIGHT_FORMS = ("params", "constants")

# The aten operator the PyTorch frontend names in the span of each Relay operator.
_ATEN = {
    "nn.conv2d": "_convolution", "nn.conv2d_transpose": "_convolution", "nn.bias_add": "_convolution",
    "nn.batch_norm": "batch_norm", "nn.relu": "relu_", "clip": "hardtanh_", "add": "add",
    "nn.max_pool2d": "max_pool2d", "nn.global_avg_pool2d": "adaptive_avg_pool2d",
    "nn.adaptive_avg_pool2d": "adaptive_avg_pool2d", "nn.batch_flatten": "flatten",
    "nn.dense": "linear", "nn.softmax": "softmax", "sigmoid": "sigmoid", "tanh": "tanh",
    "multiply": "mul", "divide": "div", "subtract": "sub", "concatenate": "cat",
    "nn.upsampling": "upsample_nearest2d", "split": "chunk", "squeeze": "select", "stack": "stack",
    "take": "embedding", "nn.layer_norm": "layer_norm", "reshape": "view", "transpose": "permute",
    "nn.batch_matmul": "matmul", "strided_slice": "slice", "where": "where", "erf": "gelu",
    "power": "pow", "mean": "mean", "nn.pad": "constant_pad_nd", "nn.dropout": "dropout",
    "expand_dims": "unsqueeze", "cast": "to", "arange": "arange", "less_equal": "le", "zeros": "zeros",
    "nn.log_softmax": "log_softmax",
}


def tensor_type(shape: Sequence[int], dtype: str = "float32") -> str:
    if not shape:
        return dtype
    return f"Tensor[({', '.join(str(d) for d in shape)}), {dtype}]"


@dataclass(frozen=True)
class Value:
    """A Relay expression as the text that refers to it, with its type."""

    ref: str
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    fields: tuple[Value, ...] | None = None  # set for tuples

    @property
    def ty(self) -> str:
        if self.fields is not None:
            return "(" + ", ".join(f.ty for f in self.fields) + ("," if len(self.fields) == 1 else "") + ")"
        return tensor_type(self.shape, self.dtype)


@dataclass
class Printed:
    """A printed model: its text, the names/shapes/dtypes of its data inputs, its weights."""

    name: str
    text: str
    inputs: dict[str, tuple[tuple[int, ...], str]]
    weights: dict[str, np.ndarray]  # by name; in the params form these are @main parameters too
    weights_form: str
    int_high: dict[str, int] = field(default_factory=dict)  # integer inputs are drawn in [0, high)

    def make_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Random data inputs, plus the weights when they are @main parameters."""
        rng = np.random.default_rng(seed)
        out: dict[str, np.ndarray] = {}
        for name, (shape, dtype) in self.inputs.items():
            if dtype.startswith(("int", "uint")):
                out[name] = rng.integers(0, self.int_high[name], size=shape).astype(dtype)
            else:
                out[name] = rng.standard_normal(shape).astype(dtype)
        if self.weights_form == "params":
            out.update(self.weights)
        return out


class Builder:
    """Writes @main line by line the way TVM's text printer does."""

    def __init__(self, name: str, weights: str, seed: int = 0, spans: bool = True):
        if weights not in WEIGHT_FORMS:
            raise ValueError(f"weights must be one of {WEIGHT_FORMS}, not {weights!r}")
        self.name, self.form, self.spans = name, weights, spans
        self.rng = np.random.default_rng(seed)
        self.params: list[Value] = []
        self.inputs: dict[str, tuple[tuple[int, ...], str]] = {}
        self.int_high: dict[str, int] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.constants: list[np.ndarray] = []
        self.lines: list[str] = []
        self.counter = 0
        self.aten_counts: Counter[str] = Counter()
        # Device placement as PlanDevices prints it: meta[VirtualDevice] entries, the index of
        # each placed parameter's (by its ref) and of @main's own virtual device.
        self.virtual_devices: list[VirtualDevice] = []
        self.param_devices: dict[str, int] = {}
        self.function_device: int | None = None
        # The span of every binding while one aten node expands to many (aten::lstm_0).
        self.span_source: str | None = None
        # Non-default normalization epsilons (printed, as TVM does, only when not 1e-5).
        self.bn_epsilon = 1e-5
        self.ln_epsilon = 1e-5

    # -- leaves ---------------------------------------------------------------------------------

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32", high: int = 0) -> Value:
        value = Value(f"%{name}", tuple(shape), dtype)
        self.params.append(value)
        self.inputs[name] = (tuple(shape), dtype)
        if high:
            self.int_high[name] = high
        return value

    def weight(self, name: str, shape: Sequence[int], kind: str = "normal", scale: float | None = None,
               array: np.ndarray | None = None) -> Value:
        """A trained weight: He-scaled normal, or `positive` (variances), `gamma` (near 1), or
        the given `array` (any dtype: quantized weights, anchors)."""
        shape = tuple(shape)
        if array is not None:
            assert array.shape == shape, (name, array.shape, shape)
        elif kind == "positive":
            array = self.rng.uniform(0.5, 1.5, shape)
        elif kind == "gamma":
            array = self.rng.uniform(0.8, 1.2, shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            sigma = scale if scale is not None else (math.sqrt(2.0 / fan_in) if len(shape) > 1 else 0.1)
            array = self.rng.standard_normal(shape) * sigma
        array = array if array.dtype != np.float64 else array.astype("float32")
        self.weights[name] = array
        if self.form == "params":
            value = Value(f"%{name}", shape, str(array.dtype))
            self.params.append(value)
            return value
        return self.constant(array)

    def constant(self, array: np.ndarray) -> Value:
        """A tensor constant: always `meta[relay.Constant][i]`, in both forms."""
        self.constants.append(np.asarray(array))
        index = len(self.constants) - 1
        shape, dtype = tuple(array.shape), "bool" if array.dtype == np.bool_ else str(array.dtype)
        return Value(f"meta[relay.Constant][{index}] /* ty={tensor_type(shape, dtype)} */", shape, dtype)

    @staticmethod
    def scalar(value: float, dtype: str = "float32") -> Value:
        text = f"{value:g}f" if dtype == "float32" else f"{value}i64" if dtype == "int64" else str(value)
        return Value(f"{text} /* ty={dtype} */", (), dtype)

    # -- bindings -------------------------------------------------------------------------------

    def _bind(self, expr: str, value_shape: tuple[int, ...], dtype: str, span_op: str | None,
              fields: tuple[Value, ...] | None = None) -> Value:
        ref = f"%{self.counter}"
        self.counter += 1
        value = Value(ref, value_shape, dtype, fields)
        comment = f"ty={value.ty}"
        if self.spans and self.span_source is not None:
            comment += f" span={self.span_source}:0:0"
        elif self.spans and span_op is not None and span_op in _ATEN:
            aten = _ATEN[span_op]
            comment += f" span=aten::{aten}_{self.aten_counts[aten]}:0:0"
            self.aten_counts[aten] += 1
        self.lines.append(f"  {ref} = {expr} /* {comment} */;")
        return value

    def call(self, op: str, args: Sequence[Value], shape: Sequence[int], attrs: str = "",
             dtype: str = "float32") -> Value:
        text = ", ".join([a.ref for a in args] + ([attrs] if attrs else []))
        return self._bind(f"{op}({text})", tuple(shape), dtype, op)

    def call_tuple(self, op: str, args: Sequence[Value], fields: Sequence[Value], attrs: str = "") -> Value:
        text = ", ".join([a.ref for a in args] + ([attrs] if attrs else []))
        return self._bind(f"{op}({text})", (), "float32", op, tuple(fields))

    def tuple(self, items: Sequence[Value]) -> Value:
        text = "(" + ", ".join(i.ref for i in items) + ("," if len(items) == 1 else "") + ")"
        return self._bind(text, (), "float32", None, tuple(items))

    def get(self, tup: Value, index: int) -> Value:
        assert tup.fields is not None
        item = tup.fields[index]
        return self._bind(f"{tup.ref}.{index}", item.shape, item.dtype, None)

    # -- the module -----------------------------------------------------------------------------

    def finish(self, result: Value) -> Printed:
        """@main returning `result`; the last line is its body when it computes `result`."""
        last = self.lines[-1] if self.lines else ""
        if last.startswith(f"  {result.ref} = "):
            body = self.lines[:-1] + ["  " + last[len(f"  {result.ref} = "):-1]]
        else:
            body = self.lines + [f"  {result.ref}"]
        def param(p: Value) -> str:
            device = self.param_devices.get(p.ref)
            placed = f" {{virtual_device=meta[VirtualDevice][{device}]}}" if device is not None else ""
            return f"{p.ref}{placed}: {p.ty} /* ty={p.ty} */"

        params = [param(p) for p in self.params]
        if self.function_device is not None:
            params.append(f"virtual_device=meta[VirtualDevice][{self.function_device}]")
        text = ['#[version = "0.0.5"]', f"def @main({', '.join(params)}) -> {result.ty} {{", *body, "}", ""]
        source = "\n".join(text)
        if self.constants or self.virtual_devices:
            source += "\n#[metadata]\n" + encode_metadata(self.constants, self.virtual_devices) + "\n"
        return Printed(self.name, source, self.inputs, self.weights, self.form, self.int_high)


# ----------------------------------------------------------------------------------------------
# Layers as the PyTorch frontend emits them


def _pair(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def conv2d(b: Builder, x: Value, name: str, out_ch: int, k: int, stride: int = 1, pad: int = 0,
           groups: int = 1, bias: bool = False) -> Value:
    n, c, h, w = x.shape
    weight = b.weight(f"{name}.weight", (out_ch, c // groups, k, k))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    attrs = []
    if stride != 1:
        attrs.append(f"strides={_pair([stride, stride])}")
    attrs.append(f"padding={_pair([pad] * 4)}")
    if groups != 1:
        attrs.append(f"groups={groups}")
    attrs += [f"channels={out_ch}", f"kernel_size={_pair([k, k])}"]
    y = b.call("nn.conv2d", [x, weight], (n, out_ch, oh, ow), ", ".join(attrs))
    if bias:
        y = b.call("nn.bias_add", [y, b.weight(f"{name}.bias", (out_ch,))], y.shape)
    return y


def batch_norm(b: Builder, x: Value, name: str) -> Value:
    c = x.shape[1]
    args = [x, b.weight(f"{name}.weight", (c,), "gamma"), b.weight(f"{name}.bias", (c,)),
            b.weight(f"{name}.running_mean", (c,)), b.weight(f"{name}.running_var", (c,), "positive")]
    vec = Value("", (c,))
    attrs = f"epsilon={b.bn_epsilon:g}f" if b.bn_epsilon != 1e-5 else ""
    out = b.call_tuple("nn.batch_norm", args, [Value("", x.shape), vec, vec], attrs)
    return b.get(out, 0)


def relu(b: Builder, x: Value) -> Value:
    return b.call("nn.relu", [x], x.shape)


def relu6(b: Builder, x: Value) -> Value:
    return b.call("clip", [x], x.shape, "a_min=0f, a_max=6f")


def hardsigmoid(b: Builder, x: Value) -> Value:
    """aten::hardsigmoid as the frontend expands it: clip(x + 3, 0, 6) / 6."""
    y = b.call("clip", [b.call("add", [x, b.scalar(3.0)], x.shape)], x.shape, "a_min=0f, a_max=6f")
    return b.call("divide", [y, b.scalar(6.0)], x.shape)


def hardswish(b: Builder, x: Value) -> Value:
    return multiply(b, x, hardsigmoid(b, x))


def sigmoid(b: Builder, x: Value) -> Value:
    return b.call("sigmoid", [x], x.shape)


def add(b: Builder, x: Value, y: Value) -> Value:
    shape = np.broadcast_shapes(x.shape, y.shape)
    return b.call("add", [x, y], shape, dtype=x.dtype)


def multiply(b: Builder, x: Value, y: Value) -> Value:
    return b.call("multiply", [x, y], np.broadcast_shapes(x.shape, y.shape))


def linear(b: Builder, x: Value, name: str, out_features: int, bias: bool = True) -> Value:
    weight = b.weight(f"{name}.weight", (out_features, x.shape[-1]))
    y = b.call("nn.dense", [x, weight], (*x.shape[:-1], out_features), "units=None")
    if bias:
        y = b.call("nn.bias_add", [y, b.weight(f"{name}.bias", (out_features,))], y.shape, "axis=-1")
    return y


def classifier_head(b: Builder, x: Value, classes: int) -> Value:
    n, c = x.shape[:2]
    y = b.call("nn.global_avg_pool2d", [x], (n, c, 1, 1))
    y = b.call("nn.batch_flatten", [y], (n, c))
    y = linear(b, y, "fc", classes)
    return b.call("nn.softmax", [y], y.shape, "axis=1")


def max_pool(b: Builder, x: Value, k: int, stride: int, pad: int) -> Value:
    n, c, h, w = x.shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    attrs = f"pool_size={_pair([k, k])}, strides={_pair([stride, stride])}, padding={_pair([pad] * 4)}"
    return b.call("nn.max_pool2d", [x], (n, c, oh, ow), attrs)


# ----------------------------------------------------------------------------------------------
# CNNs


def _conv_bn(b: Builder, x: Value, name: str, out_ch: int, k: int, stride: int = 1, groups: int = 1,
             act: Callable[[Builder, Value], Value] | None = relu) -> Value:
    y = conv2d(b, x, f"{name}.conv", out_ch, k, stride, k // 2, groups)
    y = batch_norm(b, y, f"{name}.bn")
    return act(b, y) if act else y


def _basic_block(b: Builder, x: Value, name: str, out_ch: int, stride: int) -> Value:
    y = _conv_bn(b, x, f"{name}.1", out_ch, 3, stride)
    y = _conv_bn(b, y, f"{name}.2", out_ch, 3, act=None)
    shortcut = x
    if stride != 1 or x.shape[1] != out_ch:
        shortcut = _conv_bn(b, x, f"{name}.downsample", out_ch, 1, stride, act=None)
    return relu(b, add(b, y, shortcut))


def _bottleneck(b: Builder, x: Value, name: str, width: int, out_ch: int, stride: int, groups: int = 1) -> Value:
    y = _conv_bn(b, x, f"{name}.1", width, 1)
    y = _conv_bn(b, y, f"{name}.2", width, 3, stride, groups)
    y = _conv_bn(b, y, f"{name}.3", out_ch, 1, act=None)
    shortcut = x
    if stride != 1 or x.shape[1] != out_ch:
        shortcut = _conv_bn(b, x, f"{name}.downsample", out_ch, 1, stride, act=None)
    return relu(b, add(b, y, shortcut))


def resnet_basic_block(weights: str = "constants") -> Printed:
    """One ResNet basic block with a 1x1 projection shortcut (checked against numpy)."""
    b = Builder("resnet_basic_block", weights, seed=1)
    x = b.input("input0", (1, 8, 8, 8))
    return b.finish(_basic_block(b, x, "layer1.0", 16, 2))


def resnet(weights: str = "constants") -> Printed:
    """ResNet-18 style: 7x7/2 stem, 3x3/2 max pool with padding, basic blocks, GAP, fc, softmax."""
    b = Builder("resnet", weights, seed=2)
    x = b.input("input0", (1, 3, 32, 32))
    y = _conv_bn(b, x, "conv1", 8, 7, 2)  # conv1 then bn1 then relu
    y = max_pool(b, y, 3, 2, 1)
    y = _basic_block(b, y, "layer1.0", 8, 1)
    y = _basic_block(b, y, "layer2.0", 16, 2)
    return b.finish(classifier_head(b, y, 10))


def resnet_bottleneck(weights: str = "constants") -> Printed:
    """ResNet-50 style: bottleneck blocks (1x1, 3x3, 1x1 with expansion 4)."""
    b = Builder("resnet_bottleneck", weights, seed=3)
    x = b.input("input0", (1, 3, 32, 32))
    y = _conv_bn(b, x, "conv1", 8, 3)
    y = max_pool(b, y, 3, 2, 1)
    y = _bottleneck(b, y, "layer1.0", 4, 16, 1)
    y = _bottleneck(b, y, "layer2.0", 8, 32, 2)
    return b.finish(classifier_head(b, y, 10))


def resnext(weights: str = "constants") -> Printed:
    """ResNeXt: bottlenecks whose 3x3 conv is grouped (cardinality 4)."""
    b = Builder("resnext", weights, seed=4)
    x = b.input("input0", (1, 3, 32, 32))
    y = _conv_bn(b, x, "conv1", 16, 3, 2)
    y = _bottleneck(b, y, "layer1.0", 16, 32, 1, groups=4)
    y = _bottleneck(b, y, "layer2.0", 16, 32, 2, groups=4)
    return b.finish(classifier_head(b, y, 10))


def mobilenet_v1(weights: str = "constants") -> Printed:
    """MobileNet v1: depthwise (groups=channels) 3x3 + pointwise 1x1, each with bn and relu6."""
    b = Builder("mobilenet_v1", weights, seed=5)
    x = b.input("input0", (1, 3, 32, 32))
    y = _conv_bn(b, x, "stem", 8, 3, 2, act=relu6)
    for i, (out_ch, stride) in enumerate([(16, 1), (32, 2)]):
        c = y.shape[1]
        y = _conv_bn(b, y, f"features.{i}.dw", c, 3, stride, groups=c, act=relu6)
        y = _conv_bn(b, y, f"features.{i}.pw", out_ch, 1, act=relu6)
    return b.finish(classifier_head(b, y, 10))


def mobilenet_v1_tflite(weights: str = "constants") -> Printed:
    """MobileNet v1 as the TFLite frontend prints it: NHWC data, HWIO (HWOI for depthwise)
    kernels, TF "same" padding as asymmetric conv padding, bias_add on axis 3, relu6 as clip,
    average pool, reshape, dense with units, softmax; parameters named `_param_<k>`, no spans."""
    b = Builder("mobilenet_v1_tflite", weights, seed=15, spans=False)
    x = b.input("input", (1, 32, 32, 3))

    def conv(v: Value, out_ch: int, k: int, stride: int, depthwise: bool = False) -> Value:
        n, h, w, c = v.shape
        kernel = b.weight(f"_param_{len(b.weights) + 1}", (k, k, c, 1) if depthwise else (k, k, c, out_ch))
        out_ch = c if depthwise else out_ch
        total = max((h + stride - 1) // stride - 1, 0) * stride + k - h  # TF "same"
        pad = [total // 2, total // 2, total - total // 2, total - total // 2] if k > 1 else [0, 0, 0, 0]
        attrs = [f"strides={_pair([stride, stride])}"] if stride != 1 else []
        attrs.append(f"padding={_pair(pad)}")
        if depthwise:
            attrs.append(f"groups={c}")
        attrs += [f"channels={out_ch}", f"kernel_size={_pair([k, k])}", 'data_layout="NHWC"',
                  f'kernel_layout="{"HWOI" if depthwise else "HWIO"}"']
        oh, ow = (h + stride - 1) // stride, (w + stride - 1) // stride
        y = b.call("nn.conv2d", [v, kernel], (n, oh, ow, out_ch), ", ".join(attrs))
        y = b.call("nn.bias_add", [y, b.weight(f"_param_{len(b.weights) + 1}", (out_ch,))], y.shape, "axis=3")
        return relu6(b, y)

    y = conv(x, 8, 3, 2)
    for out_ch, stride in [(16, 1), (32, 2)]:
        y = conv(conv(y, 0, 3, stride, depthwise=True), out_ch, 1, 1)
    n, h, w, c = y.shape
    y = b.call("nn.avg_pool2d", [y], (n, 1, 1, c),
               f'pool_size=[{h}, {w}], strides=[2, 2], padding=[0, 0, 0, 0], layout="NHWC"')
    y = b.call("reshape", [y], (1, c), f"newshape=[1, {c}]")
    fc = b.weight(f"_param_{len(b.weights) + 1}", (10, c))
    y = b.call("nn.dense", [y, fc], (1, 10), "units=10")
    y = b.call("nn.bias_add", [y, b.weight(f"_param_{len(b.weights) + 1}", (10,))], y.shape)
    return b.finish(b.call("nn.softmax", [y], y.shape, "axis=1"))


def _nchwc_conv(b: Builder, v: Value, name: str, out_ch: int, k: int, stride: int,
                relu_after: bool = True) -> Value:
    """contrib_conv2d_NCHWc from NCHW[ci]c to NCHW8c, its OIHW kernel blocked by layout_transform,
    batch norm folded into a multiply/add of 5-d per-channel constants."""
    n, cb, h, w, ci = v.shape
    kernel = b.weight(f"{name}_weight", (out_ch, cb * ci, k, k))
    blocked = b.call("layout_transform", [kernel], (out_ch // 8, cb, k, k, ci, 8),
                     f'src_layout="OIHW", dst_layout="OIHW{ci}i8o"')
    pad = k // 2
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    attrs = [f"strides={_pair([stride, stride])}"] if stride != 1 else []
    attrs += [f"padding={_pair([pad] * 4)}", f"channels={out_ch}", f"kernel_size={_pair([k, k])}",
              f'data_layout="NCHW{ci}c"', f'kernel_layout="OIHW{ci}i8o"', 'out_layout="NCHW8c"']
    y = b.call("nn.contrib_conv2d_NCHWc", [v, blocked], (n, out_ch // 8, oh, ow, 8), ", ".join(attrs))
    return _nchwc_bn(b, y, name, relu_after)


def _nchwc_bn(b: Builder, y: Value, name: str, relu_after: bool = True) -> Value:
    shape = (1, y.shape[1], 1, 1, 8)
    y = b.call("multiply", [y, b.weight(f"{name}_bn_scale", shape, "gamma")], y.shape)
    y = b.call("add", [y, b.weight(f"{name}_bn_shift", shape)], y.shape)
    return relu(b, y) if relu_after else y


def resnet_nchwc(weights: str = "constants") -> Printed:
    """A ResNet stem and basic block as TVM prints them after AlterOpLayout for x86: NCHW[x]c
    data, OIHW[x]i[y]o kernels through layout_transform, nn.contrib_conv2d_NCHWc, batch norm
    folded into a multiply/add of 5-d per-channel constants, blocked pools, and back to NCHW for
    the classifier."""
    b = Builder("resnet_nchwc", weights, seed=16, spans=False)
    x = b.input("data", (1, 3, 32, 32))

    def conv(v: Value, name: str, out_ch: int, k: int, stride: int, relu_after: bool = True) -> Value:
        return _nchwc_conv(b, v, name, out_ch, k, stride, relu_after)

    y = b.call("layout_transform", [x], (1, 1, 32, 32, 3), 'src_layout="NCHW", dst_layout="NCHW3c"')
    y = conv(y, "conv1", 8, 3, 2)
    y = b.call("nn.max_pool2d", [y], (1, 1, 8, 8, 8),
               'pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1], layout="NCHW8c"')
    shortcut = y
    y = conv(conv(y, "layer1.0.conv1", 8, 3, 1), "layer1.0.conv2", 8, 3, 1, relu_after=False)
    y = relu(b, add(b, y, shortcut))
    y = b.call("nn.global_avg_pool2d", [y], (1, 1, 1, 1, 8), 'layout="NCHW8c"')
    y = b.call("layout_transform", [y], (1, 8, 1, 1), 'src_layout="NCHW8c", dst_layout="NCHW"')
    y = b.call("nn.batch_flatten", [y], (1, 8))
    return b.finish(linear(b, y, "fc", 10))


def mobilenet_nchwc(weights: str = "constants") -> Printed:
    """A MobileNet stem and depthwise-separable block as TVM prints them after AlterOpLayout for
    x86: contrib_conv2d_NCHWc and contrib_depthwise_conv2d_NCHWc (OIHW1i8o kernel) on NCHW8c,
    blocked avg and adaptive pools, and the dense classifier rewritten to
    nn.contrib_dense_pack on an NC5n-packed weight."""
    b = Builder("mobilenet_nchwc", weights, seed=17, spans=False)
    x = b.input("data", (1, 3, 16, 16))
    y = b.call("layout_transform", [x], (1, 1, 16, 16, 3), 'src_layout="NCHW", dst_layout="NCHW3c"')
    y = _nchwc_conv(b, y, "conv1", 16, 3, 2)
    n, cb, h, w, _ = y.shape
    kernel = b.weight("dw1_weight", (cb * 8, 1, 3, 3))
    blocked = b.call("layout_transform", [kernel], (cb, 1, 3, 3, 1, 8), 'src_layout="OIHW", dst_layout="OIHW1i8o"')
    attrs = (f"padding=[1, 1, 1, 1], groups={cb * 8}, channels={cb * 8}, kernel_size=[3, 3], "
             'data_layout="NCHW8c", kernel_layout="OIHW1i8o", out_layout="NCHW8c"')
    y = b.call("nn.contrib_depthwise_conv2d_NCHWc", [y, blocked], y.shape, attrs)
    y = _nchwc_bn(b, y, "dw1")
    y = _nchwc_conv(b, y, "pw1", 32, 1, 1)
    y = b.call("nn.avg_pool2d", [y], (n, 4, h // 2, w // 2, 8),
               'pool_size=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0], layout="NCHW8c"')
    y = b.call("nn.adaptive_avg_pool2d", [y], (n, 4, 1, 1, 8), 'output_size=[1, 1], layout="NCHW8c"')
    y = b.call("layout_transform", [y], (n, 32, 1, 1), 'src_layout="NCHW8c", dst_layout="NCHW"')
    y = b.call("nn.batch_flatten", [y], (n, 32))
    fc = b.weight("fc.weight", (10, 32))
    packed = b.call("layout_transform", [fc], (2, 32, 5), 'src_layout="NC", dst_layout="NC5n"')
    y = b.call("nn.contrib_dense_pack", [y, packed], (n, 10),
               'units=None, out_dtype="float32", weight_layout="NC5n"')
    y = b.call("nn.bias_add", [y, b.weight("fc.bias", (10,))], y.shape, "axis=-1")
    return b.finish(b.call("nn.softmax", [y], y.shape, "axis=1"))


def _inverted_residual(b: Builder, x: Value, name: str, out_ch: int, stride: int, expand: int,
                       act: Callable[[Builder, Value], Value] = relu6,
                       se: bool = False, se_inner: Callable[[Builder, Value], Value] | None = None,
                       se_gate: Callable[[Builder, Value], Value] = sigmoid) -> Value:
    c = x.shape[1]
    hidden = c * expand
    y = _conv_bn(b, x, f"{name}.expand", hidden, 1, act=act) if expand != 1 else x
    y = _conv_bn(b, y, f"{name}.dw", hidden, 3, stride, groups=hidden, act=act)
    if se:
        y = _squeeze_excite(b, y, f"{name}.se", max(1, c // 4), se_inner, se_gate)
    y = _conv_bn(b, y, f"{name}.project", out_ch, 1, act=None)
    if stride == 1 and c == out_ch:
        y = add(b, y, x)
    return y


def mobilenet_v2(weights: str = "constants") -> Printed:
    """MobileNet v2: inverted residuals (expand 1x1, depthwise 3x3, linear 1x1 project, add)."""
    b = Builder("mobilenet_v2", weights, seed=6)
    x = b.input("input0", (1, 3, 32, 32))
    y = _conv_bn(b, x, "stem", 8, 3, 2, act=relu6)
    y = _inverted_residual(b, y, "block1", 8, 1, 1)
    y = _inverted_residual(b, y, "block2", 16, 2, 4)
    y = _inverted_residual(b, y, "block3", 16, 1, 4)
    return b.finish(classifier_head(b, y, 10))


def swish(b: Builder, x: Value) -> Value:
    return multiply(b, x, b.call("sigmoid", [x], x.shape))


def _squeeze_excite(b: Builder, x: Value, name: str, squeezed: int,
                    inner: Callable[[Builder, Value], Value] | None = None,
                    gate: Callable[[Builder, Value], Value] = sigmoid) -> Value:
    n, c = x.shape[:2]
    s = b.call("nn.adaptive_avg_pool2d", [x], (n, c, 1, 1), "output_size=[1, 1]")
    s = conv2d(b, s, f"{name}.reduce", squeezed, 1, bias=True)
    s = (inner or swish)(b, s)
    s = conv2d(b, s, f"{name}.expand", c, 1, bias=True)
    return multiply(b, x, gate(b, s))


def mobilenet_v3(weights: str = "constants") -> Printed:
    """MobileNet v3: hardswish activations, squeeze-and-excite with relu and hardsigmoid."""
    b = Builder("mobilenet_v3", weights, seed=14)
    b.bn_epsilon = 1e-3
    x = b.input("input0", (1, 3, 32, 32))
    y = _conv_bn(b, x, "features.0", 8, 3, 2, act=hardswish)
    y = _inverted_residual(b, y, "features.1", 8, 2, 1, act=relu, se=True, se_inner=relu, se_gate=hardsigmoid)
    y = _inverted_residual(b, y, "features.2", 16, 2, 4, act=hardswish, se=True, se_inner=relu,
                           se_gate=hardsigmoid)
    y = _inverted_residual(b, y, "features.3", 16, 1, 3, act=hardswish)
    return b.finish(classifier_head(b, y, 10))


def efficientnet(weights: str = "constants") -> Printed:
    """EfficientNet (TF-ported weights, as timm's tf_ variants): batch norm epsilon 1e-3, the
    stem's "same" padding as an asymmetric nn.pad, MBConv blocks with swish and
    squeeze-and-excite."""
    b = Builder("efficientnet", weights, seed=7)
    b.bn_epsilon = 1e-3
    x = b.input("input0", (1, 3, 32, 32))
    padded = b.call("nn.pad", [x, b.scalar(0.0)], (1, 3, 33, 33), "pad_width=[[0, 0], [0, 0], [0, 1], [0, 1]]")
    y = conv2d(b, padded, "stem.conv", 8, 3, 2, 0)
    y = swish(b, batch_norm(b, y, "stem.bn"))
    y = _inverted_residual(b, y, "block1", 8, 1, 1, act=swish, se=True)
    y = _inverted_residual(b, y, "block2", 16, 2, 4, act=swish, se=True)
    y = _inverted_residual(b, y, "block3", 16, 1, 4, act=swish, se=True)
    y = _conv_bn(b, y, "head", 32, 1, act=swish)
    return b.finish(classifier_head(b, y, 10))


def unet(weights: str = "constants") -> Printed:
    """U-Net: two down levels, a transposed-conv and a nearest-upsampling up level, skip concats."""
    b = Builder("unet", weights, seed=8)
    x = b.input("input0", (1, 3, 32, 32))

    def double_conv(v: Value, name: str, ch: int) -> Value:
        v = _conv_bn(b, v, f"{name}.a", ch, 3)
        return _conv_bn(b, v, f"{name}.b", ch, 3)

    def concat(skip: Value, up: Value) -> Value:
        pair = b.tuple([skip, up])
        n, c1, h, w = skip.shape
        return b.call("concatenate", [pair], (n, c1 + up.shape[1], h, w), "axis=1")

    e1 = double_conv(x, "enc1", 8)
    e2 = double_conv(max_pool(b, e1, 2, 2, 0), "enc2", 16)
    mid = double_conv(max_pool(b, e2, 2, 2, 0), "mid", 32)
    n, c, h, w = mid.shape
    up2 = b.call("nn.conv2d_transpose", [mid, b.weight("up2.weight", (c, 16, 2, 2))], (n, 16, h * 2, w * 2),
                 "channels=16, kernel_size=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0], kernel_layout=\"IOHW\"")
    up2 = b.call("nn.bias_add", [up2, b.weight("up2.bias", (16,))], up2.shape)
    d2 = double_conv(concat(e2, up2), "dec2", 16)
    n, c, h, w = d2.shape
    up1 = b.call("nn.upsampling", [d2], (n, c, h * 2, w * 2), "scale_h=2f, scale_w=2f")
    d1 = double_conv(concat(e1, up1), "dec1", 8)
    return b.finish(conv2d(b, d1, "out", 2, 1, bias=True))


# ----------------------------------------------------------------------------------------------
# Recurrent networks, unrolled as the PyTorch frontend unrolls them


def _sequence_steps(b: Builder, x: Value) -> list[Value]:
    steps, batch, features = x.shape
    parts = b.call_tuple("split", [x], [Value("", (1, batch, features))] * steps,
                         f"indices_or_sections={steps}")
    return [b.call("squeeze", [b.get(parts, t)], (batch, features), "axis=[0]") for t in range(steps)]


def _lstm_step(b: Builder, xt: Value, h: Value, c: Value, w: dict[str, Value]) -> tuple[Value, Value]:
    hidden = h.shape[-1]
    gates = add(b, b.call("nn.dense", [xt, w["w_ih"]], (xt.shape[0], 4 * hidden), "units=None"), w["b_ih"])
    gates = add(b, gates, add(b, b.call("nn.dense", [h, w["w_hh"]], (h.shape[0], 4 * hidden), "units=None"),
                              w["b_hh"]))
    quarter = Value("", (h.shape[0], hidden))
    parts = b.call_tuple("split", [gates], [quarter] * 4, "indices_or_sections=4, axis=-1")
    i = b.call("sigmoid", [b.get(parts, 0)], quarter.shape)
    f = b.call("sigmoid", [b.get(parts, 1)], quarter.shape)
    g = b.call("tanh", [b.get(parts, 2)], quarter.shape)
    o = b.call("sigmoid", [b.get(parts, 3)], quarter.shape)
    c_new = add(b, multiply(b, f, c), multiply(b, i, g))
    h_new = multiply(b, o, b.call("tanh", [c_new], c_new.shape))
    return h_new, c_new


def _lstm_weights(b: Builder, features: int, hidden: int) -> dict[str, Value]:
    return {
        "w_ih": b.weight("lstm.weight_ih_l0", (4 * hidden, features), scale=0.3),
        "w_hh": b.weight("lstm.weight_hh_l0", (4 * hidden, hidden), scale=0.3),
        "b_ih": b.weight("lstm.bias_ih_l0", (4 * hidden,)),
        "b_hh": b.weight("lstm.bias_hh_l0", (4 * hidden,)),
    }


def lstm_cell(weights: str = "constants") -> Printed:
    """One LSTM step: (x, h, c) -> (h', c') (checked against numpy)."""
    b = Builder("lstm_cell", weights, seed=9)
    x = b.input("input0", (2, 8))
    h = b.input("h0", (2, 16))
    c = b.input("c0", (2, 16))
    h_new, c_new = _lstm_step(b, x, h, c, _lstm_weights(b, 8, 16))
    return b.finish(b.tuple([h_new, c_new]))


def lstm(weights: str = "constants") -> Printed:
    """An LSTM layer unrolled over 4 steps: split the sequence, step, stack the hidden states."""
    b = Builder("lstm", weights, seed=10)
    x = b.input("input0", (4, 1, 8))
    h = b.input("h0", (1, 16))
    c = b.input("c0", (1, 16))
    w = _lstm_weights(b, 8, 16)
    outputs = []
    for xt in _sequence_steps(b, x):
        h, c = _lstm_step(b, xt, h, c, w)
        outputs.append(h)
    stacked = b.call("stack", [b.tuple(outputs)], (len(outputs), *h.shape))
    return b.finish(b.tuple([stacked, h, c]))


def gru(weights: str = "constants") -> Printed:
    """A GRU layer unrolled over 4 steps (PyTorch's gate order r, z, n), called without an
    initial state, so the frontend starts from `zeros`."""
    b = Builder("gru", weights, seed=11)
    x = b.input("input0", (4, 1, 8))
    h = b.call("zeros", [], (1, 16), 'shape=[1, 16], dtype="float32"')
    hidden = 16
    w_ih = b.weight("gru.weight_ih_l0", (3 * hidden, 8), scale=0.3)
    w_hh = b.weight("gru.weight_hh_l0", (3 * hidden, hidden), scale=0.3)
    b_ih = b.weight("gru.bias_ih_l0", (3 * hidden,))
    b_hh = b.weight("gru.bias_hh_l0", (3 * hidden,))
    third = Value("", (1, hidden))
    outputs = []
    for xt in _sequence_steps(b, x):
        gi = add(b, b.call("nn.dense", [xt, w_ih], (1, 3 * hidden), "units=None"), b_ih)
        gh = add(b, b.call("nn.dense", [h, w_hh], (1, 3 * hidden), "units=None"), b_hh)
        i_parts = b.call_tuple("split", [gi], [third] * 3, "indices_or_sections=3, axis=1")
        h_parts = b.call_tuple("split", [gh], [third] * 3, "indices_or_sections=3, axis=1")
        r = b.call("sigmoid", [add(b, b.get(i_parts, 0), b.get(h_parts, 0))], third.shape)
        z = b.call("sigmoid", [add(b, b.get(i_parts, 1), b.get(h_parts, 1))], third.shape)
        n = b.call("tanh", [add(b, b.get(i_parts, 2), multiply(b, r, b.get(h_parts, 2)))], third.shape)
        one_minus_z = b.call("subtract", [b.scalar(1.0), z], z.shape)
        h = add(b, multiply(b, one_minus_z, n), multiply(b, z, h))
        outputs.append(h)
    stacked = b.call("stack", [b.tuple(outputs)], (len(outputs), *h.shape))
    return b.finish(b.tuple([stacked, h]))


# ----------------------------------------------------------------------------------------------
# Transformers

SEQ, HIDDEN, HEADS = 8, 16, 2
HEAD_DIM = HIDDEN // HEADS


def layer_norm(b: Builder, x: Value, name: str) -> Value:
    gamma = b.weight(f"{name}.weight", (x.shape[-1],), "gamma")
    beta = b.weight(f"{name}.bias", (x.shape[-1],))
    attrs = f"epsilon={b.ln_epsilon:g}f" if b.ln_epsilon != 1e-5 else ""
    return b.call("nn.layer_norm", [x, gamma, beta], x.shape, attrs)


def gelu_erf(b: Builder, x: Value) -> Value:
    """PyTorch's exact gelu as the frontend expands it: x * (erf(x / sqrt 2) * 0.5 + 0.5)."""
    e = b.call("erf", [b.call("multiply", [x, b.scalar(0.707107)], x.shape)], x.shape)
    half = b.call("multiply", [e, b.scalar(0.5)], x.shape)
    return multiply(b, x, b.call("add", [b.scalar(0.5), half], x.shape))


def gelu_tanh(b: Builder, x: Value) -> Value:
    """GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    cube = b.call("power", [x, b.scalar(3.0)], x.shape)
    inner = add(b, x, b.call("multiply", [b.scalar(0.044715), cube], x.shape))
    t = b.call("tanh", [b.call("multiply", [b.scalar(0.797885), inner], x.shape)], x.shape)
    one_plus = b.call("add", [b.scalar(1.0), t], x.shape)
    return multiply(b, b.call("multiply", [b.scalar(0.5), x], x.shape), one_plus)


def _heads(b: Builder, x: Value, axes: str) -> Value:
    """(1, SEQ, HIDDEN) -> (1, HEADS, ., .): `view` to heads, then `permute` by `axes`."""
    y = b.call("reshape", [x], (1, SEQ, HEADS, HEAD_DIM), f"newshape=[1, {SEQ}, {HEADS}, {HEAD_DIM}]")
    order = [int(a) for a in axes.strip("[]").split(",")]
    return b.call("transpose", [y], tuple(y.shape[a] for a in order), f"axes={axes}")


def matmul(b: Builder, x: Value, y: Value) -> Value:
    """aten::matmul of two 4-d tensors as the frontend converts it: both to 3-d, the right one
    transposed, batch_matmul with transpose_b=True, the result back to 4-d."""
    (n, h, m, k), cols = x.shape, y.shape[3]
    x3 = b.call("reshape", [x], (n * h, m, k), f"newshape=[-1, {m}, {k}]")
    y3 = b.call("reshape", [y], (n * h, k, cols), f"newshape=[-1, {k}, {cols}]")
    y3t = b.call("transpose", [y3], (n * h, cols, k), "axes=[0, 2, 1]")
    out = b.call("nn.batch_matmul", [x3, y3t], (n * h, m, cols), "transpose_b=True")
    return b.call("reshape", [out], (n, h, m, cols), f"newshape=[{n}, {h}, {m}, {cols}]")


def dropout(b: Builder, x: Value) -> Value:
    """nn.dropout as the frontend prints it in eval mode: a 2-tuple, then its field 0."""
    pair = b.call_tuple("nn.dropout", [x], [Value("", x.shape), Value("", x.shape)], "rate=0.1f")
    return b.get(pair, 0)


def _attention(b: Builder, x: Value, name: str, proj: Callable[[Builder, Value, str, int], Value],
               causal: Value | None = None, mask: Value | None = None, fill: Value | None = None) -> Value:
    q = _heads(b, proj(b, x, f"{name}.query", HIDDEN), "[0, 2, 1, 3]")
    k_t = _heads(b, proj(b, x, f"{name}.key", HIDDEN), "[0, 2, 3, 1]")
    v = _heads(b, proj(b, x, f"{name}.value", HIDDEN), "[0, 2, 1, 3]")
    scores = matmul(b, q, k_t)
    scores = b.call("divide", [scores, b.scalar(math.sqrt(HEAD_DIM))], scores.shape)
    if causal is not None:
        scores = b.call("where", [causal, scores, fill], scores.shape)
    if mask is not None:
        scores = add(b, scores, mask)
    probs = b.call("nn.softmax", [scores], scores.shape)
    if mask is not None:
        probs = dropout(b, probs)
    ctx = b.call("transpose", [matmul(b, probs, v)], (1, SEQ, HEADS, HEAD_DIM), "axes=[0, 2, 1, 3]")
    ctx = b.call("reshape", [ctx], (1, SEQ, HIDDEN), f"newshape=[1, {SEQ}, {HIDDEN}]")
    return proj(b, ctx, f"{name}.out", HIDDEN)


def conv1d_gpt2(b: Builder, x: Value, name: str, nf: int) -> Value:
    """GPT-2's Conv1D: addmm(bias, x.view(-1, nx), weight) with weight (nx, nf), then a view."""
    nx = x.shape[-1]
    weight = b.weight(f"{name}.weight", (nx, nf))
    flat = b.call("reshape", [x], (SEQ, nx), f"newshape=[-1, {nx}]")
    weight_t = b.call("transpose", [weight], (nf, nx), "axes=[1, 0]")
    y = b.call("nn.dense", [flat, weight_t], (SEQ, nf), "units=None")
    y = add(b, b.weight(f"{name}.bias", (nf,)), y)
    return b.call("reshape", [y], (1, SEQ, nf), f"newshape=[1, {SEQ}, {nf}]")


def _mlp(b: Builder, x: Value, name: str, gelu: Callable[[Builder, Value], Value],
         proj: Callable[[Builder, Value, str, int], Value]) -> Value:
    h = proj(b, x, f"{name}.fc1", 4 * HIDDEN)
    return proj(b, gelu(b, h), f"{name}.fc2", HIDDEN)


def transformer_encoder(weights: str = "constants") -> Printed:
    """A BERT encoder layer (post-norm): token + position embeddings, the extended attention
    mask ((1 - mask) * -10000 broadcast over heads), attention, erf gelu MLP, eval-mode dropouts."""
    b = Builder("transformer_encoder", weights, seed=12)
    b.ln_epsilon = 1e-12
    ids = b.input("input_ids", (1, SEQ), "int64", high=32)
    attention_mask = b.input("attention_mask", (1, SEQ), "int64", high=2)
    word = b.weight("embeddings.word_embeddings.weight", (32, HIDDEN), scale=0.5)
    pos = b.weight("embeddings.position_embeddings.weight", (SEQ, HIDDEN), scale=0.5)
    positions = b.constant(np.arange(SEQ, dtype="int64").reshape(1, SEQ))
    x = b.call("take", [word, ids], (1, SEQ, HIDDEN), "axis=0")
    x = add(b, x, b.call("take", [pos, positions], (1, SEQ, HIDDEN), "axis=0"))
    x = dropout(b, layer_norm(b, x, "embeddings.LayerNorm"))
    mask = b.call("expand_dims", [attention_mask], (1, 1, SEQ), "axis=1", dtype="int64")
    mask = b.call("expand_dims", [mask], (1, 1, 1, SEQ), "axis=2", dtype="int64")
    mask = b.call("cast", [mask], mask.shape, 'dtype="float32"')
    mask = b.call("subtract", [b.scalar(1.0), mask], mask.shape)
    mask = b.call("multiply", [mask, b.scalar(-10000.0)], mask.shape)
    attn = dropout(b, _attention(b, x, "attention", linear, mask=mask))
    x = layer_norm(b, add(b, attn, x), "attention.output.LayerNorm")
    x = layer_norm(b, add(b, dropout(b, _mlp(b, x, "intermediate", gelu_erf, linear)), x), "output.LayerNorm")
    return b.finish(x)


def gpt2_block(weights: str = "constants", mask: str = "slice") -> Printed:
    """A GPT-2 block (pre-norm): wte/wpe embeddings, Conv1D projections (addmm), a causal mask
    applied by where, tanh gelu, residuals, the final layer norm and the tied lm head.

    mask="slice": HF's bool `bias` buffer sliced per axis with strided_slice, filled with
    torch.finfo(float32).min (printed to 6 digits); mask="arange": built from arange,
    expand_dims and less_equal, filled with -inf."""
    b = Builder("gpt2_block" if mask == "slice" else f"gpt2_block_{mask}", weights, seed=13)
    ids = b.input("input_ids", (1, SEQ), "int64", high=32)
    wte = b.weight("wte.weight", (32, HIDDEN), scale=0.5)
    wpe = b.weight("wpe.weight", (16, HIDDEN), scale=0.5)
    positions = b.constant(np.arange(SEQ, dtype="int64").reshape(1, SEQ))
    x = add(b, b.call("take", [wte, ids], (1, SEQ, HIDDEN), "axis=0"),
            b.call("take", [wpe, positions], (1, SEQ, HIDDEN), "axis=0"))
    if mask == "slice":
        bias = b.constant(np.tril(np.ones((16, 16), dtype=bool)).reshape(1, 1, 16, 16))
        causal = b.call("strided_slice", [bias], (1, 1, SEQ, 16),
                        f"begin=[0], end=[{SEQ}], strides=[1], axes=[2]", dtype="bool")
        causal = b.call("strided_slice", [causal], (1, 1, SEQ, SEQ),
                        f"begin=[0], end=[{SEQ}], strides=[1], axes=[3]", dtype="bool")
        fill = b.scalar(-3.40282e38)
    else:
        steps = [b.scalar(v, "int64") for v in (0, SEQ, 1)]
        cols = b.call("arange", steps, (SEQ,), 'dtype="int64"', dtype="int64")
        rows = b.call("expand_dims", [cols], (SEQ, 1), "axis=1", dtype="int64")
        causal = b.call("less_equal", [cols, rows], (SEQ, SEQ), dtype="bool")
        fill = Value("-inff /* ty=float32 */")
    x = add(b, x, _attention(b, layer_norm(b, x, "h.0.ln_1"), "h.0.attn", conv1d_gpt2, causal=causal, fill=fill))
    x = add(b, x, _mlp(b, layer_norm(b, x, "h.0.ln_2"), "h.0.mlp", gelu_tanh, conv1d_gpt2))
    x = layer_norm(b, x, "ln_f")
    return b.finish(b.call("nn.dense", [x, wte], (1, SEQ, 32), "units=None"))


# The models, by name; CNN and transformer models are also built with target "cblas, c".
MODELS: dict[str, Callable[[str], Printed]] = {
    "resnet_basic_block": resnet_basic_block,
    "resnet": resnet,
    "resnet_bottleneck": resnet_bottleneck,
    "resnext": resnext,
    "resnet_nchwc": resnet_nchwc,
    "mobilenet_nchwc": mobilenet_nchwc,
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v1_tflite": mobilenet_v1_tflite,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3": mobilenet_v3,
    "efficientnet": efficientnet,
    "unet": unet,
    "lstm_cell": lstm_cell,
    "lstm": lstm,
    "gru": gru,
    "transformer_encoder": transformer_encoder,
    "gpt2_block": gpt2_block,
    "gpt2_block_arange": lambda weights="constants": gpt2_block(weights, mask="arange"),
}
BLAS_MODELS = ("resnet_basic_block", "resnet", "resnet_bottleneck", "resnext", "resnet_nchwc", "mobilenet_nchwc",
               "mobilenet_v1",
               "mobilenet_v1_tflite", "mobilenet_v2", "mobilenet_v3", "efficientnet", "unet",
               "transformer_encoder", "gpt2_block", "gpt2_block_arange")
