from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cffi
import numpy as np
import pytest

from compiler.diagnostics import InputError
from compiler.runtime.build import build_shared_library
from compiler.runtime.ffi import Library, StructArg, aligned_empty, load_library, prim_func_cdef
from compiler.tir.expr import Buffer, Const, Var
from compiler.tir.stmt import Allocate, PrimFunc, Seq, Store

SOURCE = """
#include <stdint.h>
struct pair { const float* a; int32_t* b; int64_t n; };
int32_t scale(const float* x, float* y, int64_t n, float k) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * k;
  return (int32_t)n;
}
int32_t sum_pair(struct pair* p, double* out) {
  double s = 0;
  for (int64_t i = 0; i < p->n; ++i) s += p->a[i] + p->b[i];
  *out = s;
  return 0;
}
int32_t count_true(const uint8_t* flags, int64_t n) {
  int32_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += flags[i] != 0;
  return c;
}
"""
CDEF = """
struct pair { const float* a; int32_t* b; int64_t n; };
int32_t scale(const float* x, float* y, int64_t n, float k);
int32_t sum_pair(struct pair* p, double* out);
int32_t count_true(const uint8_t* flags, int64_t n);
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Library:
    tmp = tmp_path_factory.mktemp("ffi")
    (tmp / "lib.c").write_text(SOURCE)
    return load_library(build_shared_library([tmp / "lib.c"], tmp / "libffi.so"), CDEF)


def test_call_passes_arrays_without_copies_and_returns_the_result(lib: Library) -> None:
    x = np.arange(5, dtype=np.float32)
    y = np.zeros(5, np.float32)
    assert lib.call("scale", x, y, 5, 2.5) == 5
    np.testing.assert_array_equal(y, x * 2.5)


def test_call_accepts_numpy_scalars(lib: Library) -> None:
    x, y = np.ones(3, np.float32), np.zeros(3, np.float32)
    assert lib.call("scale", x, y, np.int64(3), np.float32(4)) == 3
    assert y.tolist() == [4.0, 4.0, 4.0]


def test_array_views_that_are_contiguous_are_accepted(lib: Library) -> None:
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.zeros(4, np.float32)
    lib.call("scale", base[1], y, 4, 1.0)
    assert y.tolist() == [4.0, 5.0, 6.0, 7.0]


def test_bool_arrays_pass_for_uint8_pointers(lib: Library) -> None:
    assert lib.call("count_true", np.array([True, False, True]), 3) == 2


def test_wrong_dtype_is_an_input_error_naming_the_argument(lib: Library) -> None:
    with pytest.raises(InputError, match=r"argument 0 of scale: expected a C-contiguous float32 array, "
                                         r"got float64 array of shape \(3,\)"):
        lib.call("scale", np.zeros(3), np.zeros(3, np.float32), 3, 1.0)


def test_non_contiguous_array_is_an_input_error(lib: Library) -> None:
    x = np.zeros(6, np.float32)[::2]
    with pytest.raises(InputError, match="argument 0 of scale: expected a C-contiguous array"):
        lib.call("scale", x, np.zeros(3, np.float32), 3, 1.0)


def test_wrong_argument_count_and_kinds_are_input_errors(lib: Library) -> None:
    x = np.zeros(3, np.float32)
    with pytest.raises(InputError, match="scale takes 4 arguments, got 2"):
        lib.call("scale", x, x)
    with pytest.raises(InputError, match="argument 2 of scale: expected a value of type int64_t"):
        lib.call("scale", x, x, x, 1.0)
    with pytest.raises(InputError, match="argument 0 of scale: expected an array"):
        lib.call("scale", [1.0, 2.0], x, 2, 1.0)


def test_unknown_function_is_an_input_error(lib: Library) -> None:
    with pytest.raises(InputError, match="no declared function nope"):
        lib.call("nope")


def test_struct_of_pointers_is_passed_to_the_function(lib: Library) -> None:
    a, b = np.array([1.5, 2.5], np.float32), np.array([10, 20], np.int32)
    pair = lib.new_struct("struct pair", a=a, b=b, n=2)
    assert isinstance(pair, StructArg)
    out = np.zeros(1, np.float64)
    assert lib.call("sum_pair", pair, out) == 0
    assert out[0] == 34.0


def test_struct_keeps_its_arrays_alive(lib: Library) -> None:
    pair = lib.new_struct("struct pair", a=np.full(3, 1.0, np.float32), b=np.full(3, 2, np.int32), n=3)
    out = np.zeros(1, np.float64)
    lib.call("sum_pair", pair, out)
    assert out[0] == 9.0


def test_struct_fields_are_checked(lib: Library) -> None:
    a, b = np.zeros(2, np.float32), np.zeros(2, np.int32)
    with pytest.raises(InputError, match="missing field\\(s\\) n"):
        lib.new_struct("struct pair", a=a, b=b)
    with pytest.raises(InputError, match="unknown field\\(s\\) c"):
        lib.new_struct("struct pair", a=a, b=b, n=2, c=1)
    with pytest.raises(InputError, match="field b of struct pair: expected a C-contiguous int32 array"):
        lib.new_struct("struct pair", a=a, b=np.zeros(2, np.int64), n=2)
    with pytest.raises(InputError, match="unknown struct type"):
        lib.new_struct("struct nothing")


def test_libraries_declared_alike_share_declarations_but_call_their_own_code(tmp_path: Path) -> None:
    cdef = "int32_t answer(void);"
    libs = []
    for value in (7, 9):
        (tmp_path / f"a{value}.c").write_text(f"#include <stdint.h>\nint32_t answer(void) {{ return {value}; }}\n")
        libs.append(load_library(build_shared_library([tmp_path / f"a{value}.c"], tmp_path / f"liba{value}.so"), cdef))
    assert libs[0].ffi is libs[1].ffi
    assert (libs[0].lib.answer(), libs[1].lib.answer()) == (7, 9)
    libs[0].close()
    assert libs[1].lib.answer() == 9


def test_loading_a_missing_library_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot load library"):
        load_library(tmp_path / "libmissing.so", "int f(void);")


def test_unparsable_declarations_are_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot parse the declarations"):
        load_library(tmp_path / "libx.so", "int f(;")


def test_prim_func_cdef_is_the_calling_convention_without_restrict() -> None:
    n = Var("n", "int64")
    x, half, out = Buffer("x", (n,)), Buffer("h", (4,), "float16"), Buffer("out", (n,), "bool")
    tmp = Buffer("tmp", (4,))
    func = PrimFunc("f", (x, half, out), Allocate(tmp, Seq(())), 2, scalar_params=(n,))
    cdef = prim_func_cdef(func)
    assert cdef == ("int32_t f(const float* x, const uint16_t* h, uint8_t* out, int64_t n, "
                    "uint8_t* workspace);")
    cffi.FFI().cdef(cdef)


def test_prim_func_without_parameters_declares_void() -> None:
    func = PrimFunc("nothing", (), Store(Buffer("b", (1,)), (Const(0),), Const(0.0, "float32")), 0)
    assert prim_func_cdef(func) == "int32_t nothing(void);"


def test_aligned_empty_is_aligned_and_sized() -> None:
    for nbytes in (0, 1, 100):
        arr = aligned_empty(nbytes, 64)
        assert arr.nbytes == nbytes and arr.dtype == np.uint8 and arr.ctypes.data % 64 == 0


def test_dropping_a_library_with_parallel_loops_does_not_crash_the_process(tmp_path: Path) -> None:
    # libgomp's worker threads outlive the call; unmapping libgomp under them crashed the process.
    src = tmp_path / "par.c"
    src.write_text("#include <stdint.h>\n"
                   "int32_t fill(int32_t* out, int64_t n) {\n"
                   "  #pragma omp parallel for\n"
                   "  for (int64_t i = 0; i < n; ++i) out[i] = (int32_t)i;\n"
                   "  return 0;\n}\n")
    so = build_shared_library([src], tmp_path / "libpar.so")
    script = (
        "import gc, time\n"
        "import numpy as np\n"
        "from compiler.runtime.ffi import load_library\n"
        "def run():\n"
        f"    lib = load_library({str(so)!r}, 'int32_t fill(int32_t* out, int64_t n);')\n"
        "    out = np.zeros(1 << 20, np.int32)\n"
        "    assert lib.call('fill', out, out.size) == 0 and out[-1] == out.size - 1\n"
        "run()\n"
        "gc.collect()\n"
        "time.sleep(0.2)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[3], check=False)
    assert result.returncode == 0, result.stderr
