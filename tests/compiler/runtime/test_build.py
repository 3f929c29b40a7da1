from __future__ import annotations

from pathlib import Path

import pytest

from compiler.diagnostics import CompileError
from compiler.runtime.build import (
    DEFAULT_CFLAGS,
    BuildError,
    build_shared_library,
    compile_check,
    compiler_command,
)
from compiler.runtime.ffi import load_library

ADD_ONE = "#include <stdint.h>\nint32_t add_one(int32_t x) { return x + 1; }\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_builds_a_shared_library_that_loads(tmp_path: Path) -> None:
    src = write(tmp_path / "add.c", ADD_ONE)
    out = build_shared_library([src], tmp_path / "lib" / "libadd.so")
    assert out == tmp_path / "lib" / "libadd.so" and out.is_file()
    assert load_library(out, "int32_t add_one(int32_t x);").call("add_one", 41) == 42
    assert [p.name for p in out.parent.iterdir()] == ["libadd.so"]  # no temporary left behind


def test_compiler_error_raises_build_error_with_the_compiler_message(tmp_path: Path) -> None:
    src = write(tmp_path / "bad.c", "int f(void) { return undefined_name; }\n")
    with pytest.raises(BuildError) as info:
        build_shared_library([src], tmp_path / "libbad.so")
    err = info.value
    assert isinstance(err, CompileError) and err.kind == "build_error"
    assert "undefined_name" in err.message and "error" in err.message
    assert "bad.c" in err.output
    assert not (tmp_path / "libbad.so").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.c"]


def test_missing_compiler_raises_build_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "no-such-compiler-relaycc")
    src = write(tmp_path / "add.c", ADD_ONE)
    with pytest.raises(BuildError, match="no-such-compiler-relaycc.*not found"):
        build_shared_library([src], tmp_path / "libadd.so")


def test_cc_may_carry_its_own_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "cc -DRESULT=7")
    src = write(tmp_path / "r.c", "int result(void) { return RESULT; }\n")
    lib = load_library(build_shared_library([src], tmp_path / "libr.so"), "int result(void);")
    assert lib.call("result") == 7


def test_default_command_uses_default_flags_and_links_libm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    cmd = compiler_command([Path("a.c")], Path("liba.so"), include_dirs=["inc"], libraries=["foo"],
                           library_dirs=["libdir"])
    assert cmd[0] == "cc"
    assert cmd[1 : 1 + len(DEFAULT_CFLAGS)] == list(DEFAULT_CFLAGS)
    assert "-fopenmp" not in cmd
    assert cmd[-5:] == ["-o", "liba.so", "-Llibdir", "-lfoo", "-lm"]
    assert "-Iinc" in cmd and cmd.index("-Iinc") < cmd.index("a.c") < cmd.index("-o")


def test_openmp_is_added_for_parallel_loops(tmp_path: Path) -> None:
    assert "-fopenmp" in compiler_command([Path("a.c")], Path("a.so"), openmp=True)
    src = write(tmp_path / "par.c", (
        "#include <stdint.h>\n"
        "int32_t fill(int32_t* out, int32_t n) {\n"
        "  #pragma omp parallel for\n"
        "  for (int32_t i = 0; i < n; ++i) out[i] = i;\n"
        "  return 0;\n}\n"))
    out = build_shared_library([src], tmp_path / "libpar.so", cflags=["-O2", "-Wall", "-Werror"])
    assert out.is_file()  # -Werror would reject an unknown pragma without -fopenmp


def test_custom_flags_still_build_a_shared_library() -> None:
    cmd = compiler_command([Path("a.c")], Path("a.so"), cflags=["-O0"])
    assert "-O3" not in cmd and "-O0" in cmd and "-fPIC" in cmd and "-shared" in cmd


def test_signed_overflow_wraps_whatever_flags_are_given(tmp_path: Path) -> None:
    # -O3 may fold `x + 1 > x` to true for signed x unless overflow is defined to wrap.
    src = tmp_path / "wrap.c"
    src.write_text("#include <stdint.h>\nint32_t grows(int32_t x) { return x + 1 > x; }\n")
    assert "-fwrapv" in compiler_command([src], tmp_path / "w.so", cflags=["-O3"])
    out = build_shared_library([src], tmp_path / "libwrap.so", cflags=["-O3"])
    import cffi

    ffi = cffi.FFI()
    ffi.cdef("int32_t grows(int32_t x);")
    lib = ffi.dlopen(str(out))
    assert lib.grows(5) == 1 and lib.grows(2**31 - 1) == 0


def test_compile_check_reports_warnings() -> None:
    source = "int f(void) { int unused; return 0; }\n"
    warnings = compile_check(source)
    assert len(warnings) == 1 and "unused" in warnings[0]
    assert compile_check(ADD_ONE) == []


def test_compile_check_with_werror_raises() -> None:
    with pytest.raises(BuildError, match="unused"):
        compile_check("int f(void) { int unused; return 0; }\n", ["-Werror"])


def test_no_sources_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="no C sources"):
        build_shared_library([], tmp_path / "libnone.so")
