"""AlterOpLayout: products with a constant weight get it packed NC[b]n at compile time, as
contrib_dense_pack of a folded constant; runtime weights, few rows and other dtypes stay."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from compiler.driver import BuildOptions, build, lower
from compiler.ir.expr import Call, Constant, Function
from compiler.ir.module import IRModule
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.parser.printer import astext
from compiler.passes.alter_op_layout import AlterOpLayout
from compiler.passes.bind_params import BindParams
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import PassContext
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

HEADER = '#[version = "0.0.5"]\n'
RNG = np.random.default_rng(7)
LANES8 = PassContext(config={"tir.vector_lanes": 8})


def f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def bound(text: str, params: Mapping[str, np.ndarray]) -> IRModule:
    return InferType()(BindParams(dict(params))(parse(HEADER + text)))


def altered(mod: IRModule, ctx: PassContext = LANES8) -> IRModule:
    with ctx.scope():
        return AlterOpLayout()(mod)


def calls(mod: IRModule, name: str) -> list[Call]:
    return [n for n in post_order(mod.main) if isinstance(n, Call) and n.op_name == name]


def packed_call(mod: IRModule) -> Call:
    (call,) = calls(mod, "nn.contrib_dense_pack")
    return call


DENSE = """def @main(%x: Tensor[(20, 37), float32], %w: Tensor[(21, 37), float32], %b: Tensor[(21), float32]) {
  %0 = nn.dense(%x, %w, units=None);
  nn.relu(nn.bias_add(%0, %b, axis=-1))
}"""


def test_constant_dense_weight_becomes_a_folded_packed_constant_padded_to_whole_blocks() -> None:
    w = f32(21, 37)
    mod = altered(bound(DENSE, {"w": w, "b": f32(21)}))
    call = packed_call(mod)
    assert not calls(mod, "nn.dense") and not calls(mod, "layout_transform") and not calls(mod, "nn.pad")
    assert call.attrs["weight_layout"] == "NC16n" and call.attrs["units"] == 21
    weight = call.args[1]
    assert isinstance(weight, Constant) and weight.data.shape == (2, 37, 16)
    unpacked = weight.data.transpose(0, 2, 1).reshape(32, 37)
    np.testing.assert_array_equal(unpacked[:21], w)
    np.testing.assert_array_equal(unpacked[21:], 0)


def test_packed_model_computes_what_the_dense_model_does() -> None:
    params = {"w": f32(21, 37), "b": f32(21)}
    before = bound(DENSE, params)
    after = altered(before)
    x = {"x": f32(20, 37)}
    np.testing.assert_allclose(run_main(after, x)[0], run_main(before, x)[0], rtol=1e-5, atol=1e-6)


def test_lowered_model_fuses_the_epilogue_into_the_packed_product(tmp_path: Path) -> None:
    params = {"w": f32(21, 37), "b": f32(21)}
    model = build(HEADER + DENSE, tmp_path, BuildOptions(), params=params)
    lowered = astext(model.lowered)
    assert "fused_nn_contrib_dense_pack_nn_bias_add_nn_relu" in lowered and "nn.dense" not in lowered
    x = f32(20, 37)
    (out,) = CompiledModule(tmp_path).run({"x": x}).outputs
    np.testing.assert_allclose(out, np.maximum(x @ params["w"].T + params["b"], 0), rtol=1e-4, atol=1e-5)


def test_block_is_two_vectors_of_the_configured_lanes() -> None:
    mod = altered(bound(DENSE, {"w": f32(21, 37), "b": f32(21)}), PassContext(config={"tir.vector_lanes": 16}))
    call = packed_call(mod)
    assert call.attrs["weight_layout"] == "NC32n" and call.args[1].checked_type.shape == (1, 37, 32)


def test_whole_blocks_keep_units_as_written() -> None:
    text = DENSE.replace("21", "32")
    call = packed_call(altered(bound(text, {"w": f32(32, 37), "b": f32(32)})))
    assert call.attrs["units"] is None and call.args[1].checked_type.shape == (2, 37, 16)


def test_runtime_weights_few_rows_and_other_dtypes_are_left_alone() -> None:
    runtime = bound(DENSE, {"b": f32(21)})
    assert altered(runtime) is runtime
    one_row = bound(DENSE.replace("(20, 37)", "(1, 37)"), {"w": f32(21, 37), "b": f32(21)})
    assert altered(one_row) is one_row
    half = bound(DENSE.replace("float32", "float16"),
                 {"w": f32(21, 37).astype("float16"), "b": f32(21).astype("float16")})
    assert altered(half) is half


def test_opt_level_below_three_leaves_dense(tmp_path: Path) -> None:
    model = lower(parse(HEADER + DENSE), BuildOptions(opt_level=2), {"w": f32(21, 37), "b": f32(21)}, executor=False)
    assert "nn.contrib_dense_pack" not in astext(model.lowered)


def test_matmul_and_shared_batch_matmul_weights_are_packed_from_their_layouts() -> None:
    text = """def @main(%x: Tensor[(2, 9, 12), float32], %w: Tensor[(12, 19), float32], %v: Tensor[(1, 12, 19), float32],
                        %u: Tensor[(2, 12, 19), float32]) {
  %0 = nn.matmul(%x, %w, units=None);
  %1 = nn.batch_matmul(%x, %v, transpose_b=False);
  %2 = nn.batch_matmul(%x, %u, transpose_b=False);
  (%0, %1, %2)
}"""
    params = {"w": f32(12, 19), "v": f32(1, 12, 19), "u": f32(2, 12, 19)}
    before = bound(text, params)
    after = altered(before)
    assert len(calls(after, "nn.contrib_dense_pack")) == 2 and not calls(after, "nn.matmul")
    assert len(calls(after, "nn.batch_matmul")) == 1  # a weight per batch is not one weight
    x = {"x": f32(2, 9, 12)}
    for got, want in zip(run_main(after, x), run_main(before, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batch_matmul_of_whole_blocks_packs_without_units() -> None:
    text = """def @main(%x: Tensor[(1, 20, 12), float32], %v: Tensor[(1, 32, 12), float32]) {
  nn.batch_matmul(%x, %v, transpose_b=True)
}"""
    before = bound(text, {"v": f32(1, 32, 12)})
    call = packed_call(altered(before))
    assert call.attrs["units"] is None and call.attrs["weight_layout"] == "NC16n"
    x = {"x": f32(1, 20, 12)}
    np.testing.assert_allclose(run_main(altered(before), x)[0], run_main(before, x)[0], rtol=1e-5, atol=1e-5)


def test_product_taken_by_an_external_codegen_is_not_packed() -> None:
    # cblas takes a batch_matmul whatever its weight; AlterOpLayout would pack this one's.
    product = """def @main(%x: Tensor[(1, 20, 37), float32], %w: Tensor[(1, 21, 37), float32]) {
  nn.batch_matmul(%x, %w, transpose_a=False, transpose_b=True)
}"""
    model = lower(parse(HEADER + product), BuildOptions(target="cblas, c"), {"w": f32(1, 21, 37)}, executor=False)
    functions = [f for _, f in model.source.functions() if isinstance(f, Function)]
    ops = {n.op_name for f in functions for n in post_order(f) if isinstance(n, Call) and n.op_name}
    assert "nn.batch_matmul" in ops and "nn.contrib_dense_pack" not in ops


def test_dense_of_a_constant_weight_stays_on_the_host_under_cblas_and_is_packed() -> None:
    mlp = """def @main(%x: Tensor[(20, 37), float32], %w: Tensor[(21, 37), float32]) {
  nn.dense(%x, %w, units=None)
}"""
    model = lower(parse(HEADER + mlp), BuildOptions(target="cblas, c"), {"w": f32(21, 37)}, executor=False)
    functions = [f for _, f in model.source.functions() if isinstance(f, Function)]
    assert not [f for f in functions if f.attrs.get("Compiler")]
    ops = {n.op_name for f in functions for n in post_order(f) if isinstance(n, Call) and n.op_name}
    assert "nn.contrib_dense_pack" in ops
