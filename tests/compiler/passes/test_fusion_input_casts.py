"""FuseOps' rule for float16->float32 casts in front of kernels that widen their own input
(compiler/passes/fusion_input_casts.py): which casts join the consuming call's primitive
function, and which stay kernels of their own; and a float16 convolution chain built with it,
against numpy rounding to float16 at each op."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from compiler.ir.expr import Call, Function, Op, Var
from compiler.ir.module import IRModule
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.passes.fuse_ops import FuseOps
from compiler.passes.fusion_graph import build_graph
from compiler.passes.fusion_groups import partition
from compiler.passes.fusion_input_casts import fuse_input_casts, half_cast_source
from compiler.passes.infer_type import InferType
from compiler.passes.pass_infra import PassContext

LANES = 8
HEADER = '#[version = "0.0.5"]\n'
# A packed convolution (OHWI16o weight, NCHW16c activations): the kernel that widens its data.
PACKED = ('channels=16, kernel_size=[1, 1], data_layout="NCHW16c", kernel_layout="OHWI16o", '
          'out_layout="NCHW16c"')
X16 = "Tensor[(1, 1, 4, 4, 16), float16]"
W = "Tensor[(1, 1, 1, 16, 16), float32]"


def model(body: str, params: str = f"%x: {X16}, %w: {W}") -> IRModule:
    return InferType().run(parse(f"{HEADER}def @main({params}) {{\n{body}\n}}"), PassContext())


def primitives(mod: IRModule) -> list[Function]:
    main = FuseOps().run(mod, PassContext(config={"tir.vector_lanes": LANES})).main
    return [n for n in post_order(main.body) if isinstance(n, Function)]


def ops_of(func: Function) -> list[str]:
    return [n.op.name for n in post_order(func.body) if isinstance(n, Call) and isinstance(n.op, Op)]


def test_a_cast_into_a_packed_convolution_joins_its_function_which_takes_the_float16_tensor() -> None:
    mod = model(f'''  %0 = cast(%x, dtype="float32");
  %1 = nn.contrib_conv2d_NCHWc(%0, %w, {PACKED});
  nn.relu(%1)''')
    (conv,) = primitives(mod)
    assert ops_of(conv) == ["cast", "nn.contrib_conv2d_NCHWc", "nn.relu"]
    assert [p.checked_type.dtype for p in conv.params] == ["float16", "float32"]


def test_a_cast_with_two_uses_stays_a_kernel_of_its_own() -> None:
    mod = model(f'''  %0 = cast(%x, dtype="float32");
  %1 = nn.contrib_conv2d_NCHWc(%0, %w, {PACKED});
  %2 = nn.contrib_conv2d_NCHWc(%0, %w, {PACKED});
  (%1, %2)''')
    assert sorted(ops_of(f) for f in primitives(mod)) == [
        ["cast"], ["nn.contrib_conv2d_NCHWc"], ["nn.contrib_conv2d_NCHWc"]]


def test_a_cast_into_a_convolution_that_reads_float32_from_memory_is_not_fused() -> None:
    # OIHW16i16o on blocked data is TVM's layout: the generic kernel, which does not widen.
    generic = PACKED.replace('kernel_layout="OHWI16o"', 'kernel_layout="OIHW16i16o"')
    mod = model(f'''  %0 = cast(%x, dtype="float32");
  nn.contrib_conv2d_NCHWc(%0, %w, {generic})''', f"%x: {X16}, %w: Tensor[(1, 1, 1, 1, 16, 16), float32]")
    assert sorted(ops_of(f) for f in primitives(mod)) == [["cast"], ["nn.contrib_conv2d_NCHWc"]]


def test_only_a_float16_to_float32_widening_is_fused() -> None:
    # A float64 source rounds when cast to float32: the kernel would read other values.
    mod = model(f'''  %0 = cast(%x, dtype="float32");
  nn.contrib_conv2d_NCHWc(%0, %w, {PACKED})''', f"%x: Tensor[(1, 1, 4, 4, 16), float64], %w: {W}")
    assert sorted(ops_of(f) for f in primitives(mod)) == [["cast"], ["nn.contrib_conv2d_NCHWc"]]


def test_a_cast_into_the_weight_is_not_fused() -> None:
    mod = model(f'''  %0 = cast(%v, dtype="float32");
  nn.contrib_conv2d_NCHWc(%x, %0, {PACKED})''',
                "%x: Tensor[(1, 1, 4, 4, 16), float32], %v: Tensor[(1, 1, 1, 16, 16), float16]")
    assert sorted(ops_of(f) for f in primitives(mod)) == [["cast"], ["nn.contrib_conv2d_NCHWc"]]


def test_a_cast_fused_with_its_producer_moves_into_the_convolution_that_widens_it() -> None:
    # relu -> cast is one elementwise group after the phases; the relu's kernel now returns
    # float16, and the convolution reads that.
    mod = model(f'''  %0 = nn.relu(%x);
  %1 = cast(%0, dtype="float32");
  nn.contrib_conv2d_NCHWc(%1, %w, {PACKED})''')
    relu, conv = sorted(primitives(mod), key=ops_of, reverse=True)
    assert (ops_of(relu), ops_of(conv)) == (["nn.relu"], ["cast", "nn.contrib_conv2d_NCHWc"])
    assert relu.ret_type.dtype == "float16" and conv.params[0].checked_type.dtype == "float16"


def test_a_returned_widening_moves_into_the_elementwise_epilogue_of_its_user() -> None:
    # A projection shortcut: its kernel ends in the widening the other branch's add needs.
    mod = model(f'''  %0 = nn.contrib_conv2d_NCHWc(%x32, %w, {PACKED});
  %1 = cast(%0, dtype="float16");
  %2 = cast(%1, dtype="float32");
  %3 = nn.contrib_conv2d_NCHWc(%x32, %w, {PACKED});
  %4 = add(%3, %2);
  nn.relu(%4)''', f"%x32: Tensor[(1, 1, 4, 4, 16), float32], %w: {W}")
    funcs = primitives(mod)
    shortcut = next(f for f in funcs if "add" not in ops_of(f))
    block = next(f for f in funcs if "add" in ops_of(f))
    assert ops_of(shortcut) == ["nn.contrib_conv2d_NCHWc", "cast"]
    assert shortcut.ret_type.dtype == "float16"
    assert ops_of(block) == ["nn.contrib_conv2d_NCHWc", "cast", "add", "nn.relu"]
    assert [p.checked_type.dtype for p in block.params][-1] == "float16"


def test_a_returned_widening_with_two_uses_or_an_opaque_user_stays_in_its_producer() -> None:
    two_uses = model('''  %0 = nn.relu(%x);
  %1 = cast(%0, dtype="float32");
  %2 = nn.softmax(%1);
  (%2, %1)''')
    assert sorted(ops_of(f) for f in primitives(two_uses)) == [["nn.relu", "cast"], ["nn.softmax"]]
    into_softmax = model('''  %0 = nn.relu(%x);
  %1 = cast(%0, dtype="float32");
  nn.softmax(%1)''')
    assert sorted(ops_of(f) for f in primitives(into_softmax)) == [["nn.relu", "cast"], ["nn.softmax"]]


def test_the_rule_merges_groups_after_the_phases_and_nothing_at_opt_level_0() -> None:
    mod = model(f'''  %0 = cast(%x, dtype="float32");
  nn.contrib_conv2d_NCHWc(%0, %w, {PACKED})''')
    graph = build_graph(mod.main)
    groups = partition(graph, 3)
    cast, conv = (n for n in graph.nodes if isinstance(n.expr, Call))
    assert groups[cast.index].find_root() is not groups[conv.index].find_root()
    fuse_input_casts(graph, groups, LANES)
    assert groups[cast.index].find_root() is groups[conv.index].find_root()
    assert groups[conv.index].find_root().anchor_ref is conv.expr
    level_0 = FuseOps(fuse_opt_level=0).run(mod, PassContext(config={"tir.vector_lanes": LANES})).main
    assert sorted(ops_of(f) for f in post_order(level_0.body) if isinstance(f, Function)) == [
        ["cast"], ["nn.contrib_conv2d_NCHWc"]]


def test_half_cast_source_names_the_float16_operand_of_a_widening_only() -> None:
    mod = model('''  %0 = cast(%x, dtype="float32");
  %1 = cast(%0, dtype="float16");
  (%0, %1)''', f"%x: {X16}")
    widen, narrow = (n for n in post_order(mod.main.body) if isinstance(n, Call))
    assert isinstance(half_cast_source(widen), Var) and half_cast_source(widen).name_hint == "x"
    assert half_cast_source(narrow) is None


CHAIN = HEADER + '''def @main(%x: Tensor[(1, 16, 8, 8), float16], %w1: Tensor[(16, 16, 3, 3), float16],
          %w2: Tensor[(16, 16, 1, 1), float16], %w3: Tensor[(32, 16, 1, 1), float16]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2);
  %3 = add(%2, %1);
  %4 = nn.relu(%3);
  %5 = nn.conv2d(%4, %w3, strides=[2, 2]);
  %6 = nn.conv2d(%4, %w2);
  (%5, %6)
}'''


def half_conv(x: np.ndarray, w: np.ndarray, stride: int = 1, pad: int = 0) -> np.ndarray:
    """A float16 convolution as TVM's float16 program computes it here: the sum in float32 (float64
    here, within the rounding), the result rounded to float16."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, _, kh, kw = w.shape
    oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], o, oh, ow))
    for ky in range(kh):
        for kx in range(kw):
            window = xp[:, :, ky: ky + (oh - 1) * stride + 1: stride, kx: kx + (ow - 1) * stride + 1: stride]
            out += np.einsum("nihw,oi->nohw", window, w[:, :, ky, kx].astype(np.float64))
    return out.astype(np.float16)


def test_a_float16_convolution_chain_computes_as_float16_rounding_at_each_op(tmp_path: Path) -> None:
    from compiler.driver import BuildOptions, export, lower
    from compiler.runtime.module import CompiledModule

    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (1, 16, 8, 8)).astype(np.float16)
    params = {name: rng.uniform(-0.3, 0.3, shape).astype(np.float16)
              for name, shape in (("w1", (16, 16, 3, 3)), ("w2", (16, 16, 1, 1)), ("w3", (32, 16, 1, 1)))}
    model = lower(parse(CHAIN), BuildOptions(config={"tir.vector_lanes": LANES}), params)
    kernels = [f.name for f in model.prim_funcs]
    # Every float16->float32 cast went into the convolution that reads it: no kernel of its own.
    assert len([k for k in kernels if "conv2d" in k]) == 4
    assert not [k for k in kernels if re.fullmatch(r"tvmgen_default_fused_cast(_\d+)?", k)]
    export(model, tmp_path, "")
    result = CompiledModule(tmp_path).run({"x": x}).outputs

    a = np.maximum(half_conv(x, params["w1"], pad=1), 0)
    b = np.maximum((half_conv(a, params["w2"]).astype(np.float32) + a).astype(np.float16), 0)
    expected = (half_conv(b, params["w3"], stride=2), half_conv(b, params["w2"]))
    for got, want in zip(result, expected):
        assert got.dtype == np.float16
        # float32 sums against float64 ones: a result may round to the neighbouring float16.
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)
