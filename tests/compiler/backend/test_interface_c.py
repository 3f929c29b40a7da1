import cffi
import pytest

from compiler.backend.interface_c import (
    TensorInfo,
    c_name,
    c_prefix,
    cffi_cdef,
    check_names,
    emit_header,
    header_name,
    output_names,
    result_names,
    sanitize,
    size_macro,
)
from compiler.diagnostics import UnsupportedError
from compiler.runtime.build import compile_check


def tensor(name: str, shape=(2, 3), dtype="float32") -> TensorInfo:
    return TensorInfo(name, c_name(name), shape, dtype, 24)


def test_sanitize_replaces_every_non_alphanumeric_character():
    assert sanitize("dense.weight-1") == "dense_weight_1"
    assert sanitize("x") == "x"


def test_c_name_makes_keywords_and_leading_digits_valid_identifiers():
    assert c_name("0") == "_0"
    assert c_name("int") == "int_"
    assert c_name("data.0") == "data_0"


def test_module_names_are_only_sanitized():
    assert c_prefix("default") == "tvmgen_default"
    assert c_prefix("my-net") == "tvmgen_my_net"
    assert header_name("my-net") == "tvmgen_my_net.h"
    assert size_macro("my-net", tensor("x")) == "TVMGEN_MY_NET_X_SIZE"


def test_results_are_out_i_for_users_and_tvms_fields_in_the_header():
    assert result_names(1) == ["out0"]
    assert result_names(3) == ["out0", "out1", "out2"]
    assert output_names(1, tuple_result=False) == ["output"]
    assert output_names(1, tuple_result=True) == ["output0"]  # a 1-tuple's leaf, as TVM names it
    assert output_names(2, tuple_result=True) == ["output0", "output1"]


def test_header_follows_tvms_layout():
    text = emit_header("default", [tensor("x"), tensor("y")], [tensor("output")], 1024, 16, 64)
    lines = text.splitlines()
    order = [
        "#ifndef TVMGEN_DEFAULT_H_",
        "#define TVMGEN_DEFAULT_H_",
        "#include <stdint.h>",
        'extern "C" {',
        "#define TVMGEN_DEFAULT_X_SIZE 24",
        "#define TVMGEN_DEFAULT_Y_SIZE 24",
        "#define TVMGEN_DEFAULT_OUTPUT_SIZE 24",
        "struct tvmgen_default_inputs {",
        "  void* x;",
        "  void* y;",
        "struct tvmgen_default_outputs {",
        "  void* output;",
        "#define TVMGEN_DEFAULT_WORKSPACE_SIZE 1024",
        "#define TVMGEN_DEFAULT_CONSTANT_POOL_SIZE 64",
        "int32_t tvmgen_default_run(struct tvmgen_default_inputs* inputs, struct tvmgen_default_outputs* outputs);",
        "#endif  /* TVMGEN_DEFAULT_H_ */",
    ]
    positions = [lines.index(line) for line in order]
    assert positions == sorted(positions)
    assert "/* input x: float32[2, 3] */" in lines


def test_header_compiles_as_c_and_cffi_parses_the_declarations():
    inputs, outputs = [tensor("x")], [tensor("output0"), tensor("output1")]
    header = emit_header("default", inputs, outputs, 0, 16, 0)
    assert compile_check(header + "\nint use(void) { return TVMGEN_DEFAULT_OUTPUT1_SIZE; }\n") == []
    ffi = cffi.FFI()
    ffi.cdef(cffi_cdef("default", inputs, outputs, 0, 16, 0))
    assert ffi.typeof("struct tvmgen_default_outputs").fields[1][0] == "output1"


def test_module_without_inputs_still_gets_a_valid_inputs_struct():
    header = emit_header("default", [], [tensor("output")], 0, 16, 0)
    assert "struct tvmgen_default_inputs {\n  void* unused_;\n};" in header
    assert compile_check(header) == []


def test_fields_that_collide_after_sanitizing_are_rejected():
    with pytest.raises(UnsupportedError, match="'a.b' and 'a-b' both become 'a_b'"):
        check_names("default", [tensor("a.b"), tensor("a-b")], [tensor("output")])


def test_size_macros_that_collide_are_rejected():
    with pytest.raises(UnsupportedError, match="TVMGEN_DEFAULT_X_SIZE"):
        check_names("default", [tensor("x"), tensor("X")], [tensor("output")])
    with pytest.raises(UnsupportedError, match="TVMGEN_DEFAULT_OUTPUT_SIZE"):
        check_names("default", [tensor("output")], [tensor("output")])
    with pytest.raises(UnsupportedError, match="workspace size"):
        check_names("default", [tensor("workspace")], [tensor("output")])
