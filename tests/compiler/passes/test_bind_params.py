import numpy as np
import pytest

from compiler.diagnostics import InputError
from compiler.ir.expr import Call, Constant, Function, Op, Var
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.passes.bind_params import BindParams
from compiler.runtime.interpreter import run_main

MLP = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4), float32], %w: Tensor[(3, 4), float32], %b: Tensor[(3), float32]) {
  %0 = nn.dense(%x, %w, units=3);
  nn.bias_add(%0, %b, axis=-1)
}"""


def test_named_parameters_become_constants_and_leave_the_parameter_list():
    mod = parse(MLP)
    w = np.arange(12, dtype="float32").reshape(3, 4)
    b = np.ones(3, dtype="float32")
    bound = BindParams({"w": w, "b": b})(mod)
    main = bound.main
    assert [p.name_hint for p in main.params] == ["x"]
    bias_add = main.body
    dense = bias_add.args[0]
    assert isinstance(dense.args[1], Constant) and isinstance(bias_add.args[1], Constant)
    np.testing.assert_array_equal(dense.args[1].data, w)
    x = np.linspace(-1, 1, 4, dtype="float32").reshape(1, 4)
    np.testing.assert_allclose(run_main(bound, {"x": x})[0], run_main(mod, {"x": x, "w": w, "b": b})[0])
    assert str(main.checked_type) == "fn (Tensor[(1, 4), float32]) -> Tensor[(1, 3), float32]"


def test_binding_nothing_returns_the_module():
    mod = parse(MLP)
    assert BindParams({})(mod) is mod


def test_other_globals_are_untouched():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32], %y: Tensor[(2), float32]) { @f(%x, %y) }
def @f(%x: Tensor[(2), float32], %y: Tensor[(2), float32]) { add(%x, %y) }""")
    bound = BindParams({"y": np.ones(2, dtype="float32")})(mod)
    assert structural_equal(bound["f"], mod["f"])
    assert [p.name_hint for p in bound.main.params] == ["x"]


def test_dynamic_dimension_accepts_any_extent():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(?, 2), float32]) { exp(%x) }""")
    bound = BindParams({"x": np.zeros((5, 2), dtype="float32")})(mod)
    assert bound.main.params == ()
    assert str(bound.main.body.checked_type) == "Tensor[(5, 2), float32]"


def test_unknown_name_is_an_input_error_naming_the_parameters():
    with pytest.raises(InputError, match=r"'v'.*x, w, b"):
        BindParams({"v": np.zeros(3, dtype="float32")})(parse(MLP))


def test_wrong_dtype_is_an_input_error():
    with pytest.raises(InputError, match="parameter b: expected dtype float32, got float64"):
        BindParams({"b": np.zeros(3)})(parse(MLP))


def test_wrong_shape_is_an_input_error():
    with pytest.raises(InputError, match=r"parameter w: expected shape Tensor\[\(3, 4\), float32\], got \(4, 3\)"):
        BindParams({"w": np.zeros((4, 3), dtype="float32")})(parse(MLP))


def test_wrong_rank_is_an_input_error():
    with pytest.raises(InputError, match="parameter b: expected shape"):
        BindParams({"b": np.zeros((3, 1), dtype="float32")})(parse(MLP))


def test_ambiguous_parameter_name_is_an_input_error():
    # The parser refuses duplicate names; programs built in Python may still have them.
    x1, x2 = Var("x", TensorType((2,), "float32")), Var("x", TensorType((2,), "float32"))
    mod = IRModule.from_expr(Function((x1, x2), Call(Op.get("add"), (x1, x2))))
    with pytest.raises(InputError, match="two parameters"):
        BindParams({"x": np.zeros(2, dtype="float32")})(mod)
