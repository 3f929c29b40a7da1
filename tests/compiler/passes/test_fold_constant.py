import numpy as np

from compiler.ir.expr import Call, Constant, Function, Op, Tuple, const
from compiler.ir.module import IRModule
from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.passes.fold_constant import FoldConstant, is_constant_value
from compiler.passes.pass_infra import PassContext, Sequential
from compiler.runtime.interpreter import run_main


def assert_folds(before_text, expected_text, inputs=None):
    before = parse(before_text)
    after = FoldConstant()(before)
    expected = parse(expected_text)
    assert structural_equal(after, expected), after.astext()
    if inputs is not None:
        for got, want in zip(run_main(after, inputs), run_main(before, inputs)):
            np.testing.assert_allclose(got, want, rtol=1e-6)
    return after


def test_constant_subgraph_is_evaluated_and_inputs_are_kept():
    after = assert_folds(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  %0 = add(2f, 3f);
  %1 = multiply(%0, 2f);
  %2 = sqrt(%1);
  add(%x, %2)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  add(%x, 3.1622777f)
}""",
        inputs={"x": np.arange(3, dtype="float32")},
    )
    assert str(after.main.body.checked_type) == "Tensor[(3), float32]"


def test_folded_constant_keeps_the_call_result_dtype():
    after = FoldConstant()(parse("""#[version = "0.0.5"]
def @main() { cast(7, dtype="int8") }"""))
    body = after.main.body
    assert isinstance(body, Constant)
    assert body.data.dtype == np.int8 and body.data.item() == 7


def test_operators_without_arguments_fold():
    after = FoldConstant()(parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 2), float32]) {
  %0 = ones(shape=[2, 2], dtype="float32");
  add(%x, %0)
}"""))
    const = after.main.body.args[1]
    assert isinstance(const, Constant)
    np.testing.assert_array_equal(const.data, np.ones((2, 2), dtype="float32"))


def test_tuple_valued_operator_folds_to_a_tuple_of_constants():
    after = FoldConstant()(parse("""#[version = "0.0.5"]
def @main() {
  %0 = ones(shape=[4], dtype="float32");
  split(%0, indices_or_sections=2)
}"""))
    body = after.main.body
    assert isinstance(body, Tuple) and is_constant_value(body)
    assert [f.data.shape for f in body.fields] == [(2,), (2,)]


def test_projection_of_a_tuple_literal_is_the_field():
    assert_folds(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  %0 = (%x, %y);
  exp(%0.1)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %y: Tensor[(3), float32]) {
  exp(%y)
}""",
    )


def test_calls_with_tuple_of_constants_argument_fold():
    after = FoldConstant()(parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  %0 = (1f, 2f);
  %1 = stack(%0);
  add(%x, %1)
}"""))
    const = after.main.body.args[1]
    assert isinstance(const, Constant)
    np.testing.assert_array_equal(const.data, np.array([1, 2], dtype="float32"))


def test_let_bound_constant_is_substituted():
    assert_folds(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %c = add(1f, 1f);
  let %y = add(%x, %c);
  multiply(%y, %c)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  let %y = add(%x, 2f);
  multiply(%y, 2f)
}""",
        inputs={"x": np.arange(3, dtype="float32")},
    )


def test_primitive_and_external_functions_are_not_folded():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32]) {
  %0 = fn (%p0: Tensor[(3), float32], Primitive=1) {
    %1 = add(1f, 1f);
    add(%p0, %1)
  };
  %2 = %0(%x);
  @ext(%2)
}
def @ext(%y: Tensor[(3), float32], Compiler="acme", global_symbol="ext", Primitive=1) {
  %0 = add(1f, 1f);
  add(%y, %0)
}"""
    mod = parse(text)
    assert FoldConstant()(mod) is mod


def test_opaque_dropout_is_not_folded_but_layer_norm_is():
    after = FoldConstant()(parse("""#[version = "0.0.5"]
def @main() {
  %0 = ones(shape=[2, 4], dtype="float32");
  %1 = ones(shape=[4], dtype="float32");
  %2 = zeros(shape=[4], dtype="float32");
  %3 = nn.layer_norm(%0, %1, %2);
  %4 = nn.dropout(%3);
  %4.0
}"""))
    dropout = after.main.body.tuple_value
    assert dropout.op.name == "nn.dropout"
    assert isinstance(dropout.args[0], Constant)
    np.testing.assert_allclose(dropout.args[0].data, np.zeros((2, 4)))


def test_calls_of_functions_are_not_folded():
    text = """#[version = "0.0.5"]
def @main() { @two() }
def @two() -> float32 { 2f }"""
    mod = parse(text)
    assert FoldConstant()(mod) is mod


def test_fold_constant_is_skipped_below_opt_level_two():
    mod = parse("""#[version = "0.0.5"]
def @main() { add(1f, 1f) }""")
    assert Sequential([FoldConstant()])(mod, PassContext(opt_level=1)) is mod
    folded = Sequential([FoldConstant()])(mod, PassContext(opt_level=2))
    assert isinstance(folded.main.body, Constant)


def test_deep_constant_chain_folds_without_recursion():
    depth = 10_000
    node = Call(Op.get("add"), (const(1.0), const(1.0)))
    for _ in range(depth - 1):
        node = Call(Op.get("add"), (node, const(1.0)))
    mod = IRModule.from_expr(Function((), node))
    after = FoldConstant()(mod)
    assert isinstance(after.main.body, Constant)
    assert after.main.body.data.item() == depth + 1
