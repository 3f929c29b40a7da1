"""Symbolic types of primitive functions with `?` dims: dim variables for the parameters,
expressions from the ops' shape rules for everything else."""

from __future__ import annotations

import dataclasses

import pytest

from compiler import ops

from compiler.backend.symbolic_shapes import SymbolicShapes, has_dynamic_types, shapes_equal
from compiler.ops.common import same_dim as dim_equal
from compiler.diagnostics import UnsupportedError
from compiler.ir.expr import Function
from compiler.ir.types import TensorType
from compiler.ops import registry
from compiler.parser import parse_expr
from compiler.passes.infer_type import infer_expr
from compiler.tir import expr as te


def typed(text: str) -> Function:
    func = parse_expr(text)
    assert isinstance(func, Function)
    infer_expr(func)
    return func


def symbolic(text: str) -> tuple[Function, SymbolicShapes]:
    func = typed(text)
    return func, SymbolicShapes.of(func, [p.name_hint for p in func.params], lambda base: base)


def test_function_with_a_dynamic_parameter_or_value_is_dynamic() -> None:
    assert has_dynamic_types(typed("fn (%x: Tensor[(?, 2), float32]) { exp(%x) }"))
    assert not has_dynamic_types(typed("fn (%x: Tensor[(3, 2), float32]) { exp(%x) }"))


def test_each_unknown_parameter_dim_gets_a_variable() -> None:
    func, shapes = symbolic("fn (%x: Tensor[(?, 2, ?), float32]) { exp(%x) }")
    assert [v.name for v in shapes.scalars] == ["x_dim0", "x_dim2"]
    ty = shapes.type_of(func.params[0])
    assert isinstance(ty, TensorType) and ty.shape[1] == 2 and ty.shape[0] is shapes.scalars[0]


def test_rule_results_that_fold_to_constants_become_ints() -> None:
    func, shapes = symbolic("fn (%x: Tensor[(?, 1), float32], %y: Tensor[(4), float32]) { add(%x, %y) }")
    ty = shapes.type_of(func.body)
    assert isinstance(ty, TensorType) and ty.shape[1] == 4 and ty.shape[0] is shapes.scalars[0]


def test_same_dims_reached_two_ways_compare_equal() -> None:
    n = te.Var("n", "int64")
    assert dim_equal(n + 1, 1 + n)
    assert dim_equal(3, 3) and not dim_equal(3, 4) and not dim_equal(n, n + 1)
    assert shapes_equal(TensorType((n, 2), "float32"), TensorType((n, 2), "int8"))  # type: ignore[arg-type]


def test_data_dependent_op_cannot_give_a_kernel_its_dims(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, "exp", dataclasses.replace(ops.get("exp"), shape_data_dependent=True))
    with pytest.raises(UnsupportedError, match="exp: its result shape depends on values"):
        symbolic("fn (%x: Tensor[(?), float32]) { exp(%x) }")


def test_static_calls_keep_their_checked_types() -> None:
    func, shapes = symbolic("fn (%x: Tensor[(?), float32], %y: Tensor[(3), float32]) { (exp(%x), exp(%y)) }")
    static_call = func.body.fields[1]  # type: ignore[attr-defined]
    assert shapes.type_of(static_call) is static_call.checked_type


def test_broadcast_of_two_unknown_batches_keeps_the_first_and_records_the_pair() -> None:
    func, shapes = symbolic("fn (%a: Tensor[(?, 4), float32], %b: Tensor[(?, 4), float32]) { add(%a, %b) }")
    out = shapes.type_of(func.body)
    assert isinstance(out, TensorType) and out.shape[0] is shapes.scalars[0]
    assert shapes.equal_scalars == [(0, 1)]
    assert shapes.checks() == {"equal_scalars": ((0, 1),)}


def test_reshape_from_an_unknown_batch_to_a_static_shape_records_the_element_counts() -> None:
    _, shapes = symbolic("fn (%a: Tensor[(?, 1, 4), float32]) { reshape(%a, newshape=[1, 4]) }")
    assert shapes.equal_counts == [(((0,), 4), ((), 4))]


def test_data_dependent_rule_reads_the_parameter_buffer_the_kernel_takes() -> None:
    func, shapes = symbolic(
        "fn (%a: Tensor[(?, 6), float32], %s: Tensor[(2), int64]) { dyn.reshape(%a, %s) }")
    (s_buffer,) = shapes.data_buffers.values()
    assert s_buffer.shape == (2,) and s_buffer.dtype == "int64"
    out = shapes.type_of(func.body)
    assert isinstance(out, TensorType) and not all(isinstance(d, int) for d in out.shape)


def test_data_dependent_rule_of_a_value_computed_inside_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="dyn.reshape: its result shape depends on values computed inside"):
        symbolic("fn (%a: Tensor[(?, 6), float32]) { dyn.reshape(%a, shape_of(%a)) }")
