"""The built-in cblas codegen's description: its registration, pattern table, support checks
and scratch sizes (compiler/byoc/cblas/__init__.py)."""

from __future__ import annotations

import pytest

from compiler.byoc import cblas
from compiler.byoc.codegen_config import builtin, builtin_names
from compiler.byoc.codegen_library import defined_symbols
from compiler.byoc.pattern import find_match
from compiler.byoc.pattern_text import parse_pattern
from compiler.ir.expr import Function
from compiler.parser import parse_expr
from compiler.passes.infer_type import infer_expr


def typed(text: str) -> Function:
    func = parse_expr(text)
    assert isinstance(func, Function)
    infer_expr(func)
    return func


def check(pattern: str, text: str) -> bool:
    """Whether the named pattern matches the body of the function `text` (the candidate root)
    and its check accepts the match."""
    spec = cblas.SPEC.pattern_for(f"cblas.{pattern}")
    assert spec is not None and spec.check is not None
    body = typed(text).body
    return find_match(parse_pattern(spec.text), body) is not None and spec.check(body)


DENSE = "fn (%x: Tensor[{x}, {dt}], %w: Tensor[(4, 6), {dt}], %b: Tensor[(4), {dt}]) {{ {body} }}"


def dense(body: str, x: str = "(16, 6)", dt: str = "float32") -> str:
    return DENSE.format(x=x, dt=dt, body=body)


CONV = ("fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32]) "
        "{{ {body} }}")


def test_cblas_is_a_builtin_codegen() -> None:
    assert builtin("cblas") is cblas.SPEC
    assert "cblas" in builtin_names()
    assert cblas.SPEC.mode == "relay_to_tir" and cblas.SPEC.calling_convention == "dltensor"
    assert cblas.SPEC.library.libraries == ("openblas",)


def test_patterns_put_the_most_specific_first() -> None:
    names = [p.name for p in cblas.SPEC.patterns]
    assert names == ["dense_bias_relu", "dense_bias", "dense", "batch_matmul",
                     "conv2d_bias_relu", "conv2d_bias", "conv2d"]
    assert cblas.SPEC.symbol_for("cblas.dense_bias_relu") == "relaycc_cblas_dense_bias_relu"


def test_conv2d_and_batch_matmul_pass_their_attributes() -> None:
    attrs = {p.name: [str(a) for a in p.attrs] for p in cblas.SPEC.patterns}
    assert attrs["conv2d_bias_relu"] == ["nn.conv2d.strides", "nn.conv2d.padding", "nn.conv2d.dilation"]
    assert attrs["batch_matmul"] == ["nn.batch_matmul.transpose_a", "nn.batch_matmul.transpose_b"]
    assert attrs["dense"] == []


def test_library_defines_every_pattern_symbol() -> None:
    assert set(cblas.SPEC.symbols) <= defined_symbols(cblas.SPEC)


def test_dense_check_accepts_float32_with_bias_on_the_last_axis() -> None:
    assert check("dense_bias_relu", dense("nn.relu(nn.bias_add(nn.dense(%x, %w, units=None), %b, axis=-1))"))
    assert check("dense_bias", dense("nn.bias_add(nn.dense(%x, %w, units=None), %b, axis=1)"))
    assert check("dense_bias", dense("nn.bias_add(nn.dense(%x, %w, units=None), %b, axis=2)", x="(2, 8, 6)"))
    assert check("dense", dense("nn.dense(%x, %w, units=None)", x="(4, 5, 6)"))


def test_dense_check_keeps_other_dtypes_and_axes_on_the_host() -> None:
    assert not check("dense", dense("nn.dense(%x, %w, units=None)", dt="float64"))
    assert not check("dense", dense("nn.dense(%x, %w, units=None, out_dtype=\"float64\")"))
    assert not check("dense_bias", dense("nn.bias_add(nn.dense(%x, %w, units=None), %b, axis=0)", x="(4, 6)"))
    assert not check("dense_bias", dense("nn.bias_add(nn.dense(%x, %w, units=None), %b, axis=1)", x="(4, 4, 6)"))


def test_dense_check_keeps_a_few_rows_on_the_hosts_dot_kernel() -> None:
    assert not check("dense", dense("nn.dense(%x, %w, units=None)", x="(1, 6)"))
    assert not check("dense", dense("nn.dense(%x, %w, units=None)", x="(3, 5, 6)"))
    assert check("dense", dense("nn.dense(%x, %w, units=None)", x="(16, 6)"))


def test_dense_check_keeps_dynamic_shapes_on_the_host() -> None:
    assert not check("dense", dense("nn.dense(%x, %w, units=None)", x="(?, 6)"))


def test_batch_matmul_check_accepts_float32_only() -> None:
    text = "fn (%a: Tensor[(2, 3, 4), {dt}], %b: Tensor[(2, 5, 4), {dt}]) {{ nn.batch_matmul(%a, %b, transpose_b=True) }}"
    assert check("batch_matmul", text.format(dt="float32"))
    assert not check("batch_matmul", text.format(dt="int32"))


ATTENTION = ("fn (%q: Tensor[(4, {rows}, 64), float32], %k: Tensor[(4, 64, {cols}), float32]) "
             "{{ nn.batch_matmul(%q, {b}, transpose_b={tb}) }}")


def test_attention_products_whose_b_the_host_reads_in_place_stay_on_the_host() -> None:
    # Untransposed whole panels, or a transposed B an injective op makes (AlterOpLayout turns it).
    assert not check("batch_matmul", ATTENTION.format(rows=128, cols=128, b="%k", tb=False))
    assert not check("batch_matmul", ATTENTION.format(rows=128, cols=128, b="transpose(%k, axes=[0, 2, 1])", tb=True))
    # A transposed parameter, few rows, or ragged panels: sgemm.
    text = "fn (%q: Tensor[(4, 128, 64), float32], %k: Tensor[(4, 128, 64), float32]) { nn.batch_matmul(%q, %k, transpose_b=True) }"
    assert check("batch_matmul", text)
    assert check("batch_matmul", ATTENTION.format(rows=8, cols=128, b="%k", tb=False))
    assert check("batch_matmul", ATTENTION.format(rows=128, cols=40, b="%k", tb=False))


def test_conv2d_check_accepts_nchw_oihw_with_channel_bias() -> None:
    body = "nn.relu(nn.bias_add(nn.conv2d(%x, %w, padding=[1, 1, 1, 1]), %b))"
    assert check("conv2d_bias_relu", CONV.format(body=body))
    assert check("conv2d", CONV.format(body="nn.conv2d(%x, %w, strides=[2, 2], padding=[0, 1, 0, 1], dilation=[2, 2])"))


@pytest.mark.parametrize("attrs", ["strides=[2], padding=[0, 0, 0, 0]", "dilation=[2], padding=[0, 0, 0, 0]"])
def test_conv2d_check_accepts_one_value_strides_and_dilations(attrs: str) -> None:
    # The codegen passes them as two values each, as the kernels read them.
    assert check("conv2d", CONV.format(body=f"nn.conv2d(%x, %w, {attrs})"))


@pytest.mark.parametrize("attrs", ["padding=[1, 1]", "padding=[1]", "padding=[0, 0]"])
def test_conv2d_check_accepts_short_padding_forms(attrs: str) -> None:
    # The codegen expands padding to (top, left, bottom, right) before passing it.
    assert check("conv2d", CONV.format(body=f"nn.conv2d(%x, %w, {attrs})"))


@pytest.mark.parametrize("pattern, text", [
    ("conv2d", "fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(3, 1, 3, 3), float32]) "
               "{ nn.conv2d(%x, %w, padding=[0, 0, 0, 0], groups=3) }"),
    ("conv2d", CONV.format(body="nn.conv2d(%x, %w, padding=[0, 0, 0, 0], out_layout=\"NHWC\")")),
    ("conv2d_bias", "fn (%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], "
                    "%b: Tensor[(6), float32]) { nn.bias_add(nn.conv2d(%x, %w, padding=[0, 0, 0, 0]), %b, axis=3) }"),
])
def test_conv2d_check_keeps_groups_layouts_and_other_bias_axes_on_the_host(pattern: str, text: str) -> None:
    assert not check(pattern, text)


def test_conv2d_check_keeps_nhwc_data_on_the_host() -> None:
    text = ("fn (%x: Tensor[(1, 8, 8, 3), float32], %w: Tensor[(3, 3, 3, 4), float32]) "
            "{ nn.conv2d(%x, %w, padding=[0, 0, 0, 0], data_layout=\"NHWC\", kernel_layout=\"HWIO\") }")
    assert not check("conv2d", text)


def test_conv2d_scratch_holds_one_images_im2col_matrix() -> None:
    composite = typed("fn (%x: Tensor[(2, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) "
                      "{ nn.relu(nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1])) }")
    # C*KH*KW = 27 rows, OH*OW = 4*4 columns, float32
    assert cblas.conv2d_scratch_bytes(composite) == 27 * 16 * 4
    spec = cblas.SPEC.pattern_for("cblas.conv2d")
    assert spec is not None and spec.scratch is cblas.conv2d_scratch_bytes


def offloaded(body: str, kernel: int, bind_weight: bool, channels: int = 16) -> bool:
    """Whether a build for `cblas, c` of a 16->`channels` conv on a 1x16x16x16 input gives
    cblas a function."""
    import numpy as np

    from compiler.driver import BuildOptions, lower
    from compiler.ir.expr import Function as Func
    from compiler.parser import parse

    text = (f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(1, 16, 16, 16), float32], '
            f'%w: Tensor[({channels}, 16, {kernel}, {kernel}), float32]) {{ {body} }}')
    weight = np.ones((channels, 16, kernel, kernel), np.float32)
    model = lower(parse(text), BuildOptions(target="cblas, c"), {"w": weight} if bind_weight else None,
                  executor=False)
    return any(f.attrs.get("Compiler") == "cblas" for _, f in model.source.functions() if isinstance(f, Func))


@pytest.mark.parametrize(("body", "kernel"), [
    ("nn.conv2d(%x, %w, padding=[1, 1, 1, 1])", 3),
    ("nn.conv2d(%x, %w, strides=[2, 2], padding=[1, 1, 1, 1])", 3),
    ("nn.conv2d(%x, %w)", 1),
])
def test_a_constant_weight_conv_of_whole_channel_blocks_stays_on_the_host(body: str, kernel: int) -> None:
    # The host's kernel reads the weight AlterOpLayout packed at compile time, on blocked activations.
    assert not offloaded(body, kernel, bind_weight=True)


@pytest.mark.parametrize(("channels", "bind"), [(16, False), (12, True)])
def test_runtime_weights_and_ragged_channel_counts_go_to_cblas(channels: int, bind: bool) -> None:
    assert offloaded("nn.conv2d(%x, %w, padding=[1, 1, 1, 1])", 3, bind_weight=bind, channels=channels)
