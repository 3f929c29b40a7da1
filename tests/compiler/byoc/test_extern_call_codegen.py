import re
from pathlib import Path

import numpy as np
import pytest

from compiler.byoc.codegen_config import AttrRef, CodegenSpec, PatternSpec
from compiler.backend.dlpack import HEADER_NAME, HEADER_TEXT
from compiler.byoc.extern_call_codegen import ExternCallCodegen, attr_arguments, emit_extern_calls
from compiler.diagnostics import InputError, UnsupportedError
from compiler.ir.expr import Call, Constant, GlobalVar
from compiler.parser import parse, parse_file
from compiler.passes.infer_type import InferType
from compiler.runtime.build import compile_check
from compiler.tir.analysis import walk_stmts
from compiler.tir.expr import Buffer, CallExtern
from compiler.tir.stmt import Allocate, Evaluate, PrimFunc

MODELS = Path(__file__).resolve().parents[2] / "models"
SYMBOL = "tvmgen_default_toy_cg_thflow_main_0"
TOY = CodegenSpec(
    "toy_cg_thflow",
    patterns=(
        PatternSpec("dense_bias_relu", "nn.relu(nn.bias_add(nn.dense(*, *), *))", "dense_bias_relu"),
        PatternSpec("dense_bias", "nn.bias_add(nn.dense(*, *), *)", "dense_bias"),
    ),
)


def seed001():
    return InferType()(parse_file(MODELS / "seed001_mlp_partitioned.relay"))


def lowered(mod, spec=TOY, defined=None):
    return ExternCallCodegen(spec, defined).relay_to_tir(InferType()(mod))


def extern_calls(func: PrimFunc) -> list[CallExtern]:
    return [s.value for s in walk_stmts(func.body) if isinstance(s, Evaluate) and isinstance(s.value, CallExtern)]


def compilable(text: str) -> str:
    return text.replace(f'#include "{HEADER_NAME}"', HEADER_TEXT)


def test_partitioned_function_becomes_sequential_extern_calls_through_a_global_buffer():
    out = lowered(seed001())
    func = out[SYMBOL]
    assert isinstance(func, PrimFunc)
    assert dict(func.attrs)["Compiler"] == "toy_cg_thflow" and func.attrs["target"] == "toy_cg_thflow"
    allocations = [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate)]
    assert [(b.name, b.shape, b.scope) for b in allocations] == [("buf0", (8, 32), "global")]
    first, second = extern_calls(func)
    assert (first.name, second.name) == ("dense_bias_relu", "dense_bias")
    assert first.args[:3] == func.inputs[:3] and first.args[3] is allocations[0]
    assert second.args[0] is allocations[0] and second.args[1:3] == func.inputs[3:5]
    assert second.args[3] is func.outputs[0]
    # @main now calls the PrimFunc (LowerTE makes that a call_lowered).
    assert isinstance(out.main.body, Call) and out.main.body.op.name_hint == SYMBOL


def test_generated_c_calls_one_after_another_with_dltensors_and_compiles_cleanly():
    func = lowered(seed001())[SYMBOL]
    module = emit_extern_calls("toy_cg_thflow", [func], 16)
    text = module.source
    calls = re.findall(r"status = (\w+)\(([^)]*)\);", text)
    assert calls == [("dense_bias_relu", "&i0, &i1, &i2, &buf0"), ("dense_bias", "&buf0, &i3, &i4, &out0")]
    assert "dense_bias(dense_bias_relu" not in text
    assert text.count("if (status != 0) return status;") == 2
    assert "float* buf0_data = (float*)(workspace + 0);" in text
    assert "int32_t dense_bias(DLTensor*, DLTensor*, DLTensor*, DLTensor*);" in text
    assert module.symbols == (SYMBOL,) and module.calls == ("dense_bias", "dense_bias_relu")
    library = """
int32_t dense_bias(DLTensor* a, DLTensor* b, DLTensor* c, DLTensor* d) { return a->ndim + b->ndim + c->ndim + d->ndim; }
int32_t dense_bias_relu(DLTensor* a, DLTensor* b, DLTensor* c, DLTensor* d) { return dense_bias(a, b, c, d); }
"""
    assert compile_check(compilable(text) + library) == []


def test_constants_become_inputs_passed_by_every_caller():
    mod = seed001()
    gv = mod.get_global_var(SYMBOL)
    bias = Constant(np.ones(10, dtype="float32"))
    main = mod.main
    call = Call(gv, (*main.params[:4], bias))
    mod = mod.with_function(mod.get_global_var("main"), type(main)(main.params[:4], call))
    out = lowered(mod)
    func = out[SYMBOL]
    assert func.num_inputs == 5 and [b.name for b in func.inputs][-1] == "toy_cg_thflow_0_i4"
    new_call = out.main.body
    assert new_call.args[4] is bias and len(new_call.args) == 5


def test_constants_bound_inside_the_function_are_lifted_to_extra_inputs():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(3, 4), float32]) { @tvmgen_default_acme_main_0(%x, %w) }
def @tvmgen_default_acme_main_0(%acme_0_i0: Tensor[(2, 4), float32], %acme_0_i1: Tensor[(3, 4), float32],
    Compiler="acme", Primitive=1, global_symbol="tvmgen_default_acme_main_0") {
  %0 = fn (%a: Tensor[(2, 4), float32], %b: Tensor[(3, 4), float32], Composite="acme.dense") {
    nn.dense(%a, %b, units=None)
  };
  %0(%acme_0_i0, %acme_0_i1)
}""")
    # As PartitionGraph binds constants: the weight is a constant inside the function.
    gv = mod.get_global_var("tvmgen_default_acme_main_0")
    func, main = mod[gv], mod.main
    body = Call(func.body.op, (func.params[0], Constant(np.ones((3, 4), dtype="float32"))))
    mod = mod.with_function(gv, type(func)(func.params[:1], body, None, func.attrs))
    mod = mod.with_function(mod.get_global_var("main"), type(main)(main.params[:1], Call(gv, main.params[:1])))
    spec = CodegenSpec("acme", patterns=(PatternSpec("dense", "nn.dense(*, *)", "acme_dense"),))
    out = lowered(mod, spec)
    func = out["tvmgen_default_acme_main_0"]
    assert [b.name for b in func.inputs] == ["acme_0_i0", "constant_0"]
    [call] = extern_calls(func)
    assert call.name == "acme_dense" and call.args == (*func.inputs, func.outputs[0])
    caller = out.main.body
    assert isinstance(caller.args[1], Constant) and caller.args[1].data.shape == (3, 4)


def test_constants_embedded_in_a_composite_follow_its_parameters():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32]) { @f(%x) }
def @f(%p: Tensor[(2, 4), float32], Compiler="acme", Primitive=1, global_symbol="f") {
  %0 = fn (%a: Tensor[(2, 4), float32], Composite="acme.scaled") {
    multiply(%a, ones(shape=[2, 4], dtype="float32"))
  };
  %0(%p)
}""")
    gv = mod.get_global_var("f")
    func = mod[gv]
    composite = func.body.op
    scaled = Call(composite.body.op, (composite.params[0], Constant(np.ones((2, 4), dtype="float32"))))
    composite = type(composite)(composite.params, scaled, None, composite.attrs)
    mod = mod.with_function(gv, type(func)(func.params, Call(composite, func.body.args), None, func.attrs))
    out = lowered(mod, CodegenSpec("acme"))
    [call] = extern_calls(out["f"])
    assert call.name == "scaled"
    assert [b.name for b in call.args] == ["p", "constant_0", "output"]


CONV = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 5, 5), float32], %w: Tensor[(3, 2, 3, 3), float32]) { @f(%x, %w) }
def @f(%p: Tensor[(1, 2, 5, 5), float32], %q: Tensor[(3, 2, 3, 3), float32], Compiler="acme", Primitive=1,
    global_symbol="f") {
  %0 = fn (%a: Tensor[(1, 2, 5, 5), float32], %b: Tensor[(3, 2, 3, 3), float32], Composite="acme.conv") {
    %1 = nn.conv2d(%a, %b, strides=[2, 1], padding=[1, 1], groups=1);
    nn.relu(%1)
  };
  %0(%p, %q)
}"""


def test_listed_attrs_follow_the_tensors_as_flattened_int64s():
    spec = CodegenSpec("acme", patterns=(PatternSpec(
        "conv", "nn.relu(nn.conv2d(*, *))", "acme_conv",
        (AttrRef("nn.conv2d", "strides"), AttrRef("nn.conv2d", "padding"), AttrRef("nn.conv2d", "groups"))),))
    func = lowered(parse(CONV), spec)["f"]
    [call] = extern_calls(func)
    tensors = [a for a in call.args if isinstance(a, Buffer)]
    scalars = [(a.value, a.dtype) for a in call.args if not isinstance(a, Buffer)]
    assert len(tensors) == 3
    assert scalars == [(2, "int64"), (1, "int64"), (1, "int64"), (1, "int64"), (1, "int64"), (1, "int64"), (1, "int64")]
    text = emit_extern_calls("acme", [func], 16).source
    assert "status = acme_conv(&i0, &i1, &out0, 2, 1, 1, 1, 1, 1, 1);" in text
    assert "int32_t acme_conv(DLTensor*, DLTensor*, DLTensor*, " + ", ".join(["int64_t"] * 7) + ");" in text


def test_attrs_that_are_not_integers_are_an_error():
    spec = CodegenSpec("acme", patterns=(PatternSpec(
        "conv", "nn.relu(nn.conv2d(*, *))", "acme_conv", (AttrRef("nn.conv2d", "data_layout"),)),))
    with pytest.raises(UnsupportedError, match="codegen acme: pattern conv passes nn.conv2d.data_layout"):
        lowered(parse(CONV), spec)
    composite = InferType()(parse(CONV))["f"].body.op
    missing = PatternSpec("conv", "nn.relu(nn.conv2d(*, *))", "c", (AttrRef("nn.dense", "units"),))
    with pytest.raises(UnsupportedError, match="the composite calls no nn.dense"):
        attr_arguments("acme", missing, composite)


def test_scratch_buffers_are_planned_allocations_passed_after_the_outputs():
    spec = CodegenSpec("acme", patterns=(PatternSpec(
        "conv", "nn.relu(nn.conv2d(*, *))", "acme_conv", scratch=lambda composite: 100),))
    func = lowered(parse(CONV), spec)["f"]
    [allocation] = [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate)]
    assert (allocation.shape, allocation.dtype, allocation.scope) == ((100,), "uint8", "global")
    [call] = extern_calls(func)
    assert call.args[-1] is allocation and call.args[-2] is func.outputs[0]
    assert "status = acme_conv(&i0, &i1, &out0, &scratch0);" in emit_extern_calls("acme", [func], 16).source


def test_tuple_results_are_several_outputs():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32]) { @f(%x) }
def @f(%p: Tensor[(2, 4), float32], Compiler="acme", Primitive=1, global_symbol="f") {
  %0 = fn (%a: Tensor[(2, 4), float32], Composite="acme.relu") { nn.relu(%a) };
  %1 = %0(%p);
  %2 = fn (%b: Tensor[(2, 4), float32], Composite="acme.neg") { negative(%b) };
  (%1, %2(%1))
}""")
    func = lowered(mod, CodegenSpec("acme"))["f"]
    assert [b.name for b in func.outputs] == ["output0", "output1"]
    first, second = extern_calls(func)
    assert first.args == (func.inputs[0], func.outputs[0])
    assert second.args == (func.outputs[0], func.outputs[1])
    assert not [s for s in walk_stmts(func.body) if isinstance(s, Allocate)]


def test_let_bound_composites_are_called_too():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32]) { @f(%x) }
def @f(%p: Tensor[(2, 4), float32], Compiler="acme", Primitive=1, global_symbol="f") {
  let %g = fn (%a: Tensor[(2, 4), float32], Composite="acme.relu") { nn.relu(%a) };
  let %v = %g(%p);
  %g(%v)
}""")
    func = lowered(mod, CodegenSpec("acme"))["f"]
    assert [c.name for c in extern_calls(func)] == ["relu", "relu"]


def test_inline_compiler_functions_are_outlined_first():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32]) {
  %0 = fn (%p: Tensor[(2, 4), float32], Compiler="acme", Primitive=1, Inline=1, global_symbol="acme_main_0") {
    %1 = fn (%a: Tensor[(2, 4), float32], Composite="acme.relu") { nn.relu(%a) };
    %1(%p)
  };
  %0(%x)
}""")
    out = lowered(mod, CodegenSpec("acme"))
    assert isinstance(out["acme_main_0"], PrimFunc)
    assert isinstance(out.main.body.op, GlobalVar) and out.main.body.op.name_hint == "acme_main_0"


def test_operators_outside_composites_become_loop_kernels_called_with_pointers():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 3, 3), float32]) { @f(%x) }
def @f(%p: Tensor[(1, 2, 3, 3), float32], Compiler="acme", Primitive=1, global_symbol="f") {
  %0 = layout_transform(%p, src_layout="NCHW", dst_layout="NHWC");
  %1 = fn (%a: Tensor[(1, 3, 3, 2), float32], Composite="acme.relu") { nn.relu(%a) };
  %2 = %1(%0);
  %3 = layout_transform(%2, src_layout="NHWC", dst_layout="NCHW");
  add(%3, 1f)
}""")
    out = lowered(mod, CodegenSpec("acme"))
    func = out["f"]
    names = [c.name for c in extern_calls(func)]
    assert names == ["f_layout_transform_0", "relu", "f_layout_transform_1", "f_add_2"]
    for name in names[::2] + names[3:]:
        kernel = out[name]
        assert isinstance(kernel, PrimFunc) and kernel.attrs["target"] == "c"
    assert func.attrs["kernels"] == ("f_layout_transform_0", "f_layout_transform_1", "f_add_2")
    module = emit_extern_calls("acme", [func], 16)
    text = module.source
    assert "status = f_layout_transform_0(p, buf0_data);" in text
    assert "status = relu(&buf0, &buf1);" in text
    assert "status = f_add_2(buf2_data, output);" in text
    assert module.calls == ("relu",)  # kernels are host code, not library symbols
    from compiler.backend.codegen_c import emit_c_module

    kernels = emit_c_module([out[n] for n in names if n != "relu"])
    library = "int32_t relu(DLTensor* a, DLTensor* b) { return a->ndim - b->ndim; }\n"
    assert compile_check(compilable(text) + library) == []
    assert compile_check(kernels) == []


def test_operators_that_cannot_be_lowered_are_reported():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32], %g: Tensor[(4), float32], %b: Tensor[(4), float32]) { @f(%x, %g, %b) }
def @f(%p: Tensor[(2, 4), float32], %q: Tensor[(4), float32], %r: Tensor[(4), float32], Compiler="acme",
       Primitive=1, global_symbol="f") {
  nn.layer_norm(%p, %q, %r)
}""")
    with pytest.raises(UnsupportedError, match="codegen acme: cannot compile operator nn.layer_norm outside a composite"):
        lowered(mod, CodegenSpec("acme"))


def test_a_parameter_as_the_result_is_reported():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32]) { @f(%x) }
def @f(%p: Tensor[(2, 4), float32], Compiler="acme", Primitive=1, global_symbol="f") { %p }""")
    with pytest.raises(UnsupportedError, match="must be computed by composite calls"):
        lowered(mod, CodegenSpec("acme"))


def test_composite_symbols_the_library_does_not_define_are_reported():
    with pytest.raises(InputError, match="codegen toy_cg_thflow: composite toy_cg_thflow.dense_bias calls "
                                         "dense_bias, which its library does not define"):
        lowered(seed001(), TOY, frozenset({"dense_bias_relu"}))


def test_composites_of_another_codegen_are_reported():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32]) { @f(%x) }
def @f(%p: Tensor[(2, 4), float32], Compiler="acme", Primitive=1, global_symbol="f") {
  %0 = fn (%a: Tensor[(2, 4), float32], Composite="other.relu") { nn.relu(%a) };
  %0(%p)
}""")
    with pytest.raises(UnsupportedError, match="composite other.relu belongs to another codegen"):
        lowered(mod, CodegenSpec("acme"))


def test_global_renamed_to_its_global_symbol():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32]) { @f(%x) }
def @f(%p: Tensor[(2, 4), float32], Compiler="acme", Primitive=1, global_symbol="acme_relu_fn") {
  %0 = fn (%a: Tensor[(2, 4), float32], Composite="acme.relu") { nn.relu(%a) };
  %0(%p)
}""")
    out = lowered(mod, CodegenSpec("acme"))
    assert "f" not in out and isinstance(out["acme_relu_fn"], PrimFunc)
    assert out.main.body.op.name_hint == "acme_relu_fn"


# -- `?` dims -------------------------------------------------------------------------------------

DYNAMIC_NPU = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 2, 3, 3), float32], %w: Tensor[(4, 2, 1, 1), float32]) { @f(%x, %w) }
def @f(%p: Tensor[(?, 2, 3, 3), float32], %q: Tensor[(4, 2, 1, 1), float32], Compiler="acme", Primitive=1,
       global_symbol="f") {
  %0 = layout_transform(%p, src_layout="NCHW", dst_layout="NHWC");
  %1 = layout_transform(%q, src_layout="OIHW", dst_layout="OHWI");
  %2 = fn (%a: Tensor[(?, 3, 3, 2), float32], %b: Tensor[(4, 1, 1, 2), float32], Composite="acme.conv") {
    nn.conv2d(%a, %b, channels=4, kernel_size=[1, 1], data_layout="NHWC", kernel_layout="OHWI")
  };
  %3 = %2(%0, %1);
  layout_transform(%3, src_layout="NHWC", dst_layout="NCHW")
}"""


def test_question_mark_dims_become_dim_parameters_of_the_function_and_its_kernels():
    from compiler.backend.te_compiler import SHAPE_SOURCE
    from compiler.ir.types import FuncType

    out = lowered(parse(DYNAMIC_NPU), CodegenSpec("acme"))
    func = out["f"]
    (batch,) = func.scalar_params
    assert batch.dtype == "int64"
    p, q = func.inputs
    assert p.shape == (batch, 2, 3, 3) and q.shape == (4, 2, 1, 1)
    assert func.outputs[0].shape == (batch, 4, 3, 3)
    # The executor maps the dim parameter back through the Relay type: the first `?` of %p.
    assert isinstance(func.func_type, FuncType) and str(func.func_type.arg_types[0]) == "Tensor[(?, 2, 3, 3), float32]"
    allocations = {s.buffer.name: s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate)}
    # What depends on the batch is allocated at run time; the weight's layout stays planned.
    assert {n: (b.shape, b.scope) for n, b in allocations.items()} == {
        "buf0": ((batch, 3, 3, 2), "heap"), "buf1": ((4, 1, 1, 2), "global"), "buf2": ((batch, 3, 3, 4), "heap")}
    first, second, conv, last = extern_calls(func)
    assert first.args == (p, allocations["buf0"], batch) and second.args == (q, allocations["buf1"])
    assert conv.args == (allocations["buf0"], allocations["buf1"], allocations["buf2"])
    assert last.args == (allocations["buf2"], func.outputs[0], batch)
    assert len(out[first.name].scalar_params) == 1 and out[second.name].scalar_params == ()
    # LowerTE makes the call's shape function from the partitioned function.
    source = func.extra[SHAPE_SOURCE]
    assert [p.name_hint for p in source.params] == ["p", "q"]
    assert str(source.result_type) == "Tensor[(?, 4, 3, 3), float32]"


def test_question_mark_dims_fill_the_dltensor_shapes_and_heap_buffers_are_freed_on_every_path():
    out = lowered(parse(DYNAMIC_NPU), CodegenSpec("acme"))
    text = emit_extern_calls("acme", [out["f"]], 16).source
    assert "#include <stdlib.h>" in text
    assert "int32_t f(const float* restrict p, const float* restrict q, float* restrict output, int64_t p_dim0, " \
           "uint8_t* restrict workspace) {" in text
    assert "int64_t buf0_shape[4] = {p_dim0, 3, 3, 2};" in text
    assert "int64_t buf2_shape[4] = {p_dim0, 3, 3, 4};" in text
    assert "int64_t buf1_shape[4] = {4, 1, 1, 2};" in text
    assert "float* buf0_data = (float*)malloc(buf0_bytes > 0 ? buf0_bytes : 1);" in text
    assert "float* buf1_data = (float*)(workspace + 0);" in text
    assert "status = f_layout_transform_0(p, buf0_data, p_dim0);" in text
    assert "status = f_layout_transform_2(buf2_data, output, p_dim0);" in text
    # One way out: every failure (allocation, kernel, library) reaches the frees.
    assert "if (buf0_data == NULL || buf2_data == NULL) { status = -4; goto done; }" in text
    assert text.count("return ") == 1 and "return status;\n}" in text
    assert text.count("if (status != 0) goto done;") == 4
    assert text.split("done:\n")[1].startswith("  free(buf0_data);\n  free(buf2_data);\n  return status;\n}")
    library = "int32_t conv(DLTensor* a, DLTensor* b, DLTensor* c) { return (int32_t)(a->shape[0] - c->shape[0] + b->ndim - 4); }\n"
    assert compile_check(compilable(text) + library) == []


def test_a_static_function_keeps_its_planned_buffers_and_direct_returns():
    static = DYNAMIC_NPU.replace("?, ", "5, ")
    func = lowered(parse(static), CodegenSpec("acme"))["f"]
    assert func.scalar_params == ()
    assert {s.buffer.scope for s in walk_stmts(func.body) if isinstance(s, Allocate)} == {"global"}
    text = emit_extern_calls("acme", [func], 16).source
    assert "malloc" not in text and "stdlib" not in text and "goto" not in text
    assert "int64_t buf0_shape[4] = {5, 3, 3, 2};" in text


def test_two_question_mark_dims_meeting_outside_a_composite_are_reported():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(?, 4), float32], %y: Tensor[(?, 4), float32]) { @f(%x, %y) }
def @f(%p: Tensor[(?, 4), float32], %q: Tensor[(?, 4), float32], Compiler="acme", Primitive=1, global_symbol="f") {
  %0 = add(%p, %q);
  %1 = fn (%a: Tensor[(?, 4), float32], Composite="acme.relu") { nn.relu(%a) };
  %1(%0)
}""")
    with pytest.raises(UnsupportedError, match="codegen acme: operator add outside a composite meets two `\\?` dims") as err:
        lowered(mod, CodegenSpec("acme"))
    assert err.value.span is not None and (err.value.span.line, err.value.span.column) == (4, 8)


def test_a_result_shape_read_from_values_is_reported():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(?, 4), float32], %s: Tensor[(2), int64]) { @f(%x, %s) }
def @f(%p: Tensor[(?, 4), float32], %q: Tensor[(2), int64], Compiler="acme", Primitive=1, global_symbol="f") {
  %0 = dyn.reshape(%p, %q);
  %1 = fn (%a: Tensor[(?, ?), float32], Composite="acme.relu") { nn.relu(%a) };
  %1(%0)
}""")
    with pytest.raises(UnsupportedError, match="codegen acme: the result shape of dyn.reshape depends on the values") as err:
        lowered(mod, CodegenSpec("acme"))
    assert err.value.span is not None and (err.value.span.line, err.value.span.column) == (4, 8)


COUNTING_ALLOCATOR = """#include <stdlib.h>
#include <stdint.h>
static int live, calls;
int fail_allocation = -1;  /* which malloc answers NULL, or -1 */
int32_t conv_status = 0;   /* what the library returns */
static void* counting_malloc(size_t n) {
  if (calls++ == fail_allocation) return NULL;
  ++live;
  return malloc(n);
}
static void counting_free(void* p) { if (p != NULL) --live; free(p); }
int live_allocations(void) { return live; }
int32_t conv(DLTensor* a, DLTensor* b, DLTensor* c) {
  if (conv_status != 0) return conv_status;
  /* A 1x1 convolution NHWC x OHWI -> NHWC, reading every dim from the DLTensors. */
  const float* x = (const float*)a->data; const float* w = (const float*)b->data; float* y = (float*)c->data;
  int64_t rows = a->shape[0] * a->shape[1] * a->shape[2], channels = a->shape[3], filters = b->shape[0];
  if (c->shape[0] != a->shape[0] || c->shape[3] != filters) return 99;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t f = 0; f < filters; ++f) {
      float acc = 0.0f;
      for (int64_t k = 0; k < channels; ++k) acc += x[r * channels + k] * w[f * channels + k];
      y[r * filters + f] = acc;
    }
  return 0;
}
#define malloc counting_malloc
#define free counting_free
"""


def test_the_generated_function_runs_and_frees_its_heap_buffers_on_every_way_out(tmp_path):
    from compiler.backend.codegen_c import emit_c_module
    from compiler.runtime.build import build_shared_library
    from compiler.runtime.ffi import load_library
    from compiler.tir.analysis import workspace_bytes

    out = lowered(parse(DYNAMIC_NPU), CodegenSpec("acme"))
    func = out["f"]
    text = compilable(emit_extern_calls("acme", [func], 16).source)
    head, _, rest = text.partition("\n\n")  # the allocator goes after the standard includes
    (tmp_path / "calls.c").write_text(head + "\n" + compilable(f'#include "{HEADER_NAME}"\n') +
                                      COUNTING_ALLOCATOR + rest)
    kernels = [out[c.name] for c in extern_calls(func) if c.name != "conv"]
    (tmp_path / "kernels.c").write_text(emit_c_module(kernels))
    lib = load_library(build_shared_library([tmp_path / "calls.c", tmp_path / "kernels.c"], tmp_path / "lib.so"),
                       "int32_t f(float* p, float* q, float* output, int64_t p_dim0, uint8_t* workspace);"
                       "int live_allocations(void); extern int fail_allocation; extern int32_t conv_status;")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 2, 1, 1)).astype("float32")
    workspace = np.zeros(workspace_bytes(func, 16), "uint8")
    for batch in (1, 3):
        p = rng.standard_normal((batch, 2, 3, 3)).astype("float32")
        output = np.zeros((batch, 4, 3, 3), "float32")
        assert lib.call("f", p, q, output, batch, workspace) == 0
        np.testing.assert_allclose(output, np.einsum("nchw,oc->nohw", p, q[:, :, 0, 0]), rtol=1e-5)
        assert lib.call("live_allocations") == 0
    lib.lib.conv_status = 7  # the library fails: its status comes back, nothing leaks
    assert lib.call("f", p, q, output, 3, workspace) == 7 and lib.call("live_allocations") == 0
    lib.lib.conv_status = 0
    lib.lib.fail_allocation = 7  # the second malloc of the next call fails after the first succeeded
    assert lib.call("f", p, q, output, 3, workspace) == -4 and lib.call("live_allocations") == 0
