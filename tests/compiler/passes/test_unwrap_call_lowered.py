from __future__ import annotations

from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.passes.unwrap_call_lowered import UnwrapCallLowered

KERNEL = """#[version = "0.0.5"]
def @f(%a: Tensor[(2), float32], %b: Tensor[(2), float32], Primitive=1) -> Tensor[(2), float32] {
  add(%a, %b)
}
"""

BEFORE = KERNEL + """def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  %0 = negative(%x);
  %1 = (%0, %x);
  %2 = call_lowered(@f, %1, metadata={relay_attrs={Primitive=1}, all_prim_fn_vars=[@f]});
  exp(%2)
}"""

EXPECTED = KERNEL + """def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  %0 = negative(%x);
  %1 = @f(%0, %x);
  exp(%1)
}"""


def test_call_lowered_of_a_relay_function_becomes_a_call_of_it():
    assert structural_equal(UnwrapCallLowered()(parse(BEFORE)), parse(EXPECTED))


def test_call_lowered_with_arguments_that_are_not_a_tuple_literal_is_left_alone():
    mod = parse(KERNEL + """def @main(%t: (Tensor[(2), float32], Tensor[(2), float32])) -> Tensor[(2), float32] {
  call_lowered(@f, %t, metadata={relay_attrs={Primitive=1}, all_prim_fn_vars=[@f]})
}""")
    assert UnwrapCallLowered()(mod) is mod


def test_a_module_without_call_lowered_is_returned_as_it_is():
    mod = parse(EXPECTED)
    assert UnwrapCallLowered()(mod) is mod
