"""Every operator's loop lowering, compiled to C and checked against its numpy reference.

For each sample of each op, the call `op(%p0, ...)` is wrapped in a primitive function, lowered
to a PrimFunc and emitted as C; all of them are built into one shared library (one compiler run
for the whole registry) and called with the sample's inputs, drawn exactly as the registry test
draws them. The few ops SimplifyInference decomposes before fusion have no loops of their own;
they are compiled through the whole pipeline instead, and a test checks no other op lacks loops.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.backend.lower_primitive import lower_primitive
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, Op, Tuple, Var
from compiler.ir.types import TupleType, Type
from compiler.ops.registry import OpDef, OpPattern, Sample
from compiler.passes.infer_type import infer_expr
from compiler.tir.stmt import PrimFunc
from tests.built_once import built_once
from tests.compiler.backend.prim_library import PrimLibrary, build_prim_library
from tests.compiler.ops.samples import sample_inputs

ALL_OPS = [op for op in ops.all_ops() if not op.extras.get("internal")]
# Families whose every op must already have its loops.
LOWERED_FAMILIES = ("compiler.ops.elemwise", "compiler.ops.broadcast", "compiler.ops.reduce")


def has_loops(op: OpDef) -> bool:
    return op.compute is not None or op.reduction is not None or op.kernel is not None


def func_name(op: OpDef, index: int) -> str:
    return f"test_{op.name.replace('.', '_')}_{index}"


def constant_args(op: OpDef, values: list[object], sample: Sample | None = None) -> list[np.ndarray | None] | None:
    """For an op whose type depends on constant argument values (`extras["constant_args"]`,
    arange, the qnn ops), the sample's arrays as the call's constant arguments; None for other
    ops. Given the `sample`, only the inputs it gives as arrays are constants (those it gives
    as types, like a qnn op's data, are drawn at random and passed at run time)."""
    if not op.extras.get("constant_args"):
        return None
    if sample is not None:
        return [v if is_constant_entry(e) else None for v, e in zip(values, sample.inputs)]  # type: ignore[misc]  # arrays
    return [v if isinstance(v, np.ndarray) else None for v in values]


def is_constant_entry(entry: object) -> bool:
    """A sample input given as an array, or as a tuple of arrays (a tuple of Constants)."""
    if isinstance(entry, np.ndarray):
        return True
    return isinstance(entry, tuple) and bool(entry) and all(isinstance(f, np.ndarray) for f in entry)


def runtime_inputs(op: OpDef, values: list[object], sample: Sample | None = None) -> list[np.ndarray]:
    """The arrays the compiled function takes: every input but the constant arguments."""
    constants = constant_args(op, values, sample)
    return list(flatten(tuple(v for k, v in enumerate(values) if constants is None or constants[k] is None)))


def primitive_call(
    op: OpDef, types: list[Type], attrs: Attrs, constants: list[np.ndarray | None] | None = None
) -> Function:
    """`fn (%p0: T0, ..., Primitive=1) { op(%p0, ...) }`, typed. A tuple-typed argument is
    passed as a tuple of parameters, as FuseOps leaves it (concatenate((%p0, %p1))); an argument
    with a value in `constants` is passed as that Constant instead."""
    params: list[Var] = []
    args: list[Expr] = []
    for k, ty in enumerate(types):
        if constants is not None and constants[k] is not None:
            value = constants[k]
            if isinstance(value, tuple):
                args.append(Tuple(tuple(Constant(v) for v in value)))
            else:
                args.append(Constant(value))
        elif isinstance(ty, TupleType):
            fields = []
            for field_ty in ty.fields:
                fields.append(Var(f"p{len(params)}", field_ty))
                params.append(fields[-1])
            args.append(Tuple(tuple(fields)))
        else:
            params.append(Var(f"p{len(params)}", ty))
            args.append(params[-1])
    func = Function(tuple(params), Call(Op.get(op.name), tuple(args), attrs), attrs=Attrs({"Primitive": 1}))
    infer_expr(func)
    return func


def flatten(value: object) -> Iterator[np.ndarray]:
    if isinstance(value, tuple):
        for part in value:
            yield from flatten(part)
    else:
        yield np.asarray(value)


def _sample_params() -> list[object]:
    return [
        pytest.param(op, index, id=f"{op.name}-{index}")
        for op in ALL_OPS
        for index in range(len(op.samples))
    ]


@dataclass(repr=False)
class CompiledSamples:
    """The library built from every sample that lowered, and the errors of those that did not
    (each reported by its own test, so one op's bug does not hide the others' results)."""

    library: PrimLibrary
    errors: dict[str, Exception]

    def __repr__(self) -> str:
        # Shown in failure reports; PrimFunc reprs are far too long for that.
        return f"CompiledSamples({self.library!r}, {len(self.errors)} lowering errors)"


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> CompiledSamples:
    return built_once(tmp_path_factory, "op_lowering", build_samples)


def build_samples(directory: Path) -> CompiledSamples:
    """Every sample of every op with loops, lowered and built into one library."""
    funcs: list[PrimFunc] = []
    errors: dict[str, Exception] = {}
    for op in ALL_OPS:
        if not has_loops(op):
            continue
        for index, sample in enumerate(op.samples):
            name = func_name(op, index)
            try:
                values, types = sample_inputs(op, index)
                call = primitive_call(op, types, op.make_attrs(sample.attrs), constant_args(op, values, sample))
                funcs.append(lower_primitive(call, name))
            except Exception as err:  # noqa: BLE001  reported by the sample's own test
                errors[name] = err
    library = build_prim_library(funcs, directory, "ops")
    return CompiledSamples(library, errors)


def assert_matches(actual: np.ndarray, expected: np.ndarray, accumulates: bool, where: str) -> None:
    assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype}, reference {expected.dtype}"
    assert actual.shape == expected.shape, f"{where}: shape {actual.shape}, reference {expected.shape}"
    if actual.dtype.kind != "f":
        np.testing.assert_array_equal(actual, expected, err_msg=where)
        return
    if actual.dtype == np.float16:
        rtol, atol = 1e-3, 1e-3  # float16 keeps 11 significant bits
    else:
        rtol, atol = 1e-5, 1e-6
    if accumulates and expected.size:
        # A float32 sum of many terms is off by about eps times the terms' magnitude, which an
        # element that cancels to near zero cannot meet relatively: measure against the scale.
        atol = max(atol, rtol * float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=where)


# Ops SimplifyInference rewrites into other ops before fusion (as TVM does), and the dyn ops,
# which DynamicToStatic makes static when their shapes are constants: they never reach the loop
# lowering, so they are compiled through the whole pipeline instead.
# dyn ops whose kernels read their extents from the shape values (a run-time newshape).
DYN_WITH_LOOPS = ("dyn.reshape", "dyn.zeros", "dyn.ones", "dyn.full")
DECOMPOSED = ("nn.batch_norm", "nn.dropout", "nn.layer_norm", "nn.group_norm", "nn.instance_norm") + tuple(
    op.name for op in ALL_OPS if op.extras.get("static_form") and op.name not in DYN_WITH_LOOPS)


def pipeline_function(
    op: OpDef, values: list[object], types: list[Type], attrs: Attrs, sample: Sample
) -> tuple[Function, dict[str, np.ndarray]]:
    """`fn (%p0, ...) { op(...) }` for the whole pipeline, with the sample's constant arguments
    (`extras["constant_args"]`) as Constants, and the run-time inputs by parameter name. A
    tuple result gives its first field (inference models read batch_norm's and dropout's)."""
    from compiler.ir.expr import TupleGetItem

    constants = constant_args(op, values, sample)
    params: list[Var] = []
    args: list[Expr] = []
    inputs: dict[str, np.ndarray] = {}
    for i, (value, ty) in enumerate(zip(values, types)):
        if constants is not None and constants[i] is not None:
            args.append(Constant(np.asarray(value)))
        else:
            params.append(Var(f"p{i}", ty))
            args.append(params[-1])
            inputs[f"p{i}"] = np.asarray(value)
    call = Call(Op.get(op.name), tuple(args), attrs)
    infer_expr(Function(tuple(params), call))
    body: Expr = TupleGetItem(call, 0) if isinstance(call.checked_type, TupleType) else call
    return Function(tuple(params), body), inputs


def test_every_op_without_loops_is_decomposed_before_fusion() -> None:
    assert sorted(op.name for op in ALL_OPS if not has_loops(op)) == sorted(DECOMPOSED)


@pytest.mark.parametrize(("op", "index"), _sample_params())
def test_compiled_op_matches_the_reference(op: OpDef, index: int, compiled: CompiledSamples) -> None:
    if not has_loops(op):
        pytest.skip("decomposed by SimplifyInference: see test_decomposed_op_compiles_through_the_pipeline")
    name = func_name(op, index)
    if name in compiled.errors:
        raise compiled.errors[name]
    values, _ = sample_inputs(op, index)
    expected = list(flatten(op.reference(values, op.make_attrs(op.samples[index].attrs))))  # type: ignore[arg-type]  # tuple inputs too
    actual = compiled.library.run(name, runtime_inputs(op, values, op.samples[index]))
    assert len(actual) == len(expected), f"{name}: {len(actual)} outputs, reference has {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert_matches(a, e, op.pattern >= OpPattern.COMM_REDUCE, f"{name} output {k}")


def test_generated_c_compiles_without_warnings(compiled: CompiledSamples) -> None:
    assert compiled.library.broken == {}
    assert compiled.library.warnings == []


def test_elementwise_broadcast_and_reduce_ops_all_have_loops() -> None:
    missing = [op.name for op in ALL_OPS if op.reference.__module__ in LOWERED_FAMILIES and not has_loops(op)]
    assert missing == []


@pytest.mark.parametrize(("op", "index"), [
    pytest.param(op, index, id=f"{op.name}-{index}")
    for op in ALL_OPS if op.name in DECOMPOSED for index in range(len(op.samples))
])
def test_decomposed_op_compiles_through_the_pipeline(op: OpDef, index: int, tmp_path: Path) -> None:
    from compiler.driver import export, lower
    from compiler.ir.module import IRModule
    from compiler.runtime.module import CompiledModule

    values, types = sample_inputs(op, index)
    attrs = op.make_attrs(op.samples[index].attrs)
    func, inputs = pipeline_function(op, values, types, attrs, op.samples[index])
    model = lower(IRModule.from_expr(func))
    export(model, tmp_path, "")
    result = CompiledModule(tmp_path).run(inputs)
    expected = op.reference(values, attrs)
    first = expected[0] if isinstance(expected, tuple) else expected
    assert_matches(result.outputs[0], np.asarray(first), True, f"{op.name}-{index}")
