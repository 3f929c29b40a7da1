"""Blocked activations between packed convolutions (compiler/passes/blocked_activations.py, run
by AlterOpLayout): which values stay NCHW[b]c, where layout_transforms are left, and that the
altered models compute what the originals do, interpreted and built."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from compiler.driver import BuildOptions, build
from compiler.ir.expr import Call
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
RNG = np.random.default_rng(5)
LANES8 = PassContext(config={"tir.vector_lanes": 8})

# A residual block's shape: stem, pool, two convolutions with a folded batch norm's scale and
# shift, a residual add, a global pool and a classifier.
BLOCK = """def @main(%x: Tensor[(1, 3, 12, 12), float32]) {
  %0 = nn.conv2d(%x, %w0, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %1 = nn.relu(nn.bias_add(%0, %b0));
  %2 = nn.max_pool2d(%1, pool_size=[2, 2], strides=[2, 2]);
  %3 = nn.conv2d(%2, %w1, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %4 = add(multiply(%3, %scale), %shift);
  %5 = nn.relu(add(%4, %2));
  %6 = nn.conv2d(%5, %w2, channels=32, kernel_size=[1, 1]);
  %7 = nn.global_avg_pool2d(nn.relu(%6));
  nn.batch_flatten(%7)
}"""


def f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def weights() -> dict[str, np.ndarray]:
    return {"w0": f32(16, 3, 3, 3), "b0": f32(16), "w1": f32(16, 16, 3, 3), "scale": f32(16, 1, 1),
            "shift": f32(16, 1, 1), "w2": f32(32, 16, 1, 1)}


def with_params(text: str, params: Mapping[str, np.ndarray]) -> str:
    """`text` whose @main takes `params` first, as a model printed with its weights does."""
    signature = "".join(f"%{k}: Tensor[{tuple(v.shape)}, float32], ".replace(",)", ")") for k, v in params.items())
    return HEADER + text.replace("def @main(", f"def @main({signature}", 1)


def bound(text: str, params: Mapping[str, np.ndarray]) -> IRModule:
    return InferType()(BindParams(dict(params))(parse(with_params(text, params))))


def altered(mod: IRModule) -> IRModule:
    with LANES8.scope():
        return AlterOpLayout()(mod)


def calls(mod: IRModule, name: str) -> list[Call]:
    return [n for n in post_order(mod.main) if isinstance(n, Call) and n.op_name == name]


def transforms(mod: IRModule) -> list[tuple[str, str]]:
    return sorted((str(t.attrs["src_layout"]), str(t.attrs["dst_layout"])) for t in calls(mod, "layout_transform"))


def test_activations_stay_blocked_from_the_stem_to_the_global_pool() -> None:
    mod = altered(bound(BLOCK, weights()))
    convs = calls(mod, "nn.contrib_conv2d_NCHWc")
    layouts = sorted((str(c.attrs["data_layout"]), str(c.attrs["out_layout"])) for c in convs)
    assert layouts == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW16c"), ("NCHW16c", "NCHW16c")]
    (pool,) = calls(mod, "nn.max_pool2d")
    (global_pool,) = calls(mod, "nn.global_avg_pool2d")
    assert pool.attrs["layout"] == global_pool.attrs["layout"] == "NCHW16c"
    # One transform is left, before batch_flatten; bias, scale and shift are blocked constants.
    assert transforms(mod) == [("NCHW16c", "NCHW")]
    assert not calls(mod, "nn.bias_add") and not calls(mod, "reshape")
    assert mod.main.checked_type.ret_type.shape == (1, 32)


def test_blocked_model_computes_what_the_original_does() -> None:
    before = bound(BLOCK, weights())
    x = {"x": f32(1, 3, 12, 12)}
    np.testing.assert_allclose(run_main(altered(before), x)[0], run_main(before, x)[0], rtol=1e-5, atol=1e-5)


def test_built_blocked_model_matches_the_interpreter(tmp_path: Path) -> None:
    params = weights()
    x = {"x": f32(1, 3, 12, 12)}
    expected = run_main(bound(BLOCK, params), x)[0]
    model = build(with_params(BLOCK, params), tmp_path, BuildOptions(), params=params)
    assert 'out_layout="NCHW16c"' in astext(model.lowered)
    (out,) = CompiledModule(tmp_path).run(x).outputs
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_a_model_of_run_time_image_size_keeps_its_activations_blocked_and_matches_the_interpreter(
        tmp_path: Path) -> None:
    params = weights()
    dynamic = BLOCK.replace("Tensor[(1, 3, 12, 12), float32]", "Tensor[(1, 3, ?, ?), float32]")
    mod = altered(bound(dynamic, params))
    layouts = sorted(str(c.attrs["out_layout"]) for c in calls(mod, "nn.contrib_conv2d_NCHWc"))
    assert layouts == ["NCHW16c"] * 3 and transforms(mod) == [("NCHW16c", "NCHW")]
    build(with_params(dynamic, params), tmp_path, BuildOptions(), params=params)
    module = CompiledModule(tmp_path)
    for hw in ((12, 12), (17, 10)):
        x = {"x": f32(1, 3, *hw)}
        (out,) = module.run(x).outputs
        np.testing.assert_allclose(out, run_main(bound(dynamic, params), x)[0], rtol=1e-4, atol=1e-5)


OTHERS = """def @main(%x: Tensor[(1, 8, 6, 6), float32], %r: Tensor[(1, 1, 6, 6), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]);
  %1 = nn.conv2d(%0, %w2, channels=16, kernel_size=[1, 1]);
  %2 = add(%1, %r);
  %3 = nn.bias_add(%1, %wb, axis=3);
  %4 = concatenate((%1, %1), axis=1);
  (%2, %3, %4, %1)
}"""


def test_uses_that_need_nchw_get_one_transform_back_per_value() -> None:
    params = {"w": f32(16, 8, 3, 3), "w2": f32(16, 16, 1, 1), "wb": f32(6)}
    before = bound(OTHERS, params)
    mod = altered(before)
    first, second = sorted(calls(mod, "nn.contrib_conv2d_NCHWc"), key=lambda c: str(c.attrs["data_layout"]))
    assert (first.attrs["data_layout"], second.attrs["data_layout"]) == ("NCHW", "NCHW16c")
    # A one-channel operand, a bias on the width and a concatenate see NCHW, as does the result.
    assert transforms(mod) == [("NCHW16c", "NCHW")]
    (back,) = calls(mod, "layout_transform")
    assert back.args[0] is second
    inputs = {"x": f32(1, 8, 6, 6), "r": f32(1, 1, 6, 6)}
    for got, want in zip(run_main(mod, inputs), run_main(before, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_lone_convolution_keeps_its_nchw_result() -> None:
    text = """def @main(%x: Tensor[(1, 8, 6, 6), float32]) {
  nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=16, kernel_size=[3, 3]))
}"""
    mod = altered(bound(text, {"w": f32(16, 8, 3, 3)}))
    (conv,) = calls(mod, "nn.contrib_conv2d_NCHWc")
    assert conv.attrs["out_layout"] == "NCHW" and not transforms(mod)


def test_a_function_without_packed_convolutions_is_left_alone() -> None:
    text = """def @main(%x: Tensor[(1, 8, 6, 6), float32]) {
  nn.max_pool2d(nn.relu(%x), pool_size=[2, 2])
}"""
    before = bound(text, {})
    assert altered(before) is before


def random_chain(seed: int) -> tuple[str, dict[str, np.ndarray]]:
    """A chain of packed convolutions (channels multiples of 8, 1x1 or 3x3, stride 1 or 2) with
    operators drawn between them: those the blocked layout is carried through and those that
    send it back to NCHW."""
    rng = np.random.default_rng(seed)
    params: dict[str, np.ndarray] = {}
    lines: list[str] = []
    channels, size, value = 8, 12, "%x"

    def let(expr: str) -> str:
        lines.append(f"  %{len(lines)} = {expr};")
        return f"%{len(lines) - 1}"

    def const(name: str, *shape: int) -> str:
        params[name] = rng.uniform(-1, 1, shape).astype("float32")
        return f"%{name}"

    for layer in range(4):
        out = int(rng.choice([8, 16, 24, 32]))
        k, stride = int(rng.choice([1, 3])), int(rng.choice([1, 1, 2]))
        pad = k // 2
        w = const(f"w{layer}", out, channels, k, k)
        value = let(f"nn.conv2d({value}, {w}, strides=[{stride}, {stride}], padding=[{pad}, {pad}, {pad}, {pad}], "
                    f"channels={out}, kernel_size=[{k}, {k}])")
        channels, size = out, (size + 2 * pad - k) // stride + 1
        conv, conv_shape = value, (channels, size)
        for step in range(int(rng.integers(1, 4))):
            kind = rng.choice(["relu", "bias", "scale", "residual", "pool", "sigmoid", "clip", "concat", "one_channel"])
            name = f"c{layer}_{step}"
            if kind == "relu":
                value = let(f"nn.relu({value})")
            elif kind == "bias":
                value = let(f"nn.bias_add({value}, {const(name, channels)})")
            elif kind == "scale":
                value = let(f"multiply({value}, {const(name, channels, 1, 1)})")
            elif kind == "residual" and value != conv and (channels, size) == conv_shape:
                value = let(f"add({value}, {conv})")
            elif kind == "pool" and size >= 2:
                value = let(f"nn.max_pool2d({value}, pool_size=[2, 2], strides=[2, 2])")
                size //= 2
            elif kind == "sigmoid":
                value = let(f"sigmoid({value})")
            elif kind == "clip":
                value = let(f"clip({value}, a_min=-0.5f, a_max=0.5f)")
            elif kind == "concat":
                value = let(f"concatenate(({value}, {value}), axis=1)")
                channels *= 2
            elif kind == "one_channel":
                value = let(f"add({value}, {const(name, 1, 1, size)})")
    body = "\n".join(lines)
    text = f"def @main(%x: Tensor[(1, 8, 12, 12), float32]) {{\n{body}\n  nn.global_avg_pool2d({value})\n}}"
    return text, params


@pytest.mark.parametrize("seed", range(4))
def test_random_conv_chains_compute_what_they_did_before_blocking(seed: int, tmp_path: Path) -> None:
    text, params = random_chain(seed)
    before = bound(text, params)
    assert calls(altered(before), "nn.contrib_conv2d_NCHWc")
    x = {"x": f32(1, 8, 12, 12)}
    expected = run_main(before, x)[0]
    build(with_params(text, params), tmp_path, BuildOptions(), params=params)
    (out,) = CompiledModule(tmp_path).run(x).outputs
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
