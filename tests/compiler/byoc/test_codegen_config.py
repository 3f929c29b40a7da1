import json

import pytest

from compiler.byoc.codegen_config import (
    FUNCTION_AT_A_TIME,
    RELAY_TO_TIR,
    AttrRef,
    CodegenSpec,
    LibrarySource,
    LibrarySpec,
    PatternSpec,
    builtin,
    builtin_names,
    register_builtin,
)
from compiler.byoc.pattern import CallPattern
from compiler.diagnostics import InputError

LIBRARY = "int dense_bias(void) { return 0; }\n"


def doc(**overrides):
    base = {
        "name": "acme",
        "mode": "relay_to_tir",
        "patterns": [{"name": "dense_bias", "pattern": "nn.bias_add(nn.dense(*, *), *)", "symbol": "acme_dense_bias"}],
        "passes": ["FoldConstant"],
        "calling_convention": "dltensor",
        "library": {"sources": ["acme.c"]},
    }
    base.update(overrides)
    return base


def write_json(path, document):
    path.write_text(json.dumps(document))
    return path


def test_from_json_file_reads_sources_relative_to_the_file(tmp_path):
    (tmp_path / "cg").mkdir()
    (tmp_path / "cg" / "acme.c").write_text(LIBRARY)
    spec = CodegenSpec.from_json_file(write_json(tmp_path / "cg" / "acme.json", doc()))
    assert spec.name == "acme" and spec.mode == RELAY_TO_TIR
    [source] = spec.library.sources
    assert source.text == LIBRARY and source.path == (tmp_path / "cg" / "acme.c").resolve()
    assert spec.library.source_dirs() == ((tmp_path / "cg").resolve(),)
    assert spec.passes == ("FoldConstant",)


def test_from_document_takes_inline_sources():
    spec = CodegenSpec.from_document(doc(), {"acme.c": LIBRARY})
    assert spec.library.sources == (LibrarySource("acme.c", LIBRARY),)
    assert spec.library_texts() == {"acme.c": LIBRARY}


def test_defaults_symbol_from_the_pattern_name_and_mode_relay_to_tir():
    spec = CodegenSpec.from_document({"name": "toy", "patterns": [{"name": "dense", "pattern": "nn.dense(*, *)"}]})
    assert spec.mode == RELAY_TO_TIR and spec.calling_convention == "dltensor"
    assert spec.patterns[0].symbol == "dense"
    assert spec.library == LibrarySpec()


def test_composite_names_map_to_symbols_by_pattern_or_by_the_part_after_the_dot():
    spec = CodegenSpec.from_document(doc(), {"acme.c": LIBRARY})
    assert spec.composite_name(spec.patterns[0]) == "acme.dense_bias"
    assert spec.symbol_for("acme.dense_bias") == "acme_dense_bias"
    assert spec.symbol_for("acme.conv2d_relu") == "conv2d_relu"
    assert spec.symbols == ("acme_dense_bias",)


def test_pattern_table_holds_parsed_patterns_in_order():
    spec = CodegenSpec.from_document(
        doc(patterns=[{"name": "a", "pattern": "nn.relu(nn.dense(*, *))"}, {"name": "b", "pattern": "nn.dense(*, *)"}]),
        {"acme.c": LIBRARY},
    )
    table = spec.pattern_table()
    assert [name for name, _, _ in table] == ["acme.a", "acme.b"]
    assert all(isinstance(p, CallPattern) for _, p, _ in table)


def test_attrs_are_parsed_into_op_and_attribute():
    spec = CodegenSpec.from_document(
        doc(patterns=[{"name": "conv", "pattern": "nn.conv2d(*, *)", "attrs": ["nn.conv2d.strides", "nn.conv2d.padding"]}]),
        {"acme.c": LIBRARY},
    )
    assert spec.patterns[0].attrs == (AttrRef("nn.conv2d", "strides"), AttrRef("nn.conv2d", "padding"))


def test_to_document_reads_back_to_an_equal_spec():
    spec = CodegenSpec.from_document(doc(), {"acme.c": LIBRARY})
    again = CodegenSpec.from_document(spec.to_document(), spec.library_texts())
    assert again == spec


def test_function_at_a_time_mode_needs_no_library():
    spec = CodegenSpec.from_document(doc(mode=FUNCTION_AT_A_TIME, library=None))
    assert spec.mode == FUNCTION_AT_A_TIME and spec.library.sources == ()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"patterns": [{"name": "d", "pattern": "nn.bias_add(nn.dense(*, *) *)"}]},
         r"codegen acme: pattern d: expected .* at column 28"),
        ({"patterns": [{"name": "d", "pattern": "nn.dense_x(*, *)"}]}, r"codegen acme: pattern d: .*nn.dense_x"),
        ({"passes": ["Frobnicate"]}, r"codegen acme: pass 'Frobnicate': unknown pass 'Frobnicate'"),
        ({"passes": ["ConvertLayout(nn.conv2d=NHWC:OHWI"]}, r"codegen acme: pass .*column 34"),
        ({"calling_convention": "packed"}, r"codegen acme: unknown calling convention 'packed'"),
        ({"mode": "graph"}, r"codegen acme: unknown mode 'graph'"),
        ({"extra": 1}, r"codegen acme: unknown key 'extra'"),
        ({"patterns": [{"name": "d", "pattern": "nn.dense(*, *)", "attrs": ["nn.conv2d.strides"]}]},
         r"codegen acme: pattern d: attrs names nn.conv2d.strides, but nn.conv2d is not in the pattern"),
        ({"patterns": [{"name": "d", "pattern": "nn.dense(*, *)", "attrs": ["nn.dense.stride"]}]},
         r"operator nn.dense has no attribute 'stride'"),
        ({"patterns": [{"name": "d", "pattern": "nn.dense(*, *)", "attrs": ["strides"]}]},
         r"attrs entry 'strides' must look like"),
        ({"patterns": [{"name": "d", "pattern": "nn.dense(*, *)"}, {"name": "d", "pattern": "nn.relu(*)"}]},
         r"two patterns are named 'd'"),
        ({"patterns": [{"name": "d", "pattern": "nn.dense(*, *)", "symbol": "not-c"}]},
         r"symbol 'not-c' is not a C identifier"),
        ({"name": "c"}, r"codegen c: 'c' is the name of a host target"),
    ],
)
def test_invalid_documents_name_the_codegen_and_the_cause(overrides, message):
    with pytest.raises(InputError, match=message):
        CodegenSpec.from_document(doc(**overrides), {"acme.c": LIBRARY})


def test_missing_library_file_is_reported_with_where_it_was_looked_for(tmp_path):
    path = write_json(tmp_path / "acme.json", doc())
    with pytest.raises(InputError, match=r"codegen acme: library source 'acme.c' not found \(looked for .*acme.c\)"):
        CodegenSpec.from_json_file(path)


def test_missing_inline_source_is_reported():
    with pytest.raises(InputError, match="codegen acme: library source 'acme.c' is missing"):
        CodegenSpec.from_document(doc(), {})


def test_library_sources_must_be_c_files_with_distinct_names():
    with pytest.raises(InputError, match="is not a .c file"):
        CodegenSpec.from_document(doc(library={"sources": ["acme.h"]}), {"acme.h": ""})
    with pytest.raises(InputError, match="two library sources are named 'acme.c'"):
        CodegenSpec.from_document(doc(library={"sources": ["a/acme.c", "b/acme.c"]}), {"a/acme.c": "", "b/acme.c": ""})


def test_missing_include_dir_is_reported(tmp_path):
    (tmp_path / "acme.c").write_text(LIBRARY)
    path = write_json(tmp_path / "acme.json", doc(library={"sources": ["acme.c"], "include_dirs": ["inc"]}))
    with pytest.raises(InputError, match="codegen acme: include dir 'inc' not found"):
        CodegenSpec.from_json_file(path)


def test_unreadable_json_names_file_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"name": "acme",\n "patterns": [}\n')
    with pytest.raises(InputError, match=r"bad.json:2:15: invalid codegen JSON"):
        CodegenSpec.from_json_file(path)
    with pytest.raises(InputError, match="no such codegen file"):
        CodegenSpec.from_json_file(tmp_path / "absent.json")


def test_builtin_registry_finds_registered_specs_by_name(monkeypatch):
    from compiler.byoc import codegen_config

    # The modules of the built-in codegens register themselves when first imported: import them
    # before the registry is swapped, or they register into the copy and are lost with it.
    builtin_names()
    monkeypatch.setattr(codegen_config, "_BUILTINS", dict(codegen_config._BUILTINS))
    spec = CodegenSpec("test_builtin_acme", patterns=(PatternSpec("relu", "nn.relu(*)", "acme_relu"),))
    register_builtin(spec)
    assert builtin("test_builtin_acme") is spec
    assert "test_builtin_acme" in builtin_names()
    assert builtin("no_such_codegen") is None
    with pytest.raises(ValueError, match="already registered"):
        register_builtin(CodegenSpec("test_builtin_acme"))


def test_cblas_is_a_builtin_codegen():
    assert "cblas" in builtin_names()
    assert builtin("cblas").library.libraries == ("openblas",)
