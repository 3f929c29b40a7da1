import numpy as np

from compiler.backend.aot_c import extern_prototype
from compiler.byoc.c_source_codegen import CSourceCodegen, InlineComposites, c_source_module, prepare
from compiler.ir.expr import Call, Constant, Function, Var
from compiler.ir.structural import structural_equal
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.passes.infer_type import InferType
from compiler.runtime.build import build_shared_library, compile_check
from compiler.runtime.ffi import load_library
from compiler.runtime.interpreter import run_main

PARTITIONED = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 6), float32], %w: Tensor[(3, 6), float32], %b: Tensor[(3), float32]) {
  @tvmgen_default_ccg_main_0(%x, %w, %b)
}

def @tvmgen_default_ccg_main_0(%ccg_0_i0: Tensor[(4, 6), float32], %ccg_0_i1: Tensor[(3, 6), float32],
    %ccg_0_i2: Tensor[(3), float32], Compiler="ccg", Primitive=1, Inline=1,
    global_symbol="tvmgen_default_ccg_main_0") {
  %0 = fn (%a: Tensor[(4, 6), float32], %k: Tensor[(3, 6), float32], %c: Tensor[(3), float32],
           Composite="ccg.dense_bias_relu") {
    %1 = nn.dense(%a, %k, units=None);
    %2 = nn.bias_add(%1, %c, axis=-1);
    nn.relu(%2)
  };
  %3 = %0(%ccg_0_i0, %ccg_0_i1, %ccg_0_i2);
  multiply(%3, 2f)
}
"""


def partitioned(text=PARTITIONED, name="tvmgen_default_ccg_main_0"):
    return InferType()(parse(text))[name]


def with_constant_weight(func: Function, weight: np.ndarray) -> Function:
    """`func` with its second parameter replaced by a constant (as PartitionGraph binds it)."""
    composite_call = func.body.args[0]
    args = (composite_call.args[0], Constant(weight), composite_call.args[2])
    body = Call(func.body.op, (Call(composite_call.op, args), func.body.args[1]), func.body.attrs)
    return Function((func.params[0], func.params[2]), body, None, func.attrs)


def build_and_call(tmp_path, module, symbol, inputs, out_shape):
    source = tmp_path / module.file_name
    source.write_text(module.source)
    library = build_shared_library([source], tmp_path / "libccg.so")
    dtypes = ["float32"] * (len(inputs) + 1)
    lib = load_library(library, extern_prototype(symbol, dtypes) + ";")
    out = np.zeros(out_shape, dtype="float32")
    assert lib.call(symbol, *inputs, out) == 0
    return out


def test_composite_calls_are_replaced_by_their_bodies():
    func = partitioned()
    body = InlineComposites(func.body).visit(func.body)
    expected = parse("""#[version = "0.0.5"]
def @main(%ccg_0_i0: Tensor[(4, 6), float32], %ccg_0_i1: Tensor[(3, 6), float32], %ccg_0_i2: Tensor[(3), float32]) {
  %0 = nn.dense(%ccg_0_i0, %ccg_0_i1, units=None);
  %1 = nn.bias_add(%0, %ccg_0_i2, axis=-1);
  %2 = nn.relu(%1);
  multiply(%2, 2f)
}""").main
    assert structural_equal(Function(func.params, body), expected)


def test_let_bound_composites_are_inlined_and_their_lets_dropped():
    func = partitioned("""#[version = "0.0.5"]
def @f(%p: Tensor[(2), float32], Compiler="ccg", Primitive=1, global_symbol="f") {
  let %g = fn (%a: Tensor[(2), float32], Composite="ccg.relu") { nn.relu(%a) };
  %g(%g(%p))
}""", "f")
    body = InlineComposites(func.body).visit(func.body)
    assert [n.op_name for n in post_order(body) if isinstance(n, Call)] == ["nn.relu", "nn.relu"]
    assert not any(isinstance(n, Function) for n in post_order(body))


def test_tensor_constants_become_parameters_and_scalars_stay():
    weight = np.ones((3, 6), dtype="float32")
    prepared = prepare(with_constant_weight(partitioned(), weight))
    assert [p.name_hint for p in prepared.func.params] == ["ccg_0_i0", "ccg_0_i2", "constant_0"]
    assert len(prepared.constants) == 1 and prepared.constants[0].data.shape == (3, 6)
    scalars = [n for n in post_order(prepared.func.body) if isinstance(n, Constant)]
    assert [c.data.ndim for c in scalars] == [0]


def test_module_defines_the_symbol_with_the_executors_extern_signature():
    module = c_source_module(partitioned(), "ccg")
    assert module.codegen == "ccg" and module.symbols == ("tvmgen_default_ccg_main_0",)
    assert module.file_name == "tvmgen_default_ccg_main_0.c"
    assert "int32_t tvmgen_default_ccg_main_0(float* in0, float* in1, float* in2, float* out0) {" in module.source
    assert "tvmgen_default_ccg_main_0_kernel(" in module.source
    assert compile_check(module.source) == []


def test_compiled_function_matches_the_interpreter(tmp_path):
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((4, 6), (3, 6), (3,)))
    module = CSourceCodegen("ccg")(partitioned())
    got = build_and_call(tmp_path, module, "tvmgen_default_ccg_main_0", (x, w, b), (4, 3))
    np.testing.assert_allclose(got, 2 * np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-5)


def test_constants_live_in_the_modules_pool(tmp_path):
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((4, 6), (3, 6), (3,)))
    module = c_source_module(with_constant_weight(partitioned(), w), "ccg")
    assert "tvmgen_default_ccg_main_0_constants" in module.source
    got = build_and_call(tmp_path, module, "tvmgen_default_ccg_main_0", (x, b), (4, 3))
    np.testing.assert_allclose(got, 2 * np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-5)


def test_kernel_workspace_is_allocated_by_the_wrapper(tmp_path):
    text = """#[version = "0.0.5"]
def @f(%p: Tensor[(1, 2, 5, 5), float32], %q: Tensor[(3, 3, 3, 2), float32], Compiler="ccg", Primitive=1,
       global_symbol="f") {
  %0 = layout_transform(%p, src_layout="NCHW", dst_layout="NHWC");
  %1 = nn.conv2d(%0, %q, padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI");
  layout_transform(%1, src_layout="NHWC", dst_layout="NCHW")
}"""
    module = c_source_module(partitioned(text, "f"), "ccg")
    assert "aligned_alloc(64," in module.source and "free(workspace);" in module.source
    rng = np.random.default_rng(2)
    p, q = rng.standard_normal((1, 2, 5, 5)).astype("float32"), rng.standard_normal((3, 3, 3, 2)).astype("float32")
    got = build_and_call(tmp_path, module, "f", (p, q), (1, 3, 5, 5))
    plain = parse(text.replace('Compiler="ccg", Primitive=1,\n       global_symbol="f"', "").replace("@f", "@main"))
    np.testing.assert_allclose(got, run_main(plain, {"p": p, "q": q})[0], rtol=1e-4, atol=1e-4)


def test_prepared_function_keeps_the_original_parameters():
    func = partitioned()
    prepared = prepare(func)
    assert all(isinstance(p, Var) for p in prepared.func.params)
    assert prepared.func.params[:3] == func.params
