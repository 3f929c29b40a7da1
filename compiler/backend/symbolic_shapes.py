"""Symbolic types of a primitive function with `?` dims, for lowering it to loops.

Each `?` dim of a parameter becomes an int64 variable, a scalar parameter of the kernel (the
caller passes the dims of the tensors it has). Every other value's dims follow from the shape
rules the operators declare (compiler/ops/shape_rules.py), applied to those variables: the same
arithmetic the call's shape function does at run time, here giving the loop extents and buffer
shapes. A dim the rules prove constant stays a Python int, so code for static dims is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from compiler import ops
from compiler.diagnostics import UnsupportedError
from compiler.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem, Var
from compiler.ir.types import ANY, TensorType, TupleType, Type, flatten_tensor_types, is_dynamic
from compiler.ir.visitor import post_order
from compiler.ops.common import same_dim
from compiler.ops.shape_rules import ShapeArg, ShapeRuleError
from compiler.tir import expr as te
from compiler.tir.compute import TensorView
from compiler.tir.simplify import simplify_expr


def has_dynamic_types(func: Function) -> bool:
    """True when a parameter or any value in `func`'s body has a `?` dim."""
    if any(is_dynamic(p.checked_type) for p in func.params):
        return True
    return any(
        is_dynamic(n.checked_type) for n in post_order(func.body, descend=lambda n: not isinstance(n, Function))
        if isinstance(n, (Call, Tuple, TupleGetItem))
    )


def shapes_equal(a: Type, b: Type) -> bool:
    return (
        isinstance(a, TensorType) and isinstance(b, TensorType) and a.ndim == b.ndim
        and all(same_dim(x, y) for x, y in zip(a.shape, b.shape))
    )


@dataclass
class SymbolicShapes:
    """The symbolic type of every value of one primitive function (see the module docstring).

    `scalars` are the dim variables, in parameter order: the kernel's scalar parameters.

    Where a broadcasting op meets two different `?` dims (a residual add of two parameters'
    batches), they are taken to be equal, so the result keeps a plain dim rather than a
    `select` between them and the ops around it keep their shapes; `equal_scalars` lists those
    pairs (indices into `scalars`, the kept dim first), which the executor checks before the
    call: the other dim must equal the kept one or be 1 (its loads still broadcast); a kept dim
    of 1 meeting a longer one fails the run instead of computing a wrong answer."""

    func: Function
    fresh: Callable[[str], str]
    scalars: list[te.Var] = field(default_factory=list)
    types: dict[Expr, Type] = field(default_factory=dict)
    equal_scalars: list[tuple[int, int]] = field(default_factory=list)
    param_names: dict[Var, str] = field(default_factory=dict)
    # Element counts a reshape needs equal, each side as (scalar indices, constant factor):
    # a `?` reaching a reshape to a static shape must bring exactly that many elements.
    equal_counts: list[tuple[tuple[tuple[int, ...], int], tuple[tuple[int, ...], int]]] = field(default_factory=list)
    # Parameters whose values a data-dependent rule reads (dyn.reshape's newshape): their
    # buffers, which the kernel takes as its own, so its extents are loads from them.
    data_buffers: dict[Var, te.Buffer] = field(default_factory=dict)

    def type_of(self, node: Expr) -> Type:
        return self.types.get(node, node.checked_type)

    @staticmethod
    def of(func: Function, param_names: list[str], fresh: Callable[[str], str]) -> SymbolicShapes:
        """`param_names` are the C names of the parameters (a tuple parameter's fields get
        `_<i>` suffixes, as the lowering names their buffers); `fresh` makes the dim variables'
        names unique in the kernel."""
        shapes = SymbolicShapes(func, fresh)
        shapes.param_names = dict(zip(func.params, param_names))
        for param, name in zip(func.params, param_names):
            shapes.types[param] = shapes._param_type(param.checked_type, name)
        for node in post_order(func.body, descend=lambda n: not isinstance(n, Function)):
            if node in shapes.types:
                continue
            if isinstance(node, Tuple):
                shapes.types[node] = TupleType(tuple(shapes.type_of(f) for f in node.fields))
            elif isinstance(node, TupleGetItem):
                whole = shapes.type_of(node.tuple_value)
                assert isinstance(whole, TupleType)
                shapes.types[node] = whole.fields[node.index]
            elif isinstance(node, Call) and isinstance(node.op, Op):
                shapes.types[node] = shapes._call_type(node)
            elif isinstance(node, Call):
                raise UnsupportedError("a call of a function inside a primitive function with `?` dims", node.span)
            elif isinstance(node, (Constant, Op, Var)):
                continue
        return shapes

    def _param_type(self, ty: Type, name: str) -> Type:
        if isinstance(ty, TupleType):
            return TupleType(tuple(self._param_type(f, f"{name}_{i}") for i, f in enumerate(ty.fields)))
        if not isinstance(ty, TensorType):
            return ty
        dims: list[object] = []
        for k, d in enumerate(ty.shape):
            if d is ANY:
                var = te.Var(self.fresh(f"{name}_dim{k}"), "int64")
                self.scalars.append(var)
                dims.append(var)
            else:
                dims.append(d)
        return TensorType(tuple(dims), ty.dtype)  # type: ignore[arg-type]  # symbolic dims

    def _call_type(self, call: Call) -> Type:
        assert isinstance(call.op, Op)
        name = call.op.name
        opdef = ops.get(name)
        if not is_dynamic(call.checked_type) and not any(is_dynamic(a.checked_type) for a in call.args):
            return call.checked_type
        if opdef.shape_func is None:
            raise UnsupportedError(f"{name} declares no shape rule, so its `?` dims cannot be computed", call.span)
        inputs = [self._data_arg(a, name) if opdef.reads_data(k) else self._shape_arg(self.type_of(a))
                  for k, a in enumerate(call.args)]
        try:
            dims = opdef.shape_func(inputs, call.attrs, call.checked_type)
        except (ShapeRuleError, ops.TypeRelationError) as err:
            # A rule that cannot relate two different dim variables (einsum's labels) is a
            # limit of the kernel, not an error of the model: its type checked with `?` dims.
            raise UnsupportedError(f"{name}: {err}", call.span) from err
        results = flatten_tensor_types(call.checked_type)
        if len(dims) != len(results):  # type: ignore[arg-type]  # a sequence
            raise UnsupportedError(f"the shape rule of {name} gave {len(dims)} shapes for {len(results)} results", call.span)  # type: ignore[arg-type]
        if opdef.pattern == ops.OpPattern.BROADCAST and len(results) == 1:
            dims = [self._unify_broadcast(inputs, dims[0])]  # type: ignore[index]  # a sequence
        if opdef.reshape_only and len(results) == 1 and isinstance(inputs[0], tuple):
            self._check_count(inputs[0], dims[0])  # type: ignore[index]  # a sequence
        symbolic = [TensorType(tuple(_dim(d) for d in ds), ty.dtype) for ds, ty in zip(dims, results)]  # type: ignore[arg-type, union-attr]
        if isinstance(call.checked_type, TupleType):
            it = iter(symbolic)

            def nest(t: Type) -> Type:
                return TupleType(tuple(nest(f) for f in t.fields)) if isinstance(t, TupleType) else next(it)

            return nest(call.checked_type)
        return symbolic[0]

    def bind_param(self, param: Var, name: str) -> Type:
        """Gives `param` its symbolic type, a dim variable per `?` dim (named after `name`),
        for callers that walk a body themselves (an extern-call function calling composites)."""
        self.param_names[param] = name
        ty = self.types[param] = self._param_type(param.checked_type, name)
        return ty

    def call_type(self, call: Call) -> Type:
        """The symbolic type of an operator call whose arguments' types are known."""
        ty = self.types[call] = self._call_type(call)
        return ty

    def checks(self) -> dict[str, object]:
        """What the executor must check of the dim parameters before calling the kernel
        (PrimFunc.extra): dims taken to be equal, element counts a reshape keeps."""
        out: dict[str, object] = {}
        if self.equal_scalars:
            out["equal_scalars"] = tuple(self.equal_scalars)
        if self.equal_counts:
            out["equal_counts"] = tuple(self.equal_counts)
        return out

    def _unify_broadcast(self, inputs: list[ShapeArg], out: tuple[object, ...]) -> tuple[object, ...]:
        """`out` with each dim where different dim variables meet replaced by the first of them
        (see the class docstring)."""
        rank = len(out)
        unified = list(out)
        for axis in range(rank):
            variables: list[te.Var] = []
            for shape in inputs:
                if not isinstance(shape, tuple) or len(shape) - rank + axis < 0:
                    continue
                d = _bare_var(shape[len(shape) - rank + axis])
                if d is not None and all(d is not v for v in variables):
                    variables.append(d)
            if len(variables) < 2:
                continue
            first = variables[0]
            for other in variables[1:]:
                pair = (self._scalar_index(first), self._scalar_index(other))
                if pair not in self.equal_scalars:
                    self.equal_scalars.append(pair)
            unified[axis] = first
        return tuple(unified)

    def _check_count(self, before: tuple[object, ...], after: tuple[object, ...]) -> None:
        sides = [self._product(before), self._product(after)]
        if sides[0] is None or sides[1] is None or sides[0] == sides[1] or not (sides[0][0] or sides[1][0]):
            return  # not a product of dim variables, or equal by construction, or static
        pair = (sides[0], sides[1])
        if pair not in self.equal_counts:
            self.equal_counts.append(pair)

    def _product(self, dims: tuple[object, ...]) -> tuple[tuple[int, ...], int] | None:
        """`dims`' element count as (sorted scalar indices, constant), if it is such a product."""
        scalars: list[int] = []
        constant = 1
        for d in dims:
            expr = simplify_expr(te.as_expr(d))  # type: ignore[arg-type]  # int or PrimExpr
            if isinstance(expr, te.Const):
                constant *= int(expr.value)
                continue
            var = _bare_var(expr)
            if var is None or all(var is not v for v in self.scalars):
                return None
            scalars.append(self._scalar_index(var))
        return tuple(sorted(scalars)), constant

    def _scalar_index(self, var: te.Var) -> int:
        return next(i for i, v in enumerate(self.scalars) if v is var)

    def _data_arg(self, arg: Expr, op_name: str) -> ShapeArg:
        """The values a data-dependent rule reads: a parameter's buffer or a Constant's data."""
        if isinstance(arg, Constant):
            return constant_view(arg.data, op_name)  # type: ignore[return-value]  # a view
        ty = arg.checked_type
        if not isinstance(arg, Var) or arg not in self.func.params:
            raise UnsupportedError(f"{op_name}: its result shape depends on values computed inside the fused "
                                   "function, which its kernel cannot know before its loops", arg.span)
        if not isinstance(ty, TensorType) or ty.is_dynamic:
            raise UnsupportedError(f"{op_name}: its result shape depends on values of %{arg.name_hint}, "
                                   f"whose type {ty} is not a tensor of static shape", arg.span)
        buffer = self.data_buffers.get(arg)
        if buffer is None:
            shape = tuple(int(d) for d in ty.shape)  # type: ignore[arg-type]  # static, checked above
            buffer = self.data_buffers[arg] = te.Buffer(self.fresh(self.param_names[arg]), shape, ty.dtype)
        return TensorView.of_buffer(buffer)  # type: ignore[return-value]  # a view

    def _shape_arg(self, ty: Type) -> ShapeArg:
        if isinstance(ty, TupleType):
            return [self._shape_arg(f) for f in ty.fields]  # type: ignore[misc]  # nested shapes
        assert isinstance(ty, TensorType)
        return tuple(te.cast("int64", te.as_expr(d)) for d in ty.shape)  # type: ignore[arg-type]  # ints or exprs


def _bare_var(dim: object) -> te.Var | None:
    """The dim variable `dim` is (through an int64 cast), if any."""
    expr = simplify_expr(te.as_expr(dim))  # type: ignore[arg-type]  # int or PrimExpr
    while isinstance(expr, te.Cast):
        expr = expr.value
    return expr if isinstance(expr, te.Var) else None


def _dim(value: object) -> object:
    """A dim as the lowering wants it: a Python int when it simplifies to a constant."""
    expr = simplify_expr(te.as_expr(value))  # type: ignore[arg-type]  # int or PrimExpr
    if isinstance(expr, te.Const):
        return int(expr.value)
    return expr


def constant_view(data: np.ndarray, op_name: str) -> TensorView:
    """A Constant's data as a rule reads it: each element a constant, so the shape function
    folds it (the rule must index it with constants)."""

    def load(idx: Sequence[te.PrimExpr]) -> te.PrimExpr:
        at = [int(i.value) for i in idx if isinstance(i, te.Const)]
        if len(at) != len(idx):
            raise UnsupportedError(f"the shape rule of {op_name} reads a Constant at a computed index")
        return te.const(data[tuple(at)].item(), str(data.dtype))

    return TensorView(tuple(int(d) for d in data.shape), str(data.dtype), load, data=data)
