import numpy as np
import pytest

from compiler.diagnostics import InputError
from compiler.ir.expr import Call, Function, Let, Op, Var
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.parser import parse
from compiler.runtime.interpreter import evaluate, run_main

TWO_OUTPUTS = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 2), float32], %y: Tensor[(2, 2), float32]) {
  %0 = add(%x, %y);
  (%0, (multiply(%0, %y), %x))
}"""


def test_run_main_flattens_nested_tuple_outputs_in_order():
    x = np.arange(4, dtype="float32").reshape(2, 2)
    y = np.full((2, 2), 2, "float32")
    outs = run_main(parse(TWO_OUTPUTS), {"x": x, "y": y})
    assert len(outs) == 3
    np.testing.assert_array_equal(outs[0], x + y)
    np.testing.assert_array_equal(outs[1], (x + y) * y)
    np.testing.assert_array_equal(outs[2], x)


def test_closures_capture_their_defining_scope():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  %0 = exp(%x);
  let %f = fn (%y: Tensor[(3), float32]) { add(%y, %0) };
  %1 = %f(%x);
  %f(%1)
}""")
    x = np.array([0, 1, 2], "float32")
    (out,) = run_main(mod, {"x": x})
    np.testing.assert_allclose(out, x + 2 * np.exp(x), rtol=1e-6)


def test_if_evaluates_only_the_chosen_branch():
    mod = parse("""#[version = "0.0.5"]
def @main(%c: bool, %x: Tensor[(2), int32]) {
  if (%c) { %x } else { divide(%x, subtract(%x, %x)) }
}""")
    x = np.array([1, 2], "int32")
    (out,) = run_main(mod, {"c": np.array(True), "x": x})
    np.testing.assert_array_equal(out, x)


def test_recursive_global_calls_run_without_python_recursion():
    # countdown(n) = if n > 0 then countdown(n - 1) + 1 else 0, 3000 levels deep
    mod = parse("""#[version = "0.0.5"]
def @count(%n: int32) -> int32 {
  if (greater(%n, 0)) { add(@count(subtract(%n, 1)), 1) } else { 0 }
}
def @main(%n: int32) -> int32 { @count(%n) }""")
    (out,) = run_main(mod, {"n": np.array(3000, "int32")})
    assert int(out) == 3000


def test_a_20000_deep_let_chain_evaluates_without_python_recursion():
    x = Var("x", TensorType((2,), "float32"))
    vars_ = [Var(f"v{i}") for i in range(20_000)]  # twenty times Python's recursion limit
    body = vars_[-1]
    for i in reversed(range(len(vars_))):
        body = Let(vars_[i], Call(Op.get("negative"), (x if i == 0 else vars_[i - 1],)), body)
    mod = IRModule.from_expr(Function((x,), body))
    out = evaluate(mod, [np.array([1.0, -2.0], "float32")])
    np.testing.assert_array_equal(out, [1.0, -2.0])


def test_missing_input_is_an_input_error_naming_it():
    with pytest.raises(InputError, match="missing input 'y'"):
        run_main(parse(TWO_OUTPUTS), {"x": np.zeros((2, 2), "float32")})


def test_wrong_shape_and_dtype_and_unknown_inputs_are_reported():
    mod = parse(TWO_OUTPUTS)
    ok = np.zeros((2, 2), "float32")
    with pytest.raises(InputError, match="expected shape"):
        run_main(mod, {"x": np.zeros((3, 2), "float32"), "y": ok})
    with pytest.raises(InputError, match="expected dtype float32, got float64"):
        run_main(mod, {"x": np.zeros((2, 2)), "y": ok})
    with pytest.raises(InputError, match="unknown input 'z'"):
        run_main(mod, {"x": ok, "y": ok, "z": ok})


def test_recursive_let_bound_closure_runs_as_a_loop():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32], %n: int32) -> Tensor[(2), float32] {
  let %while_loop = fn (%i: int32, %acc: Tensor[(2), float32]) {
    if (less(%i, %n)) { %while_loop(add(%i, 1), add(%acc, %x)) } else { %acc }
  };
  %while_loop(0, %x)
}""")
    x = np.array([1, 2], "float32")
    (out,) = run_main(mod, {"x": x, "n": np.array(1000, "int32")})
    np.testing.assert_array_equal(out, 1001 * x)
