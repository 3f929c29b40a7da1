"""FoldScaleAxis: a constant per-channel scale after conv2d or dense goes into the weight (and
into a constant bias between them); everything else is left as written."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from compiler.driver import BuildOptions, build, lower
from compiler.ir.expr import Call, Constant
from compiler.ir.module import IRModule
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.passes.bind_params import BindParams
from compiler.passes.fold_constant import FoldConstant
from compiler.passes.fold_scale_axis import FoldScaleAxis
from compiler.passes.infer_type import InferType
from compiler.passes.simplify_inference import SimplifyInference
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

HEADER = '#[version = "0.0.5"]\n'
RNG = np.random.default_rng(35)

CONV_BN = """def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32],
          %g: Tensor[(4), float32], %b: Tensor[(4), float32], %m: Tensor[(4), float32], %v: Tensor[(4), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.batch_norm(%0, %g, %b, %m, %v);
  nn.relu(%1.0)
}"""


def f32(*shape: int, low: float = -1.0) -> np.ndarray:
    return RNG.uniform(low, 1, shape).astype("float32")


def bn_params() -> dict[str, np.ndarray]:
    return {"w": f32(4, 3, 3, 3), "g": f32(4), "b": f32(4), "m": f32(4), "v": f32(4, low=0.5)}


def prepared(text: str, params: Mapping[str, np.ndarray]) -> IRModule:
    """What FoldScaleAxis sees in the pipeline: params bound, batch norms simplified, folded."""
    mod = InferType()(BindParams(dict(params))(parse(HEADER + text)))
    return FoldConstant()(SimplifyInference()(mod))


def calls(mod: IRModule, name: str) -> list[Call]:
    return [n for n in post_order(mod.main) if isinstance(n, Call) and n.op_name == name]


def assert_same_results(before: IRModule, after: IRModule, inputs: Mapping[str, np.ndarray]) -> None:
    for got, want in zip(run_main(after, inputs), run_main(before, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_batch_norm_scale_after_a_conv2d_folds_into_its_weight() -> None:
    before = prepared(CONV_BN, bn_params())
    assert len(calls(before, "multiply")) == 1
    after = FoldScaleAxis()(before)
    assert not calls(after, "multiply")
    (conv,) = calls(after, "nn.conv2d")
    assert isinstance(conv.args[1], Constant)
    assert_same_results(before, after, {"x": f32(1, 3, 8, 8)})


def test_a_scale_folds_over_an_image_of_run_time_size() -> None:
    # Only the channel axis the scale runs along must be known; the map's `?` dims pass.
    before = prepared(CONV_BN.replace("(1, 3, 8, 8)", "(?, 3, ?, ?)"), bn_params())
    after = FoldScaleAxis()(before)
    assert not calls(after, "multiply")
    assert_same_results(before, after, {"x": f32(2, 3, 7, 5)})


@pytest.mark.parametrize("bias", ["nn.bias_add(%0, %c)", "add(%0, %c2)", "add(%c2, %0)"])
def test_scale_after_a_constant_bias_scales_the_bias_too(bias: str) -> None:
    text = f"""def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32],
              %c: Tensor[(4), float32], %c2: Tensor[(4, 1, 1), float32], %s: Tensor[(4, 1, 1), float32]) {{
      %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
      %1 = {bias};
      multiply(%s, %1)
    }}"""
    params = {"w": f32(4, 3, 3, 3), "c": f32(4), "c2": f32(4, 1, 1), "s": f32(4, 1, 1)}
    before = prepared(text, params)
    after = FoldScaleAxis()(before)
    assert not calls(after, "multiply")
    assert_same_results(before, after, {"x": f32(1, 3, 8, 8)})


def test_dense_scale_along_its_units_folds_into_the_weight_rows() -> None:
    text = """def @main(%x: Tensor[(5, 6), float32], %w: Tensor[(7, 6), float32], %s: Tensor[(7), float32]) {
      multiply(nn.dense(%x, %w, units=7), %s)
    }"""
    before = prepared(text, {"w": f32(7, 6), "s": f32(7)})
    after = FoldScaleAxis()(before)
    assert not calls(after, "multiply")
    assert_same_results(before, after, {"x": f32(5, 6)})


def test_nhwc_conv2d_with_an_hwio_kernel_scales_the_kernel_last_axis() -> None:
    text = """def @main(%x: Tensor[(1, 8, 8, 3), float32], %w: Tensor[(3, 3, 3, 4), float32], %s: Tensor[(4), float32]) {
      %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3], data_layout="NHWC", kernel_layout="HWIO");
      multiply(%0, %s)
    }"""
    before = prepared(text, {"w": f32(3, 3, 3, 4), "s": f32(4)})
    after = FoldScaleAxis()(before)
    assert not calls(after, "multiply")
    assert_same_results(before, after, {"x": f32(1, 8, 8, 3)})


def test_a_scalar_scale_folds_too() -> None:
    text = """def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
      multiply(nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3]), 0.5f)
    }"""
    before = prepared(text, {"w": f32(4, 3, 3, 3)})
    after = FoldScaleAxis()(before)
    assert not calls(after, "multiply")
    assert_same_results(before, after, {"x": f32(1, 3, 8, 8)})


LEFT_ALONE = {
    "a scale varying along the rows": ("""def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %s: Tensor[(1, 1, 6, 1), float32]) {
      multiply(nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3]), %s)
    }""", {"w": (4, 3, 3, 3), "s": (1, 1, 6, 1)}),
    "a scale along a `?` axis": ("""def @main(%x: Tensor[(1, 3, 8, ?), float32], %w: Tensor[(4, 3, 3, 3), float32], %s: Tensor[(1, 1, 1, 6), float32]) {
      multiply(nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3]), %s)
    }""", {"w": (4, 3, 3, 3), "s": (1, 1, 1, 6)}),
    "a product with a second consumer": ("""def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %s: Tensor[(4, 1, 1), float32]) {
      %0 = nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3]);
      (multiply(%0, %s), %0)
    }""", {"w": (4, 3, 3, 3), "s": (4, 1, 1)}),
    "a runtime weight": ("""def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %s: Tensor[(4, 1, 1), float32]) {
      multiply(nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3]), %s)
    }""", {"s": (4, 1, 1)}),
    "a runtime scale": ("""def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %s: Tensor[(4, 1, 1), float32]) {
      multiply(nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3]), %s)
    }""", {"w": (4, 3, 3, 3)}),
    "a scale that widens the result": ("""def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %s: Tensor[(2, 4, 1, 1), float32]) {
      multiply(nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3]), %s)
    }""", {"w": (4, 3, 3, 3), "s": (2, 4, 1, 1)}),
    "a depthwise HWOI kernel": ("""def @main(%x: Tensor[(1, 8, 8, 4), float32], %w: Tensor[(3, 3, 4, 1), float32], %s: Tensor[(4), float32]) {
      %0 = nn.conv2d(%x, %w, channels=4, groups=4, kernel_size=[3, 3], data_layout="NHWC", kernel_layout="HWOI");
      multiply(%0, %s)
    }""", {"w": (3, 3, 4, 1), "s": (4,)}),
    "a bias add with a second consumer": ("""def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %c: Tensor[(4), float32], %s: Tensor[(4, 1, 1), float32]) {
      %0 = nn.bias_add(nn.conv2d(%x, %w, channels=4, kernel_size=[3, 3]), %c);
      (multiply(%0, %s), %0)
    }""", {"w": (4, 3, 3, 3), "c": (4,), "s": (4, 1, 1)}),
}


@pytest.mark.parametrize("case", sorted(LEFT_ALONE))
def test_what_cannot_fold_exactly_is_left_as_written(case: str) -> None:
    text, shapes = LEFT_ALONE[case]
    before = prepared(text, {name: f32(*shape) for name, shape in shapes.items()})
    after = FoldScaleAxis()(before)
    assert after is before
    assert len(calls(after, "multiply")) == 1


def test_grouped_oihw_conv2d_folds_along_its_output_channels() -> None:
    text = """def @main(%x: Tensor[(1, 4, 8, 8), float32], %w: Tensor[(4, 1, 3, 3), float32], %s: Tensor[(4, 1, 1), float32]) {
      multiply(nn.conv2d(%x, %w, channels=4, groups=4, kernel_size=[3, 3]), %s)
    }"""
    before = prepared(text, {"w": f32(4, 1, 3, 3), "s": f32(4, 1, 1)})
    after = FoldScaleAxis()(before)
    assert not calls(after, "multiply")
    assert_same_results(before, after, {"x": f32(1, 4, 8, 8)})


def test_pipeline_folds_at_opt_level_3_and_not_below_or_when_disabled() -> None:
    params = bn_params()

    def kernels(**options: object) -> list[str]:
        model = lower(parse(HEADER + CONV_BN), BuildOptions(**options), params)  # type: ignore[arg-type]
        return [name for name, info in model.functions.items() if info.get("kind") == "prim_func"]

    assert not any("multiply" in name for name in kernels())
    assert any("multiply" in name for name in kernels(opt_level=2))
    assert any("multiply" in name for name in kernels(disabled_passes=("FoldScaleAxis",)))
    assert "FoldScaleAxis" in [p["name"] for p in lower(parse(HEADER + CONV_BN), BuildOptions(), params).report["passes"]]


def test_compiled_conv_bn_relu_matches_numpy(tmp_path: Path) -> None:
    params = bn_params()
    x = f32(1, 3, 8, 8)
    build(HEADER + CONV_BN, tmp_path, BuildOptions(), params=params)
    (got,) = CompiledModule(tmp_path).run({"x": x}).outputs
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, 4, 8, 8), np.float32)
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,oc->nohw", padded[:, :, i:i + 8, j:j + 8], params["w"][:, :, i, j])
    scale = params["g"] / np.sqrt(params["v"] + 1e-5)
    want = np.maximum(conv * scale[:, None, None] + (params["b"] - params["m"] * scale)[:, None, None], 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_float16_conv_bn_rounds_the_folded_weight_once(tmp_path: Path) -> None:
    """In float16 the scale's product is rounded into the weight, as TVM's FoldConstant does,
    and the kernel no longer rounds after a multiply: the compiled model equals the
    interpreter on the folded module and stays within float16's precision of the unfolded one."""
    params = {k: v.astype("float16") for k, v in bn_params().items()}
    text = CONV_BN.replace("float32", "float16")
    x = f32(1, 3, 8, 8).astype("float16")
    build(HEADER + text, tmp_path, BuildOptions(), params=params)
    (got,) = CompiledModule(tmp_path).run({"x": x}).outputs
    folded = FoldScaleAxis()(prepared(text, params))
    (want_folded,) = run_main(folded, {"x": x})
    np.testing.assert_array_equal(got, want_folded)
    (unfolded,) = run_main(prepared(text, params), {"x": x})
    np.testing.assert_allclose(got.astype("float32"), unfolded.astype("float32"), rtol=4e-3, atol=4e-3)
