"""Float16ComputeInFloat32: float16 host ops compute in float32 and round their results to
float16; data movement, conversions and what a codegen took are left as written."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from compiler.driver import BuildOptions, build, lower
from compiler.ir.expr import Call, Constant
from compiler.ir.module import IRModule
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.parser.printer import astext
from compiler.passes.bind_params import BindParams
from compiler.passes.float16_compute import Float16ComputeInFloat32
from compiler.passes.infer_type import InferType
from compiler.runtime.module import CompiledModule

HEADER = '#[version = "0.0.5"]\n'
RNG = np.random.default_rng(16)

CONV = """def @main(%x: Tensor[(1, 3, 10, 10), float16], %w: Tensor[(8, 3, 3, 3), float16], %b: Tensor[(8), float16]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, %b);
  %2 = nn.relu(%1);
  transpose(%2, axes=[0, 2, 3, 1])
}"""


def f16(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float16")


def rewritten(text: str, params: Mapping[str, np.ndarray] | None = None) -> IRModule:
    mod = InferType()(BindParams(dict(params or {}))(parse(HEADER + text)))
    return Float16ComputeInFloat32()(mod)


def calls(mod: IRModule, name: str) -> list[Call]:
    return [n for n in post_order(mod.main) if isinstance(n, Call) and n.op_name == name]


def test_conv_reads_a_folded_float32_weight_and_its_result_rounds_to_float16() -> None:
    mod = rewritten(CONV, {"w": f16(8, 3, 3, 3), "b": f16(8)})
    (conv,) = calls(mod, "nn.conv2d")
    weight = conv.args[1]

    assert isinstance(weight, Constant) and weight.data.dtype == np.float32
    assert conv.checked_type.dtype == "float32"  # type: ignore[attr-defined]  # a TensorType
    (relu,) = calls(mod, "nn.relu")
    assert relu.checked_type.dtype == "float32"  # type: ignore[attr-defined]
    (transpose,) = calls(mod, "transpose")  # moves values: stays float16
    assert transpose.checked_type.dtype == "float16"  # type: ignore[attr-defined]
    assert mod.main.body.checked_type.dtype == "float16"  # type: ignore[attr-defined]


def test_conversions_creation_and_integer_results_are_left_alone() -> None:
    text = """def @main(%x: Tensor[(4, 5), float16]) {
  %0 = cast(%x, dtype="int32");
  %1 = zeros(shape=[4, 5], dtype="float16");
  %2 = argmax(%x, axis=[1]);
  %3 = reshape(%x, newshape=[20]);
  (%0, %1, %2, %3)
}"""
    mod = InferType()(parse(HEADER + text))
    assert Float16ComputeInFloat32()(mod) is mod


def test_an_explicit_float16_out_dtype_becomes_float32() -> None:
    text = """def @main(%x: Tensor[(4, 6), float16], %w: Tensor[(3, 6), float16]) {
  nn.dense(%x, %w, units=3, out_dtype="float16")
}"""
    (dense,) = calls(rewritten(text), "nn.dense")
    assert dense.attrs["out_dtype"] == "float32"
    assert [a.checked_type.dtype for a in dense.args] == ["float32", "float32"]  # type: ignore[attr-defined]


def test_compiled_float16_conv_rounds_at_each_op_as_numpy_does(tmp_path: Path) -> None:
    x, w, b = f16(1, 3, 10, 10), f16(8, 3, 3, 3), f16(8)
    build(HEADER + CONV, tmp_path, BuildOptions(), {"w": w, "b": b})
    (got,) = CompiledModule(tmp_path).run({"x": x}).outputs

    # The float16 program: each op's result in float16, the convolution summed in float32.
    padded = np.pad(x.astype("float32"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    conv = np.einsum("nchwij,ocij->nohw", windows, w.astype("float32")).astype("float16")
    want = np.maximum(conv + b[None, :, None, None], np.float16(0)).transpose(0, 2, 3, 1)
    assert got.dtype == np.float16
    # One float16 ulp where float32 sums in another order land on the other side of a tie.
    np.testing.assert_allclose(got.astype("float32"), want.astype("float32"), rtol=1e-3, atol=1e-3)


def test_opt_level_zero_keeps_float16_arithmetic() -> None:
    model = lower(parse(HEADER + CONV), BuildOptions(opt_level=0), {"w": f16(8, 3, 3, 3), "b": f16(8)}, executor=False)
    assert "float32" not in astext(model.lowered)


def test_max_pools_and_maxima_stay_float16_since_they_only_pick_an_input() -> None:
    text = """def @main(%x: Tensor[(1, 4, 8, 8), float16]) {
  %0 = nn.max_pool2d(%x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1]);
  %1 = max(%0, axis=[1]);
  %2 = nn.avg_pool2d(%x, pool_size=[2, 2]);
  (%1, %2)
}"""
    mod = rewritten(text)
    (pool,) = calls(mod, "nn.max_pool2d")
    (largest,) = calls(mod, "max")
    (average,) = calls(mod, "nn.avg_pool2d")
    assert pool.checked_type.dtype == "float16" and largest.checked_type.dtype == "float16"  # type: ignore[attr-defined]
    assert average.checked_type.dtype == "float32"  # type: ignore[attr-defined]  # a sum rounds: widened
