"""Algebraic data types in Relay text: `type` definitions, type calls, constructors, `match`.

The modules use the shapes TVM's prelude prints (List, Option, Tree); each is parsed, printed,
parsed again to a structurally equal module, and type-checked.
"""

from __future__ import annotations

import pytest

from compiler.ir.expr import Call, Constructor, Let, Match, PatternConstructor, PatternTuple, PatternVar, PatternWildcard
from compiler.ir.structural import structural_equal
from compiler.ir.types import FuncType, TensorType, TypeCall, TypeVar
from compiler.parser import astext, parse

PRELUDE = """#[version = "0.0.5"]
type List[A] {
  Cons(A, List[A]),
  Nil,
}
type Option[A] {
  Some(A),
  None,
}
type Tree[A] {
  Rose(A, List[Tree[A]]),
}
"""

F2 = TensorType((2,), "float32")


def round_trip(text: str):
    mod = parse(text, "adt.relay")
    again = parse(astext(mod), "printed.relay")
    assert structural_equal(mod, again), astext(mod)
    return mod


def test_type_definitions_keep_their_parameters_and_constructors():
    mod = round_trip(PRELUDE + "def @main(%x: float32) { %x }")
    data = mod.type_definition("List")
    assert data.type_params == (TypeVar("A"),)
    cons, nil = data.constructors
    assert (cons.name, cons.inputs, cons.tag) == ("Cons", (TypeVar("A"), TypeCall("List", (TypeVar("A"),))), 0)
    assert (nil.name, nil.inputs, nil.tag) == ("Nil", (), 1)
    rose = mod.type_definition("Tree").constructors[0]
    assert rose.inputs[1] == TypeCall("List", (TypeCall("Tree", (TypeVar("A"),)),))


def test_printer_writes_type_definitions_first_sorted_by_name():
    text = astext(parse(PRELUDE + "def @main(%x: float32) { %x }"))
    assert text.index("type List[A] {\n  Cons(A, List[A]),\n  Nil,\n}") < text.index("type Option[A]")
    assert text.index("type Option[A]") < text.index("type Tree[A]") < text.index("def @main")


def test_type_call_in_parameter_and_return_annotations():
    mod = round_trip(PRELUDE + "def @main(%l: List[Tensor[(2), float32]]) -> List[Tensor[(2), float32]] { %l }")
    assert mod.main.params[0].type_annotation == TypeCall("List", (F2,))
    assert mod.main.checked_type == FuncType((TypeCall("List", (F2,)),), TypeCall("List", (F2,)))


def test_constructors_are_values_and_callees():
    mod = round_trip(PRELUDE + "def @main(%x: Tensor[(2), float32]) { Cons(%x, Cons(%x, Nil)) }")
    body = mod.main.body
    assert isinstance(body, Call) and isinstance(body.op, Constructor) and body.op.name == "Cons"
    nil = body.args[1].args[1]
    assert isinstance(nil, Constructor) and nil is mod.type_definition("List").constructors[1]
    assert body.checked_type == TypeCall("List", (F2,))


def test_type_definition_may_follow_the_defs_that_use_it():
    text = '#[version = "0.0.5"]\ndef @main(%x: float32) { Some(%x) }\ntype Option[A] { Some(A), None }'
    assert parse(text).main.checked_type.ret_type == TypeCall("Option", (TensorType((), "float32"),))


def test_match_with_constructor_variable_and_wildcard_patterns():
    mod = round_trip(PRELUDE + """def @main(%l: List[float32]) -> float32 {
  match (%l) {
    Cons(%h, Nil) => %h,
    Cons(_, %rest) => 1f,
    Nil => 0f,
  }
}""")
    match = mod.main.body
    assert isinstance(match, Match) and match.complete
    first, second, third = (c.lhs for c in match.clauses)
    assert isinstance(first, PatternConstructor) and isinstance(first.patterns[0], PatternVar)
    assert isinstance(first.patterns[1], PatternConstructor) and first.patterns[1].constructor.name == "Nil"
    assert isinstance(second.patterns[0], PatternWildcard)
    assert first.patterns[0].var is match.clauses[0].rhs


def test_partial_match_and_tuple_patterns_nested_in_constructors():
    mod = round_trip(PRELUDE + """def @main(%l: List[(float32, float32)]) -> float32 {
  match? (%l) {
    Cons((%a, _), _) => %a,
  }
}""")
    match = mod.main.body
    assert isinstance(match, Match) and not match.complete
    assert isinstance(match.clauses[0].lhs.patterns[0], PatternTuple)
    assert "match? (%l) {" in astext(mod)


def test_match_on_a_tuple_value_and_a_block_body():
    mod = round_trip(PRELUDE + """def @main(%x: Tensor[(2), float32], %o: Option[Tensor[(2), float32]]) {
  match ((%x, %o)) {
    (%y, Some(%z)) => { let %s = add(%y, %z); multiply(%s, %s) },
    (%y, None) => %y,
  }
}""")
    assert mod.main.checked_type.ret_type == F2


def test_polymorphic_recursive_global_over_a_list():
    mod = round_trip(PRELUDE + """def @length[A](%l: List[A]) -> int32 {
  match (%l) {
    Cons(_, %rest) => add(1, @length(%rest)),
    Nil => 0,
  }
}
def @main(%x: float32) -> int32 { @length(Cons(%x, Nil)) }""")
    assert mod["length"].type_params == (TypeVar("A"),)
    assert "def @length[A](%l: List[A]) -> int32 {" in astext(mod)


def test_printed_match_shares_a_value_used_by_two_clauses():
    mod = round_trip(PRELUDE + """def @main(%x: Tensor[(2), float32], %o: Option[Tensor[(2), float32]]) {
  %0 = exp(%x);
  match (%o) {
    Some(%y) => add(%y, %0),
    None => %0,
  }
}""")
    text = astext(mod)
    assert text.count("exp(%x)") == 1 and text.index("exp(%x)") < text.index("match")


@pytest.mark.parametrize("keyword", ["match", "match?"])
def test_let_bound_match_result_round_trips(keyword):
    mod = round_trip(PRELUDE + f"""def @main(%o: Option[float32]) {{
  let %v = {keyword} (%o) {{ Some(%y) => %y, _ => 0f }};
  %v
}}""")
    assert isinstance(mod.main.body, Let)


def test_polymorphic_function_type_in_an_annotation_binds_its_own_type_variables():
    mod = parse(PRELUDE + "def @apply(%f: fn [B](B) -> B, %x: float32) -> float32 { %f(%x) }\n"
                "def @main(%x: float32) -> float32 { %x }", infer_types=False)
    ty = mod["apply"].params[0].type_annotation
    assert ty == FuncType((TypeVar("B"),), TypeVar("B"), (TypeVar("B"),))
    assert "%f: fn [B](B) -> B" in astext(mod)
    assert structural_equal(parse(astext(mod), infer_types=False), mod)


def test_type_without_parameters_is_written_with_empty_brackets_and_read_either_way():
    text = PRELUDE + """type tensor_float32_t {
  tensor_nil_float32,
  tensor1_float32(Tensor[(?), float32]),
}
def @main(%t: tensor_float32_t, %l: List[tensor_float32_t[]]) -> List[tensor_float32_t[]] { Cons(%t, %l) }"""
    mod = round_trip(text)
    assert mod.main.params[0].type_annotation == TypeCall("tensor_float32_t", ())
    assert "def @main(%t: tensor_float32_t[], %l: List[tensor_float32_t[]]) -> List[tensor_float32_t[]] {" in astext(mod)
