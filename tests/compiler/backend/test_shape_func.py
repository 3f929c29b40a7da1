"""Shape functions: their calling convention (states, buffers) and the shapes they compute.

Most cases run a shape function by substituting the input shapes (or data) into its loop-level
body and simplifying each output dim to a constant; one compiles it to C and calls it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.backend.codegen_c import emit_c_module
from compiler.backend.shape_func import (
    DATA_DEPENDENT,
    SHAPE_DEPENDENT,
    lower_shape_func,
    shape_func_label,
    shape_rule,
)
from compiler.diagnostics import UnsupportedError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Function, Op, Var
from compiler.ir.types import ANY, TensorType, Type
from compiler.ops.shape_rules import ShapeArg
from compiler.ops import registry
from compiler.parser import parse_expr
from compiler.passes.infer_type import infer_expr
from compiler.runtime.build import build_shared_library, compile_check
from compiler.runtime.ffi import load_library, prim_func_cdef
from compiler.tir import expr as te
from compiler.tir.analysis import ExprRewriter, walk_stmts
from compiler.tir.compute import TensorView
from compiler.tir.simplify import simplify_expr
from compiler.tir.stmt import PrimFunc, Store


def typed(text: str) -> Function:
    func = parse_expr(text)
    assert isinstance(func, Function)
    infer_expr(func)
    return func


def constant(expr: te.PrimExpr, values: dict[te.Buffer, np.ndarray]) -> int:
    """The value of `expr` once loads of `values`' buffers are replaced by their contents."""

    def substitute(node: te.PrimExpr) -> te.PrimExpr:
        if isinstance(node, te.Load) and node.buffer in values:
            index = tuple(constant(i, values) for i in node.indices)
            return te.Const(values[node.buffer][index].item(), node.buffer.dtype)
        return node

    result = simplify_expr(ExprRewriter(substitute)(expr))
    assert isinstance(result, te.Const), f"not a closed expression: {result}"
    return int(result.value)


def run(prim_func: PrimFunc, *inputs: Sequence[int] | np.ndarray) -> list[list[int]]:
    """The output shapes `prim_func` writes for the given input shapes (or data)."""
    values = {b: np.asarray(v, dtype=b.dtype) for b, v in zip(prim_func.inputs, inputs, strict=True)}
    outputs = {b: [0] * int(b.shape[0]) for b in prim_func.outputs}  # type: ignore[call-overload]  # static rank
    for stmt in walk_stmts(prim_func.body):
        if isinstance(stmt, Store):
            outputs[stmt.buffer][constant(stmt.indices[0], values)] = constant(stmt.value, values)
    return [outputs[b] for b in prim_func.outputs]


def test_broadcast_shape_function_computes_numpy_broadcast_of_runtime_shapes() -> None:
    func = typed("""fn (%x: Tensor[(?, 1, 7), float32], %y: Tensor[(?, 1), float32]) -> Tensor[(?, ?, 7), float32] {
        add(%x, %y)
    }""")
    shape_func = lower_shape_func(func, "shape_func_add")
    pf = shape_func.prim_func
    assert shape_func.param_states == (SHAPE_DEPENDENT, SHAPE_DEPENDENT)
    assert (shape_func.num_inputs, shape_func.num_outputs) == (2, 1)
    assert [(b.name, b.shape, b.dtype) for b in pf.params] == [
        ("x_shape", (3,), "int64"), ("y_shape", (2,), "int64"), ("out_shape", (3,), "int64")]
    assert run(pf, [4, 1, 7], [3, 1]) == [[4, 3, 7]]
    assert run(pf, [1, 1, 7], [1, 1]) == [[1, 1, 7]]
    assert any(isinstance(node, te.Select) for s in walk_stmts(pf.body) if isinstance(s, Store)
               for node in [s.value])
    assert dict(pf.attrs) == {"global_symbol": "shape_func_add", "target": "c", "shape_func": 1}


def test_shape_function_follows_chains_lets_and_nested_function_literals() -> None:
    func = typed("""fn (%x: Tensor[(?, 7), float32], %c: Tensor[(?, 1), bool], %z: Tensor[(7,), float32]) -> Tensor[(?, 7), float32] {
        let %e = exp(%x);
        %0 = fn (%p: Tensor[(?, 7), float32], %q: Tensor[(7,), float32], Composite="test.add_relu") -> Tensor[(?, 7), float32] {
            nn.relu(add(%p, %q))
        };
        %1 = %0(%e, %z);
        where(%c, %1, %z)
    }""")
    shape_func = lower_shape_func(func, "f")
    assert run(shape_func.prim_func, [5, 7], [5, 1], [7]) == [[5, 7]]
    assert shape_func_label(func) == "shape_func_exp_add_nn_relu_where"


def test_shape_function_follows_calls_of_let_bound_function_literals() -> None:
    # A partitioned function may bind its composites with `let` (as written by hand, or by
    # other tools) and call them through the variable.
    func = typed("""fn (%x: Tensor[(?, 7), float32], %z: Tensor[(7,), float32]) -> Tensor[(?, 7), float32] {
        let %f = fn (%p: Tensor[(?, 7), float32], %q: Tensor[(7,), float32], Composite="test.add_relu") {
            nn.relu(add(%p, %q))
        };
        let %y = %f(%x, %z);
        exp(%y)
    }""")
    shape_func = lower_shape_func(func, "f")
    assert shape_func.param_states == (SHAPE_DEPENDENT, SHAPE_DEPENDENT)
    assert run(shape_func.prim_func, [5, 7], [7]) == [[5, 7]]


def test_shape_function_takes_no_input_for_parameters_it_does_not_need() -> None:
    func = typed("""fn (%x: Tensor[(?, 3), float32], %unused: Tensor[(2,), float32]) -> Tensor[(?, 3), float32] {
        negative(%x)
    }""")
    shape_func = lower_shape_func(func, "f")
    assert shape_func.param_states == (SHAPE_DEPENDENT, 0)
    assert shape_func.num_inputs == 1
    assert run(shape_func.prim_func, [9, 3]) == [[9, 3]]


def test_shape_function_writes_one_buffer_per_result_of_a_tuple() -> None:
    func = typed("""fn (%x: Tensor[(?, 3), float32], %y: Tensor[(3,), float32]) -> (Tensor[(?, 3), float32], Tensor[(3,), float32]) {
        (add(%x, %y), %y)
    }""")
    shape_func = lower_shape_func(func, "f")
    assert [b.name for b in shape_func.prim_func.outputs] == ["out_shape0", "out_shape1"]
    assert shape_func.num_outputs == 2
    assert run(shape_func.prim_func, [2, 3], [3]) == [[2, 3], [3]]


def test_tuple_parameter_passes_one_shape_buffer_per_field() -> None:
    func = typed("""fn (%t: (Tensor[(?, 3), float32], Tensor[(3,), float32])) -> Tensor[(?, 3), float32] {
        add(%t.0, %t.1)
    }""")
    shape_func = lower_shape_func(func, "f")
    assert shape_func.param_states == (SHAPE_DEPENDENT,)
    assert [b.name for b in shape_func.prim_func.inputs] == ["t_0_shape", "t_1_shape"]
    assert run(shape_func.prim_func, [8, 3], [3]) == [[8, 3]]


def test_shape_function_names_the_operator_without_shape_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, "transpose", dataclasses.replace(ops.get("transpose"), shape_func=None))
    func = typed("""fn (%x: Tensor[(?, 3), float32]) -> Tensor[(3, ?), float32] { transpose(%x, axes=[1, 0]) }""")
    with pytest.raises(UnsupportedError, match="operator transpose has no shape function"):
        lower_shape_func(func, "f")


def test_shape_function_uses_the_rule_an_operator_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    def flatten_rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[te.PrimExpr, ...]]:
        dims = inputs[0]
        assert isinstance(dims, tuple)
        return [(dims[0], dims[1] * dims[2])]

    opdef = ops.get("nn.batch_flatten")
    monkeypatch.setitem(registry._REGISTRY, "nn.batch_flatten", dataclasses.replace(opdef, shape_func=flatten_rule))
    func = typed("""fn (%x: Tensor[(?, 3, 4), float32]) -> Tensor[(?, 12), float32] { nn.batch_flatten(%x) }""")
    assert shape_rule("nn.batch_flatten") is flatten_rule
    assert run(lower_shape_func(func, "f").prim_func, [6, 3, 4]) == [[6, 12]]


def _register_data_dependent_op(monkeypatch: pytest.MonkeyPatch) -> str:
    """`test.ones_of(n)`: a vector of ones whose length is the value of the int64 scalar `n`."""

    def rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[te.PrimExpr, ...]]:
        data = inputs[0]
        assert isinstance(data, TensorView)
        return [(data[0],)]

    opdef = registry.OpDef(
        "test.ones_of", 1, lambda types, attrs: TensorType((ANY,), "float32"), registry.OpPattern.OPAQUE,
        lambda arrays, attrs: np.ones(int(arrays[0][0]), "float32"),
        shape_func=rule, shape_data_dependent=True,
    )
    monkeypatch.setitem(registry._REGISTRY, opdef.name, opdef)
    return opdef.name


def test_data_dependent_operator_gets_the_parameter_data(monkeypatch: pytest.MonkeyPatch) -> None:
    name = _register_data_dependent_op(monkeypatch)
    n = Var("n", TensorType((1,), "int64"))
    x = Var("x", TensorType((ANY,), "float32"))
    func = Function((n, x), Call(Op.get("multiply"), (Call(Op.get(name), (n,)), x)))
    infer_expr(func)
    shape_func = lower_shape_func(func, "f")
    assert shape_func.param_states == (DATA_DEPENDENT, SHAPE_DEPENDENT)
    data, shape = shape_func.prim_func.inputs
    assert (data.name, data.shape, data.dtype) == ("n", (1,), "int64")
    assert run(shape_func.prim_func, np.array([5]), [1]) == [[5]]


def test_data_dependent_operator_on_an_intermediate_value_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    name = _register_data_dependent_op(monkeypatch)
    n = Var("n", TensorType((1,), "int64"))
    func = Function((n,), Call(Op.get(name), (Call(Op.get("negative"), (n,)),)))
    infer_expr(func)
    with pytest.raises(UnsupportedError, match="only function parameters can be passed"):
        lower_shape_func(func, "f")


def test_shape_function_rejects_control_flow() -> None:
    func = typed("""fn (%c: bool, %x: Tensor[(?,), float32]) -> Tensor[(?,), float32] {
        if (%c) { %x } else { negative(%x) }
    }""")
    with pytest.raises(UnsupportedError, match="control flow"):
        lower_shape_func(func, "f")


def test_long_shape_function_label_is_cut_and_hashed_like_kernel_names() -> None:
    body = "%x"
    for _ in range(12):
        body = f"negative({body})"
    label = shape_func_label(typed(f"fn (%x: Tensor[(2,), float32]) {{ {body} }}"))
    assert label.startswith("shape_func_negative_negative")
    assert len(label) > 80 and label.endswith("_")
    assert label[80] == "_" and all(c in "0123456789abcdef" for c in label[81:-1])


def test_shape_function_compiles_to_c_that_computes_the_broadcast_shape(tmp_path: Path) -> None:
    func = typed("""fn (%x: Tensor[(?, 1, 7), float32], %y: Tensor[(?, 1), float32]) -> Tensor[(?, ?, 7), float32] {
        nn.relu(add(%x, %y))
    }""")
    prim_func = lower_shape_func(func, "shape_func_add_nn_relu").prim_func
    source = emit_c_module([prim_func])
    assert compile_check(source) == []
    path = tmp_path / "shape_func.c"
    path.write_text(source)
    lib = load_library(build_shared_library([path], tmp_path / "libshape.so"), prim_func_cdef(prim_func))
    try:
        for x_shape, y_shape, expected in [([4, 1, 7], [3, 1], [4, 3, 7]), ([2, 1, 7], [1, 1], [2, 1, 7])]:
            out = np.zeros(3, "int64")
            assert lib.call(prim_func.name, np.array(x_shape, "int64"), np.array(y_shape, "int64"), out) == 0
            assert out.tolist() == expected
    finally:
        lib.close()


def test_data_dependent_rule_reads_constant_arguments_as_folded_values() -> None:
    # arange with a constant start and step and a run-time stop: only %stop is passed, by data.
    stop = Var("stop", TensorType((), "float32"))
    start, step = Constant(np.array(0.5, "float32")), Constant(np.array(0.25, "float32"))
    func = Function((stop,), Call(Op.get("arange"), (start, stop, step), ops.get("arange").make_attrs({"dtype": "float32"})))
    infer_expr(func)
    shape_func = lower_shape_func(func, "f")
    assert shape_func.param_states == (DATA_DEPENDENT,)
    assert [b.name for b in shape_func.prim_func.inputs] == ["stop"]
    assert run(shape_func.prim_func, np.array(2.0)) == [[6]]
    assert run(shape_func.prim_func, np.array(2.1)) == [[7]]
    assert run(shape_func.prim_func, np.array(0.0)) == [[0]]  # an empty range, not a negative length


def test_constant_argument_of_a_shape_rule_gives_its_shape() -> None:
    x = Var("x", TensorType((ANY, 3), "float32"))
    func = Function((x,), Call(Op.get("add"), (x, Constant(np.ones((1, 3), "float32")))))
    infer_expr(func)
    shape_func = lower_shape_func(func, "f")
    assert shape_func.param_states == (SHAPE_DEPENDENT,)
    assert run(shape_func.prim_func, [4, 3]) == [[4, 3]]


def test_shape_rule_reading_a_constant_at_a_computed_index_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    name = _register_data_dependent_op(monkeypatch)

    def rule(inputs: Sequence[ShapeArg], attrs: Attrs, out_type: Type) -> list[tuple[te.PrimExpr, ...]]:
        data = inputs[0]
        assert isinstance(data, TensorView)
        return [(data[te.Var("i", "int32")],)]

    monkeypatch.setitem(registry._REGISTRY, name, dataclasses.replace(ops.get(name), shape_func=rule))
    func = Function((), Call(Op.get(name), (Constant(np.array([3], "int64")),)))
    infer_expr(func)
    with pytest.raises(UnsupportedError, match="test.ones_of reads a Constant at a computed index"):
        lower_shape_func(func, "f")
