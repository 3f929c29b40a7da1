"""Match patterns under InferType: variable types from patterns, errors, exhaustiveness."""

from __future__ import annotations

import pytest

from compiler.diagnostics import TypeCheckError
from compiler.ir.types import TensorType, TupleType, TypeCall
from compiler.parser import parse

TYPES = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
type Option[A] { Some(A), None }
"""
F32 = TensorType((), "float32")


def type_error(body: str) -> TypeCheckError:
    with pytest.raises(TypeCheckError) as info:
        parse(TYPES + body, "m.relay")
    return info.value


def test_match_binds_constructor_fields_with_the_types_of_the_matched_value():
    mod = parse(TYPES + """def @main(%l: List[float32]) {
  match (%l) { Cons(%h, %t) => (%h, %t), Nil => (0f, Nil) }
}""")
    clause = mod.main.body.clauses[0]
    h, t = (p.var for p in clause.lhs.patterns)
    assert h.checked_type == F32 and t.checked_type == TypeCall("List", (F32,))
    assert mod.main.body.checked_type == TupleType((F32, TypeCall("List", (F32,))))


def test_tuple_pattern_binds_each_field():
    mod = parse(TYPES + "def @main(%p: (float32, int32)) { match (%p) { (_, %b) => %b } }")
    assert mod.main.body.checked_type == TensorType((), "int32")


def test_complete_match_missing_a_constructor_is_a_located_error():
    error = type_error("def @main(%l: List[float32]) {\n  match (%l) { Cons(%h, _) => %h }\n}")
    assert "match does not handle the case Nil" in error.message
    assert (error.line, error.column) == (5, 3)


def test_complete_match_missing_a_nested_case_names_it():
    error = type_error("def @main(%l: List[float32]) {\n  match (%l) { Cons(%h, Nil) => %h, Nil => 0f }\n}")
    assert "the case Cons(_, Cons(_, _))" in error.message


def test_partial_match_may_leave_cases_out():
    mod = parse(TYPES + "def @main(%l: List[float32]) { match? (%l) { Cons(%h, _) => %h } }")
    assert mod.main.body.checked_type == F32


def test_wildcard_and_variable_clauses_make_a_match_complete():
    parse(TYPES + "def @main(%o: Option[float32]) { match (%o) { Some(%y) => %y, %other => 0f } }")
    parse(TYPES + "def @main(%p: (Option[float32], float32)) { match (%p) { (Some(%y), _) => %y, (_, %z) => %z } }")


def test_pattern_of_another_type_is_an_error():
    error = type_error("def @main(%o: Option[float32]) { match (%o) { Cons(%h, _) => %h, _ => 0f } }")
    assert "pattern Cons matches values of type List, not Option[float32]" in error.message


def test_clauses_must_agree_on_the_result_type():
    error = type_error("def @main(%o: Option[float32]) { match (%o) { Some(%y) => %y, None => 0 } }")
    assert "match clauses disagree: clause 0 has type float32, clause 1 has type int32" in error.message


def test_constructor_argument_of_the_wrong_type_names_both_types():
    error = type_error("def @main(%x: float32) -> List[float32] { Cons(%x, Cons(1, Nil)) }")
    assert "argument 1 of call to constructor Cons: expected List[float32], found List[int32]" in error.message
