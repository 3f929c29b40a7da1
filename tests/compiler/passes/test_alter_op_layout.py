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


CONV = """def @main(%x: Tensor[(2, 9, 11, 9), float32], %w: Tensor[(32, 9, 3, 3), float32],
          %b: Tensor[(32), float32], %r: Tensor[(2, 32, 6, 7), float32]) {
  %0 = nn.conv2d(%x, %w, strides=[2, 1], padding=[1, 2, 1, 0], dilation=[1, 2], channels=32, kernel_size=[3, 3]);
  %1 = nn.relu(nn.bias_add(%0, %b));
  add(%1, %r)
}"""


def conv_with(channels: int) -> str:
    """CONV with another count of output channels."""
    return CONV.replace("(32", f"({channels}").replace(", 32,", f", {channels},").replace("=32", f"={channels}")


def conv_call(mod: IRModule) -> Call:
    (call,) = calls(mod, "nn.contrib_conv2d_NCHWc")
    return call


def numpy_conv_model(x: np.ndarray, w: np.ndarray, b: np.ndarray, r: np.ndarray) -> np.ndarray:
    """CONV written out: stride (2, 1), dilation (1, 2), padding top 1, left 2, bottom 1."""
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (2, 0)))
    out = np.zeros((x.shape[0], 32, 6, 7))
    for ky in range(3):
        for kx in range(3):
            window = padded[:, :, ky: ky + 11: 2, 2 * kx: 2 * kx + 7]
            out += np.einsum("nihw,oi->nohw", window, w[:, :, ky, kx])
    return np.maximum(out + b[:, None, None], 0) + r


def test_constant_conv2d_weight_becomes_a_folded_ohwi_blocked_constant_on_nchw_data() -> None:
    w = f32(32, 9, 3, 3)
    mod = altered(bound(CONV, {"w": w, "b": f32(32)}))
    call = conv_call(mod)
    assert not calls(mod, "nn.conv2d") and not calls(mod, "layout_transform")
    assert (call.attrs["data_layout"], call.attrs["kernel_layout"], call.attrs["out_layout"]) == ("NCHW", "OHWI16o", "NCHW")
    assert list(call.attrs["strides"]) == [2, 1] and list(call.attrs["dilation"]) == [1, 2]
    weight = call.args[1]
    assert isinstance(weight, Constant)
    np.testing.assert_array_equal(weight.data, w.reshape(2, 16, 9, 3, 3).transpose(0, 3, 4, 2, 1))
    assert call.checked_type.shape == (2, 32, 6, 7)


def test_packed_conv2d_model_computes_what_the_conv2d_model_does() -> None:
    params = {"w": f32(32, 9, 3, 3), "b": f32(32)}
    before = bound(CONV, params)
    inputs = {"x": f32(2, 9, 11, 9), "r": f32(2, 32, 6, 7)}
    np.testing.assert_allclose(run_main(altered(before), inputs)[0], run_main(before, inputs)[0], rtol=1e-5, atol=1e-6)


def test_built_packed_conv2d_fuses_bias_relu_and_add_and_matches_numpy(tmp_path: Path) -> None:
    params = {"w": f32(32, 9, 3, 3), "b": f32(32)}
    model = build(HEADER + CONV, tmp_path, BuildOptions(), params=params)
    lowered = astext(model.lowered)
    assert "fused_nn_contrib_conv2d_NCHWc_nn_bias_add_nn_relu_add" in lowered and "nn.conv2d(" not in lowered
    x, r = f32(2, 9, 11, 9), f32(2, 32, 6, 7)
    (out,) = CompiledModule(tmp_path).run({"x": x, "r": r}).outputs
    np.testing.assert_allclose(out, numpy_conv_model(x, params["w"], params["b"], r), rtol=1e-4, atol=1e-5)


def test_conv2d_block_is_two_vectors_or_one_when_the_channels_need_it() -> None:
    wide = altered(bound(CONV, {"w": f32(32, 9, 3, 3), "b": f32(32)}), PassContext(config={"tir.vector_lanes": 16}))
    assert conv_call(wide).attrs["kernel_layout"] == "OHWI32o"
    narrow = altered(bound(conv_with(24), {"w": f32(24, 9, 3, 3), "b": f32(24)}))
    assert conv_call(narrow).attrs["kernel_layout"] == "OHWI8o" and conv_call(narrow).args[1].checked_type.shape == (3, 3, 3, 9, 8)


def test_conv2d_of_few_input_channels_keeps_the_taps_innermost() -> None:
    rgb = CONV.replace("(2, 9, 11, 9)", "(2, 3, 11, 9)").replace("(32, 9, 3, 3)", "(32, 3, 3, 3)")
    w = f32(32, 3, 3, 3)
    call = conv_call(altered(bound(rgb, {"w": w, "b": f32(32)})))
    assert call.attrs["kernel_layout"] == "OIHW16o"
    np.testing.assert_array_equal(call.args[1].data, w.reshape(2, 16, 3, 3, 3).transpose(0, 2, 3, 4, 1))  # type: ignore[attr-defined]  # a Constant


def test_conv2d_over_any_image_size_or_batch_packs_its_weight(tmp_path: Path) -> None:
    # `?` height and width: the weight is packed as for a static size, the activations stay
    # NCHW (no blocked layout for `?` maps), and the kernel reads the panels in place.
    dynamic = CONV.replace("(2, 9, 11, 9)", "(2, 9, ?, ?)").replace("(2, 32, 6, 7)", "(2, 32, ?, ?)")
    params = {"w": f32(32, 9, 3, 3), "b": f32(32)}
    call = conv_call(altered(bound(dynamic, params)))
    assert (call.attrs["data_layout"], call.attrs["kernel_layout"], call.attrs["out_layout"]) == ("NCHW", "OHWI16o", "NCHW")
    build(HEADER + dynamic, tmp_path, BuildOptions(), params=params)
    kernels = "".join(f.read_text() for f in (tmp_path / "src").glob("*.c"))
    assert "nn_contrib_conv2d_NCHWc" in kernels and "packed_b" not in kernels  # nothing packed per call
    x, r = f32(2, 9, 11, 9), f32(2, 32, 6, 7)
    (out,) = CompiledModule(tmp_path).run({"x": x, "r": r}).outputs
    np.testing.assert_allclose(out, numpy_conv_model(x, params["w"], params["b"], r), rtol=1e-4, atol=1e-5)
    # A `?` batch: packed too, its static kernel run once per image.
    batch_only = CONV.replace("(2, 9, 11, 9)", "(?, 9, 11, 9)").replace("(2, 32, 6, 7)", "(?, 32, 6, 7)")
    assert conv_call(altered(bound(batch_only, params))).attrs["kernel_layout"] == "OHWI16o"
    build(HEADER + batch_only, tmp_path / "batch", BuildOptions(), params=params)
    for images in (1, 3):
        x, r = f32(images, 9, 11, 9), f32(images, 32, 6, 7)
        (out,) = CompiledModule(tmp_path / "batch").run({"x": x, "r": r}).outputs
        np.testing.assert_allclose(out, numpy_conv_model(x, params["w"], params["b"], r), rtol=1e-4, atol=1e-5)


def test_conv2d_runtime_weights_groups_odd_channels_other_layouts_and_dtypes_are_left_alone() -> None:
    runtime = bound(CONV, {"b": f32(32)})
    assert altered(runtime) is runtime
    grouped = bound(CONV.replace("(32, 9, 3, 3)", "(32, 1, 3, 3)").replace("(2, 9, 11, 9)", "(2, 4, 11, 9)")
                    .replace("channels=32", "groups=4, channels=32"), {"w": f32(32, 1, 3, 3), "b": f32(32)})
    assert altered(grouped) is grouped
    odd = bound(conv_with(12), {"w": f32(12, 9, 3, 3), "b": f32(12)})
    assert altered(odd) is odd
    nhwc = """def @main(%x: Tensor[(1, 9, 9, 5), float32], %w: Tensor[(3, 3, 5, 16), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1], data_layout="NHWC", kernel_layout="HWIO")
}"""
    channels_last = bound(nhwc, {"w": f32(3, 3, 5, 16)})
    assert altered(channels_last) is channels_last
    half = bound(CONV.replace("float32", "float16"), {"w": f32(32, 9, 3, 3).astype("float16"), "b": f32(32).astype("float16")})
    assert altered(half) is half


ATTENTION = """def @main(%q: Tensor[(ROWS, 4, 16), float32], %k: Tensor[(32, 4, 16), float32]) {
  %0 = transpose(%q, axes=[1, 0, 2]);
  %1 = transpose(reshape(%k, newshape=[32, 4, 16]), axes=[1, 0, 2]);
  nn.batch_matmul(%0, %1, transpose_a=False, transpose_b=True)
}"""


def test_attention_scores_take_k_untransposed_through_one_composed_transpose() -> None:
    mod = altered(bound(ATTENTION.replace("ROWS", "20"), {}))
    (product,) = calls(mod, "nn.batch_matmul")
    assert not product.attrs["transpose_b"]
    # transpose(transpose(reshape(k), [1, 0, 2]), [0, 2, 1]) is one transpose of reshape(k).
    b = product.args[1]
    assert isinstance(b, Call) and b.op_name == "transpose" and list(b.attrs["axes"]) == [1, 2, 0]
    assert isinstance(b.args[0], Call) and b.args[0].op_name == "reshape"
    q, k = f32(20, 4, 16), f32(32, 4, 16)
    (before,) = run_main(bound(ATTENTION.replace("ROWS", "20"), {}), {"q": q, "k": k})
    (after,) = run_main(mod, {"q": q, "k": k})
    np.testing.assert_allclose(after, before, rtol=1e-6)
    np.testing.assert_allclose(after, np.einsum("rhd,chd->hrc", q, k), rtol=1e-5, atol=1e-6)


def test_a_transpose_that_undoes_the_product_s_is_dropped() -> None:
    text = """def @main(%x: Tensor[(2, 20, 8), float32], %y: Tensor[(2, 8, 32), float32]) {
  nn.batch_matmul(%x, transpose(%y, axes=[0, 2, 1]), transpose_a=False, transpose_b=True)
}"""
    mod = altered(bound(text, {}))
    (product,) = calls(mod, "nn.batch_matmul")
    assert not product.attrs["transpose_b"] and not calls(mod, "transpose")
    assert product.args[1] is mod.main.params[1]


def test_attention_with_few_rows_ragged_panels_or_a_parameter_b_keeps_transpose_b() -> None:
    few_rows = altered(bound(ATTENTION.replace("ROWS", "4"), {}))  # dot products, no packing
    param_b = """def @main(%x: Tensor[(2, 20, 8), float32], %y: Tensor[(2, 32, 8), float32]) {
  nn.batch_matmul(%x, %y, transpose_a=False, transpose_b=True)
}"""
    ragged = ATTENTION.replace("ROWS", "20").replace("(32,", "(24,").replace("[32,", "[24,")  # a ragged panel
    for mod in (few_rows, altered(bound(param_b, {})), altered(bound(ragged, {}))):
        (product,) = calls(mod, "nn.batch_matmul")
        assert product.attrs["transpose_b"]
