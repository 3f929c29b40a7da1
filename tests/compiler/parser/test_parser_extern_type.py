"""`extern type Storage`: a type without constructors, as TVM's core.rly declares it for the
storage that memory.alloc_storage returns.

TVM's parser reads `extern type Name` (optionally with type parameters) and refuses
constructors on it; it stops reading definitions after one, so our printer writes extern types
after every `def`, where both parsers accept them.
"""

from __future__ import annotations

import pytest

from compiler.diagnostics import ParseError
from compiler.ir.structural import structural_equal
from compiler.ir.types import FuncType, TensorType, TypeCall, TypeVar
from compiler.parser import astext, parse

HEADER = '#[version = "0.0.5"]\n'
MAIN = "def @main(%s: Storage, %x: float32) -> (Storage, float32) {\n  (%s, %x)\n}\n"


def test_extern_type_parses_as_a_type_without_constructors():
    mod = parse(HEADER + "extern type Storage\n" + MAIN, "ext.relay")
    data = mod.type_definition("Storage")
    assert data.extern and data.constructors == () and data.type_params == ()
    assert (data.span.line, data.span.column) == (2, 1)
    storage = TypeCall("Storage")
    assert mod.main.checked_type == FuncType((storage, TensorType((), "float32")), mod.main.ret_type)


def test_extern_type_may_come_after_the_defs_and_takes_type_parameters():
    mod = parse(HEADER + MAIN.replace("Storage", "Handle[int8]") + "extern type Handle[A]\n")
    data = mod.type_definition("Handle")
    assert data.extern and data.type_params == (TypeVar("A"),)
    assert mod.main.params[0].type_annotation == TypeCall("Handle", (TensorType((), "int8"),))


def test_printer_writes_extern_types_after_the_defs_and_the_text_parses_back_equal():
    mod = parse(HEADER + "extern type Storage\ntype Box { Wrap(float32) }\n" + MAIN)
    text = astext(mod)
    assert text.index("type Box {") < text.index("def @main") < text.index("extern type Storage\n")
    assert text.rstrip().endswith("extern type Storage")
    again = parse(text)
    assert structural_equal(mod, again) and again.type_definition("Storage").extern
    assert astext(again) == text


def test_extern_type_with_constructors_is_a_located_error():
    with pytest.raises(ParseError) as info:
        parse(HEADER + "extern type Storage { Make }\n" + MAIN, "bad.relay")
    assert info.value.message == "an external type may not have any constructors (extern type Storage)"
    assert (info.value.span.line, info.value.span.column) == (2, 21)


def test_extern_without_type_and_extern_as_a_value_are_located_errors():
    with pytest.raises(ParseError) as info:
        parse(HEADER + "extern Storage\n" + MAIN, "bad.relay")
    assert info.value.message == "expected `type` after `extern`, found `Storage`"
    assert (info.value.span.line, info.value.span.column) == (2, 8)
    with pytest.raises(ParseError) as info:
        parse(HEADER + "def @main(%x: float32) { extern }", "bad.relay")
    assert info.value.message == "expected an expression, found `extern`"
    assert (info.value.span.line, info.value.span.column) == (2, 26)
