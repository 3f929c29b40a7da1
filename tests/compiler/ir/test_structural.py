import subprocess
import sys

import numpy as np
import pytest

from compiler.ir.attrs import Attrs
from compiler.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
    const,
)
from compiler.ir.module import IRModule
from compiler.ir.structural import structural_equal, structural_hash
from compiler.ir.types import ANY, FuncType, TensorType, TupleType
from compiler.ir.visitor import ExprMutator
from compiler.parser import parse as parse_module

F8 = TensorType((1, 8), "float32")
BOOL = TensorType((), "bool")


def call(name: str, *args: Expr, **attrs: object) -> Call:
    return Call(Op.get(name), args, attrs)


def assert_equal(a, b, **kwargs) -> None:
    assert structural_equal(a, b, **kwargs)
    assert structural_equal(b, a, **kwargs)
    assert structural_hash(a, **kwargs) == structural_hash(b, **kwargs)


def assert_unequal(a, b, **kwargs) -> None:
    assert not structural_equal(a, b, **kwargs)
    assert not structural_equal(b, a, **kwargs)


def dense_relu(x_name: str = "x", w_name: str = "w") -> Function:
    x, w = Var(x_name, F8), Var(w_name, TensorType((4, 8)))
    return Function([x, w], call("nn.relu", call("nn.dense", x, w, units=None)))


# --- alpha-equivalence and free variables ---------------------------------------------------------


def test_functions_differing_only_in_parameter_names_are_equal():
    assert_equal(dense_relu("x", "w"), dense_relu("data", "weight"))


def test_lets_differing_only_in_variable_names_are_equal():
    def build(name: str) -> Function:
        x, v = Var("x", F8), Var(name)
        return Function([x], Let(v, call("negative", x), call("add", v, v)))

    assert_equal(build("a"), build("b"))


def test_swapped_parameter_uses_are_unequal():
    x, y = Var("x", F8), Var("y", F8)
    a, b = Var("a", F8), Var("b", F8)
    assert_unequal(Function([x, y], call("subtract", x, y)), Function([a, b], call("subtract", b, a)))


def test_binding_position_not_name_decides_equality():
    # Same names, bound at different positions.
    x, y = Var("x", F8), Var("y", F8)
    p, q = Var("y", F8), Var("x", F8)
    assert_equal(Function([x, y], call("subtract", x, y)), Function([p, q], call("subtract", p, q)))


def test_free_variables_compare_by_identity():
    x = Var("x", F8)
    assert_equal(call("negative", x), call("negative", x))
    assert_unequal(call("negative", x), call("negative", Var("x", F8)))


def test_free_variables_may_be_renamed_one_to_one_with_map_free_vars():
    x, y = Var("x", F8), Var("y", F8)
    a, b = Var("a", F8), Var("b", F8)
    assert_equal(call("add", x, y), call("add", a, b), map_free_vars=True)
    # x would have to map to both a and b.
    assert_unequal(call("add", x, x), call("add", a, b), map_free_vars=True)
    assert_unequal(call("add", x, y), call("add", a, a), map_free_vars=True)


def test_mapped_free_variables_still_need_equal_annotations():
    assert_unequal(Var("x", F8), Var("x", TensorType((1, 9))), map_free_vars=True)


def test_a_bound_variable_never_equals_a_free_one():
    x, free = Var("x", F8), Var("x", F8)
    assert_unequal(Function([x], x), Function([Var("x", F8)], free), map_free_vars=True)


def test_parameter_annotations_must_match():
    assert_unequal(Function([Var("x", F8)], const(1)), Function([Var("x", TensorType((2, 8)))], const(1)))
    assert_unequal(Function([Var("x", F8)], const(1)), Function([Var("x")], const(1)))


# --- what is compared ----------------------------------------------------------------------------


def test_calls_of_different_operators_are_unequal():
    x = Var("x", F8)
    assert_unequal(call("negative", x), call("exp", x))


def test_differing_call_attributes_are_unequal():
    x, b = Var("x", F8), Var("b", TensorType((8,)))
    assert_unequal(call("nn.bias_add", x, b, axis=1), call("nn.bias_add", x, b, axis=-1))
    assert_unequal(call("clip", x, a_min=0.0, a_max=1.0), call("clip", x, a_min=0.0, a_max=6.0))


def test_missing_operator_attributes_take_their_defaults():
    x, w = Var("x", F8), Var("w", TensorType((4, 8)))
    assert_equal(call("nn.dense", x, w, units=None), call("nn.dense", x, w, units=None, out_dtype=""))
    assert_unequal(call("nn.dense", x, w, units=None), call("nn.dense", x, w, units=None, out_dtype="float16"))


def test_attribute_values_of_different_kinds_are_unequal():
    assert_unequal(Attrs(a=1), Attrs(a=True))
    assert_unequal(Attrs(a=1), Attrs(a=1.0))
    assert_unequal(Attrs(a=(1, 2)), Attrs(a=(1, 2, 3)))
    assert_unequal(Attrs(a="1"), Attrs(a=1))


def test_attrs_compare_by_value_in_any_key_order():
    assert_equal(Attrs({"a": 1, "b": (2, 3)}), Attrs({"b": [2, 3], "a": 1}))
    assert_equal(Attrs(eps=float("nan")), Attrs(eps=float("nan")))
    assert_equal(Attrs(eps=0.0), Attrs(eps=-0.0))
    assert_equal(Attrs(f=GlobalVar("f"), meta=Attrs(x=1)), Attrs(f=GlobalVar("f"), meta=Attrs(x=1)))
    assert_unequal(Attrs(f=GlobalVar("f")), Attrs(f=GlobalVar("g")))


def test_differing_function_attributes_are_unequal():
    base = dense_relu()
    assert_unequal(base.with_attrs(Composite="acme.dense"), base.with_attrs(Composite="acme.relu"))
    assert_unequal(base.with_attrs(Primitive=1), base)


def test_constants_compare_by_dtype_shape_and_bytes():
    assert_equal(Constant(np.arange(6, dtype="float32")), Constant(np.arange(6, dtype="float32")))
    assert_unequal(Constant(np.arange(6, dtype="float32")), Constant(np.arange(6, dtype="int32")))
    assert_unequal(Constant(np.arange(6, dtype="float32")), Constant(np.arange(6, dtype="float32").reshape(2, 3)))
    assert_unequal(Constant(np.zeros(3, "float32")), Constant(np.array([0, 0, 1], "float32")))
    assert_equal(const(np.nan), const(np.nan))


def test_tuple_indices_and_lengths_must_match():
    x = Var("x", F8)
    pair = Tuple([x, x])
    assert_unequal(TupleGetItem(pair, 0), TupleGetItem(pair, 1))
    assert_unequal(Tuple([x]), Tuple([x, x]))


def test_if_compares_condition_and_both_branches():
    c, x = Var("c", BOOL), Var("x", F8)
    assert_equal(If(c, x, call("negative", x)), If(c, x, call("negative", x)))
    assert_unequal(If(c, x, call("negative", x)), If(c, call("negative", x), x))


def test_global_vars_compare_by_name():
    x = Var("x", F8)
    assert_equal(Call(GlobalVar("f"), [x]), Call(GlobalVar("f"), [x]))
    assert_unequal(Call(GlobalVar("f"), [x]), Call(GlobalVar("g"), [x]))


def test_different_node_kinds_are_unequal():
    x = Var("x", F8)
    assert_unequal(Tuple([x]), call("negative", x))
    assert_unequal(x, const(1))
    assert not structural_equal(x, F8)  # type: ignore[arg-type]  # an Expr against a Type


def test_return_types_are_compared_only_when_both_are_known():
    def build(ret: TensorType | None) -> Function:
        x = Var("x", F8)
        return Function([x], x, ret_type=ret)

    assert_equal(build(F8), build(None))
    assert_unequal(build(F8), build(TensorType((2, 8))))
    inferred = build(None)
    inferred.set_checked_type(FuncType((F8,), TensorType((2, 8))))
    assert not structural_equal(inferred, build(F8))


def test_types_compare_by_value():
    assert_equal(TensorType((ANY, 4), "int8"), TensorType((ANY, 4), "int8"))
    assert_equal(TupleType((F8, BOOL)), TupleType((F8, BOOL)))
    assert_unequal(TensorType((ANY, 4)), TensorType((1, 4)))
    assert_unequal(FuncType((F8,), F8), FuncType((F8,), BOOL))


# --- sharing ------------------------------------------------------------------------------------


def test_a_dag_equals_its_tree_unfolded_copy():
    x = Var("x", F8)
    shared = call("negative", x)
    dag = call("add", shared, shared)
    tree = call("add", call("negative", x), call("negative", x))
    assert_equal(dag, tree)


def test_a_shared_fn_literal_equals_two_separate_copies():
    x = Var("x", F8)

    def literal() -> Function:
        p = Var("p", F8)
        return Function([p], call("exp", p), attrs={"Primitive": 1})

    shared = literal()
    dag = Tuple([Call(shared, [x]), Call(shared, [call("negative", x)])])
    tree = Tuple([Call(literal(), [x]), Call(literal(), [call("negative", x)])])
    assert_equal(dag, tree)


def test_a_shared_let_value_equals_two_separate_copies():
    x = Var("x", F8)

    def body(value: Expr) -> Let:
        v = Var("v")
        return Let(v, value, call("add", v, x))

    shared = call("negative", x)
    assert_equal(Tuple([body(shared), body(shared)]), Tuple([body(call("negative", x)), body(call("negative", x))]))


def test_a_mutator_copy_of_a_function_is_equal():
    class Rebuild(ExprMutator):
        def rewrite_call(self, pre: Call, post: Call) -> Expr:
            return Call(post.op, post.args, post.attrs)

    func = dense_relu()
    copy = Rebuild().visit(func)
    assert copy is not func
    assert_equal(func, copy)


# --- modules ------------------------------------------------------------------------------------


def test_modules_are_equal_when_their_functions_are_pairwise_equal():
    a = IRModule({GlobalVar("main"): dense_relu("x"), GlobalVar("f"): dense_relu("a")})
    b = IRModule({GlobalVar("f"): dense_relu("b"), GlobalVar("main"): dense_relu("y")})
    assert_equal(a, b)


def test_modules_with_different_global_names_or_bodies_are_unequal():
    a = IRModule({GlobalVar("main"): dense_relu()})
    assert_unequal(a, IRModule({GlobalVar("other"): dense_relu()}))
    assert_unequal(a, IRModule({GlobalVar("main"): dense_relu(), GlobalVar("f"): dense_relu()}))
    x = Var("x", F8)
    assert_unequal(a, IRModule({GlobalVar("main"): Function([x], x)}))
    assert not structural_equal(a, dense_relu())


# --- hashing ------------------------------------------------------------------------------------


def test_hash_distinguishes_common_differences():
    x = Var("x", F8)
    variants = [
        call("negative", x),
        call("exp", x),
        call("nn.bias_add", x, Var("b", TensorType((8,))), axis=1),
        Tuple([x]),
        Tuple([x, x]),
        TupleGetItem(Tuple([x, x]), 1),
        const(1),
        const(1.0),
        dense_relu(),
        dense_relu().with_attrs(Primitive=1),
    ]
    assert len({structural_hash(v) for v in variants}) == len(variants)


def test_hash_distinguishes_swapped_parameters():
    x, y = Var("x", F8), Var("y", F8)
    assert structural_hash(Function([x, y], call("subtract", x, y))) != structural_hash(
        Function([x, y], call("subtract", y, x))
    )


def test_hash_of_free_variables_ignores_names_only_with_map_free_vars():
    a, b = call("negative", Var("a", F8)), call("negative", Var("b", F8))
    assert structural_hash(a) != structural_hash(b)
    assert structural_hash(a, map_free_vars=True) == structural_hash(b, map_free_vars=True)


def test_hash_is_the_same_in_another_process():
    code = (
        "from compiler.ir.expr import Call, Function, Op, Var; "
        "from compiler.ir.types import TensorType; "
        "from compiler.ir.structural import structural_hash; "
        "x = Var('x', TensorType((1, 8))); "
        "print(structural_hash(Function([x], Call(Op.get('nn.relu'), [x]), attrs={'Compiler': 'acme'})))"
    )
    x = Var("x", F8)
    here = structural_hash(Function([x], call("nn.relu", x), attrs={"Compiler": "acme"}))
    runs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": seed}
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert runs == {str(here)}


def test_hash_is_a_64_bit_unsigned_integer():
    h = structural_hash(dense_relu())
    assert isinstance(h, int) and 0 <= h < 2**64


# --- deep and large graphs ------------------------------------------------------------------------


def let_chain(depth: int, prefix: str) -> Function:
    x = Var("x", F8)
    names = [Var(f"{prefix}{i}") for i in range(depth)]
    body: Expr = names[-1]
    for i in reversed(range(depth)):
        body = Let(names[i], call("negative", x if i == 0 else names[i - 1]), body)
    return Function([x], body)


def test_equality_and_hash_of_10000_deep_let_chains():
    a, b = let_chain(10_000, "a"), let_chain(10_000, "b")
    assert_equal(a, b)


def test_equality_and_hash_of_10000_deep_let_alias_chains():
    def chain(prefix: str) -> Function:
        x = Var("x", F8)
        names = [Var(f"{prefix}{i}") for i in range(10_000)]
        body: Expr = names[-1]
        for i in reversed(range(10_000)):
            body = Let(names[i], x if i == 0 else names[i - 1], body)
        return Function([x], body)

    assert_equal(chain("a"), chain("b"))


def test_equality_and_hash_of_10000_deep_call_chains():
    x = Var("x", F8)

    def chain(last: str) -> Expr:
        node: Expr = x
        for _ in range(10_000):
            node = call("negative", node)
        return call(last, node)

    a, b, c = chain("exp"), chain("exp"), chain("log")
    assert_equal(a, b)
    assert_unequal(a, c)


def test_a_diamond_dag_of_depth_200_is_compared_and_hashed_in_linear_time():
    def diamond(name: str) -> Function:
        x = Var(name, F8)
        node: Expr = x
        for _ in range(200):
            node = call("add", node, node)
        return Function([x], node)

    a, b = diamond("x"), diamond("y")
    assert_equal(a, b)


# --- bad input ------------------------------------------------------------------------------------


def test_unknown_expression_kinds_are_rejected():
    class Strange(Expr):
        span = None

    with pytest.raises(TypeError, match="cannot hash"):
        structural_hash(Strange())
    with pytest.raises(TypeError, match="cannot compare"):
        structural_equal(Strange(), Strange())


ADT = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
"""


def test_matches_equal_up_to_renaming_of_pattern_variables_and_hash_alike():
    a = parse_module(ADT + "def @main(%l: List[float32]) { match (%l) { Cons(%h, _) => %h, Nil => 0f } }")
    b = parse_module(ADT + "def @main(%m: List[float32]) { match (%m) { Cons(%x, _) => %x, Nil => 0f } }")
    assert structural_equal(a, b) and structural_hash(a) == structural_hash(b)


def test_matches_differing_in_pattern_completeness_or_bound_field_are_unequal():
    base = parse_module(ADT + "def @main(%l: List[float32]) { match? (%l) { Cons(%h, %t) => %h } }")
    other_field = parse_module(ADT + "def @main(%l: List[float32]) { match? (%l) { Cons(%t, %h) => %h } }")
    complete = parse_module(ADT + "def @main(%l: List[float32]) { match (%l) { Cons(%h, %t) => %h, _ => 0f } }")
    assert not structural_equal(base, other_field)
    assert structural_hash(base) != structural_hash(other_field)
    assert not structural_equal(base, complete)


def test_modules_with_different_type_definitions_are_unequal():
    a = parse_module(ADT + "def @main(%x: float32) { %x }")
    b = parse_module('#[version = "0.0.5"]\ntype List[A] { Cons(A, List[A]), Empty }\ndef @main(%x: float32) { %x }')
    assert not structural_equal(a, b) and structural_hash(a) != structural_hash(b)
