import numpy as np
import pytest

from compiler.diagnostics import UnsupportedError
from compiler.ir.expr import Let
from compiler.ir.structural import structural_equal
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.passes.inline_globals import InlineGlobals
from compiler.runtime.interpreter import run_main

HELPER_TWICE = """#[version = "0.0.5"]
def @double(%v: Tensor[(3), float32]) -> Tensor[(3), float32] {
  let %t = add(%v, %v);
  %t
}
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = @double(%x);
  %1 = @double(%y);
  subtract(%0, %1)
}"""


def test_inline_globals_replaces_helper_calls_and_drops_the_helper():
    mod = InlineGlobals()(parse(HELPER_TWICE))
    assert [gv.name_hint for gv in mod] == ["main"]
    expected = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = (let %a = add(%x, %x); %a);
  %1 = (let %b = add(%y, %y); %b);
  subtract(%0, %1)
}""")
    assert structural_equal(mod, expected)


def test_inlining_twice_binds_fresh_variables_each_time():
    mod = InlineGlobals()(parse(HELPER_TWICE))
    lets = [n for n in post_order(mod.main.body) if isinstance(n, Let)]
    assert len(lets) == 2 and lets[0].var is not lets[1].var


def test_inline_globals_preserves_results():
    original = parse(HELPER_TWICE)
    x, y = np.array([1, 2, 3], "float32"), np.array([0.5, 0, -1], "float32")
    before = run_main(original, {"x": x, "y": y})
    after = run_main(InlineGlobals()(original), {"x": x, "y": y})
    np.testing.assert_array_equal(before[0], after[0])


def test_primitive_and_extern_globals_are_not_inlined():
    mod = InlineGlobals()(parse("""#[version = "0.0.5"]
def @ext(%v: Tensor[(3), float32], Extern=1) -> Tensor[(3), float32] { %v }
def @main(%x: Tensor[(3), float32]) { @ext(%x) }"""))
    assert "ext" in mod


def test_recursive_helper_is_an_error_with_location():
    with pytest.raises(UnsupportedError, match="recursive call @main -> @f -> @f") as info:
        InlineGlobals()(parse("""#[version = "0.0.5"]
def @f(%n: int32) -> int32 { @f(%n) }
def @main(%n: int32) { @f(%n) }"""))
    assert info.value.line == 2
