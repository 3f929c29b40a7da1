import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Function, GlobalVar, Let, Op, Var
from compiler.ir.module import IRModule
from compiler.ir.structural import structural_equal
from compiler.ir.types import TensorType
from compiler.parser import parse
from compiler.passes.dead_code_elimination import DeadCodeElimination, live_let_vars
from compiler.runtime.interpreter import run_main


def assert_eliminates(before_text, expected_text, dce=None):
    before = parse(before_text)
    after = (dce or DeadCodeElimination())(before)
    expected = parse(expected_text)
    assert structural_equal(after, expected), after.astext()
    return before, after


def test_unused_let_is_removed_and_used_one_kept():
    before, after = assert_eliminates(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %unused = exp(%x);
  let %y = negative(%x);
  add(%y, %x)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %y = negative(%x);
  add(%y, %x)
}""",
    )
    x = np.arange(3, dtype="float32")
    np.testing.assert_array_equal(run_main(after, {"x": x})[0], run_main(before, {"x": x})[0])


def test_let_used_only_by_dead_lets_is_dead_too():
    assert_eliminates(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %a = exp(%x);
  let %b = add(%a, %a);
  let %c = negative(%b);
  %x
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  %x
}""",
    )


def test_dead_lets_inside_function_literals_and_branches_are_removed():
    assert_eliminates(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %c: bool) {
  %0 = fn (%y: Tensor[(3), float32]) {
    let %dead = exp(%y);
    negative(%y)
  };
  if (%c) {
    let %dead2 = exp(%x);
    %0(%x)
  } else {
    %x
  }
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %c: bool) {
  %0 = fn (%y: Tensor[(3), float32]) {
    negative(%y)
  };
  if (%c) {
    %0(%x)
  } else {
    %x
  }
}""",
    )


def test_unreachable_globals_are_removed_and_called_ones_kept():
    assert_eliminates(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) { @f(%x) }
def @f(%x: Tensor[(3), float32]) { @g(%x) }
def @g(%x: Tensor[(3), float32]) { exp(%x) }
def @unused(%x: Tensor[(3), float32]) { @g(%x) }""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) { @f(%x) }
def @f(%x: Tensor[(3), float32]) { @g(%x) }
def @g(%x: Tensor[(3), float32]) { exp(%x) }""",
    )


def test_keep_globals_keeps_every_global():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) { %x }
def @unused(%x: Tensor[(3), float32]) { exp(%x) }"""
    mod = parse(text)
    assert DeadCodeElimination(keep_globals=True)(mod) is mod


def test_globals_named_in_call_attributes_are_reachable():
    t = TensorType((3,), "float32")
    x, p = Var("x", t), Var("p", t)
    kernel, shape_fn = GlobalVar("kernel"), GlobalVar("shape_func")
    # A call whose attributes name another global, as call_lowered metadata does.
    call = Call(kernel, (x,), Attrs({"metadata": Attrs({"prim_shape_fn_var": shape_fn})}))
    mod = IRModule(
        {
            GlobalVar("main"): Function((x,), call),
            kernel: Function((p,), p),
            shape_fn: Function((p,), p),
            GlobalVar("orphan"): Function((p,), p),
        }
    )
    names = {gv.name_hint for gv, _ in DeadCodeElimination()(mod).items()}
    assert names == {"main", "kernel", "shape_func"}


def test_primitive_functions_are_not_entered():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  %0 = fn (%p0: Tensor[(3), float32], Primitive=1) {
    let %dead = exp(%p0);
    %p0
  };
  %0(%x)
}"""
    mod = parse(text)
    assert DeadCodeElimination()(mod) is mod


def test_module_without_dead_code_is_returned_unchanged():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) { let %y = exp(%x); %y }""")
    assert DeadCodeElimination()(mod) is mod


def test_long_let_chain_with_dead_bindings_works_without_recursion():
    t = TensorType((2,), "float32")
    x = Var("x", t)
    n = 20_000  # twenty times Python's recursion limit
    vars_ = [Var(f"v{i}") for i in range(n)]
    body: object = vars_[-1]
    for i in reversed(range(n)):
        previous = vars_[i - 2] if i >= 2 else x  # every other binding is dead
        body = Let(vars_[i], Call(Op.get("exp"), (previous,)), body)
    mod = IRModule.from_expr(Function((x,), body))
    live = live_let_vars(mod.main)
    assert len([v for v in vars_ if v in live]) == n // 2
    after = DeadCodeElimination()(mod)
    count, node = 0, after.main.body
    while isinstance(node, Let):
        count, node = count + 1, node.body
    assert count == n // 2
