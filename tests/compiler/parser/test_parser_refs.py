"""References in Relay text: `ref(e)`, `ref_read(r)`, `ref_write(r, v)` and the type `ref(T)`."""

from __future__ import annotations

import pytest

from compiler.diagnostics import ParseError, TypeCheckError
from compiler.ir.expr import Let, RefCreate, RefRead, RefWrite
from compiler.ir.structural import structural_equal
from compiler.ir.types import RefType, TensorType, TupleType
from compiler.parser import astext, parse

COUNTER = """#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %r: ref(Tensor[(2), float32]) = ref(%x);
  let %old = ref_read(%r);
  let %done = ref_write(%r, add(%old, %old));
  ref_read(%r)
}
"""
F2 = TensorType((2,), "float32")


def test_reference_nodes_and_types_parse_print_and_parse_again():
    mod = parse(COUNTER, "refs.relay")
    let_r = mod.main.body
    assert isinstance(let_r, Let) and isinstance(let_r.value, RefCreate)
    assert let_r.var.type_annotation == RefType(F2)
    let_old = let_r.body
    assert isinstance(let_old.value, RefRead) and let_old.value.ref is let_r.var
    let_done = let_old.body
    assert isinstance(let_done.value, RefWrite)
    text = astext(mod)
    assert "let %r: ref(Tensor[(2), float32]) = ref(%x);" in text
    assert structural_equal(mod, parse(text))


def test_reference_expressions_are_typed():
    mod = parse(COUNTER)
    let_r = mod.main.body
    assert let_r.value.checked_type == RefType(F2)
    assert let_r.body.value.checked_type == F2
    assert let_r.body.body.value.checked_type == TupleType(())


def test_writing_a_value_of_another_type_is_a_type_error_naming_both():
    text = COUNTER.replace("add(%old, %old)", "1f")
    with pytest.raises(TypeCheckError) as info:
        parse(text, "refs.relay")
    assert "ref_write needs a reference to float32, found ref(Tensor[(2), float32])" in info.value.message
    assert (info.value.line, info.value.column) == (5, 15)


def test_reading_a_non_reference_is_a_type_error():
    with pytest.raises(TypeCheckError, match="ref_read needs a reference, found Tensor"):
        parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) { ref_read(%x) }')


def test_ref_write_needs_two_operands():
    with pytest.raises(ParseError) as info:
        parse('#[version = "0.0.5"]\ndef @main(%x: float32) { ref_write(ref(%x)) }', "refs.relay")
    assert info.value.message == "ref_write takes 2 operands, got 1"
    assert (info.value.line, info.value.column) == (2, 26)
