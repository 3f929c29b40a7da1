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
