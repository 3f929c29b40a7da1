"""A small CNN split between a CPU and a GPU the way TVM's PlanDevices prints it (the Builder of
tests/e2e/tvm_printed.py, no spans).

* `cnn_plan_devices` (TVM 0.9 to 0.18): `%x {virtual_device=meta[VirtualDevice][i]}` on every
  parameter and `virtual_device=` on @main (the device of its result), `meta[VirtualDevice]`
  entries (with targets and a memory scope) in the metadata section; the image is
  `device_copy`'d to the GPU, the conv stack runs there and its result is pinned by
  `on_device(..., constrain_result=True)` before the `device_copy` back; the classifier head
  runs on the CPU. Weights bound as constants are pinned to their device with
  `on_device(meta[relay.Constant][i], ..., constrain_result=True)`, as PlanDevices leaves them.
* `cnn_plan_devices_tvm08`: the same model as TVM 0.8's PlanDevices printed it, with DLPack
  device types: `param_device_types=[...]` and `result_device_type=` on @main,
  `on_device(x, device_type=2, is_fixed=True)` and `device_copy(x, src_dev_type=1,
  dst_dev_type=2)`.

* `cnn_texture_scopes`: memory scopes on one OpenCL device (`global`, `global.texture`,
  `global.texture-weight`) as TVM's memory-scope planning for Adreno prints them.

On our single CPU all compile to the same program as the model without placement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.ir.device import VirtualDevice
from tests.e2e.tvm_printed import Builder, Printed, Value, _pair, linear, max_pool, relu

CPU, GPU = 0, 1
DEVICES = (VirtualDevice(1, 0, "llvm", ""), VirtualDevice(2, 0, "cuda", "global"))
DLPACK = (1, 2)  # kDLCPU, kDLCUDA


class PlacedBuilder(Builder):
    """A Builder whose weights and inputs live on a current device, written as PlanDevices does
    in TVM 0.9+ (`style="virtual_device"`) or 0.8 (`style="device_type"`)."""

    def __init__(self, name: str, weights: str, seed: int, style: str,
                 devices: Sequence[VirtualDevice] = DEVICES):
        super().__init__(name, weights, seed, spans=False)
        self.style = style
        self.device = CPU
        self.param_types: list[int] = []
        if style == "virtual_device":
            self.virtual_devices = list(devices)

    def _place_param(self) -> None:
        if self.style == "virtual_device":
            self.param_devices[self.params[-1].ref] = self.device
        else:
            self.param_types.append(DLPACK[self.device])

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32", high: int = 0) -> Value:
        value = super().input(name, shape, dtype, high)
        self._place_param()
        return value

    def weight(self, name: str, shape: Sequence[int], kind: str = "normal", scale: float | None = None,
               array: np.ndarray | None = None) -> Value:
        value = super().weight(name, shape, kind, scale, array)
        if self.form == "params":
            self._place_param()
            return value
        return self.pin(value)

    def pin(self, value: Value) -> Value:
        """on_device(value) fixed to the current device."""
        if self.style == "virtual_device":
            attrs = f"virtual_device=meta[VirtualDevice][{self.device}], constrain_result=True"
        else:
            attrs = f"device_type={DLPACK[self.device]}, is_fixed=True"
        return self.call("on_device", [value], value.shape, attrs, dtype=value.dtype)

    def copy_to(self, value: Value, device: int) -> Value:
        if self.style == "virtual_device":
            attrs = (f"src_virtual_device=meta[VirtualDevice][{self.device}], "
                     f"dst_virtual_device=meta[VirtualDevice][{device}]")
        else:
            attrs = f"src_dev_type={DLPACK[self.device]}, dst_dev_type={DLPACK[device]}"
        self.device = device
        return self.call("device_copy", [value], value.shape, attrs, dtype=value.dtype)

    def finish(self, result: Value) -> Printed:
        if self.style == "virtual_device":
            self.function_device = self.device
            return super().finish(result)
        printed = super().finish(result)
        marker = f") -> {result.ty} {{"
        placement = f", param_device_types={_pair(self.param_types)}, result_device_type={DLPACK[self.device]}"
        printed.text = printed.text.replace(marker, placement + marker, 1)
        return printed


def _conv_relu(b: Builder, x: Value, name: str, out_ch: int, stride: int = 1) -> Value:
    n, c, h, w = x.shape
    weight = b.weight(f"{name}.weight", (out_ch, c, 3, 3))
    oh, ow = (h + 2 - 3) // stride + 1, (w + 2 - 3) // stride + 1
    attrs = ([f"strides={_pair([stride, stride])}"] if stride != 1 else []) + [
        "padding=[1, 1, 1, 1]", f"channels={out_ch}", "kernel_size=[3, 3]"]
    y = b.call("nn.conv2d", [x, weight], (n, out_ch, oh, ow), ", ".join(attrs))
    y = b.call("nn.bias_add", [y, b.weight(f"{name}.bias", (out_ch,))], y.shape)
    return relu(b, y)


def _cnn(style: str, weights: str) -> Printed:
    name = "cnn_plan_devices" + ("" if style == "virtual_device" else "_tvm08")
    b = PlacedBuilder(name, weights, seed=51, style=style)
    image = b.input("data", (1, 3, 16, 16))
    x = b.copy_to(image, GPU)
    x = _conv_relu(b, x, "features.0", 8)
    x = max_pool(b, x, 2, 2, 0)
    x = _conv_relu(b, x, "features.3", 16, stride=2)
    x = b.copy_to(b.pin(x), CPU)
    n, c = x.shape[:2]
    x = b.call("nn.global_avg_pool2d", [x], (n, c, 1, 1))
    x = b.call("nn.batch_flatten", [x], (n, c))
    x = linear(b, x, "classifier", 10)
    return b.finish(b.call("nn.softmax", [x], x.shape, "axis=1"))


def cnn_plan_devices(weights: str = "constants") -> Printed:
    return _cnn("virtual_device", weights)


def cnn_plan_devices_tvm08(weights: str = "constants") -> Printed:
    return _cnn("device_type", weights)


# OpenCL (device type 4) buffers and the Adreno texture scopes AnnotateMemoryScope assigns.
BUFFER, TEXTURE, TEXTURE_WEIGHT = 0, 1, 2
SCOPES = tuple(VirtualDevice(4, 0, "opencl", scope) for scope in ("global", "global.texture", "global.texture-weight"))


def _in_scope(b: PlacedBuilder, scope: int, name: str, shape: tuple[int, ...]) -> Value:
    """A weight placed in `scope`; the builder's current scope is kept."""
    current, b.device = b.device, scope
    value = b.weight(name, shape)
    b.device = current
    return value


def cnn_texture_scopes(weights: str = "constants") -> Printed:
    """Memory scopes on one device, as TVM plans them for Adreno GPUs: convolution activations
    in `global.texture`, their weights in `global.texture-weight`, `device_copy` between the
    scopes of the same device, the head in plain `global` buffers."""
    b = PlacedBuilder("cnn_texture_scopes", weights, seed=52, style="virtual_device", devices=SCOPES)
    b.device = BUFFER
    image = b.input("data", (1, 3, 16, 16))
    x = b.copy_to(image, TEXTURE)
    for name, out_ch, stride in (("features.0", 8, 1), ("features.2", 16, 2)):
        n, c = x.shape[:2]
        h = (x.shape[2] + 2 - 3) // stride + 1
        attrs = ([f"strides={_pair([stride, stride])}"] if stride != 1 else []) + [
            "padding=[1, 1, 1, 1]", f"channels={out_ch}", "kernel_size=[3, 3]"]
        x = b.call("nn.conv2d", [x, _in_scope(b, TEXTURE_WEIGHT, f"{name}.weight", (out_ch, c, 3, 3))],
                   (n, out_ch, h, h), ", ".join(attrs))
        x = relu(b, b.call("nn.bias_add", [x, _in_scope(b, TEXTURE_WEIGHT, f"{name}.bias", (out_ch,))], x.shape))
    x = b.copy_to(b.pin(x), BUFFER)
    n, c = x.shape[:2]
    x = b.call("nn.batch_flatten", [b.call("nn.global_avg_pool2d", [x], (n, c, 1, 1))], (n, c))
    return b.finish(b.call("nn.softmax", [linear(b, x, "classifier", 10)], (n, 10), "axis=1"))


MODELS: dict[str, Callable[[str], Printed]] = {
    "cnn_plan_devices": cnn_plan_devices,
    "cnn_plan_devices_tvm08": cnn_plan_devices_tvm08,
    "cnn_texture_scopes": cnn_texture_scopes,
}
BLAS_MODELS = ("cnn_plan_devices",)
