from compiler.backend.aot_c import (
    Kernel,
    KernelCall,
    MainProgram,
    OutputCopy,
    Ref,
    emit_main_source,
    extern_prototype,
)
from compiler.backend.constants import ConstantPoolBuilder
from compiler.backend.interface_c import TensorInfo, emit_header
from compiler.runtime.build import compile_check


def info(name: str, dtype: str = "float32") -> TensorInfo:
    return TensorInfo(name, name, (4,), dtype, 16)


def program(calls, copies=(), inputs=(info("x"), info("y")), outputs=(info("output"),), workspace=0) -> MainProgram:
    return MainProgram("default", tuple(inputs), tuple(outputs), tuple(calls), tuple(copies), workspace, 16,
                       ConstantPoolBuilder().build())


def compiles_cleanly(prog: MainProgram, extra: str = "") -> bool:
    header = emit_header("default", prog.inputs, prog.outputs, prog.workspace_bytes, 16, 0)
    source = emit_main_source(prog).replace('#include "tvmgen_default.h"', header)
    return compile_check(source + extra) == []


NEG = Kernel("neg", ("float32", "float32"), False, extern_prototype("neg", ("float32", "float32")))


def test_unread_parameters_are_voided_and_no_workspace_means_null():
    call = KernelCall(NEG, (Ref("input", "in_x", "float32"), Ref("output", "out_output", "float32")))
    prog = program([call])
    src = emit_main_source(prog)
    assert "(void)in_y;" in src and "(void)workspace;" in src and "(void)in_x;" not in src
    assert "tvmgen_default_run_with_workspace(inputs, outputs, NULL);" in src
    assert "global_workspace" not in src
    assert "if (neg(in_x, out_output) != 0) return -1;" in src
    assert compiles_cleanly(prog)


def test_a_buffer_of_another_dtype_is_cast_to_the_parameter_type():
    as_int = Kernel("bits", ("int32", "float32"), False, extern_prototype("bits", ("int32", "float32")))
    call = KernelCall(as_int, (Ref("input", "in_x", "float32"), Ref("output", "out_output", "float32")))
    src = emit_main_source(program([call], inputs=(info("x"),)))
    assert "bits((int32_t*)in_x, out_output)" in src


def test_intermediates_are_typed_pointers_into_the_workspace():
    to_sid = KernelCall(NEG, (Ref("input", "in_x", "float32"), Ref("sid", "sid_0", "float32", 32)))
    from_sid = KernelCall(NEG, (Ref("sid", "sid_0", "float32", 32), Ref("output", "out_output", "float32")))
    copy = OutputCopy(Ref("output", "out_output1", "float32"), Ref("input", "in_x", "float32"), 16)
    prog = program([to_sid, from_sid], [copy], inputs=(info("x"),), outputs=(info("output"), info("output1")),
                   workspace=48)
    src = emit_main_source(prog)
    assert "  float* sid_0 = (float*)(workspace + 32);" in src
    assert "static uint8_t tvmgen_default_global_workspace[48] __attribute__((aligned(16)));" in src
    order = ["neg(in_x, sid_0)", "neg(sid_0, out_output)", "memcpy(out_output1, in_x, 16);"]
    assert [src.index(text) for text in order] == sorted(src.index(text) for text in order)
    assert compiles_cleanly(prog)


def test_kernels_are_declared_once_with_their_prototype():
    call = KernelCall(NEG, (Ref("input", "in_x", "float32"), Ref("output", "out_output", "float32")))
    src = emit_main_source(program([call, call], inputs=(info("x"),)))
    assert src.count("int32_t neg(float*, float*);") == 1
