"""The extern-call codegen: each partitioned function becomes a PrimFunc that calls the
codegen's library, one composite after another, through planned intermediate buffers.

This is the RelayToTIR hook of every `relay_to_tir` codegen (compiler/byoc/codegen_config.py),
and the answer to seed 001: instead of nesting the calls (`dense_bias(dense_bias_relu(...))`),
every intermediate result gets its own global-scope `Allocate` in the PrimFunc, so the AOT
executor's static memory planner places it in the module workspace with the host's
intermediates, and the C reads

    status = dense_bias_relu(&i0, &i1, &i2, &buf0);
    if (status != 0) return status;
    status = dense_bias(&buf0, &i3, &i4, &out0);

Before (run by LowerTE, first thing): global functions with `Compiler="<codegen>"` (literal ones
are outlined first) whose bodies call composite functions (`Composite="<codegen>.<name>"`,
in place or let-bound) on parameters, constants, tuples and each other's results.
After: each such function is a PrimFunc named by its `global_symbol`, with `target` and
`Compiler` set to the codegen, and every call of it also passes the constants the function
used (they are PrimFunc inputs, so they live in the model's constant pool). LowerTE then turns
those calls into `call_lowered` like any PrimFunc call.

The `dltensor` calling convention of a composite call:

    int32_t <symbol>(DLTensor* in..., DLTensor* out..., [DLTensor* scratch], int64_t attr...)

* inputs: the composite's parameters in order, then the constants embedded in its body (from
  `const` patterns) in the order they are used;
* outputs: the composite's result, tuples flattened;
* scratch: only for patterns of built-in codegens that ask for one (a 1-D uint8 tensor, also
  planned in the workspace);
* attrs: the values of the pattern's `attrs` (`nn.conv2d.strides`), read from the first call of
  that operator in the composite, as `int64_t` each; lists are flattened, booleans are 0/1, and
  the `padding` of a 2-D operator is always four values (top, left, bottom, right), its
  `strides`, `dilation`, `pool_size` and `kernel_size` always two (height, width).
Operators outside composites (say the `layout_transform`s ConvertLayout puts around a
composite) are compiled to loop kernels by the host machinery and called with plain pointers.
A non-zero return value is returned by the PrimFunc, and so fails the run.

`?` dims: the PrimFunc takes them as trailing `int64_t` parameters, one per `?` dim of each
parameter in order (the host kernels' convention, compiler/backend/symbolic_shapes.py, so the
AOT executor maps them back through `func_type`); every other value's dims are expressions of
them from the operators' shape rules. They fill the DLTensors' `shape` arrays and are passed to
the loop kernels that take them. The function's workspace is planned before the dims are known,
so an intermediate whose size depends on them is an `Allocate` of `HEAP_SCOPE` instead: the C
mallocs it on entry and frees it on every way out. LowerTE gives the call the shape function of
the partitioned function (left in `PrimFunc.extra[SHAPE_SOURCE]`).

The C of these PrimFuncs comes from `emit_extern_calls`, the codegen's TIRToRuntime hook.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
from dataclasses import dataclass, field

from compiler.backend.c_expr import ExprEmitter, strip_parens
from compiler.backend.c_helpers import helpers_used
from compiler.backend.c_signature import CNames, has_workspace, prim_func_signature, signature, signature_params
from compiler.backend.lower_primitive import c_identifier, lower_primitive
from compiler.backend.symbolic_shapes import SymbolicShapes, has_dynamic_types
from compiler.backend.te_compiler import SHAPE_SOURCE
from compiler.byoc.codegen_config import CodegenSpec, PatternSpec
from compiler.byoc.compiler_function_utils import OutlineCompilerFunctionsWithExistingGlobalSymbols
from compiler.backend.dlpack import HEADER_NAME, tensor_initializer
from compiler.byoc.external_module import ExternalModule
from compiler.diagnostics import CompileError, InputError, UnsupportedError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, GlobalVar, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, FuncType, TensorType, TupleType, Type, flatten_tensor_types, is_dynamic
from compiler.ir.visitor import ExprMutator, post_order
from compiler.passes.infer_type import infer_expr
from compiler.ops.window import pair, padding4
from compiler.tir.analysis import expr_children, walk_stmts, workspace_bytes, workspace_layout
from compiler.tir.compute import KernelContext
from compiler.tir import expr as te
from compiler.tir.dtypes import c_type, itemsize
from compiler.tir.expr import Buffer, CallExtern, Const
from compiler.tir.simplify import ExprSimplifier
from compiler.tir.stmt import Allocate, Evaluate, PrimFunc, Seq, Stmt, seq

CALLING_CONVENTION = "dltensor"
# PrimFunc attribute: the loop kernels (host PrimFuncs) an extern-call PrimFunc calls.
KERNELS_ATTR = "kernels"
# Window attributes of 2-D operators that TVM's text lets one value stand for both axes.
WINDOW_PAIRS = frozenset({"strides", "dilation", "pool_size", "kernel_size"})
# Allocate scope of an intermediate whose size depends on `?` dims: the module workspace is
# planned before the dims are known, so the function allocates it itself at run time.
HEAP_SCOPE = "heap"
# What the function returns when such an allocation fails (the executor's "memory ran out").
OUT_OF_MEMORY = -4


@dataclass(frozen=True)
class ExternCallCodegen:
    """The RelayToTIR and TIRToRuntime hooks of one `relay_to_tir` codegen.

    `defined` are the symbols the codegen's library defines (compiler/byoc/codegen_library.py
    `check_library`); a composite whose symbol is not among them is an error. None (not known)
    skips that check.
    """

    spec: CodegenSpec
    defined: frozenset[str] | None = None

    def relay_to_tir(self, mod: IRModule) -> IRModule:
        mod = OutlineCompilerFunctionsWithExistingGlobalSymbols(self.spec.name)(mod)
        out = mod.copy()
        replaced: dict[GlobalVar, tuple[GlobalVar, tuple[Constant, ...]]] = {}
        for gv, func in mod.functions():
            if func.attrs.get("Compiler") != self.spec.name:
                continue
            lowered = _FunctionLowering(self, func).lower()
            new_gv = gv
            if gv.name_hint != lowered.prim_func.name:
                out.remove(gv)
                if out.has(lowered.prim_func.name):
                    raise CompileError(f"global_symbol {lowered.prim_func.name} of @{gv.name_hint} "
                                       "is already the name of another global", func.span)
                new_gv = GlobalVar(lowered.prim_func.name)
            out.add(new_gv, lowered.prim_func)
            for kernel in lowered.kernels:
                # Host loop kernels: the host C module defines them, the PrimFunc calls them.
                out.add(GlobalVar(kernel.name), kernel)
            replaced[gv] = (new_gv, lowered.constants)
        if not replaced:
            return mod
        for gv, func in out.functions():
            new = _CallRewriter(replaced).visit(func)
            if new is not func:
                out.add(gv, new)
        return out

    def tir_to_runtime(self, funcs: Sequence[PrimFunc], workspace_alignment: int) -> ExternalModule:
        return emit_extern_calls(self.spec.name, funcs, workspace_alignment)

    def symbol(self, composite: str) -> str:
        symbol = self.spec.symbol_for(composite)
        if self.defined is not None and symbol not in self.defined:
            raise InputError(f"codegen {self.spec.name}: composite {composite} calls {symbol}, "
                             "which its library does not define")
        return symbol


class _CallRewriter(ExprMutator):
    """Calls of replaced globals go to their PrimFuncs and also pass the lifted constants."""

    def __init__(self, replaced: dict[GlobalVar, tuple[GlobalVar, tuple[Constant, ...]]]):
        super().__init__()
        self.by_name = {gv.name_hint: entry for gv, entry in replaced.items()}

    def rewrite_call(self, pre: Call, post: Call) -> Expr:
        if not isinstance(post.op, GlobalVar) or post.op.name_hint not in self.by_name:
            return post
        new_gv, constants = self.by_name[post.op.name_hint]
        return Call(new_gv, (*post.args, *constants), post.attrs, post.span)


@dataclass
class _Lowered:
    prim_func: PrimFunc
    constants: tuple[Constant, ...]
    kernels: tuple[PrimFunc, ...]


@dataclass
class _FunctionLowering:
    """Lowers one partitioned function; `values[node]` are the buffers holding its value,
    tuples flattened."""

    codegen: ExternCallCodegen
    func: Function
    values: dict[Expr, list[Buffer]] = field(default_factory=dict)
    composites: dict[Var, Function] = field(default_factory=dict)
    constants: dict[Constant, Buffer] = field(default_factory=dict)
    allocations: list[Buffer] = field(default_factory=list)
    calls: list[Stmt] = field(default_factory=list)
    outputs: list[Buffer] = field(default_factory=list)
    kernels: list[PrimFunc] = field(default_factory=list)
    symbol: str = ""
    # With `?` dims: the symbolic type of every value (dims are int64 expressions of the dim
    # parameters), else None and every shape is static.
    shapes: SymbolicShapes | None = None

    @property
    def name(self) -> str:
        return self.codegen.spec.name

    def fail(self, message: str, expr: Expr | None = None) -> UnsupportedError:
        where = expr.span if expr is not None and expr.span is not None else self.func.span
        return UnsupportedError(f"codegen {self.name}: {message}", where)

    def lower(self) -> _Lowered:
        func = self.func
        symbol = func.attrs.get("global_symbol")
        if not isinstance(symbol, str) or not symbol:
            raise CompileError(f'a function for Compiler="{self.name}" has no global_symbol to name it', func.span)
        self.symbol = symbol
        if has_dynamic_types(func):
            self.shapes = SymbolicShapes(func, KernelContext().fresh)
        params = [self.param_buffer(p) for p in func.params]
        result = _result_expr(func.body)
        if self.shapes is not None:
            self.infer(func.body)
        ret_types = flatten_tensor_types(self.type_of(result) if self.shapes is not None else func.result_type)
        self.outputs = [
            Buffer("output" if len(ret_types) == 1 else f"output{k}", self.dims(t, func), t.dtype)
            for k, t in enumerate(ret_types)
        ]
        destinations = self.destinations(result)
        let_value: dict[Var, Expr] = {}

        def descend(node: Expr) -> bool:
            if isinstance(node, Let):
                let_value[node.var] = node.value
            return not isinstance(node, Function)

        for node in post_order(func.body, descend=descend):
            self.visit(node, let_value, destinations)
        produced = [b for f in _fields(result) for b in self.values.get(f, [])]
        if [id(b) for b in produced] != [id(b) for b in self.outputs]:
            raise self.fail(f"the result of {symbol} must be computed by composite calls "
                            "(a parameter, constant or repeated value as a result is not supported)", result)
        lifted = list(self.constants.values())
        body: Stmt = seq(self.calls) if self.calls else Seq(())
        for buffer in reversed(self.allocations):
            body = Allocate(buffer, body)
        arg_types: list[Type] = [p.checked_type if p.has_type else p.type_annotation for p in func.params]
        arg_types += [c.tensor_type for c in self.constants]
        attrs = Attrs({
            "global_symbol": symbol, "target": self.name, "Compiler": self.name,
            "calling_convention": CALLING_CONVENTION, "tir.noalias": 1,
            KERNELS_ATTR: tuple(k.name for k in self.kernels),
        })
        extra: dict[str, object] = {KERNELS_ATTR: tuple(self.kernels)}
        if self.shapes is not None:
            # The dims the executor checks before the call, as for a host kernel.
            extra.update(self.shapes.checks())
            if is_dynamic(func.result_type):
                extra[SHAPE_SOURCE] = self.shape_source(arg_types[len(params):])
        prim_func = PrimFunc(
            symbol, (*params, *lifted, *self.outputs), body, len(params) + len(lifted),
            scalar_params=tuple(self.shapes.scalars) if self.shapes is not None else (),
            attrs=attrs, func_type=FuncType(tuple(arg_types), func.result_type), extra=extra,
        )
        return _Lowered(prim_func, tuple(self.constants), tuple(self.kernels))

    def shape_source(self, constant_types: Sequence[Type]) -> Function:
        """The Relay function LowerTE makes this PrimFunc's shape function from: the partitioned
        function, with a parameter (whose shape it never reads) per lifted constant, so that
        its parameters are the call's arguments."""
        func = self.func
        extra = tuple(Var(f"constant_{k}", t) for k, t in enumerate(constant_types))
        return Function((*func.params, *extra), func.body, func.result_type, func.attrs, func.span)

    # -- symbolic shapes ---------------------------------------------------------------------

    def type_of(self, node: Expr) -> Type:
        assert self.shapes is not None
        return self.shapes.type_of(node)

    def infer(self, body: Expr) -> None:
        """The symbolic type of every value of `body`; a composite call's is that of the
        composite's body with its params bound to the arguments' types."""
        shapes = self.shapes
        assert shapes is not None
        let_value: dict[Var, Expr] = {}
        functions: dict[Var, Function] = {}

        def descend(node: Expr) -> bool:
            if isinstance(node, Let):
                let_value[node.var] = node.value
            return not isinstance(node, Function)

        for node in post_order(body, descend=descend):
            if isinstance(node, Var):
                bound = let_value.get(node)
                if isinstance(bound, Function):
                    functions[node] = bound
                elif bound is not None:
                    shapes.types[node] = shapes.type_of(bound)
            elif isinstance(node, Tuple):
                shapes.types[node] = TupleType(tuple(shapes.type_of(f) for f in node.fields))
            elif isinstance(node, TupleGetItem):
                whole = shapes.type_of(node.tuple_value)
                assert isinstance(whole, TupleType)
                shapes.types[node] = whole.fields[node.index]
            elif isinstance(node, Let):
                shapes.types[node] = shapes.type_of(node.body)
            elif isinstance(node, Call) and isinstance(node.op, Op):
                shapes.call_type(node)
                if shapes.data_buffers:
                    raise self.fail(f"the result shape of {node.op.name} depends on the values of an input; "
                                    "the extern-call codegen passes only dims", node)
            elif isinstance(node, Call):
                callee = node.op if isinstance(node.op, Function) else \
                    functions.get(node.op) if isinstance(node.op, Var) else None
                if callee is None:
                    continue  # reported where the lowering meets it
                for param, arg in zip(callee.params, node.args):
                    shapes.types[param] = shapes.type_of(arg)
                self.infer(callee.body)
                shapes.types[node] = shapes.type_of(callee.body)

    def dims(self, ty: TensorType, where: Expr) -> tuple[int | te.PrimExpr, ...]:
        """A buffer's dims: ints, or with `?` dims int64 expressions of the dim parameters."""
        if self.shapes is None:
            return _static(ty, self, where)
        return tuple(d if isinstance(d, int) else te.cast("int64", d) for d in ty.shape)  # type: ignore[arg-type]  # symbolic dims

    # -- buffers -----------------------------------------------------------------------------

    def param_buffer(self, param: Var) -> Buffer:
        ty = param.checked_type if param.has_type else param.type_annotation
        if not isinstance(ty, TensorType):
            raise self.fail(f"parameter %{param.name_hint} has type {ty}; only tensor parameters are supported", param)
        if self.shapes is not None:
            symbolic = self.shapes.bind_param(param, param.name_hint)
            assert isinstance(symbolic, TensorType)
            ty = symbolic
        buffer = Buffer(param.name_hint, self.dims(ty, param), ty.dtype)
        self.values[param] = [buffer]
        return buffer

    def constant_buffer(self, constant: Constant) -> Buffer:
        buffer = self.constants.get(constant)
        if buffer is None:
            ty = constant.tensor_type
            buffer = self.constants[constant] = Buffer(f"constant_{len(self.constants)}", ty.shape, ty.dtype)
        return buffer

    def destinations(self, result: Expr) -> dict[Expr, list[Buffer]]:
        """Which result-producing nodes write the output buffers directly."""
        destinations: dict[Expr, list[Buffer]] = {}
        k = 0
        for node in _fields(result):
            count = len(flatten_tensor_types(node.checked_type))
            if isinstance(node, Call) and node not in destinations:
                destinations[node] = self.outputs[k : k + count]
            k += count
        return destinations

    def intermediates(self, node: Expr) -> list[Buffer]:
        buffers = []
        ty = self.type_of(node) if self.shapes is not None else node.checked_type
        for t in flatten_tensor_types(ty):
            dims = self.dims(t, node)
            scope = "global" if all(isinstance(d, int) for d in dims) else HEAP_SCOPE
            buffer = Buffer(f"buf{len(self.allocations)}", dims, t.dtype, scope)
            self.allocations.append(buffer)
            buffers.append(buffer)
        return buffers

    # -- nodes -------------------------------------------------------------------------------

    def visit(self, node: Expr, let_value: dict[Var, Expr], destinations: dict[Expr, list[Buffer]]) -> None:
        if isinstance(node, Var):
            if node in self.values:
                return
            bound = let_value.get(node)
            if isinstance(bound, Function):
                self.composites[node] = bound
            elif bound is not None and bound in self.values:
                self.values[node] = self.values[bound]
            elif bound is None:
                raise self.fail(f"%{node.name_hint} is free in the partitioned function", node)
        elif isinstance(node, Constant):
            self.values[node] = [self.constant_buffer(node)]
        elif isinstance(node, Tuple):
            self.values[node] = [b for f in node.fields for b in self.value(f)]
        elif isinstance(node, TupleGetItem):
            self.values[node] = self.project(node)
        elif isinstance(node, Let):
            if node.body in self.values:
                self.values[node] = self.values[node.body]
        elif isinstance(node, Call):
            self.call(node, destinations)
        elif isinstance(node, (Function, Op, GlobalVar)):
            return  # callees: handled at their calls
        else:
            raise self.fail(f"{type(node).__name__} expressions are not supported in a partitioned function", node)

    def value(self, node: Expr) -> list[Buffer]:
        buffers = self.values.get(node)
        if buffers is None:
            raise self.fail("a function is used as a value", node)
        return buffers

    def project(self, node: TupleGetItem) -> list[Buffer]:
        tuple_type = node.tuple_value.checked_type
        assert isinstance(tuple_type, TupleType)
        start = sum(len(flatten_tensor_types(t)) for t in tuple_type.fields[: node.index])
        count = len(flatten_tensor_types(tuple_type.fields[node.index]))
        return self.value(node.tuple_value)[start : start + count]

    def call(self, call: Call, destinations: dict[Expr, list[Buffer]]) -> None:
        if isinstance(call.op, Op):
            self.operator(call, destinations)
            return
        composite = call.op if isinstance(call.op, Function) else self.composites.get(call.op) \
            if isinstance(call.op, Var) else None
        if composite is None or not isinstance(composite.attrs.get("Composite"), str):
            raise self.fail("the partitioned function calls a function that is not a composite", call)
        name = str(composite.attrs["Composite"])
        if not name.startswith(f"{self.name}."):
            raise self.fail(f"composite {name} belongs to another codegen", call)
        symbol = self.codegen.symbol(name)
        pattern = self.codegen.spec.pattern_for(name)
        by_param = {param: self.value(arg) for param, arg in zip(composite.params, call.args)}
        inputs = [b for param in _operand_params(composite) for b in by_param[param]]
        inputs += [self.constant_buffer(c) for c in _embedded_constants(composite)]
        outputs = destinations.get(call) or self.intermediates(call)
        extra: list[object] = []
        if pattern is not None and pattern.scratch is not None:
            size = int(pattern.scratch(composite))
            if size > 0:
                scratch = Buffer(f"scratch{len(self.allocations)}", (size,), "uint8")
                self.allocations.append(scratch)
                extra.append(scratch)
        if pattern is not None:
            extra += attr_arguments(self.name, pattern, composite)
        self.calls.append(Evaluate(CallExtern(symbol, (*inputs, *outputs, *extra), "int32")))
        self.values[call] = list(outputs)

    def operator(self, call: Call, destinations: dict[Expr, list[Buffer]]) -> None:
        """An operator outside any composite (e.g. a layout_transform that ConvertLayout put
        around a composite): lowered to a loop kernel of its own, which the PrimFunc calls with
        plain pointers."""
        assert isinstance(call.op, Op)
        params: list[Var] = []
        args: list[Expr] = []
        inputs: list[Buffer] = []
        for k, arg in enumerate(call.args):
            if isinstance(arg, Constant) and arg.data.ndim == 0:
                args.append(arg)  # scalars are immediates inside the loops
                continue
            param = Var(f"p{k}", arg.checked_type)
            params.append(param)
            args.append(param)
            inputs += self.value(arg)
        primitive = Function(tuple(params), Call(call.op, tuple(args), call.attrs, call.span), None,
                             Attrs(Primitive=1))
        infer_expr(primitive)
        name = f"{self.symbol}_{c_identifier(call.op.name)}_{len(self.kernels)}"
        try:
            kernel = lower_primitive(primitive, name, KernelContext())
        except CompileError as err:
            raise self.fail(f"cannot compile operator {call.op.name} outside a composite: {err.message}", call)
        kernel = dataclasses.replace(kernel, attrs=kernel.attrs.with_attr("target", "c"))
        if kernel.extra.get("equal_scalars") or kernel.extra.get("equal_counts"):
            raise self.fail(f"operator {call.op.name} outside a composite meets two `?` dims that must be "
                            "equal; the extern-call codegen does not check that yet", call)
        self.kernels.append(kernel)
        outputs = destinations.get(call) or self.intermediates(call)
        workspace: list[Buffer] = []
        if has_workspace(kernel):
            try:
                size = workspace_bytes(kernel)
            except UnsupportedError as err:
                raise self.fail(f"cannot compile operator {call.op.name} outside a composite: {err.message}", call)
            scratch = Buffer(f"scratch{len(self.allocations)}", (size,), "uint8")
            self.allocations.append(scratch)
            workspace.append(scratch)
        dims = _kernel_dims(kernel, params, inputs)
        self.calls.append(Evaluate(CallExtern(name, (*inputs, *outputs, *dims, *workspace), "int32")))
        self.values[call] = list(outputs)


def _result_expr(body: Expr) -> Expr:
    while isinstance(body, Let):
        body = body.body
    return body


def _fields(result: Expr) -> list[Expr]:
    return list(result.fields) if isinstance(result, Tuple) else [result]


def _static(ty: TensorType, lowering: _FunctionLowering, where: Expr) -> tuple[int, ...]:
    dims = tuple(d for d in ty.shape if isinstance(d, int))
    if len(dims) != len(ty.shape):
        raise lowering.fail(f"{ty} has a dynamic shape; the extern-call codegen needs static shapes", where)
    return dims


def _kernel_dims(kernel: PrimFunc, params: list[Var], inputs: list[Buffer]) -> list[te.PrimExpr]:
    """The dims a loop kernel takes as scalars: one per `?` dim of its parameters' types, tuple
    fields flattened, in order (compiler/backend/symbolic_shapes.py), read off the buffers
    passed for them."""
    leaves = [t for p in params for t in flatten_tensor_types(p.checked_type)]
    dims = [te.cast("int64", te.as_expr(b.shape[k]))
            for b, t in zip(inputs, leaves) for k, d in enumerate(t.shape) if d is ANY]
    assert len(dims) == len(kernel.scalar_params), (kernel.name, len(dims), len(kernel.scalar_params))
    return dims


def _operand_params(composite: Function) -> list[Var]:
    """The composite's params once per operand they feed, left to right: the kernel takes one
    tensor per pattern leaf, and MergeComposite gives an expression that feeds two leaves
    (`nn.dense(%x, %x)`) a single param."""
    params = set(composite.params)
    found: list[Var] = []

    def walk(node: Expr) -> None:
        if isinstance(node, Var) and node in params:
            found.append(node)
        elif isinstance(node, Call):
            for arg in node.args:
                walk(arg)
        elif isinstance(node, Tuple):
            for part in node.fields:
                walk(part)
        elif isinstance(node, TupleGetItem):
            walk(node.tuple_value)
        elif isinstance(node, Let):
            walk(node.value)
            walk(node.body)

    walk(composite.body)
    # A param the body never reaches directly (none today) still gets its place.
    found += [p for p in composite.params if p not in found]
    return found


def _embedded_constants(composite: Function) -> list[Constant]:
    return [n for n in post_order(composite.body, descend=lambda n: not isinstance(n, Function))
            if isinstance(n, Constant) and n.data.ndim > 0]


def attr_arguments(codegen: str, pattern: PatternSpec, composite: Function) -> list[Const]:
    """The `int64_t` trailing arguments of `pattern`'s attrs, read from `composite`'s body."""
    calls = [n for n in post_order(composite.body) if isinstance(n, Call) and isinstance(n.op, Op)]
    args: list[Const] = []
    for ref in pattern.attrs:
        call = next((c for c in calls if c.op_name == ref.op), None)
        if call is None:
            raise UnsupportedError(f"codegen {codegen}: pattern {pattern.name} passes {ref}, "
                                   f"but the composite calls no {ref.op}", composite.span)
        value = call.attrs.get(ref.attr)
        if ref.attr == "padding" and ref.op.endswith("2d") and isinstance(value, tuple):
            value = padding4(value, ref.op)  # one form for the library: (top, left, bottom, right)
        elif ref.attr in WINDOW_PAIRS and ref.op.endswith("2d") and isinstance(value, tuple) and len(value) == 1:
            value = pair(value, ref.attr, ref.op)  # `strides=[2]` reaches the library as (2, 2)
        values = _flatten_attr(value)
        if values is None:
            raise UnsupportedError(f"codegen {codegen}: pattern {pattern.name} passes {ref} = "
                                   f"{call.attrs.get(ref.attr)!r}, which is not integers", composite.span)
        args += [Const(v, "int64") for v in values]
    return args


def _vars(expr: te.PrimExpr) -> list[te.Var]:
    """The variables `expr` reads."""
    found: list[te.Var] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, te.Var):
            found.append(node)
        stack.extend(expr_children(node))
    return found


def _flatten_attr(value: object) -> list[int] | None:
    if isinstance(value, bool):
        return [int(value)]
    if isinstance(value, int):
        return [value]
    if isinstance(value, (tuple, list)):
        out: list[int] = []
        for v in value:
            inner = _flatten_attr(v)
            if inner is None:
                return None
            out += inner
        return out
    return None


# -- TIRToRuntime: the C of the PrimFuncs ----------------------------------------------------


def emit_extern_calls(codegen: str, funcs: Sequence[PrimFunc], workspace_alignment: int) -> ExternalModule:
    """One C file defining `funcs` (made by `ExternCallCodegen.relay_to_tir`) with the
    signatures compiler/backend/c_signature.py gives them."""
    externs: dict[str, list[str]] = {}
    kernels: dict[str, PrimFunc] = {}
    bodies = []
    heap = False
    for func in funcs:
        emitter = _ExternCallEmitter(func, workspace_alignment, externs)
        bodies.append(emitter.emit())
        kernels.update(emitter.kernels)
        heap = heap or bool(emitter.heap)
    lines = [
        f"/* Generated by relaycc: calls into the library of codegen {codegen} "
        f"(calling convention \"{CALLING_CONVENTION}\"). */",
        "#include <stddef.h>",
        "#include <stdint.h>",
        *(["#include <stdlib.h>"] if heap else []),
        "",
        f'#include "{HEADER_NAME}"',
        "",
    ]
    # Dims computed from `?` dims may divide (a strided convolution's output), through the
    # host's helpers that keep numpy's semantics.
    helpers = helpers_used("".join(bodies))
    if helpers:
        lines.append("".join(helpers))
    if externs:
        lines.append(f"/* Defined by the library of codegen {codegen}. */")
        lines += [f"int32_t {name}({', '.join(args) or 'void'});" for name, args in sorted(externs.items())]
        lines.append("")
    if kernels:
        lines.append("/* Loop kernels of operators outside composites, defined in the host module. */")
        lines += [prim_func_signature(k) + ";" for _, k in sorted(kernels.items())]
        lines.append("")
    text = "\n".join(lines) + "\n" + "\n".join(bodies)
    return ExternalModule(codegen, f"{codegen}_extern_calls.c", text, tuple(f.name for f in funcs),
                          tuple(sorted(externs)))


class _ExternCallEmitter:
    """Prints one extern-call PrimFunc: a DLTensor per buffer a library call takes, then the
    calls in order (library symbols with DLTensor pointers, loop kernels with data pointers).

    With `?` dims (scalar parameters), shapes are C expressions of them, and intermediates of
    `HEAP_SCOPE` are malloc'ed on entry and freed on every way out (a single exit label)."""

    def __init__(self, func: PrimFunc, alignment: int, externs: dict[str, list[str]]):
        self.func = func
        self.layout = workspace_layout(func, alignment)
        self.externs = externs
        extra = func.extra.get(KERNELS_ATTR, ())
        self.kernels: dict[str, PrimFunc] = {k.name: k for k in extra if isinstance(k, PrimFunc)}
        self.tensors: dict[int, str] = {}
        for k, buffer in enumerate(func.inputs):
            self.tensors[id(buffer)] = f"i{k}"
        for k, buffer in enumerate(func.outputs):
            self.tensors[id(buffer)] = f"out{k}"
        self.allocations: list[Buffer] = []
        self.calls: list[CallExtern] = []
        self.heap: list[Buffer] = []
        for s in walk_stmts(func.body):
            if isinstance(s, Allocate):
                if s.buffer.scope not in ("global", HEAP_SCOPE):
                    raise ValueError(f"{func.name}: extern-call functions allocate global or heap buffers only")
                (self.heap if s.buffer.scope == HEAP_SCOPE else self.allocations).append(s.buffer)
                self.tensors[id(s.buffer)] = s.buffer.name
            elif isinstance(s, Evaluate) and isinstance(s.value, CallExtern):
                self.calls.append(s.value)
            elif not isinstance(s, Seq):
                raise ValueError(f"{func.name}: extern-call functions hold only allocations and extern calls, "
                                 f"found {type(s).__name__}")
        # Only buffers handed to the library need a DLTensor.
        self.described = {id(a) for c in self.calls if c.name not in self.kernels
                          for a in c.args if isinstance(a, Buffer)}
        self.data: dict[int, str] = {}
        self.var_names: dict[int, str] = {}
        self.names = CNames()
        self.decls: list[str] = []

    def emit(self) -> str:
        func = self.func
        reserved = {"status", *self.tensors.values(), *(f"{t}_shape" for t in self.tensors.values()),
                    *(f"{b.name}_data" for b in [*self.allocations, *self.heap]),
                    *(f"{b.name}_bytes" for b in self.heap), *(c.name for c in self.calls),
                    *(["done"] if self.heap else [])}
        names = self.names = CNames(reserved | ({"workspace"} if has_workspace(func) else set()))
        params = signature_params(func, names, True, None)
        self.data = {id(b): name for b, (_, name) in zip(func.params, params)}
        scalars = params[len(func.params) : len(func.params) + len(func.scalar_params)]
        self.var_names = {id(v): name for v, (_, name) in zip(func.scalar_params, scalars)}
        lines = [f"{signature(func.name, params)} {{"]
        for buffer in self.allocations:
            ctype = c_type(buffer.dtype)
            pointer = f"{buffer.name}_data"
            lines.append(f"  {ctype}* {pointer} = ({ctype}*)(workspace + {self.layout[buffer]});")
            self.data[id(buffer)] = pointer
        for buffer in self.heap:
            ctype = c_type(buffer.dtype)
            pointer, size = f"{buffer.name}_data", f"{buffer.name}_bytes"
            count = self.code(te.as_expr(buffer.num_elements) * itemsize(buffer.dtype))
            lines += self.take_decls()
            lines.append(f"  const size_t {size} = (size_t)({count});")
            # malloc(0) may answer NULL; an empty tensor still gets a pointer.
            lines.append(f"  {ctype}* {pointer} = ({ctype}*)malloc({size} > 0 ? {size} : 1);")
            self.data[id(buffer)] = pointer
        for buffer in [*func.inputs, *self.allocations, *self.heap, *func.outputs]:
            if id(buffer) not in self.described:
                continue
            tensor = self.tensors[id(buffer)]
            shape = "NULL"
            if buffer.shape:
                shape = f"{tensor}_shape"
                dims = ", ".join(str(d) if isinstance(d, int) else self.code(d) for d in buffer.shape)
                lines += self.take_decls()
                lines.append(f"  int64_t {shape}[{len(buffer.shape)}] = {{{dims}}};")
            init = tensor_initializer(self.data[id(buffer)], len(buffer.shape), buffer.dtype, shape)
            lines.append(f"  DLTensor {tensor} = {init};")
        used = {id(a) for c in self.calls for a in c.args if isinstance(a, Buffer)}
        used |= {id(v) for c in self.calls for a in c.args if isinstance(a, te.PrimExpr) for v in _vars(a)}
        # A dim parameter is used by the shapes of the DLTensors and the sizes of the heap buffers.
        sized = [b for b in func.params if id(b) in self.described] + self.heap
        used |= {id(v) for b in sized for d in b.shape if isinstance(d, te.PrimExpr) for v in _vars(d)}
        lines[1:1] = [f"  (void){name};" for b, (_, name) in zip(func.params, params) if id(b) not in used]
        lines[1:1] = [f"  (void){name};" for v, (_, name) in zip(func.scalar_params, scalars) if id(v) not in used]
        if self.heap:
            lines.append("  int32_t status = 0;")
            missing = " || ".join(f"{self.data[id(b)]} == NULL" for b in self.heap)
            lines.append(f"  if ({missing}) {{ status = {OUT_OF_MEMORY}; goto done; }}")
        elif self.calls:
            lines.append("  int32_t status;")
        for call in self.calls:
            kernel = call.name in self.kernels
            if not kernel:
                self.declare(call)
            args = ", ".join(self.argument(a, call, kernel) for a in call.args)
            lines += self.take_decls()
            lines.append(f"  status = {call.name}({args});")
            lines.append("  if (status != 0) goto done;" if self.heap else "  if (status != 0) return status;")
        if self.heap:
            lines.append("done:")
            lines += [f"  free({self.data[id(b)]});" for b in self.heap]
            lines += ["  return status;", "}", ""]
        else:
            lines += ["  return 0;", "}", ""]
        return "\n".join(lines)

    def argument(self, arg: object, call: CallExtern, kernel: bool) -> str:
        if isinstance(arg, Buffer):
            return self.data[id(arg)] if kernel else f"&{self.tensors[id(arg)]}"
        if isinstance(arg, Const):
            return str(arg.value)
        assert isinstance(arg, te.PrimExpr), arg  # a dim a loop kernel takes
        return self.code(arg)

    # -- dims as C (the expression emitter's CScope) ---------------------------------------------

    def code(self, expr: te.PrimExpr) -> str:
        decls, (code,) = ExprEmitter(self, ExprSimplifier()).emit([expr])
        self.decls += decls
        return strip_parens(code)

    def take_decls(self) -> list[str]:
        decls, self.decls = self.decls, []
        return [f"  {d}" for d in decls]

    def var_name(self, var: te.Var) -> str:
        name = self.var_names.get(id(var))
        if name is None:
            raise ValueError(f"{self.func.name}: a dim refers to {var.name}, which is not a dim parameter")
        return name

    def buffer_name(self, buffer: Buffer) -> str:
        raise ValueError(f"{self.func.name}: a dim reads buffer {buffer.name}")

    def flat_index(self, buffer: Buffer, indices: Sequence[te.PrimExpr], simplifier: ExprSimplifier) -> te.PrimExpr:
        raise ValueError(f"{self.func.name}: a dim reads buffer {buffer.name}")

    def fresh(self, base: str) -> str:
        return self.names.take(base)

    def note_call(self, call: CallExtern) -> None:
        raise ValueError(f"{self.func.name}: a dim calls {call.name}")

    def index_var(self, var: te.Var) -> str | None:
        return None  # the dims here are the function's int64_t parameters, never loop counters

    def declare(self, call: CallExtern) -> None:
        """Adds the prototype of `call`'s symbol; every call of one symbol must agree."""
        args = []
        for arg in call.args:
            if isinstance(arg, Buffer):
                args.append("DLTensor*")
            elif isinstance(arg, Const) and isinstance(arg.value, int) and not isinstance(arg.value, bool):
                args.append("int64_t")
            else:
                raise ValueError(f"{self.func.name}: cannot pass {arg!r} to {call.name}")
        known = self.externs.setdefault(call.name, args)
        if known != args:
            raise ValueError(f"library symbol {call.name} is called with ({', '.join(known)}) "
                             f"and with ({', '.join(args)})")
