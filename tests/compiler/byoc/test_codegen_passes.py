import numpy as np
import pytest

from compiler.byoc.codegen_passes import PassSpec, PassSpecError, RunCodegenPasses, make_pass, parse_pass_spec
from compiler.diagnostics import CompileError
from compiler.ir.expr import Call, Constant, Function
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.passes.bind_params import bind_params
from compiler.passes.convert_layout import ConvertLayout
from compiler.passes.fold_constant import FoldConstant
from compiler.runtime.interpreter import run_main

# Two convolutions: one in a function partitioned for "acme", one left in @main for the host.
TWO_CONVS = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 6, 6), float32], %w1: Tensor[(4, 2, 3, 3), float32], %w2: Tensor[(3, 4, 1, 1), float32]) {
  %0 = @tvmgen_default_acme_main_0(%x, %w1);
  nn.conv2d(%0, %w2)
}

def @tvmgen_default_acme_main_0(%acme_0_i0: Tensor[(1, 2, 6, 6), float32], %acme_0_i1: Tensor[(4, 2, 3, 3), float32],
    Compiler="acme", Primitive=1, Inline=1, global_symbol="tvmgen_default_acme_main_0") {
  %1 = nn.conv2d(%acme_0_i0, %acme_0_i1, padding=[1, 1, 1, 1]);
  nn.relu(%1)
}
"""


def convs(func):
    return [n for n in post_order(func.body) if isinstance(n, Call) and n.op_name == "nn.conv2d"]


@pytest.mark.parametrize(
    "text, spec",
    [
        ("FoldConstant", PassSpec("FoldConstant")),
        ("  FoldConstant()  ", PassSpec("FoldConstant")),
        ("ConvertLayout(nn.conv2d=NHWC:OHWI)", PassSpec("ConvertLayout", (("nn.conv2d", "NHWC:OHWI"),))),
        ("ConvertLayout( nn.conv2d = NHWC )", PassSpec("ConvertLayout", (("nn.conv2d", "NHWC"),))),
    ],
)
def test_pass_texts_parse(text, spec):
    assert parse_pass_spec(text) == spec


@pytest.mark.parametrize(
    "text, message",
    [
        ("Frobnicate", r"unknown pass 'Frobnicate' \(known: ConvertLayout, DeadCodeElimination, FoldConstant"),
        ("ConvertLayout(nn.conv2d=NHWC:OHWI", r"expected ',' or '\)' at column 34, found the end"),
        ("ConvertLayout(=NHWC)", r"expected an argument name such as nn.conv2d at column 15"),
        ("FoldConstant(x=1)", "FoldConstant takes no arguments"),
        ("ConvertLayout", "ConvertLayout needs at least one op=layout argument"),
        ("ConvertLayout(nn.dense=NC)", "cannot convert 'nn.dense'"),
        ("ConvertLayout(nn.conv2d=NWHC)", "data layout 'NWHC'"),
        ("FoldConstant;", r"expected the end of the pass at column 13"),
        ("", "expected a pass name at column 1"),
    ],
)
def test_bad_pass_texts_say_what_is_wrong_and_where(text, message):
    with pytest.raises(PassSpecError, match=message):
        parse_pass_spec(text)


def test_make_pass_builds_the_configured_pass():
    p = make_pass("ConvertLayout(nn.conv2d=NHWC:OHWI)")
    assert isinstance(p, ConvertLayout) and p.desired_layouts == {"nn.conv2d": ("NHWC", "OHWI")}
    assert isinstance(make_pass("FoldConstant"), FoldConstant)


def test_passes_change_only_the_functions_of_their_codegen():
    mod = parse(TWO_CONVS)
    after = RunCodegenPasses("acme", ("ConvertLayout(nn.conv2d=NHWC:OHWI)",))(mod)
    [host_conv] = convs(after.main)
    assert host_conv.attrs["data_layout"] == "NCHW" and host_conv.attrs["kernel_layout"] == "OIHW"
    partitioned = after["tvmgen_default_acme_main_0"]
    [conv] = convs(partitioned)
    assert conv.attrs["data_layout"] == "NHWC" and conv.attrs["kernel_layout"] == "OHWI"
    assert dict(partitioned.attrs) == {"Compiler": "acme", "Primitive": 1, "Inline": 1,
                                       "global_symbol": "tvmgen_default_acme_main_0"}
    assert str(partitioned.checked_type) == str(mod["tvmgen_default_acme_main_0"].checked_type)
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((1, 2, 6, 6)).astype("float32"),
              "w1": rng.standard_normal((4, 2, 3, 3)).astype("float32"),
              "w2": rng.standard_normal((3, 4, 1, 1)).astype("float32")}
    np.testing.assert_allclose(run_main(after, inputs)[0], run_main(mod, inputs)[0], rtol=1e-4, atol=1e-4)


def test_fold_constant_reaches_inside_a_compiler_function():
    # FoldConstant alone leaves Compiler functions alone; run for the codegen it folds there.
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 6, 6), float32]) {
  @tvmgen_default_acme_main_0(%x)
}

def @tvmgen_default_acme_main_0(%acme_0_i0: Tensor[(1, 2, 6, 6), float32],
    Compiler="acme", Primitive=1, Inline=1, global_symbol="tvmgen_default_acme_main_0") {
  %0 = ones(shape=[4, 3, 3, 2], dtype="float32");
  %1 = layout_transform(%0, src_layout="OHWI", dst_layout="OIHW");
  nn.conv2d(%acme_0_i0, %1)
}
""")
    assert FoldConstant()(mod)["tvmgen_default_acme_main_0"] is mod["tvmgen_default_acme_main_0"]
    after = RunCodegenPasses("acme", ("FoldConstant",))(mod)
    [conv] = convs(after["tvmgen_default_acme_main_0"])
    assert isinstance(conv.args[1], Constant) and conv.args[1].data.shape == (4, 2, 3, 3)


def test_convert_layout_then_fold_constant_leaves_weights_in_the_new_layout():
    weight = np.arange(4 * 2 * 3 * 3, dtype="float32").reshape(4, 2, 3, 3)
    mod = parse(TWO_CONVS)
    # The weight bound inside the partitioned function, as PartitionGraph binds constants.
    gv = mod.get_global_var("tvmgen_default_acme_main_0")
    bound = bind_params(mod[gv], {"acme_0_i1": weight})
    mod = mod.with_function(gv, Function(bound.params, bound.body, None, mod[gv].attrs))
    main = mod.main
    call = Call(gv, (main.params[0],))
    mod = mod.with_function(mod.get_global_var("main"),
                            Function(main.params, Call(main.body.op, (call, main.params[2]), main.body.attrs)))
    after = RunCodegenPasses("acme", ("ConvertLayout(nn.conv2d=NHWC:OHWI)", "FoldConstant"))(mod)
    [conv] = convs(after["tvmgen_default_acme_main_0"])
    assert isinstance(conv.args[1], Constant)
    np.testing.assert_array_equal(conv.args[1].data, weight.transpose(0, 2, 3, 1))


def test_passes_that_change_a_signature_are_an_error():
    mod = parse(TWO_CONVS)

    class Retype(FoldConstant):
        def run(self, m, ctx):
            main = m.main
            return m.with_function(m.get_global_var("main"),
                                   Function(main.params[:1], main.params[0], None, main.attrs))

    from compiler.byoc import codegen_passes

    codegen_passes.PASSES["Retype"] = lambda spec: Retype()
    try:
        with pytest.raises(CompileError, match="codegen acme changed the type of @tvmgen_default_acme_main_0"):
            RunCodegenPasses("acme", ("Retype",))(mod)
    finally:
        del codegen_passes.PASSES["Retype"]


def test_no_passes_leave_the_module_as_it_is():
    mod = parse(TWO_CONVS)
    assert RunCodegenPasses("acme", ())(mod) is mod
