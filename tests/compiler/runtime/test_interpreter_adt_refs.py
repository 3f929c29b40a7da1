"""The interpreter runs ADTs (constructors build values, match takes them apart) and references."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import InputError
from compiler.parser import parse
from compiler.runtime.interpreter import ConstructorValue, evaluate, run_main

LIST = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
type Option[A] { Some(A), None }
def @sum(%l: List[Tensor[(2), float32]]) -> Tensor[(2), float32] {
  match (%l) {
    Cons(%h, %t) => add(%h, @sum(%t)),
    Nil => zeros(shape=[2], dtype="float32"),
  }
}
def @length[A](%l: List[A]) -> int32 {
  match (%l) { Cons(_, %rest) => add(1, @length(%rest)), Nil => 0 }
}
"""


def test_match_binds_constructor_fields_and_recursion_walks_the_list():
    mod = parse(LIST + """def @main(%x: Tensor[(2), float32], %y: Tensor[(2), float32]) {
  %0 = Cons(%x, Cons(%y, Cons(%x, Nil)));
  (@sum(%0), @length(%0))
}""")
    x, y = np.array([1, 2], "float32"), np.array([10, 20], "float32")
    total, length = run_main(mod, {"x": x, "y": y})
    np.testing.assert_array_equal(total, 2 * x + y)
    assert int(length) == 3


def test_constructor_values_record_their_constructor_and_fields():
    mod = parse(LIST + "def @main(%x: float32) { Some(Cons(%x, Nil)) }")
    value = evaluate(mod, [np.float32(3)])
    assert isinstance(value, ConstructorValue) and value.constructor.name == "Some"
    (inner,) = value.fields
    assert inner.constructor.name == "Cons" and float(inner.fields[0]) == 3
    assert inner.fields[1].constructor.name == "Nil" and inner.fields[1].fields == ()


def test_first_matching_clause_wins_and_tuple_patterns_bind_fields():
    mod = parse(LIST + """def @main(%x: float32, %o: Option[float32]) -> float32 {
  match ((%o, %x)) {
    (Some(%v), _) => %v,
    (_, %w) => negative(%w),
  }
}""")
    some, none = mod.type_definition("Option").constructors
    assert float(evaluate(mod, [np.float32(2), ConstructorValue(some, (np.float32(5),))])) == 5
    assert float(evaluate(mod, [np.float32(2), ConstructorValue(none)])) == -2


def test_partial_match_without_a_matching_clause_is_a_located_error():
    mod = parse(LIST + "def @main(%l: List[float32], %x: float32) -> float32 {\n  match? (%l) { Cons(%h, _) => add(%h, %x) }\n}")
    nil = mod.type_definition("List").constructors[1]
    with pytest.raises(InputError, match="no clause of the match handles the value Nil") as info:
        evaluate(mod, [ConstructorValue(nil), np.float32(1)])
    assert info.value.line == 14


def test_references_hold_the_last_written_value():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  let %r = ref(%x);
  let %first = ref_read(%r);
  let %w = ref_write(%r, add(%first, %first));
  (%first, ref_read(%r), %w)
}""")
    x = np.array([1, 2], "float32")
    first, last = run_main(mod, {"x": x})
    np.testing.assert_array_equal(first, x)
    np.testing.assert_array_equal(last, 2 * x)


def test_polymorphic_map_applies_a_closure_to_every_element():
    mod = parse(LIST + """def @map[A, B](%f: fn (A) -> B, %l: List[A]) -> List[B] {
  match (%l) { Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)), Nil => Nil }
}
def @main(%x: Tensor[(2), float32], %k: Tensor[(2), float32]) {
  let %scaled = @map(fn (%v) { multiply(%v, %k) }, Cons(%x, Cons(%k, Nil)));
  @sum(%scaled)
}""")
    x, k = np.array([1, 2], "float32"), np.array([3, 4], "float32")
    (out,) = run_main(mod, {"x": x, "k": k})
    np.testing.assert_array_equal(out, x * k + k * k)


def test_rose_tree_of_the_prelude_shape_is_built_and_folded():
    mod = parse("""#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
type Tree[A] { Rose(A, List[Tree[A]]) }
def @size[A](%t: Tree[A]) -> int32 {
  match (%t) { Rose(_, %children) => add(1, @forest(%children)) }
}
def @forest[A](%ts: List[Tree[A]]) -> int32 {
  match (%ts) { Cons(%t, %rest) => add(@size(%t), @forest(%rest)), Nil => 0 }
}
def @main(%x: float32) -> int32 {
  %0 = Rose(%x, Nil);
  @size(Rose(%x, Cons(%0, Cons(Rose(%x, Cons(%0, Nil)), Nil))))
}""")
    (size,) = run_main(mod, {"x": np.array(1, "float32")})
    assert int(size) == 4
