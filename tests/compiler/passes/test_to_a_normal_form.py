import numpy as np

from compiler.ir.expr import Call, Constant, Function, GlobalVar, Let, Op, Tuple, TupleGetItem, Var, const
from compiler.ir.module import IRModule
from compiler.ir.structural import structural_equal
from compiler.ir.types import TensorType
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.passes.to_a_normal_form import ToANormalForm
from compiler.runtime.interpreter import run_main

ATOMS = (Var, GlobalVar, Constant, Op)


def assert_normalizes(before_text, expected_text, inputs=None):
    before = parse(before_text)
    after = ToANormalForm()(before)
    expected = parse(expected_text)
    assert structural_equal(after, expected), after.astext()
    assert_a_normal_form(after.main)
    if inputs is not None:
        for got, want in zip(run_main(after, inputs), run_main(before, inputs)):
            np.testing.assert_array_equal(got, want)
    return before, after


def assert_a_normal_form(func):
    """Every operand is atomic; compound values appear only as let values and block results."""
    for node in post_order(func, descend=lambda n: not (isinstance(n, Function) and n.attr("Primitive"))):
        if isinstance(node, Call):
            operands = (node.op, *node.args)
        elif isinstance(node, Tuple):
            operands = node.fields
        elif isinstance(node, TupleGetItem):
            operands = (node.tuple_value,)
        else:
            continue
        assert all(isinstance(o, ATOMS) for o in operands), node


X = np.array([0.5, -1.0, 2.0], dtype="float32")


def test_each_intermediate_gets_one_let_in_evaluation_order():
    assert_normalizes(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  %0 = exp(%x);
  %1 = add(%0, %0);
  negative(%1)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %a = exp(%x);
  let %b = add(%a, %a);
  let %c = negative(%b);
  %c
}""",
        inputs={"x": X},
    )


def test_tuples_and_projections_are_bound_too():
    assert_normalizes(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  %0 = (%x, exp(%x));
  %0.1
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %a = exp(%x);
  let %t = (%x, %a);
  let %r = %t.1;
  %r
}""",
        inputs={"x": X},
    )


def test_value_shared_by_both_branches_is_bound_before_the_if():
    assert_normalizes(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %c: bool) {
  %0 = exp(%x);
  if (%c) { add(%0, %0) } else { negative(%0) }
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %c: bool) {
  let %a = exp(%x);
  let %r = if (%c) {
    let %t = add(%a, %a);
    %t
  } else {
    let %f = negative(%a);
    %f
  };
  %r
}""",
        inputs={"x": X, "c": np.array(False)},
    )


def test_value_used_in_one_branch_is_bound_inside_it():
    assert_normalizes(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %c: bool) {
  if (%c) { exp(%x) } else { %x }
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %c: bool) {
  let %r = if (%c) {
    let %t = exp(%x);
    %t
  } else {
    %x
  };
  %r
}""",
        inputs={"x": X, "c": np.array(True)},
    )


def test_function_literal_body_is_its_own_scope_and_shared_values_stay_outside():
    assert_normalizes(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  %0 = exp(%x);
  %1 = fn (%y: Tensor[(3), float32]) {
    %2 = negative(%y);
    add(%2, %0)
  };
  %1(%0)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %a = exp(%x);
  let %f = fn (%y: Tensor[(3), float32]) {
    let %n = negative(%y);
    let %s = add(%n, %a);
    %s
  };
  let %r = %f(%a);
  %r
}""",
        inputs={"x": X},
    )


def test_existing_lets_keep_their_vars_and_nested_lets_are_flattened():
    # multiply((let %w = exp(%v); %w), %v) under let %v: built directly, as the parser does not
    # read a let in operand position.
    t = TensorType((3,), "float32")
    x, v, w = Var("x", t), Var("v"), Var("w")
    inner = Let(w, Call(Op.get("exp"), (v,)), w)
    body = Let(v, Call(Op.get("add"), (x, x)), Call(Op.get("multiply"), (inner, v)))
    before = IRModule.from_expr(Function((x,), body))
    after = ToANormalForm()(before)
    expected = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %v = add(%x, %x);
  let %w = exp(%v);
  let %r = multiply(%w, %v);
  %r
}""")
    assert structural_equal(after, expected), after.astext()
    assert after.main.body.var is v and after.main.body.body.var is w
    np.testing.assert_array_equal(run_main(after, {"x": X})[0], run_main(before, {"x": X})[0])


def test_let_of_an_atom_is_kept():
    assert_normalizes(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %v = %x;
  exp(%v)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %v = %x;
  let %r = exp(%v);
  %r
}""",
        inputs={"x": X},
    )


def test_primitive_functions_are_bound_but_not_entered():
    assert_normalizes(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  %0 = fn (%p0: Tensor[(3), float32], Primitive=1) {
    %1 = exp(%p0);
    negative(%1)
  };
  %0(%x)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %f = fn (%p0: Tensor[(3), float32], Primitive=1) {
    %1 = exp(%p0);
    negative(%1)
  };
  let %r = %f(%x);
  %r
}""",
        inputs={"x": X},
    )


def test_atomic_body_and_global_calls():
    assert_normalizes(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) { @f(%x) }
def @f(%y: Tensor[(3), float32]) { %y }""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) { let %r = @f(%x); %r }
def @f(%y: Tensor[(3), float32]) { %y }""",
        inputs={"x": X},
    )


def test_deep_chain_is_normalized_without_recursion():
    x = Var("x", TensorType((2,), "float32"))
    node = x
    for _ in range(10_000):
        node = Call(Op.get("add"), (node, const(1.0)))
    mod = IRModule.from_expr(Function((x,), node))
    after = ToANormalForm()(mod)
    count, body = 0, after.main.body
    while isinstance(body, Let):
        assert isinstance(body.value, Call) and isinstance(body.value.args[0], Var)
        count, body = count + 1, body.body
    assert count == 10_000
    np.testing.assert_array_equal(run_main(after, {"x": np.zeros(2, "float32")})[0], np.full(2, 10_000, "float32"))
