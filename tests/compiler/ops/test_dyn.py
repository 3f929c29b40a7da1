"""The dyn.* operators: TVM's type relations (`?` where a dim depends on a value), references
against numpy written here, shape rules with values known only at run time, the located errors of
bad inputs, and their text form."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.diagnostics import CompileError, InputError, TypeCheckError
from compiler.ir.attrs import Attrs
from compiler.ir.structural import structural_equal
from compiler.ir.types import ANY, TensorType, TupleType, Type
from compiler.backend.shape_func import lower_shape_func
from compiler.ops.dyn import static_form
from compiler.ops.registry import OpDef
from compiler.parser import parse
from compiler.parser.printer import astext
from compiler.passes.infer_type import InferType
from tests.compiler.backend.prim_library import build_prim_library
from tests.compiler.backend.test_shape_func import run
from tests.compiler.ops.samples import sample_inputs
from tests.compiler.ops.test_lowering import flatten, primitive_call
from tests.compiler.ops.test_shape_rules import DrawnCall, hide_dims

DYN_OPS = [op for op in ops.all_ops() if op.name.startswith("dyn.")]
F32 = "float32"


def run_op(name: str, *inputs: object, **attrs: object) -> object:
    op = ops.get(name)
    return op.reference([np.asarray(x) for x in inputs], op.make_attrs(attrs))


def main_type(text: str) -> Type:
    mod = InferType()(parse('#[version = "0.0.5"]\n' + text))
    func = mod.functions()[0][1]
    return func.body.checked_type  # type: ignore[attr-defined]  # a Function


def test_every_dyn_op_of_tvm_is_registered() -> None:
    names = {op.name for op in DYN_OPS}
    assert names == {
        "dyn.reshape", "dyn.broadcast_to", "dyn.zeros", "dyn.ones", "dyn.full", "dyn.tile", "dyn.strided_slice",
        "dyn.topk", "dyn.image.resize2d", "dyn.nn.pad", "dyn.expand_dims", "dyn.squeeze", "dyn.one_hot",
        "dyn.sparse_to_dense"}
    assert all(static_form(op.name) is not None for op in DYN_OPS)


# --- type relations -------------------------------------------------------------------------------

I64 = "int64"


@pytest.mark.parametrize(
    ("params", "call", "expected"),
    [
        ("%x: Tensor[(2, 3, 4), float32], %s: Tensor[(2), int64]", "dyn.reshape(%x, %s)",
         TensorType((ANY, ANY), F32)),
        ("%x: Tensor[(3, 1), int8], %s: Tensor[(3), int32]", "dyn.broadcast_to(%x, %s)",
         TensorType((ANY, ANY, ANY), "int8")),
        ("%s: Tensor[(2), int64]", 'dyn.zeros(%s, dtype="int32")', TensorType((ANY, ANY), "int32")),
        ("%s: Tensor[(1), int64]", 'dyn.ones(%s, dtype="float16")', TensorType((ANY,), "float16")),
        ("%v: float32, %s: Tensor[(3), int64]", "dyn.full(%v, %s)", TensorType((ANY, ANY, ANY), F32)),
        ("%v: float32, %s: Tensor[(1), int64]", 'dyn.full(%v, %s, dtype="int32")', TensorType((ANY,), "int32")),
        ("%x: Tensor[(2, 3), float32], %r: Tensor[(3), int64]", "dyn.tile(%x, %r)",
         TensorType((ANY, ANY, ANY), F32)),
        ("%x: Tensor[(2, 3, 4), float32], %r: Tensor[(1), int64]", "dyn.tile(%x, %r)",
         TensorType((ANY, ANY, ANY), F32)),
        # The axes past len(begin) keep their static dims, as in TVM.
        ("%x: Tensor[(4, 5, 6), float32], %b: Tensor[(1), int64], %e: Tensor[(1), int64], %t: Tensor[(1), int64]",
         "dyn.strided_slice(%x, %b, %e, %t)", TensorType((ANY, 5, 6), F32)),
        ("%x: Tensor[(3, 5), float32], %k: int32", "dyn.topk(%x, %k)",
         TupleType((TensorType((3, ANY), F32), TensorType((3, ANY), "int32")))),
        ("%x: Tensor[(3, 5), float32], %k: Tensor[(1), int64]", 'dyn.topk(%x, %k, axis=0, ret_type="indices", dtype="int64")',
         TensorType((ANY, 5), "int64")),
        ("%x: Tensor[(1, 4, 5, 3), float32], %s: Tensor[(2), int64], %r: Tensor[(4), float32]",
         'dyn.image.resize2d(%x, %s, %r, layout="NHWC")', TensorType((1, ANY, ANY, 3), F32)),
        ("%x: Tensor[(2, 3), float32], %w: Tensor[(2, 2), int64], %v: float32", "dyn.nn.pad(%x, %w, %v)",
         TensorType((ANY, ANY), F32)),
        ("%x: Tensor[(2, 3), float32], %a: int64", "dyn.expand_dims(%x, %a, num_newaxis=2)",
         TensorType((ANY, ANY, ANY, ANY), F32)),
        ("%x: Tensor[(1, 3, 1), float32], %a: Tensor[(2), int64]", "dyn.squeeze(%x, %a)", TensorType((ANY,), F32)),
        ("%i: Tensor[(2, 3), int32], %on: float32, %off: float32, %d: int32",
         'dyn.one_hot(%i, %on, %off, %d, axis=1, dtype="float32")', TensorType((2, ANY, 3), F32)),
        ("%i: Tensor[(2, 2), int32], %v: Tensor[(2), float16], %z: float16, %s: Tensor[(3), int64]",
         "dyn.sparse_to_dense(%i, %v, %z, %s)", TensorType((ANY, ANY, ANY), "float16")),
    ],
)
def test_type_relation_gives_unknown_dims_where_values_decide(params: str, call: str, expected: Type) -> None:
    assert main_type(f"def @main({params}) {{ {call} }}") == expected


def test_type_relation_keeps_unknown_dims_for_a_constant_shape_until_dynamic_to_static() -> None:
    """As in TVM: the relation reads the shape's type, never its value."""
    op = ops.get("dyn.reshape")
    types = [TensorType((2, 3), F32), TensorType((2,), I64)]
    assert op.type_rel(types, op.make_attrs({}), [None, np.array([3, 2])]) == TensorType((ANY, ANY), F32)


@pytest.mark.parametrize(
    ("params", "call", "message"),
    [
        ("%x: Tensor[(2, 3), float32], %s: Tensor[(2), float32]", "dyn.reshape(%x, %s)",
         "dyn.reshape: newshape must be a 1-D integer tensor, got Tensor[(2), float32]"),
        ("%x: Tensor[(2, 3), float32], %s: Tensor[(?), int64]", "dyn.reshape(%x, %s)",
         "dyn.reshape: newshape Tensor[(?), int64] must have a static length (it gives the result's rank)"),
        ("%x: Tensor[(4, 5), float32], %b: Tensor[(2), int64], %e: Tensor[(1), int64], %t: Tensor[(2), int64]",
         "dyn.strided_slice(%x, %b, %e, %t)", "dyn.strided_slice: begin, end and strides must have one length"),
        ("%x: Tensor[(4, 5), float32], %b: Tensor[(3), int64], %e: Tensor[(3), int64], %t: Tensor[(3), int64]",
         "dyn.strided_slice(%x, %b, %e, %t)", "dyn.strided_slice: begin slices 3 axes of Tensor[(4, 5), float32]"),
        ("%x: Tensor[(3, 5), float32], %k: Tensor[(2), int64]", "dyn.topk(%x, %k)",
         "dyn.topk: k must be an integer scalar"),
        ("%x: Tensor[(2, 3), float32], %w: Tensor[(3, 2), int64], %v: float32", "dyn.nn.pad(%x, %w, %v)",
         "dyn.nn.pad: pad_width must be an integer tensor of shape (2, 2)"),
        ("%v: Tensor[(2), float32], %s: Tensor[(1), int64]", "dyn.full(%v, %s)",
         "dyn.full: fill_value must be a scalar (0-d)"),
        ("%x: Tensor[(1, 2, 3, 4), float32], %s: Tensor[(3), int64], %r: Tensor[(4), float32]",
         "dyn.image.resize2d(%x, %s, %r)", "dyn.image.resize2d: size must hold the 2 output sizes"),
    ],
)
def test_bad_input_types_are_located_errors_naming_the_op(params: str, call: str, message: str) -> None:
    text = f"def @main({params}) {{\n  {call}\n}}"
    with pytest.raises(TypeCheckError) as info:
        main_type(text)
    err = info.value
    assert message in err.message
    assert (err.line, err.column) == (3, 3)


# --- references against numpy ---------------------------------------------------------------------


def test_reshape_reference_copies_zero_and_infers_minus_one() -> None:
    x = np.arange(24, dtype=F32).reshape(2, 3, 4)
    np.testing.assert_array_equal(run_op("dyn.reshape", x, np.array([4, 0, -1])), x.reshape(4, 3, 2))
    np.testing.assert_array_equal(run_op("dyn.reshape", x, np.array([-1], "int32")), x.reshape(24))


def test_broadcast_zeros_ones_and_full_references() -> None:
    x = np.array([[1.0], [2.0]], F32)
    np.testing.assert_array_equal(run_op("dyn.broadcast_to", x, np.array([3, 2, 4])), np.broadcast_to(x, (3, 2, 4)))
    np.testing.assert_array_equal(run_op("dyn.zeros", np.array([2, 3]), dtype="int8"), np.zeros((2, 3), "int8"))
    np.testing.assert_array_equal(run_op("dyn.ones", np.array([4]), dtype=F32), np.ones(4, F32))
    full = run_op("dyn.full", np.array(2.5, F32), np.array([2, 2]), dtype="int32")
    np.testing.assert_array_equal(full, np.full((2, 2), 2, "int32"))


def test_tile_strided_slice_and_pad_references() -> None:
    x = np.arange(6, dtype=F32).reshape(2, 3)
    np.testing.assert_array_equal(run_op("dyn.tile", x, np.array([2, 1, 2])), np.tile(x, (2, 1, 2)))
    y = np.arange(60, dtype=F32).reshape(4, 5, 3)
    got = run_op("dyn.strided_slice", y, np.array([3, 0]), np.array([0, 5]), np.array([-2, 2]))
    np.testing.assert_array_equal(got, y[3:0:-2, 0:5:2])
    got = run_op("dyn.strided_slice", y, np.array([1]), np.array([2]), np.array([1]), slice_mode="size")
    np.testing.assert_array_equal(got, y[1:3])
    padded = run_op("dyn.nn.pad", x, np.array([[1, 0], [0, 2]]), np.array(9.0, F32))
    np.testing.assert_array_equal(padded, np.pad(x, ((1, 0), (0, 2)), constant_values=9.0))
    reflected = run_op("dyn.nn.pad", x, np.array([[1, 1], [2, 0]]), np.array(0.0, F32), pad_mode="reflect")
    np.testing.assert_array_equal(reflected, np.pad(x, ((1, 1), (2, 0)), mode="reflect"))


def test_topk_reference_sorts_along_the_axis() -> None:
    x = np.array([[3.0, 1.0, 4.0, 1.5], [9.0, 2.0, 6.0, 5.0]], F32)
    values, indices = run_op("dyn.topk", x, np.array(2, "int32"))  # type: ignore[misc]  # a pair
    np.testing.assert_array_equal(values, -np.sort(-x, axis=1)[:, :2])
    np.testing.assert_array_equal(indices, np.argsort(-x, axis=1, kind="stable")[:, :2].astype("int32"))
    smallest = run_op("dyn.topk", x, np.array([1]), axis=0, ret_type="values", is_ascend=True)
    np.testing.assert_array_equal(smallest, x.min(axis=0, keepdims=True))


def test_resize_expand_squeeze_one_hot_and_sparse_to_dense_references() -> None:
    x = np.arange(6, dtype=F32).reshape(1, 1, 2, 3)
    up = run_op("dyn.image.resize2d", x, np.array([4, 6]), np.zeros(4, F32), method="nearest_neighbor",
                coordinate_transformation_mode="asymmetric", rounding_method="floor")
    np.testing.assert_array_equal(up, x.repeat(2, axis=2).repeat(2, axis=3))
    y = np.ones((2, 3), F32)
    assert np.shape(run_op("dyn.expand_dims", y, np.array(-1), num_newaxis=2)) == (2, 3, 1, 1)
    assert np.shape(run_op("dyn.squeeze", np.ones((1, 3, 1), F32), np.array([-1]))) == (1, 3)
    hot = run_op("dyn.one_hot", np.array([0, 2]), np.array(5.0, F32), np.array(0.0, F32), np.array(3), dtype=F32)
    np.testing.assert_array_equal(hot, np.eye(3, dtype=F32)[[0, 2]] * 5.0)
    dense = run_op("dyn.sparse_to_dense", np.array([[0, 1], [2, 0]]), np.array([7.0, 8.0], F32), np.array(0.5, F32),
                   np.array([3, 2]))
    want = np.full((3, 2), 0.5, F32)
    want[0, 1], want[2, 0] = 7.0, 8.0
    np.testing.assert_array_equal(dense, want)


@pytest.mark.parametrize(
    ("name", "inputs", "message"),
    [
        ("dyn.reshape", (np.ones((2, 3), F32), np.array([4, 2])), "dyn.reshape: reshape: cannot reshape"),
        ("dyn.reshape", (np.ones((2, 3), F32), np.array([-2, 3])), "dyn.reshape: newshape [-2, 3]: value -2"),
        ("dyn.reshape", (np.ones((2, 3), F32), np.array([[6]])), "dyn.reshape: newshape must be a 1-D integer tensor"),
        ("dyn.strided_slice", (np.ones((2, 3), F32), np.array([0]), np.array([1]), np.array([0])),
         "dyn.strided_slice: strided_slice: strides [0] contains 0"),
        ("dyn.broadcast_to", (np.ones((2, 3), F32), np.array([4, 3])), "dyn.broadcast_to: broadcast_to"),
    ],
)
def test_values_the_static_op_refuses_are_input_errors_naming_the_dyn_op(
    name: str, inputs: tuple[np.ndarray, ...], message: str
) -> None:
    with pytest.raises(InputError) as info:
        run_op(name, *inputs)
    assert info.value.message.startswith(message)


# --- shape rules on run-time values ---------------------------------------------------------------


def _runtime_call(op: OpDef, index: int) -> DrawnCall:
    """Sample `index` with every input a parameter: the value arguments (read as data) keep
    their static length, the others have every dim `?`."""
    values, types = sample_inputs(op, index)
    hidden = [t if op.reads_data(k) else hide_dims(t) for k, t in enumerate(types)]
    attrs: Attrs = op.make_attrs(op.samples[index].attrs)
    func = primitive_call(op, hidden, attrs)
    expected = [list(np.shape(r)) for r in flatten(op.reference(values, attrs))]  # type: ignore[arg-type]
    return DrawnCall(func, [np.asarray(v) for v in values], expected)


def _runtime_params() -> list[object]:
    return [pytest.param(op, k, id=f"{op.name}-{k}") for op in DYN_OPS for k in range(len(op.samples))]


@pytest.mark.parametrize(("op", "index"), _runtime_params())
def test_shape_rule_reads_values_given_at_run_time(op: OpDef, index: int) -> None:
    call = _runtime_call(op, index)
    shape_func = lower_shape_func(call.func, f"shape_{op.name.replace('.', '_')}_{index}")
    # Only the value arguments are passed by data, as TVM registers the op.
    for k, state in enumerate(shape_func.param_states):
        assert bool(state & 1) == op.reads_data(k), f"parameter {k} has state {state}"
    assert run(shape_func.prim_func, *call.shape_inputs(shape_func)) == call.expected


def test_compiled_shape_functions_read_values_given_at_run_time(tmp_path: Path) -> None:
    calls = {}
    for op in DYN_OPS:
        for index in range(len(op.samples)):
            name = f"shape_{op.name.replace('.', '_')}_{index}"
            call = _runtime_call(op, index)
            calls[name] = (call, lower_shape_func(call.func, name))
    library = build_prim_library([sf.prim_func for _, sf in calls.values()], tmp_path, "dyn_shapes")
    assert library.broken == {} and library.warnings == []
    for name, (call, shape_func) in calls.items():
        got = [o.tolist() for o in library.run(name, call.shape_inputs(shape_func))]
        assert got == call.expected, name


def test_reshape_rule_infers_minus_one_from_runtime_dims_and_values() -> None:
    op = ops.get("dyn.reshape")
    func = primitive_call(op, [TensorType((ANY, ANY, 4), F32), TensorType((3,), I64)], op.make_attrs({}))
    shape_func = lower_shape_func(func, "reshape_rule")
    assert run(shape_func.prim_func, [5, 3, 4], [0, -1, 2]) == [[5, 6, 2]]
    assert run(shape_func.prim_func, [2, 3, 4], [4, 0, -1]) == [[4, 3, 2]]


# --- text form ------------------------------------------------------------------------------------


def test_dotted_dyn_names_parse_and_print_back() -> None:
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 3, 4), float32], %s: Tensor[(2), int64], %r: Tensor[(4), float32],
          %w: Tensor[(4, 2), int64], %v: float32) {
  %0 = dyn.image.resize2d(%x, %s, %r, size=[], roi=None, method="nearest_neighbor");
  %1 = dyn.nn.pad(%0, %w, %v, pad_width=[], pad_mode="edge");
  dyn.reshape(%1, shape_of(%x), newshape=[])
}
"""
    mod = parse(text)
    printed = astext(mod)
    assert "dyn.image.resize2d(" in printed and "dyn.nn.pad(" in printed and 'pad_mode="edge"' in printed
    assert structural_equal(parse(printed), mod)


def test_unknown_attribute_of_a_dyn_op_is_a_located_error() -> None:
    with pytest.raises(CompileError) as info:
        parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32], %s: Tensor[(1), int64]) {\n'
              "  dyn.reshape(%x, %s, shape=[2])\n}\n")
    assert "operator dyn.reshape has no attribute shape" in info.value.message
    assert info.value.line == 3
