from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import UnsupportedError
from compiler.parser import parse
from compiler.parser.metadata import encode_metadata
from compiler.passes.check_compilable import CheckCompilable

LIST = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
"""


def refusal(text: str) -> UnsupportedError:
    with pytest.raises(UnsupportedError) as info:
        CheckCompilable()(parse(text, "m.relay"))
    return info.value


def test_plain_tensor_model_passes_unchanged():
    mod = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) { add(%x, %x) }')
    assert CheckCompilable()(mod) is mod


def test_constructor_use_is_reported_where_it_is_used_not_where_it_is_defined():
    error = refusal(LIST + "def @main(%x: float32) -> float32 {\n  let %l = Cons(%x, Nil);\n  %x\n}")
    assert error.message == "the AOT executor cannot compile algebraic data type constructors (`Cons`); run it with relaycc interpret"
    assert (error.line, error.column) == (4, 12)


def test_match_in_a_helper_reached_from_main_is_reported():
    error = refusal(LIST + """def @head(%l: List[float32]) -> float32 {
  match? (%l) { Cons(%h, _) => %h }
}
def @main(%x: float32) -> float32 { @head(@wrap(%x)) }
def @wrap(%x: float32) -> List[float32] { Cons(%x, Nil) }""")
    assert error.message == (
        "the AOT executor cannot compile match expressions (in @head, reached from @main); run it with relaycc interpret"
    )
    assert (error.line, error.column) == (4, 3)


LOOP_IN = """def @{name}(%x: float32, %n: int32) -> float32 {{
  let %loop = fn (%i: int32) -> float32 {{ if (less(%i, %n)) {{ %loop(add(%i, 1)) }} else {{ %x }} }};
  %loop(0)
}}
"""


def test_references_are_refused():
    ref = refusal('#[version = "0.0.5"]\ndef @main(%x: float32) {\n  let %r = ref(%x);\n  ref_read(%r)\n}')
    assert "cannot compile references" in ref.message and (ref.line, ref.column) == (3, 12)


def test_a_loop_closure_in_main_passes_and_one_in_a_helper_is_refused():
    mod = parse('#[version = "0.0.5"]\n' + LOOP_IN.format(name="main"))
    assert CheckCompilable()(mod) is mod  # the AOT executor compiles it as a loop
    loop = refusal('#[version = "0.0.5"]\n' + LOOP_IN.format(name="helper")
                   + "def @main(%x: float32) -> float32 { @helper(%x, 3) }\n")
    assert "cannot compile closures (a function bound by `let`)" in loop.message
    assert (loop.line, loop.column) == (3, 15)


def test_main_inputs_of_an_adt_type_are_refused_at_the_parameter():
    error = refusal(LIST + "def @main(%l: List[float32]) -> float32 { 0f }")
    assert error.message == "the AOT executor cannot compile @main inputs of type List[float32]; run it with relaycc interpret"
    assert (error.line, error.column) == (3, 11)


def test_construct_in_main_is_reported_before_an_earlier_one_in_a_helper():
    # TVM prints the prelude before @main; the error belongs to the model, not to the library.
    error = refusal(LIST + """def @head(%l: List[float32]) -> float32 {
  match? (%l) { Cons(%h, _) => %h }
}
def @main(%x: float32) -> float32 {
  let %l = Cons(%x, Nil);
  @head(%l)
}""")
    assert "cannot compile algebraic data type constructors (`Cons`)" in error.message
    assert (error.line, error.column) == (7, 12)


def test_a_primitive_main_is_left_to_the_back_end():
    mod = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32], Primitive=1) { add(%x, %x) }')
    assert CheckCompilable()(mod) is mod


def test_memory_ops_after_manifest_alloc_are_refused_before_other_constructs():
    error = refusal("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %f = fn (%p0: Tensor[(2), float32], Primitive=1) -> Tensor[(2), float32] { negative(%p0) };
  let %storage_0 = memory.alloc_storage(8i64, 64i64);
  let %tensor_0 = memory.alloc_tensor(%storage_0, 0i64, meta[relay.Constant][0], const_shape=meta[relay.Constant][0], assert_shape=None);
  let %_ = vm.invoke_tvm_op(%f, (%x,), (%tensor_0,));
  %tensor_0
}
#[metadata]
""" + encode_metadata([np.array([2], dtype="int64")]))
    assert error.message == (
        "the AOT executor cannot compile `memory.alloc_storage` calls, which TVM's ManifestAlloc writes; "
        "give the module as it was before ManifestAlloc, or run it with relaycc interpret"
    )
    assert (error.line, error.column) == (4, 20)


def test_call_lowered_of_a_relay_function_is_refused_naming_lower_te():
    error = refusal("""#[version = "0.0.5"]
def @f(%a: Tensor[(2), float32], Primitive=1) -> Tensor[(2), float32] { negative(%a) }
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  %0 = (%x,);
  call_lowered(@f, %0, metadata={relay_attrs={Primitive=1}, all_prim_fn_vars=[@f]})
}""")
    assert error.message == (
        "the AOT executor cannot compile `call_lowered` calls, which TVM's LowerTE writes; "
        "give the module as it was before LowerTE, or run it with relaycc interpret"
    )
    assert (error.line, error.column) == (5, 3)


def test_a_parameter_of_a_trillion_elements_is_refused_at_the_parameter():
    error = refusal('#[version = "0.0.5"]\ndef @main(%x: Tensor[(1000000, 1000000), float32]) { add(%x, 1f) }')
    assert error.message.startswith(
        "a tensor of type Tensor[(1000000, 1000000), float32] holds 4,000,000,000,000 bytes, more than the "
        "4,294,967,296 bytes a tensor may have"
    )
    assert (error.line, error.column) == (2, 11)


def test_a_call_whose_shape_product_overflows_int64_is_refused_at_the_call():
    text = '#[version = "0.0.5"]\ndef @main() {\n  zeros(shape=[4294967296, 4294967296, 4294967296], dtype="int8")\n}'
    error = refusal(text)
    assert "holds 79,228,162,514,264,337,593,543,950,336 bytes" in error.message
    assert (error.line, error.column) == (3, 3)


def test_the_tensor_size_limit_is_a_pass_config_option():
    from compiler.passes.pass_infra import PassContext

    mod = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(1024), float32]) { %x }')
    with PassContext(config={"relaycc.max_tensor_bytes": 4096}).scope():
        assert CheckCompilable()(mod) is mod
    with PassContext(config={"relaycc.max_tensor_bytes": 4095}).scope(), pytest.raises(UnsupportedError):
        CheckCompilable()(mod)
