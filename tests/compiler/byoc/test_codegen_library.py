import pytest

from compiler.byoc.codegen_config import CodegenSpec, LibrarySource, LibrarySpec, PatternSpec
from compiler.byoc.codegen_library import (
    check_library,
    check_shipped_library,
    defined_symbols,
    find_library,
    include_dirs,
    linked_symbols,
    write_library,
)
from compiler.diagnostics import InputError
from compiler.runtime.build import BuildError

LIBRARY = """#include "relaycc_dlpack.h"
static int helper(void) { return 0; }
int32_t acme_relu(DLTensor* in, DLTensor* out) { (void)in; (void)out; return helper(); }
int acme_table[4];
"""


def spec(symbol="acme_relu", text=LIBRARY, libraries=(), mode="relay_to_tir", name="acme.c"):
    return CodegenSpec("acme", mode, patterns=(PatternSpec("relu", "nn.relu(*)", symbol),),
                       library=LibrarySpec((LibrarySource(name, text),) if text is not None else (),
                                           libraries=libraries))


def test_defined_symbols_are_the_global_definitions_of_the_sources():
    assert defined_symbols(spec()) == {"acme_relu", "acme_table"}
    assert defined_symbols(spec(text=None)) == frozenset()


def test_symbols_follow_a_changed_header_of_a_source_checked_before(tmp_path):
    # Symbols are remembered per source; the header the source includes is part of that key.
    header = tmp_path / "names.h"
    text = '#include "names.h"\nint NAME(void) { return 0; }\n'
    with_header = CodegenSpec("acme", "function_at_a_time", library=LibrarySpec(
        (LibrarySource("named.c", text),), include_dirs=(tmp_path,)))
    header.write_text("#define NAME acme_first\n")
    assert defined_symbols(with_header) == {"acme_first"}
    header.write_text("#define NAME acme_second\n")
    assert defined_symbols(with_header) == {"acme_second"}
    assert defined_symbols(with_header) == {"acme_second"}


def test_check_library_accepts_a_library_defining_every_pattern_symbol():
    assert "acme_relu" in check_library(spec())


def test_a_symbol_the_library_does_not_define_names_the_codegen_and_the_symbol():
    with pytest.raises(InputError, match=r"codegen acme: symbol acme_relu6 is not defined by its library \(acme.c\)"):
        check_library(spec("acme_relu6"))
    with pytest.raises(InputError, match="codegen acme: symbol helper is not defined"):
        check_library(spec("helper"))  # static: not visible to the model
    with pytest.raises(InputError, match="codegen acme: symbol acme_relu is not defined: the codegen has no library"):
        check_library(spec(text=None))


def test_function_at_a_time_codegens_need_no_symbols_but_required_ones_are_checked():
    assert check_library(spec("anything", text=None, mode="function_at_a_time")) == frozenset()
    with pytest.raises(InputError, match="symbol extra_fn is not defined"):
        check_library(spec(mode="function_at_a_time"), required=["extra_fn"])


def test_a_library_that_does_not_compile_names_the_codegen_and_the_source():
    with pytest.raises(BuildError, match="codegen acme: library source broken.c does not compile"):
        check_library(spec(text="int f( {", name="broken.c"))


def test_symbols_may_come_from_a_linked_library():
    if find_library("openblas", ()) is None:
        pytest.skip("libopenblas is not installed")
    assert "cblas_sgemm" in check_library(spec("cblas_sgemm", text=None, libraries=("openblas",)))
    assert "cblas_sgemm" in linked_symbols(spec(text=None, libraries=("openblas",)))
    with pytest.raises(InputError, match=r"symbol no_such_fn is not defined by its library \(-lopenblas\)"):
        check_library(spec("no_such_fn", text=None, libraries=("openblas",)))


def test_a_linked_library_nm_cannot_read_leaves_the_check_to_the_linker(tmp_path):
    (tmp_path / "libscript.so").write_text("INPUT ( -lm )\n")  # a linker script, like Debian's libm.so
    s = CodegenSpec("acme", patterns=(PatternSpec("relu", "nn.relu(*)", "anything"),),
                    library=LibrarySpec(libraries=("script",), library_dirs=(tmp_path,)))
    assert check_library(s) is None


def test_a_linked_library_that_cannot_be_found_is_reported():
    with pytest.raises(InputError, match="codegen acme: library -lrelaycc_no_such_lib not found"):
        check_library(spec("x", text=None, libraries=("relaycc_no_such_lib",)))


def test_write_library_copies_sources_by_base_name(tmp_path):
    s = CodegenSpec("acme", library=LibrarySpec((LibrarySource("lib/acme.c", LIBRARY, tmp_path / "lib" / "acme.c"),),
                                                 libraries=("m",)))
    build = write_library(s, tmp_path / "out", tmp_path / "include")
    assert build.sources == (tmp_path / "out" / "acme.c",)
    assert (tmp_path / "out" / "acme.c").read_text() == LIBRARY
    assert build.include_dirs == (tmp_path / "include", tmp_path / "lib")
    assert build.libraries == ("m",)
    assert include_dirs(s, tmp_path / "include") == build.include_dirs


def test_combined_links_every_library_once(tmp_path):
    from compiler.byoc.codegen_library import LibraryBuild, combined

    a = LibraryBuild((tmp_path / "a.c",), (tmp_path / "inc",), ("m", "openblas"), (tmp_path,))
    b = LibraryBuild((tmp_path / "b.c",), (tmp_path / "inc", tmp_path / "b"), ("m",), ())
    assert combined([a, b]) == LibraryBuild((tmp_path / "a.c", tmp_path / "b.c"), (tmp_path / "inc", tmp_path / "b"),
                                            ("m", "openblas"), (tmp_path,))
    assert combined([]) == LibraryBuild((), (), (), ())


def test_a_shipped_library_is_not_compiled_but_its_linked_libraries_must_exist():
    # The broken source would fail check_library; a shipped library's sources are trusted.
    assert check_shipped_library(spec(text="int f( {", name="broken.c")) is None
    with pytest.raises(InputError, match="codegen acme: library -lrelaycc_no_such_lib not found"):
        check_shipped_library(spec("x", text=None, libraries=("relaycc_no_such_lib",)))
