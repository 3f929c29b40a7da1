import pytest

from compiler.backend.dlpack import HEADER_TEXT, dtype_code, dtype_initializer, tensor_initializer
from compiler.runtime.build import compile_check


def test_header_has_dlpacks_memory_layout_and_compiles_without_warnings():
    source = HEADER_TEXT + """
#include <stddef.h>
_Static_assert(sizeof(DLDevice) == 8, "DLDevice");
_Static_assert(sizeof(DLDataType) == 4, "DLDataType");
_Static_assert(offsetof(DLTensor, device) == 8, "device");
_Static_assert(offsetof(DLTensor, ndim) == 16, "ndim");
_Static_assert(offsetof(DLTensor, dtype) == 20, "dtype");
_Static_assert(offsetof(DLTensor, shape) == 24, "shape");
_Static_assert(offsetof(DLTensor, strides) == 32, "strides");
_Static_assert(offsetof(DLTensor, byte_offset) == 40, "byte_offset");
_Static_assert(sizeof(DLTensor) == 48, "DLTensor");
int32_t first(DLTensor* t) { return t->ndim; }
"""
    assert compile_check(source) == []


def test_header_steps_aside_when_dlpack_was_included_first():
    source = "#define DLPACK_VERSION 80\ntypedef int DLTensor;\n" + HEADER_TEXT + "DLTensor t = 3;\n"
    assert compile_check(source) == []


@pytest.mark.parametrize(
    "dtype, code, bits",
    [("float32", "kDLFloat", 32), ("float16", "kDLFloat", 16), ("int8", "kDLInt", 8),
     ("uint16", "kDLUInt", 16), ("bool", "kDLBool", 8), ("int64", "kDLInt", 64)],
)
def test_dtypes_map_to_dlpack_codes_and_bits(dtype, code, bits):
    assert dtype_code(dtype) == code
    assert dtype_initializer(dtype) == f"{{{code}, {bits}, 1}}"


def test_unknown_dtype_has_no_code():
    with pytest.raises(ValueError, match="no DLPack type code"):
        dtype_code("handle")


def test_tensor_initializer_is_dense_row_major_on_the_cpu():
    text = tensor_initializer("x", 2, "float32", "x_shape")
    assert text == "{(void*)x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, x_shape, NULL, 0}"
    source = HEADER_TEXT + "#include <stddef.h>\nint64_t x_shape[2] = {2, 3};\nfloat x[6];\n"
    source += f"int32_t f(void) {{ DLTensor t = {text}; return t.ndim; }}\n"
    assert compile_check(source) == []
