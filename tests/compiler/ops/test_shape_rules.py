"""Every operator's shape rule, checked on calls drawn from its declared domain.

For each drawn call the inputs' dims are hidden behind `?` (all of them where the type relation
accepts that, else those of the first input), the call's shape function is built from the
op's rule (compiler/backend/shape_func.py), and the shapes it computes for the drawn inputs
must equal the shape of the numpy reference's result. Most draws are checked by evaluating the
shape function's loop-level body; a few per op are compiled to C and called, so the C path is
checked too.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.backend.shape_func import ShapeFunction, lower_shape_func
from compiler.diagnostics import TypeCheckError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Function
from compiler.ir.types import ANY, TensorType, TupleType, Type
from compiler.ops.domain import RandomDraw
from compiler.ops.registry import OpDef, Sample, TypeRelationError
from compiler.ops.layout import parse_layout
from compiler.ops.shape_rules import (
    ShapeRuleError,
    broadcast_dims,
    conv_output_dim,
    fill,
    layout_dims,
    relaid_out,
    same_shape_rule,
    static_rule,
    window_count,
)
from compiler.tir import expr as te
from tests.built_once import built_once
from tests.compiler.backend.prim_library import PrimLibrary, build_prim_library
from tests.compiler.backend.test_shape_func import run
from tests.compiler.ops.samples import materialize, sample_rng
from tests.compiler.ops.test_lowering import constant_args, flatten, primitive_call

ALL_OPS = [op for op in ops.all_ops() if not op.extras.get("internal")]
RULE_OPS = [op for op in ALL_OPS if op.shape_func is not None]
# Draws per op whose shape function is evaluated, and of those, how many are compiled to C.
EVALUATED_DRAWS = 12
COMPILED_DRAWS = 2


def _op_params(selected: list[OpDef]) -> list[object]:
    return [pytest.param(op, id=op.name) for op in selected]


def hide_dims(ty: Type) -> Type:
    """`ty` with every dim `?`."""
    if isinstance(ty, TupleType):
        return TupleType(tuple(hide_dims(f) for f in ty.fields))
    if isinstance(ty, TensorType):
        return TensorType(tuple(ANY for _ in ty.shape), ty.dtype)
    return ty


@dataclass(frozen=True)
class DrawnCall:
    """A drawn call, prepared for its shape function: the function with hidden dims, the
    values of its runtime inputs (in parameter order), and the reference result's shapes."""

    func: Function
    inputs: list[np.ndarray]
    expected: list[list[int]]

    def shape_inputs(self, shape_func: ShapeFunction) -> list[np.ndarray]:
        """What the shape function takes for these inputs: per parameter, its data when the
        state asks for it, then its shape."""
        out: list[np.ndarray] = []
        for value, state in zip(self.inputs, shape_func.param_states, strict=True):
            if state & 1:
                out.append(value)
            if state & 2:
                out.append(np.asarray(value.shape, "int64"))
        return out


def _draw(op: OpDef, k: int) -> Sample:
    assert op.domain is not None
    return op.domain.draw(RandomDraw(zlib.crc32(op.name.encode()) + 7919 * (k + 1)))


def prepare(op: OpDef, k: int) -> DrawnCall:
    sample = _draw(op, k)
    rng = sample_rng(op, k)
    parts = [materialize(entry, sample, rng) for entry in sample.inputs]
    values = [value for value, _ in parts]
    types = [ty for _, ty in parts]
    attrs = op.make_attrs(sample.attrs)
    constants = constant_args(op, values, sample)
    result = op.reference(values, attrs)  # type: ignore[arg-type]  # tuple-valued inputs too
    expected = [list(np.shape(r)) for r in flatten(result)]
    func = _hidden_call(op, types, attrs, constants)
    runtime = [v for k2, v in enumerate(values) if constants is None or constants[k2] is None]
    return DrawnCall(func, list(flatten(tuple(runtime))), expected)


def _hidden_call(op: OpDef, types: list[Type], attrs: Attrs, constants: list[np.ndarray | None] | None) -> Function:
    """The call with as many dims hidden as its type relation accepts: all inputs', else the
    first input's, else none (an op whose relation needs every dim, such as a conv weight's
    kernel size, still gets its rule checked on static types)."""
    hidden_first = [hide_dims(types[0]), *types[1:]] if types else types
    for candidate in ([hide_dims(t) for t in types], hidden_first, types):
        try:
            return primitive_call(op, candidate, attrs, constants)
        except (TypeRelationError, TypeCheckError):  # InferType reports a relation's refusal located
            continue
    raise AssertionError("unreachable: the static types type-check")


def check_rule(op: OpDef, k: int, call: DrawnCall, shape_func: ShapeFunction) -> None:
    got = run(shape_func.prim_func, *call.shape_inputs(shape_func))
    assert got == call.expected, f"{op.name} draw {k}: shape function gave {got}, the reference {call.expected}"


# --- declarations ---------------------------------------------------------------------------------

# call_lowered's result shape is its callee's, which has a shape function of its own; the VM's
# memory ops exist only after ManifestAlloc, whose calls pass every shape explicitly.
def _needs_rule(op: OpDef) -> bool:
    return op.name != "call_lowered" and not op.name.startswith(("memory.", "vm."))


@pytest.mark.parametrize("op", _op_params([op for op in ops.all_ops() if _needs_rule(op)]))
def test_every_op_declares_a_shape_rule(op: OpDef) -> None:
    assert op.shape_func is not None, f"{op.name} declares no shape rule, so a `?` dim stops at it"


# --- the rules on drawn calls ---------------------------------------------------------------------


@pytest.mark.parametrize("op", _op_params(RULE_OPS))
def test_shape_rule_computes_the_reference_shape_of_drawn_calls(op: OpDef) -> None:
    for k in range(EVALUATED_DRAWS):
        call = prepare(op, k)
        shape_func = lower_shape_func(call.func, f"shape_func_{k}")
        check_rule(op, k, call, shape_func)


@dataclass(repr=False)
class CompiledRules:
    library: PrimLibrary
    calls: dict[str, tuple[OpDef, int, DrawnCall, ShapeFunction]]
    errors: dict[str, Exception]


@pytest.fixture(scope="module")
def compiled_rules(tmp_path_factory: pytest.TempPathFactory) -> CompiledRules:
    return built_once(tmp_path_factory, "shape_rules", build_rules)


def build_rules(directory: Path) -> CompiledRules:
    calls: dict[str, tuple[OpDef, int, DrawnCall, ShapeFunction]] = {}
    errors: dict[str, Exception] = {}
    for op in RULE_OPS:
        for k in range(COMPILED_DRAWS):
            name = f"shape_{op.name.replace('.', '_')}_{k}"
            try:
                call = prepare(op, k)
                calls[name] = (op, k, call, lower_shape_func(call.func, name))
            except Exception as err:  # reported by the op's own test below
                errors[op.name] = err
    library = build_prim_library([c[3].prim_func for c in calls.values()], directory)
    return CompiledRules(library, calls, errors)


@pytest.mark.parametrize("op", _op_params(RULE_OPS))
def test_compiled_shape_function_computes_the_reference_shape(op: OpDef, compiled_rules: CompiledRules) -> None:
    if op.name in compiled_rules.errors:
        raise compiled_rules.errors[op.name]
    for name, (owner, k, call, shape_func) in compiled_rules.calls.items():
        if owner is not op:
            continue
        outputs = compiled_rules.library.run(name, call.shape_inputs(shape_func))
        got = [o.tolist() for o in outputs]
        assert got == call.expected, f"{op.name} draw {k}: compiled shape function gave {got}, the reference {call.expected}"


# Ops whose result shape depends on input values: TVM registers their shape functions with
# data_dependent=True, and so must we (the shape function then takes their data).
DATA_DEPENDENT_OPS = ("arange", *(op.name for op in ALL_OPS if op.extras.get("static_form")))


@pytest.mark.parametrize("name", DATA_DEPENDENT_OPS)
def test_data_dependent_ops_declare_their_mode(name: str) -> None:
    op = ops.get(name)
    assert op.shape_func is not None and op.shape_data_dependent


# --- the rule helpers -----------------------------------------------------------------------------


def _consts(values: Sequence[int]) -> tuple[te.PrimExpr, ...]:
    return tuple(te.const(v, "int64") for v in values)


def _value(dim: object) -> int:
    from compiler.tir.simplify import simplify_expr

    folded = simplify_expr(te.as_expr(dim))  # type: ignore[arg-type]  # int or PrimExpr
    assert isinstance(folded, te.Const)
    return int(folded.value)


def test_broadcast_dims_lets_a_one_give_way_on_either_side() -> None:
    got = broadcast_dims([_consts([4, 1, 3]), _consts([2, 1])])
    assert [_value(d) for d in got] == [4, 2, 3]


def test_broadcast_dims_keep_a_run_time_dim_that_meets_a_one_or_itself_plain() -> None:
    n, m = te.Var("n", "int64"), te.Var("m", "int64")
    one, four = te.const(1, "int64"), te.const(4, "int64")
    got = broadcast_dims([(n, one, n), (one, m, n)])
    assert got[0] is n and got[1] is m and got[2] is n  # no select for the kernels to see through
    (mixed,) = broadcast_dims([(n,), (four,)])
    assert isinstance(mixed, te.Select)  # n may be 1 and give way, or must be 4


def test_conv_output_dim_counts_the_window_positions_of_a_dilated_strided_kernel() -> None:
    # 10 + 1 + 2 padded, a 3-tap kernel dilated by 2 spans 5: positions 0, 3, 6 fit.
    assert _value(conv_output_dim(te.const(10, "int64"), 3, 1, 2, 3, 2)) == 3
    # A kernel as wide as the padded input fits once.
    assert _value(conv_output_dim(te.const(4, "int64"), 5, 1, 0, 2, 1)) == 1


def test_fill_keeps_the_dims_the_type_relation_knew() -> None:
    out = TensorType((ANY, 5), "float32")
    computed = (te.Var("n", "int64"), te.Var("m", "int64"))
    filled = fill(out, computed)
    assert filled[0] is computed[0] and filled[1] == 5


def test_fill_rejects_a_rule_of_the_wrong_rank() -> None:
    with pytest.raises(ShapeRuleError, match="2 dims for a result of rank 1"):
        fill(TensorType((ANY,), "float32"), (1, 2))


def test_static_rule_refuses_a_result_with_unknown_dims() -> None:
    with pytest.raises(ShapeRuleError, match="static-shape rule"):
        static_rule([], Attrs({}), TensorType((ANY,), "float32"))


def test_same_shape_rule_refuses_a_tuple_argument() -> None:
    with pytest.raises(ShapeRuleError, match="tensor argument"):
        same_shape_rule([[_consts([1])]], Attrs({}), TensorType((1,), "float32"))



def test_window_count_rounds_down_or_up_with_ceil_mode() -> None:
    # 7 inputs, 1+1 padding, window 3 dilated by 2 (span 5), stride 2: room 4 -> 3 windows;
    # 6 inputs leave room 3: floor gives 2 windows, ceil 3.
    assert _value(window_count(te.const(7, "int64"), 2, 3, 2, 2)) == 3
    assert _value(window_count(te.const(6, "int64"), 2, 3, 2, 2)) == 2
    assert _value(window_count(te.const(6, "int64"), 2, 3, 2, 2, ceil_mode=True)) == 3


def test_layout_dims_merges_and_splits_blocked_axes() -> None:
    blocked, plain = parse_layout("NCHW8c", "test"), parse_layout("NHWC", "test")
    got = layout_dims(_consts([2, 3, 5, 7, 8]), blocked, plain)
    assert [_value(d) for d in got] == [2, 5, 7, 24]
    back = layout_dims(got, plain, parse_layout("NCHW4c", "test"))
    assert [_value(d) for d in back] == [2, 6, 5, 7, 4]


def test_relaid_out_finds_axes_by_name_in_blocked_layouts() -> None:
    got = relaid_out(_consts([1, 2, 9, 9, 8]), "NCHW8c", {"H": 4, "W": 3}, "", "test")
    assert [_value(d) for d in got] == [1, 2, 4, 3, 8]
    got = relaid_out(_consts([1, 2, 9, 9, 8]), "NCHW8c", {"H": 4, "W": 3}, "NHWC", "test")
    assert [_value(d) for d in got] == [1, 4, 3, 16]


def test_pool_rules_locate_spatial_axes_in_blocked_layouts() -> None:
    """Blocked layouts are not among the pools' drawn calls."""

    def pooled(name: str, shape: tuple[int, ...], **attrs: object) -> list[int]:
        op = ops.get(name)
        assert op.shape_func is not None
        inputs = [tuple(te.const(d, "int64") for d in shape)]
        (got,) = op.shape_func(inputs, op.make_attrs(attrs), TensorType((ANY,) * len(shape), "float32"))
        return [_value(d) for d in got]

    window = {"pool_size": [3, 3], "strides": [2, 2], "padding": [1], "layout": "NCHW8c"}
    assert pooled("nn.max_pool2d", (1, 2, 9, 10, 8), **window) == [1, 2, 5, 5, 8]
    assert pooled("nn.avg_pool2d", (1, 2, 10, 9, 8), ceil_mode=True, **window) == [1, 2, 6, 5, 8]
    assert pooled("nn.global_max_pool2d", (2, 3, 7, 5, 4), layout="NCHW4c") == [2, 3, 1, 1, 4]
    assert pooled("nn.max_pool3d", (1, 1, 4, 6, 8, 16), pool_size=[2], strides=[2], layout="NCDHW16c") == [
        1, 1, 2, 3, 4, 16]
    assert pooled("nn.adaptive_avg_pool2d", (1, 9, 5, 4, 2), output_size=[3], layout="NHWC2c") == [1, 3, 3, 4, 2]
