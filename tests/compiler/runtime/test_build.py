from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from compiler.diagnostics import CompileError
from compiler.runtime.build import (
    DEFAULT_CFLAGS,
    GLUE_OPT_LEVEL,
    Blob,
    BuildError,
    LibraryBuilder,
    build_shared_library,
    compile_check,
    compiler_command,
)
from compiler.runtime.compile_cache import CompileCache
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


def test_default_command_uses_default_flags_and_links_libm_and_pthreads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    cmd = compiler_command([Path("a.c")], Path("liba.so"), include_dirs=["inc"], libraries=["foo"],
                           library_dirs=["libdir"])
    assert cmd[0] == "cc"
    assert cmd[1 : 1 + len(DEFAULT_CFLAGS)] == list(DEFAULT_CFLAGS)
    assert "-fopenmp" not in cmd
    assert cmd[-6:] == ["-o", "liba.so", "-Llibdir", "-lfoo", "-lm", "-pthread"]
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


# --- several files, the compile cache, blobs ---------------------------------------------------

KERNELS = {
    "k1.c": "#include <stdint.h>\nint32_t k1(int32_t x) { return x + 1; }\n",
    "k2.c": "#include <stdint.h>\nint32_t k2(int32_t x) { return x * 2; }\n",
    "k3.c": "#include <stdint.h>\nint32_t k3(int32_t x) { return x - 3; }\n",
}
GLUE = "#include <stdint.h>\n#include \"api.h\"\nint32_t run(int32_t x) { return k3(k2(k1(x))); }\n"
API = "#include <stdint.h>\nint32_t k1(int32_t);\nint32_t k2(int32_t);\nint32_t k3(int32_t);\n"


def logging_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """CC: the system compiler behind a script that logs each command line."""
    log = tmp_path / "cc.log"
    script = tmp_path / "logcc"
    script.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec cc "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("CC", str(script))
    return log


def compiles(log: Path) -> list[str]:
    """The logged commands that compiled a file to an object."""
    return [line for line in log.read_text().splitlines() if " -c " in line] if log.exists() else []


def write_module(root: Path) -> tuple[list[Path], Path, Path]:
    (root / "include").mkdir(parents=True)
    write(root / "include" / "api.h", API)
    kernels = [write(root / name, text) for name, text in KERNELS.items()]
    return kernels, write(root / "glue.c", GLUE), root / "include"


def test_objects_of_an_identical_build_come_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = logging_compiler(tmp_path, monkeypatch)
    cache = CompileCache(tmp_path / "cache")
    for build in ("a", "b"):
        kernels, glue, include = write_module(tmp_path / build)
        out = build_shared_library(kernels, tmp_path / build / "libm.so", glue_sources=[glue],
                                   include_dirs=[include], cache=cache)
        assert load_library(out, "int32_t run(int32_t x);").call("run", 10) == 19  # (10 + 1) * 2 - 3
    assert len(compiles(log)) == 4  # the first build's four files; the second compiled none


def test_a_changed_header_compiles_the_file_that_includes_it_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = logging_compiler(tmp_path, monkeypatch)
    cache = CompileCache(tmp_path / "cache")
    kernels, glue, include = write_module(tmp_path / "a")
    build_shared_library(kernels, tmp_path / "a" / "libm.so", glue_sources=[glue], include_dirs=[include], cache=cache)
    write(include / "api.h", API + "/* changed */\n")
    build_shared_library(kernels, tmp_path / "a" / "libm.so", glue_sources=[glue], include_dirs=[include], cache=cache)
    assert [c.split(" -c ")[1].split()[0] for c in compiles(log)[4:]] == [str(glue)]


def test_a_corrupt_cache_entry_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = logging_compiler(tmp_path, monkeypatch)
    cache = CompileCache(tmp_path / "cache")
    kernels, glue, include = write_module(tmp_path / "a")
    build_shared_library(kernels, tmp_path / "a" / "libm.so", glue_sources=[glue], include_dirs=[include], cache=cache)
    entry = next((tmp_path / "cache" / "objects").rglob("*.o"))
    entry.write_bytes(entry.read_bytes()[:100])  # truncated, as by a full disk
    out = build_shared_library(kernels, tmp_path / "a" / "libm.so", glue_sources=[glue], include_dirs=[include],
                               cache=cache)
    assert len(compiles(log)) == 5
    assert load_library(out, "int32_t run(int32_t x);").call("run", 0) == -1


def test_without_a_cache_every_file_is_compiled_every_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = logging_compiler(tmp_path, monkeypatch)
    kernels, glue, include = write_module(tmp_path / "a")
    for _ in range(2):
        out = build_shared_library(kernels, tmp_path / "a" / "libm.so", glue_sources=[glue], include_dirs=[include],
                                   cache=None, jobs=2)
    assert len(compiles(log)) == 8
    assert load_library(out, "int32_t run(int32_t x);").call("run", 1) == 1


def test_glue_is_built_at_the_glue_level_and_given_flags_apply_to_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = logging_compiler(tmp_path, monkeypatch)
    kernels, glue, include = write_module(tmp_path / "a")
    build_shared_library(kernels, tmp_path / "a" / "libm.so", glue_sources=[glue], include_dirs=[include])
    levels = {c.split(" -c ")[1].split()[0]: [f for f in c.split() if f.startswith("-O")] for c in compiles(log)}
    assert levels[str(glue)] == [GLUE_OPT_LEVEL]
    assert all(levels[str(k)] == ["-O3"] for k in kernels)
    log.unlink()
    build_shared_library(kernels, tmp_path / "a" / "libm.so", glue_sources=[glue], include_dirs=[include],
                         cflags=["-O2", "-DUSER_FLAG"])
    assert all("-O2" in c.split() and "-DUSER_FLAG" in c.split() and "-O1" not in c.split() for c in compiles(log))


def test_the_first_failing_file_is_the_error_whatever_finishes_first(tmp_path: Path) -> None:
    files = [write(tmp_path / f"f{k}.c", f"int f{k}(void) {{ return missing_{k}; }}\n") for k in range(3)]
    with pytest.raises(BuildError, match="missing_0"):
        build_shared_library(files, tmp_path / "libf.so", jobs=3)
    assert not (tmp_path / "libf.so").exists()


def test_progress_counts_every_object_once_in_order_while_files_compile_at_once(tmp_path: Path) -> None:
    kernels, glue, include = write_module(tmp_path / "m")
    seen: list[tuple[int, int]] = []

    build_shared_library(kernels, tmp_path / "libm.so", glue_sources=[glue], include_dirs=[include],
                         jobs=3, progress=lambda done, total: seen.append((done, total)))

    assert seen == [(done, 4) for done in range(5)]


def test_progress_of_a_single_file_build_is_one_step(tmp_path: Path) -> None:
    source = write(tmp_path / "one.c", KERNELS["k1.c"])
    seen: list[tuple[int, int]] = []

    build_shared_library([source], tmp_path / "libone.so", progress=lambda done, total: seen.append((done, total)))

    assert seen == [(0, 1), (1, 1)]


def test_two_processes_building_the_same_objects_at_once_both_succeed(tmp_path: Path) -> None:
    kernels, glue, include = write_module(tmp_path / "m")
    program = (
        "import sys\nfrom pathlib import Path\n"
        "from compiler.runtime.build import build_shared_library\n"
        "from compiler.runtime.compile_cache import CompileCache\n"
        f"kernels = [Path(p) for p in {[str(k) for k in kernels]!r}]\n"
        f"build_shared_library(kernels, Path(sys.argv[1]), glue_sources=[Path({str(glue)!r})],\n"
        f"    include_dirs=[Path({str(include)!r})], cache=CompileCache(Path({str(tmp_path / 'cache')!r})))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", program, str(tmp_path / f"lib{k}.so")], env=env,
                              stderr=subprocess.PIPE, text=True) for k in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    for k in range(2):
        assert load_library(tmp_path / f"lib{k}.so", "int32_t run(int32_t x);").call("run", 10) == 19
    entries = list((tmp_path / "cache" / "objects").rglob("*"))
    assert len([e for e in entries if e.suffix == ".o"]) == 4 and not [e for e in entries if e.suffix == ".tmp"]


BLOB_READER = (
    "#include <stdint.h>\n"
    'extern const uint8_t table[4100] __attribute__((visibility("hidden"), aligned(64)));\n'
    "int32_t at(int32_t i) { return table[i]; }\n"
    "int32_t misalignment(void) { return (int32_t)((uintptr_t)table % 64); }\n"
)


def compiler_without_assembler(directory: Path) -> str:
    """A C compiler (the system's `cc`) that fails on assembly sources, as one whose assembler
    knows no `.incbin` would."""
    wrapper = directory / "cc-without-as"
    wrapper.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in *.s) echo "no assembler" >&2; exit 1;; esac; done\n'
                       'exec cc "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.mark.parametrize("assembler", [True, False])
def test_a_blob_is_linked_as_a_hidden_aligned_array_of_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, assembler: bool
) -> None:
    if not assembler:
        monkeypatch.setenv("CC", compiler_without_assembler(tmp_path))
    data = bytes(range(256)) * 16 + b"\x05\x06\x07\x00"
    (tmp_path / "table.bin").write_bytes(data)
    # The C definition, used where the assembler fails: the same bytes as a string literal.
    literal = "".join(f"\\{b:03o}" for b in data[:-1])
    write(tmp_path / "table.c", '#include <stdint.h>\n__attribute__((visibility("hidden"), aligned(64))) '
                                f'const uint8_t table[4100] = "{literal}";\n')
    blob = Blob(tmp_path / "table.bin", "table", len(data), 64, tmp_path / "table.c")
    out = build_shared_library([write(tmp_path / "reader.c", BLOB_READER)], tmp_path / "libt.so", blobs=[blob])
    lib = load_library(out, "int32_t at(int32_t i); int32_t misalignment(void);")
    assert [lib.call("at", i) for i in (0, 255, 256, 4096, 4098, 4099)] == [0, 255, 0, 5, 7, 0]
    assert lib.call("misalignment") == 0
    exported = subprocess.run(["nm", "-D", "--defined-only", str(out)], capture_output=True, text=True).stdout
    assert "table" not in exported.split()


# --- LibraryBuilder: files handed over while others are still being written --------------------


def test_a_failing_file_among_several_is_named_with_the_compilers_message(tmp_path: Path) -> None:
    kernels, glue, include = write_module(tmp_path / "m")
    broken = write(tmp_path / "m" / "k_broken.c", "int broken(void) { return no_such_name; }\n")
    with pytest.raises(BuildError) as raised:
        build_shared_library([*kernels, broken], tmp_path / "libm.so", glue_sources=[glue], include_dirs=[include])
    assert "C compiler failed on k_broken.c" in str(raised.value)
    assert "no_such_name" in str(raised.value)
    assert not (tmp_path / "libm.so").exists()


def test_files_added_in_steps_link_into_one_library_and_progress_starts_at_seal(tmp_path: Path) -> None:
    kernels, glue, include = write_module(tmp_path / "m")
    seen: list[tuple[int, int]] = []
    with LibraryBuilder(tmp_path / "libm.so", include_dirs=[include], jobs=2,
                        progress=lambda done, total: seen.append((done, total))) as builder:
        builder.add([glue], glue=True)
        builder.add(kernels[:1])
        builder.add(kernels[1:])
        builder.seal()
        out = builder.link()
    assert load_library(out, "int32_t run(int32_t x);").call("run", 10) == 19
    assert seen == [(done, 4) for done in range(5)]


def test_the_library_is_the_same_whatever_order_the_files_compile_in(tmp_path: Path) -> None:
    kernels, glue, include = write_module(tmp_path / "m")
    # Sizes differ, so biggest-first starts them in another order than they were given.
    write(kernels[0], KERNELS["k1.c"] + "/* " + "x" * 4000 + " */\n")
    libraries = []
    for jobs in (1, 3):
        out = tmp_path / f"jobs{jobs}" / "libm.so"
        build_shared_library(kernels, out, glue_sources=[glue], include_dirs=[include], jobs=jobs)
        libraries.append(out.read_bytes())
    assert libraries[0] == libraries[1]


def test_the_library_does_not_depend_on_the_directory_it_is_built_in(tmp_path: Path) -> None:
    # The link writes a temporary file first; gold took its name for the library's base version
    # once the library used a versioned libc symbol (the executor's clock_gettime).
    kernels, glue, include = write_module(tmp_path / "m")
    timed = write(tmp_path / "m" / "timed.c", "#include <time.h>\n"
                  "long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_nsec; }\n")
    libraries = []
    for place in ("one", "two/deeper"):
        out = tmp_path / place / "libm.so"
        build_shared_library([*kernels, timed], out, glue_sources=[glue], include_dirs=[include])
        libraries.append(out.read_bytes())
    assert libraries[0] == libraries[1]


def test_an_error_while_files_compile_kills_the_compilers_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A compiler that never finishes on its own; it records its process id, then becomes sleep.
    pids = tmp_path / "pids"
    script = write(tmp_path / "slowcc", f'#!/bin/sh\necho $$ >> {pids}\nexec sleep 600\n')
    script.chmod(0o755)
    monkeypatch.setenv("CC", str(script))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    kernels, glue, include = write_module(tmp_path / "m")
    with pytest.raises(RuntimeError, match="the caller failed"):
        with LibraryBuilder(tmp_path / "libm.so", include_dirs=[include], jobs=2) as builder:
            builder.add(kernels)
            for _ in range(600):
                if pids.exists() and len(pids.read_text().split()) == 2:
                    break
                time.sleep(0.05)
            raise RuntimeError("the caller failed")
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2  # the third file was still waiting and never started
    for pid in started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not (tmp_path / "libm.so").exists()
    assert list(scratch.iterdir()) == []  # no objects directory left behind


def test_a_blob_the_assembler_fails_on_is_compiled_from_its_source_at_link_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CC", compiler_without_assembler(tmp_path))
    data = bytes(range(256)) * 16 + b"\x05\x06\x07\x00"
    (tmp_path / "table.bin").write_bytes(data)
    blob = Blob(tmp_path / "table.bin", "table", len(data), 64, tmp_path / "table.c")
    with LibraryBuilder(tmp_path / "libt.so") as builder:
        builder.add_blob(blob)
        builder.add([write(tmp_path / "reader.c", BLOB_READER)])
        # The blob's C definition is written only now, after its object was asked for.
        literal = "".join(f"\\{b:03o}" for b in data[:-1])
        write(tmp_path / "table.c", '#include <stdint.h>\n__attribute__((visibility("hidden"), aligned(64))) '
                                    f'const uint8_t table[4100] = "{literal}";\n')
        out = builder.link()
    lib = load_library(out, "int32_t at(int32_t i); int32_t misalignment(void);")
    assert [lib.call("at", i) for i in (0, 255, 4096, 4098)] == [0, 255, 5, 7]


def test_the_link_uses_gold_where_installed_unless_the_flags_choose_a_linker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    log = logging_compiler(tmp_path, monkeypatch)
    kernels, glue, include = write_module(tmp_path / "m")
    given = [f for f in DEFAULT_CFLAGS if f != "-shared"] + ["-fuse-ld=bfd"]
    for cflags in (None, given):
        out = build_shared_library(kernels, tmp_path / "libm.so", glue_sources=[glue], include_dirs=[include],
                                   cflags=cflags)
        assert load_library(out, "int32_t run(int32_t x);").call("run", 10) == 19
    links = [line.split() for line in log.read_text().splitlines() if " -c " not in line]
    linkers = [[f for f in line if f.startswith("-fuse-ld=")] for line in links]
    assert linkers == [["-fuse-ld=gold"] if shutil.which("ld.gold") else [], ["-fuse-ld=bfd"]]


def test_the_link_skips_the_build_id_hash_unless_the_flags_ask_for_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = logging_compiler(tmp_path, monkeypatch)
    kernels, glue, include = write_module(tmp_path / "m")
    given = [f for f in DEFAULT_CFLAGS if f != "-shared"] + ["-Wl,--build-id=sha1"]
    notes = []
    for cflags in (None, given):
        out = build_shared_library(kernels, tmp_path / "libm.so", glue_sources=[glue], include_dirs=[include],
                                   cflags=cflags)
        assert load_library(out, "int32_t run(int32_t x);").call("run", 10) == 19
        notes.append(".note.gnu.build-id" in subprocess.run(["readelf", "-SW", str(out)], capture_output=True,
                                                            text=True, check=True).stdout)
    links = [line.split() for line in log.read_text().splitlines() if " -c " not in line]

    assert [[f for f in line if "build-id" in f] for line in links] == [["-Wl,--build-id=none"], ["-Wl,--build-id=sha1"]]
    assert notes == [False, True]
