"""Types as Relay text (`type_text`), as TVM's printer writes them."""

from __future__ import annotations

from compiler.ir.types import ANY, FuncType, TensorType, TupleType, TypeCall, TypeVar, type_text


def test_type_call_without_arguments_keeps_its_brackets():
    assert type_text(TypeCall("tensor_float32_t", ())) == "tensor_float32_t[]"
    assert type_text(TypeCall("List", (TypeCall("static_tensor_float32_any_3_t", ()),))) == (
        "List[static_tensor_float32_any_3_t[]]"
    )


def test_tensor_tuple_function_and_type_call_text():
    assert type_text(TensorType((ANY, 2), "float32")) == "Tensor[(?, 2), float32]"
    assert type_text(TensorType((), "int32")) == "int32"
    assert type_text(TupleType((TensorType((), "bool"),))) == "(bool,)"
    a = TypeVar("A")
    assert type_text(FuncType((a, TypeCall("List", (a,))), a)) == "fn (A, List[A]) -> A"
