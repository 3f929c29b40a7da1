import pytest

from compiler.diagnostics import TypeCheckError
from compiler.ir.expr import Call, Function, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, FuncType, TensorType, TupleType, TypeCall
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.passes.infer_type import InferType, infer_expr

F32 = "float32"


def typed(text: str) -> IRModule:
    return parse(text)


def test_every_node_of_every_function_gets_a_type():
    mod = typed("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %w: Tensor[(4, 3), float32]) {
  %0 = nn.dense(%x, %w, units=None);
  %1 = (%0, %x);
  let %t = %1;
  %t.0
}""")
    main = mod.main
    for node in post_order(main):
        if not isinstance(node, Op):
            assert node.has_type, node
    assert main.checked_type == FuncType(
        (TensorType((2, 3), F32), TensorType((4, 3), F32)), TensorType((2, 4), F32)
    )


def test_global_call_takes_the_callee_return_type_even_without_annotation():
    mod = typed("""#[version = "0.0.5"]
def @main(%x: Tensor[(5), float32]) { @twice(%x) }
def @twice(%y: Tensor[(5), float32]) { add(%y, %y) }""")
    assert mod.main.body.checked_type == TensorType((5,), F32)


def test_fn_literal_and_call_of_it():
    mod = typed("""#[version = "0.0.5"]
def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(5, 7), float32] {
  %0 = fn (%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Primitive=1) -> Tensor[(5, 7), float32] {
    add(%x, %y)
  };
  %0(%a, %a)
}""")
    call = mod.main.body
    assert isinstance(call.op, Function)
    assert call.op.checked_type.ret_type == TensorType((5, 7), F32)


def test_dynamic_return_annotation_accepts_a_static_body():
    mod = typed("""#[version = "0.0.5"]
def @main(%a: Tensor[(5, 7), float32]) -> Tensor[(?, ?), float32] { @dyn(%a, %a) }
def @dyn(%x: Tensor[(5, 7), float32], %y: Tensor[(5, 7), float32], Extern=1) -> Tensor[(?, ?), float32] {
  add(%x, %y)
}""")
    assert mod.main.body.checked_type == TensorType((ANY, ANY), F32)


def test_type_error_names_the_call_and_both_types_with_location():
    with pytest.raises(TypeCheckError) as info:
        parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(4, 3), float32]) {
  add(%x, %y)
}""", "m.relay")
    err = info.value
    assert "add" in err.message
    assert "Tensor[(2, 3), float32]" in err.message and "Tensor[(4, 3), float32]" in err.message
    assert (err.line, err.column) == (3, 3)


def test_argument_type_mismatch_in_global_call_names_expected_and_found():
    with pytest.raises(TypeCheckError) as info:
        parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) { @f(%x) }
def @f(%y: Tensor[(3, 2), float32]) { %y }""")
    msg = info.value.message
    assert "call to @f" in msg
    assert "expected Tensor[(3, 2), float32], found Tensor[(2, 3), float32]" in msg


def test_return_annotation_mismatch_is_reported():
    with pytest.raises(TypeCheckError, match="annotated to return Tensor\\[\\(3\\), float32\\]"):
        parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) -> Tensor[(3), float32] { %x }""")


def test_if_needs_a_bool_scalar_condition():
    with pytest.raises(TypeCheckError, match="bool scalar"):
        parse("""#[version = "0.0.5"]
def @main(%c: float32, %x: Tensor[(2), float32]) { if (%c) { %x } else { %x } }""")


def test_if_branches_must_agree():
    with pytest.raises(TypeCheckError, match="branches disagree"):
        parse("""#[version = "0.0.5"]
def @main(%c: bool, %x: Tensor[(2), float32], %y: Tensor[(3), float32]) { if (%c) { %x } else { %y } }""")


def test_projection_out_of_range():
    with pytest.raises(TypeCheckError, match="out of range"):
        parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) { %0 = (%x, %x); %0.2 }""")


def test_recursive_global_without_return_type_is_an_error():
    with pytest.raises(TypeCheckError, match="recursive"):
        parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) { @main(%x) }""")


def test_infer_expr_types_a_50000_deep_let_chain():
    x = Var("x", TensorType((2,), F32))
    vars_ = [Var(f"v{i}") for i in range(50_000)]
    body = vars_[-1]
    for i in reversed(range(len(vars_))):
        value = Call(Op.get("negative"), (x if i == 0 else vars_[i - 1],))
        body = Let(vars_[i], value, body)
    assert infer_expr(Function((x,), body)).ret_type == TensorType((2,), F32)


def test_infer_type_is_incremental_and_keeps_existing_types():
    x = Var("x", TensorType((3,), F32))
    inner = Call(Op.get("exp"), (x,))
    t = Tuple((inner, x))
    infer_expr(Function((x,), TupleGetItem(t, 0)))
    assert t.checked_type == TupleType((TensorType((3,), F32), TensorType((3,), F32)))
    # A new function reusing typed nodes is typed without re-walking them.
    mod = IRModule.from_expr(Function((x,), Call(Op.get("negative"), (inner,))))
    InferType()(mod)
    assert mod.main.body.checked_type == TensorType((3,), F32)


LIST = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
"""


def test_unannotated_fn_parameter_is_inferred_from_the_call():
    mod = typed("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = fn (%y) { add(%y, 1f) };
  %0(%x)
}""")
    fn = mod.main.body.op
    assert fn.params[0].checked_type == TensorType((2, 3), F32)
    assert mod.main.body.checked_type == TensorType((2, 3), F32)


def test_let_without_annotation_takes_the_type_of_its_value():
    mod = typed("""#[version = "0.0.5"]
def @main(%x: Tensor[(4), int32]) { let %y = negative(%x); let %z = %y; %z }""")
    assert mod.main.body.var.checked_type == TensorType((4,), "int32")
    assert mod.main.checked_type.ret_type == TensorType((4,), "int32")


def test_polymorphic_global_is_instantiated_afresh_at_each_call():
    mod = typed("""#[version = "0.0.5"]
def @id[A](%x: A) -> A { %x }
def @main(%x: Tensor[(2), float32], %n: int32) { (@id(%x), @id(%n), @id(@id(%n))) }""")
    assert mod.main.checked_type.ret_type == TupleType(
        (TensorType((2,), F32), TensorType((), "int32"), TensorType((), "int32"))
    )
    assert mod["id"].checked_type.type_params[0].name == "A"


def test_polymorphic_recursive_map_with_a_function_typed_parameter():
    mod = typed(LIST + """def @map[A, B](%f: fn (A) -> B, %l: List[A]) -> List[B] {
  match (%l) {
    Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)),
    Nil => Nil,
  }
}
def @main(%x: Tensor[(3), float32]) {
  @map(fn (%v) { sum(%v) }, Cons(%x, Nil))
}""")
    assert mod.main.checked_type.ret_type == TypeCall("List", (TensorType((), F32),))


def test_a_parameter_nothing_determines_is_a_located_error():
    with pytest.raises(TypeCheckError) as info:
        parse('#[version = "0.0.5"]\ndef @main(%x: float32) {\n  let %f = fn (%y) { %y };\n  %x\n}', "m.relay")
    assert "cannot infer the type of %y" in info.value.message
    assert (info.value.line, info.value.column) == (3, 16)


def test_op_relation_waits_until_its_argument_types_are_known():
    mod = typed("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  let %g = fn (%a, %b) { multiply(add(%a, %b), %b) };
  %g(%x, %x)
}""")
    assert mod.main.checked_type.ret_type == TensorType((2,), F32)


def test_failed_inference_leaves_no_types_behind():
    mod = parse('#[version = "0.0.5"]\ndef @main(%x: float32) { let %f = fn (%y) { %y }; %x }', infer_types=False)
    with pytest.raises(TypeCheckError):
        InferType()(mod)
    assert not any(node.has_type for node in post_order(mod.main))


def test_recursive_let_bound_closure_gets_its_function_type():
    mod = typed("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32], %n: int32) {
  let %loop = fn (%i: int32, %acc) {
    if (less(%i, %n)) { %loop(add(%i, 1), add(%acc, %x)) } else { %acc }
  };
  %loop(0, %x)
}""")
    f2 = TensorType((2,), F32)
    assert mod.main.body.var.checked_type == FuncType((TensorType((), "int32"), f2), f2)
    assert mod.main.checked_type.ret_type == f2


def test_values_that_may_be_static_or_dynamic_get_the_dynamic_type_as_in_tvm():
    mod = parse("""#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
def @main(%x: Tensor[(1, 3), float32], %y: Tensor[(?, 3), float32], %c: bool) {
  let %same = fn (%v) { %v };
  %0 = if (%c) { %x } else { %y };
  %1 = match (Cons(%x, Nil)) { Cons(%h, _) => %h, Nil => %y };
  (Cons(%x, Cons(%y, Nil)), %0, %1, %same(%x), %same(%y))
}""")
    dynamic = TensorType((ANY, 3), "float32")
    assert mod.main.checked_type.ret_type == TupleType(
        (TypeCall("List", (dynamic,)), dynamic, dynamic, dynamic, dynamic)
    )


@pytest.mark.parametrize(
    "opening, closing", [("(", ",)"), ("fn () -> ", "")], ids=["tuple types", "function types"]
)
def test_types_nested_as_deep_as_the_parser_allows_are_compared_without_a_recursion_error(opening, closing):
    # Found by the parser fuzzing: unifying two 490-deep types ran out of Python's recursion limit.
    import sys

    def deep(dtype: str) -> str:
        return opening * 490 + dtype + closing * 490

    limit = sys.getrecursionlimit()
    with pytest.raises(TypeCheckError) as info:
        parse(f'#[version = "0.0.5"]\ndef @main(%x: {deep("float32")}) -> {deep("int32")} {{ %x }}', "m.relay")
    assert info.value.message.startswith("function is annotated to return ")
    assert (info.value.line, info.value.column) == (2, 11)
    assert sys.getrecursionlimit() == limit
