"""Unification: holes are filled, rigid types must agree, `?` dims match any dim."""

from __future__ import annotations

from compiler.ir.types import ANY, FuncType, IncompleteType, RefType, TensorType, TupleType, TypeCall, TypeVar
from compiler.passes.type_solver import Solver, instantiate

F2 = TensorType((2,), "float32")


def test_unify_fills_a_hole_inside_a_type_call():
    solver, hole = Solver(), IncompleteType()
    assert solver.unify(TypeCall("List", (hole,)), TypeCall("List", (F2,)))
    assert solver.resolve(TupleType((hole, RefType(hole)))) == TupleType((F2, RefType(F2)))


def test_unify_chains_holes_and_refuses_a_cycle():
    solver, a, b = Solver(), IncompleteType(), IncompleteType()
    assert solver.unify(a, b) and solver.unify(b, F2)
    assert solver.resolve(a) == F2
    c = IncompleteType()
    assert not solver.unify(c, TypeCall("List", (c,)))


def test_dynamic_dims_unify_with_static_ones_but_dtypes_and_ranks_must_agree():
    solver = Solver()
    assert solver.unify(TensorType((ANY,), "float32"), F2)
    assert not solver.unify(F2, TensorType((2,), "int32"))
    assert not solver.unify(F2, TensorType((2, 1), "float32"))


def test_type_variables_are_rigid():
    solver = Solver()
    assert solver.unify(TypeVar("A"), TypeVar("A"))
    assert not solver.unify(TypeVar("A"), F2)


def test_instantiate_gives_fresh_holes_per_use():
    poly = FuncType((TypeVar("A"),), TypeVar("A"), (TypeVar("A"),))
    first, second = instantiate(poly), instantiate(poly)
    assert isinstance(first.arg_types[0], IncompleteType) and first.arg_types[0] is first.ret_type
    assert first.arg_types[0] is not second.arg_types[0]
    solver = Solver()
    assert solver.unify(first.arg_types[0], F2) and solver.resolve(first.ret_type) == F2
    assert solver.is_complete(first.ret_type) and not solver.is_complete(second.ret_type)


def test_dynamic_dim_wins_when_a_hole_meets_a_static_then_a_dynamic_shape():
    # As TVM's unifier: unify(Tensor[(1, 3)], Tensor[(?, 3)]) is Tensor[(?, 3)].
    solver, hole = Solver(), IncompleteType()
    assert solver.unify(hole, TensorType((1, 3), "float32"))
    assert solver.join(hole, TensorType((ANY, 3), "float32")) == TensorType((ANY, 3), "float32")
    assert solver.resolve(hole) == TensorType((ANY, 3), "float32")
    assert solver.unify(hole, TensorType((5, 3), "float32"))  # 5 rows fit the widened type


def test_widening_reaches_every_hole_of_the_class_and_nested_parts():
    solver, a, b = Solver(), IncompleteType(), IncompleteType()
    assert solver.unify(a, TensorType((2,), "int32")) and solver.unify(b, TensorType((2,), "int32"))
    assert solver.unify(a, b)
    assert solver.unify(TypeCall("List", (b,)), TypeCall("List", (TensorType((ANY,), "int32"),)))
    assert solver.resolve(TupleType((a, b))) == TupleType((TensorType((ANY,), "int32"),) * 2)


def test_join_of_static_shapes_that_differ_is_refused():
    solver = Solver()
    assert solver.join(TensorType((1, 3), "float32"), TensorType((2, 3), "float32")) is None
    assert solver.join(F2, F2) is F2


def test_a_hole_cannot_join_a_type_that_mentions_its_own_class():
    solver, a, b = Solver(), IncompleteType(), IncompleteType()
    assert solver.unify(a, b)
    assert not solver.unify(b, TypeCall("List", (a,)))
