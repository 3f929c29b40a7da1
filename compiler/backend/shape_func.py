"""Shape functions: loop-level functions that compute, at run time, the result shapes of a call
whose result type has `?` dimensions.

A shape function is a PrimFunc over int64 1-D buffers. For each parameter of the Relay function
it takes the parameter's shape (a buffer of `ndim` dims) and/or, for operators whose result
shape depends on values (`OpDef.shape_data_dependent`), the parameter's data; it writes one
buffer of `ndim` dims per result tensor. Which of the two each parameter needs is its *state*,
recorded in the call's metadata as TVM does: 1 data, 2 shape, 3 both, 0 neither. Inputs come in
parameter order, a parameter's data before its shape; a tuple parameter passes one shape buffer
per field.

The body is assembled from the shape rules operators declare beside their type relations
(`OpDef.shape_func`, contract in compiler/ops/shape_rules.py), evaluated symbolically over the
function body: an op's rule maps its inputs' dims (int64 PrimExprs, loads from the shape buffers
or expressions of them) to its result dims. Only function parameters of static shape and
Constants (whose values are folded into the shape function) can be passed by data to a
data-dependent rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


from compiler import ops
from compiler.backend.lower_primitive import static_shape
from compiler.backend.symbolic_shapes import constant_view
from compiler.diagnostics import UnsupportedError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, If, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.types import FuncType, TensorType, TupleType, Type, flatten_tensor_types
from compiler.ir.visitor import post_order
from compiler.passes.label_ops import MAX_NAME_LENGTH, std_string_hash
from compiler.ops.shape_rules import Dims, ShapeArg, ShapeRule, ShapeRuleError, ShapeValue
from compiler.tir import expr as te
from compiler.tir.compute import TensorView
from compiler.tir.stmt import PrimFunc, Stmt, Store, seq

DATA_DEPENDENT = 1
SHAPE_DEPENDENT = 2


def shape_rule(op_name: str) -> ShapeRule | None:
    """The shape rule an operator declares beside its type relation (compiler/ops/shape_rules.py)."""
    return ops.get(op_name).shape_func  # type: ignore[return-value]  # OpDef stores rules untyped


def shape_func_label(func: Function) -> str:
    """`shape_func_<op>_<op>...`: the operators the shape function follows (nested function
    literals included), operands first, shortened like kernel names (compiler/passes/label_ops)."""
    name = "shape_func" + "".join(
        "_" + node.op.name for node in post_order(func.body) if isinstance(node, Call) and isinstance(node.op, Op)
    )
    if len(name) > MAX_NAME_LENGTH:
        name = f"{name[:MAX_NAME_LENGTH]}_{std_string_hash(name):x}_"
    return name.replace(".", "_")


@dataclass(frozen=True)
class ShapeFunction:
    prim_func: PrimFunc
    param_states: tuple[int, ...]  # one per Relay parameter: DATA_DEPENDENT | SHAPE_DEPENDENT

    @property
    def num_inputs(self) -> int:
        return self.prim_func.num_inputs

    @property
    def num_outputs(self) -> int:
        return len(self.prim_func.outputs)


def lower_shape_func(func: Function, name: str, target: str = "c") -> ShapeFunction:
    """The shape function of the typed Relay function `func`, as a PrimFunc named `name`."""
    return _ShapeFuncBuilder(func, name, target).build()


@dataclass(frozen=True, eq=False)
class _ParamRef:
    """A parameter whose shape or data has not been asked for yet: asking creates the buffer,
    so only what the rules actually read becomes an input."""

    var: Var


@dataclass(frozen=True, eq=False)
class _ConstRef:
    """A Constant: a data-dependent rule reads its values (arange's constant start, stop and
    step), any other rule its shape."""

    constant: Constant


Value = Union[ShapeValue, _ParamRef, _ConstRef, list["Value"]]


class _ShapeFuncBuilder:
    def __init__(self, func: Function, name: str, target: str):
        self.func = func
        self.name = name
        self.target = target
        self.states: dict[Var, int] = {p: 0 for p in func.params}
        self.shape_buffers: dict[Var, list[te.Buffer]] = {}
        self.shape_values: dict[Var, ShapeValue] = {}
        self.data_buffers: dict[Var, te.Buffer] = {}
        self.buffer_names: set[str] = set()

    def build(self) -> ShapeFunction:
        func = self.func
        result = self.evaluate(func.body, {p: _ParamRef(p) for p in func.params})
        result_shape = self.shape_of(result)
        out_types = flatten_tensor_types(func.result_type)
        out_dims = _flatten_shape(result_shape)
        if len(out_dims) != len(out_types):
            raise UnsupportedError(f"shape function {self.name}: {len(out_dims)} result shapes for {len(out_types)} results")

        outputs: list[te.Buffer] = []
        stores: list[Stmt] = []
        for i, (dims, ty) in enumerate(zip(out_dims, out_types)):
            if len(dims) != ty.ndim:
                raise UnsupportedError(
                    f"shape function {self.name}: result {i} has rank {ty.ndim} but its shape rule gave {len(dims)} dims")
            out = te.Buffer(self._fresh("out_shape" if len(out_types) == 1 else f"out_shape{i}"), (ty.ndim,), "int64")
            outputs.append(out)
            stores.extend(Store(out, (te.const(k),), te.cast("int64", d)) for k, d in enumerate(dims))

        inputs: list[te.Buffer] = []
        for p in func.params:
            if p in self.data_buffers:
                inputs.append(self.data_buffers[p])
            inputs.extend(self.shape_buffers.get(p, ()))
        out_tensors = [TensorType(_static_dims(b), "int64") for b in outputs]
        ret: Type = out_tensors[0] if len(out_tensors) == 1 else TupleType(tuple(out_tensors))
        func_type = FuncType(tuple(TensorType(_static_dims(b), b.dtype) for b in inputs), ret)
        prim_func = PrimFunc(
            self.name,
            tuple(inputs + outputs),
            seq(*stores) if stores else seq(),
            num_inputs=len(inputs),
            attrs=Attrs(global_symbol=self.name, target=self.target, shape_func=1),
            func_type=func_type,
        )
        return ShapeFunction(prim_func, tuple(self.states[p] for p in func.params))

    # -- evaluation over the Relay body ------------------------------------------------------

    def evaluate(self, body: Expr, env: dict[Var, Value]) -> Value:
        """The shape value of `body`; nested function literals are evaluated in place (depth of
        recursion = nesting of function literals, not of expressions)."""
        let_values: dict[Var, Expr] = {}

        def descend(node: Expr) -> bool:
            if isinstance(node, Let):
                let_values[node.var] = node.value
            return not isinstance(node, Function)

        values: dict[Expr, Value] = {}
        functions: dict[Var, Function] = {}  # let-bound function literals (composites), called in place
        for node in post_order(body, descend=descend):
            if isinstance(node, Var):
                bound = let_values.get(node)
                if node in env:
                    values[node] = env[node]
                elif isinstance(bound, Function):
                    functions[node] = bound
                elif bound is not None:
                    values[node] = values[bound]
                else:
                    raise UnsupportedError(f"shape function {self.name}: free variable %{node.name_hint}")
            elif isinstance(node, Constant):
                values[node] = _ConstRef(node)
            elif isinstance(node, Tuple):
                values[node] = [values[f] for f in node.fields]
            elif isinstance(node, TupleGetItem):
                whole = values[node.tuple_value]
                if isinstance(whole, _ParamRef):
                    whole = self.shape_of(whole)
                assert isinstance(whole, list)
                values[node] = whole[node.index]
            elif isinstance(node, Let):
                values[node] = values[node.body]
            elif isinstance(node, Call):
                callee = functions.get(node.op) if isinstance(node.op, Var) else None
                values[node] = self.call_value(node, values, callee)
            elif isinstance(node, If):
                raise UnsupportedError(f"shape function {self.name}: control flow in a function with a dynamic result")
        return values[body]

    def call_value(self, call: Call, values: dict[Expr, Value], callee: Function | None = None) -> Value:
        """`callee`: the function a let-bound variable in callee position stands for."""
        args = [values[a] for a in call.args]
        func = call.op if isinstance(call.op, Function) else callee
        if func is not None:
            return self.evaluate(func.body, dict(zip(func.params, args)))
        if not isinstance(call.op, Op):
            raise UnsupportedError(f"shape function {self.name}: cannot follow a call of {call.op!r}")
        name = call.op.name
        rule = shape_rule(name)
        if rule is None:
            raise UnsupportedError(
                f"operator {name} has no shape function, so a result shape computed from it "
                "cannot be known at run time")
        opdef = ops.get(name)
        inputs: list[ShapeArg] = []
        for k, value in enumerate(args):
            inputs.append(self.data_of(value, name) if opdef.reads_data(k) else self.shape_of(value))
        try:
            rule_dims = rule(inputs, call.attrs, call.checked_type)
        except ShapeRuleError as err:
            raise UnsupportedError(f"shape function {self.name}: {name}: {err}", call.span) from err
        out_dims = [tuple(te.cast("int64", te.as_expr(d)) for d in dims) for dims in rule_dims]
        expected = len(flatten_tensor_types(call.checked_type))
        if len(out_dims) != expected:
            raise UnsupportedError(f"the shape rule of {name} gave {len(out_dims)} shapes for {expected} results")
        if isinstance(call.checked_type, TupleType):
            return _nest(out_dims, call.checked_type)
        return out_dims[0]

    # -- parameters ----------------------------------------------------------------------------

    def shape_of(self, value: Value) -> ShapeValue:
        if isinstance(value, _ParamRef):
            return self.param_shape(value.var)
        if isinstance(value, _ConstRef):
            return tuple(te.const(int(d), "int64") for d in value.constant.data.shape)
        if isinstance(value, list):
            return [self.shape_of(v) for v in value]
        return value

    def data_of(self, value: Value, op_name: str) -> TensorView:
        if isinstance(value, _ConstRef):
            return constant_view(value.constant.data, op_name)
        if not isinstance(value, _ParamRef):
            raise UnsupportedError(
                f"operator {op_name} needs the values of its inputs to know its result shape; "
                "only function parameters can be passed to its shape function")
        var = value.var
        ty = var.checked_type
        if not isinstance(ty, TensorType) or ty.is_dynamic:
            raise UnsupportedError(
                f"operator {op_name} needs the values of %{var.name_hint} ({ty}) for its shape "
                "function; only tensors of static shape can be passed")
        buffer = self.data_buffers.get(var)
        if buffer is None:
            shape = static_shape(ty, f"%{var.name_hint}")
            buffer = self.data_buffers[var] = te.Buffer(self._fresh(var.name_hint), shape, ty.dtype)
            self.states[var] |= DATA_DEPENDENT
        return TensorView.of_buffer(buffer)

    def param_shape(self, var: Var) -> ShapeValue:
        cached = self.shape_values.get(var)
        if cached is not None:
            return cached
        buffers: list[te.Buffer] = []

        def dims_of(ty: Type, base: str) -> ShapeValue:
            if isinstance(ty, TupleType):
                return [dims_of(f, f"{base}_{i}") for i, f in enumerate(ty.fields)]
            if not isinstance(ty, TensorType):
                raise UnsupportedError(f"shape function {self.name}: parameter %{var.name_hint} of type {ty}")
            buffer = te.Buffer(self._fresh(f"{base}_shape"), (ty.ndim,), "int64")
            buffers.append(buffer)
            return tuple(buffer[k] for k in range(ty.ndim))

        value = dims_of(var.checked_type, var.name_hint)
        self.shape_buffers[var] = buffers
        self.shape_values[var] = value
        self.states[var] |= SHAPE_DEPENDENT
        return value

    def _fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.buffer_names:
            n += 1
            name = f"{base}_{n}"
        self.buffer_names.add(name)
        return name


def _static_dims(buffer: te.Buffer) -> tuple[int, ...]:
    dims = tuple(d for d in buffer.shape if isinstance(d, int))
    assert len(dims) == len(buffer.shape), f"buffer {buffer.name} has a dynamic shape"
    return dims


def _flatten_shape(value: ShapeValue) -> list[Dims]:
    if isinstance(value, tuple):
        return [value]
    out: list[Dims] = []
    for v in value:
        out.extend(_flatten_shape(v))
    return out


def _nest(flat: list[Dims], ty: TupleType) -> list[ShapeValue]:
    """Regroup flattened result dims into the nesting of the tuple type `ty`."""
    it = iter(flat)

    def build(t: Type) -> ShapeValue:
        if isinstance(t, TupleType):
            return [build(f) for f in t.fields]
        return next(it)

    return [build(f) for f in ty.fields]
