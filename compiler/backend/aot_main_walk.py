"""The AOT executor's view of a lowered @main: which tensor every expression is, and the
`call_lowered` calls in execution order (`MainWalk`), plus the records both executors (static,
aot_executor.py; dynamic, aot_dynamic.py) build their C and their report from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from compiler.backend.aot_c import Kernel, extern_prototype
from compiler.backend.c_signature import has_workspace, prim_func_signature
from compiler.backend.constants import ConstantPool
from compiler.backend.interface_c import TensorInfo, c_name, output_names, result_names
from compiler.backend.memory_planner import MemoryPlan
from compiler.diagnostics import Span, UnsupportedError
from compiler.ir.attrs import EMPTY_ATTRS, Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, FuncType, TensorType, TupleType, Type, is_dynamic
from compiler.ir.visitor import post_order
from compiler.passes.infer_type import describe
from compiler.tir.analysis import workspace_bytes, workspace_layout
from compiler.tir.inplace import inplace_inputs
from compiler.tir.stmt import PrimFunc

DYNAMIC_MESSAGE = "the AOT executor needs static shapes"


@dataclass(frozen=True)
class CallInfo:
    """One `call_lowered` of @main, in execution order.

    `args` / `outputs` name where the call reads and writes: `%x` (an input of @main),
    `constant_<k>`, `sid_<n>` (a workspace buffer) or an output name (`output`, `output1`).
    `emitted` is False for a reshape-only call that aliases its input instead of running.
    `workspace` names the kernel's internal workspace buffer in the plan, if it has one.
    """

    callee: str
    kind: str
    args: tuple[str, ...]
    outputs: tuple[str, ...]
    metadata: Attrs
    emitted: bool = True
    workspace: str | None = None


@dataclass(frozen=True)
class AOTResult:
    """What the AOT executor produced.

    `main_source` is the C of the executor (it includes `header_name`, so build it with the
    header's directory on the include path, next to the kernels' C); `calls` has every
    call_lowered of @main in execution order, emitted or not; `memory` is the workspace plan,
    whose step numbers are positions in `calls`; `constants[k]` sits at `constant_offsets[k]`
    in the read-only pool.
    """

    module_name: str
    main_source: str
    header: str
    header_name: str
    cdef: str  # the header's declarations for cffi
    entry: str  # tvmgen_<name>_run
    memory: MemoryPlan
    calls: list[CallInfo]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    constants: list[np.ndarray]
    constant_offsets: list[int]
    workspace_bytes: int
    constant_bytes: int
    io_bytes: int
    # Per kernel workspace buffer of the plan, the kernel's own buffers inside it as report
    # rows {"name": "<callee>/<buffer>", "offset": <offset in the pool>, "bytes": ...}.
    workspace_allocations: dict[str, list[dict[str, int | str]]] = field(default_factory=dict)
    # A model with `?` shapes (aot_dynamic.py): its arena, decided at run time, as the report
    # shows it; the static `memory` plan is then empty.
    arena: dict[str, object] | None = None
    # The read-only pool; when it is large (constants.is_separate) `main_source` only declares
    # it and the driver writes its definition to a file of its own.
    constant_pool: ConstantPool | None = None

    def memory_report(self) -> dict[str, object]:
        """The report's `memory` section; a kernel workspace's row also lists `allocations`."""
        buffers: list[dict[str, object]] = []
        for b in self.memory.buffers:
            row: dict[str, object] = dict(b)
            allocations = self.workspace_allocations.get(str(b["name"]))
            if allocations:
                row["allocations"] = [dict(a) for a in allocations]
            buffers.append(row)
        return {
            "workspace_bytes": self.workspace_bytes,
            "constant_bytes": self.constant_bytes,
            "io_bytes": self.io_bytes,
            "peak_live_bytes": self.memory.peak_live_bytes,
            "buffers": buffers,
            **({"arena": self.arena} if self.arena is not None else {}),
        }


@dataclass(eq=False)
class MainTensor:
    """A tensor value of @main. kind: "input" (index = parameter position), "constant" (with
    `data`) or "result" (of the call at step `index`). `alias_of` is set for the result of a
    reshape that does not run."""

    kind: str
    ty: TensorType
    index: int
    data: np.ndarray | None = None
    alias_of: MainTensor | None = None

    @property
    def bytes(self) -> int:
        return self.ty.nbytes

    def root(self) -> MainTensor:
        t = self
        while t.alias_of is not None:
            t = t.alias_of
        return t


MainValue = MainTensor | tuple  # a tensor, or a (nested) tuple of values


def flatten_values(value: MainValue) -> list[MainTensor]:
    out: list[MainTensor] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, MainTensor):
            out.append(v)
        else:
            stack.extend(reversed(v))
    return out


@dataclass(frozen=True)
class Allocation:
    """A buffer a kernel allocates inside its workspace, at `offset` from the workspace's start."""

    name: str
    offset: int
    bytes: int


@dataclass(eq=False)
class Step:
    """One call_lowered of @main. `workspace_bytes` is the kernel's internal workspace and
    `allocations` the buffers it holds."""

    kind: str
    kernel: Kernel
    workspace_bytes: int
    inputs: list[MainTensor]
    outputs: list[MainTensor]
    metadata: Attrs
    emitted: bool = True
    allocations: tuple[Allocation, ...] = ()
    # The inputs grouped by the call's arguments (a tuple argument is one group of its fields),
    # as a shape function takes them; and the kernel's `?` dims as (input, dim) pairs, in the
    # order of its scalar parameters.
    arg_groups: tuple[tuple[MainTensor, ...], ...] = ()
    dim_args: tuple[tuple[int, int], ...] = ()
    # The kernel's own types of its inputs and outputs (a PrimFunc's Relay type), which may
    # be static where the values reaching it have `?` dims.
    param_types: tuple[TensorType, ...] = ()
    # Pairs of `dim_args` entries the kernel assumes equal (a broadcast of two `?` batches).
    equal_dims: tuple[tuple[int, int], ...] = ()
    # Element counts (products of `dim_args` entries and a constant) the kernel assumes equal.
    equal_counts: tuple[tuple[tuple[tuple[int, ...], int], tuple[tuple[int, ...], int]], ...] = ()


def check_static(ty: Type, what: str, span: Span | None) -> None:
    if isinstance(ty, TensorType):
        if ty.is_dynamic:
            raise UnsupportedError(f"{DYNAMIC_MESSAGE}; {what} has type {ty}", span)
    elif isinstance(ty, TupleType):
        for f in ty.fields:
            check_static(f, what, span)
    else:
        raise UnsupportedError(f"the AOT executor handles tensors and tuples; {what} has type {ty}", span)


def tensors_of(ty: Type, make: Callable[[TensorType], MainTensor]) -> MainValue:
    """A value shaped like `ty` whose leaves are `make(tensor_type)`, left to right (this
    recurses over the nesting of a tuple type, which is shallow, not over expressions)."""
    if isinstance(ty, TensorType):
        return make(ty)
    assert isinstance(ty, TupleType)
    return tuple(tensors_of(f, make) for f in ty.fields)


def leaf_types(ty: Type) -> list[TensorType]:
    out: list[TensorType] = []
    stack: list[Type] = [ty]
    while stack:
        t = stack.pop()
        if isinstance(t, TensorType):
            out.append(t)
        else:
            assert isinstance(t, TupleType)
            stack.extend(reversed(t.fields))
    return out


def is_call_lowered(node: Expr) -> bool:
    return isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == "call_lowered"


def is_reshape_only(metadata: Attrs) -> bool:
    relay_attrs = metadata.get("relay_attrs")
    in_relay_attrs = isinstance(relay_attrs, Attrs) and relay_attrs.get("relay.reshape_only") in (1, True)
    return metadata.get("relay.reshape_only") in (1, True) or in_relay_attrs


class MainWalk:
    """Evaluates @main symbolically: which tensor every expression is, and the calls in order."""

    def __init__(self, mod: IRModule, main: Function, workspace_alignment: int, dynamic: bool = False):
        self.mod = mod
        # With `dynamic`, tensors may have `?` dims and kernels take them as scalars
        # (aot_dynamic.py computes the shapes at run time); otherwise every shape is static.
        self.dynamic = dynamic
        self.main = main
        self.workspace_alignment = workspace_alignment
        # Per callee, computed at its first call: (kernel, internal workspace bytes).
        self.kernels: dict[str, tuple[Kernel, int]] = {}
        self.allocations: dict[str, tuple[Allocation, ...]] = {}  # per PrimFunc with a workspace
        self.values: dict[Expr, MainValue] = {}
        self.steps: list[Step] = []
        self.inputs: list[TensorInfo] = []
        self.input_spans: list[Span | None] = []
        self.result: list[MainTensor] = []
        self.output_types: list[TensorType] = []

    def run(self) -> None:
        main = self.main
        for i, p in enumerate(main.params):
            ty = p.checked_type if p.has_type else p.type_annotation
            if not isinstance(ty, TensorType):
                raise UnsupportedError(f"the AOT executor needs tensor inputs; %{p.name_hint} has type {ty}", p.span)
            self.check_type(ty, f"input %{p.name_hint}", p.span)
            self.values[p] = MainTensor("input", ty, i)
            self.inputs.append(tensor_info(p.name_hint, ty))
            self.input_spans.append(p.span)
        let_value: dict[Var, Expr] = {}

        def descend(node: Expr) -> bool:
            if isinstance(node, Let):
                let_value[node.var] = node.value
            return not isinstance(node, Function)

        for node in post_order(main.body, descend=descend):
            self.visit(node, let_value)
        body_type = main.body.checked_type
        self.check_type(body_type, "the result of @main", main.body.span)
        self.result = flatten_values(self.values[main.body])
        self.output_types = leaf_types(body_type)

    def check_type(self, ty: Type, what: str, span: Span | None) -> None:
        if self.dynamic:
            check_tensors(ty, what, span)
        else:
            check_static(ty, what, span)

    def value(self, expr: Expr, user: Expr) -> MainValue:
        v = self.values.get(expr)
        if v is None:
            raise UnsupportedError(f"the AOT executor cannot use {describe(expr)} as a value", expr.span or user.span)
        return v

    def visit(self, node: Expr, let_value: dict[Var, Expr]) -> None:
        if isinstance(node, Var):
            if node in self.values:
                return
            bound = let_value.get(node)
            if bound is None:
                raise UnsupportedError(f"%{node.name_hint} is free in @main", node.span)
            self.values[node] = self.value(bound, node)
        elif isinstance(node, Constant):
            ty = node.tensor_type
            self.values[node] = MainTensor("constant", ty, -1, data=node.data)
        elif isinstance(node, Tuple):
            self.values[node] = tuple(self.value(f, node) for f in node.fields)
        elif isinstance(node, TupleGetItem):
            tup = self.value(node.tuple_value, node)
            if not isinstance(tup, tuple) or not 0 <= node.index < len(tup):
                raise UnsupportedError(f"projection .{node.index} of a non-tuple", node.span)
            self.values[node] = tup[node.index]
        elif isinstance(node, Let):
            self.values[node] = self.value(node.body, node)
        elif isinstance(node, Call):
            if not is_call_lowered(node):
                raise UnsupportedError(
                    f"the AOT executor runs only lowered calls (call_lowered); found a {describe(node)}", node.span
                )
            self.visit_call_lowered(node)
        elif isinstance(node, If):
            raise UnsupportedError("the AOT executor does not support control flow (if) in @main", node.span)
        elif isinstance(node, Function):
            raise UnsupportedError("the AOT executor does not support functions as values in @main", node.span)
        # GlobalVars and Ops are callees, not values; a misuse shows up where they are used.

    def visit_call_lowered(self, call: Call) -> None:
        callee, args = call.args[0], call.args[1]
        if not isinstance(callee, GlobalVar) or callee not in self.mod:
            raise UnsupportedError(f"call_lowered needs a global callee, found {describe(callee)}", call.span)
        definition = self.mod[callee]
        position = len(self.steps)
        metadata = call.attrs.get("metadata") or EMPTY_ATTRS
        assert isinstance(metadata, Attrs)
        result_type = call.checked_type
        self.check_type(result_type, f"the result of @{callee.name_hint}", call.span)
        inputs = flatten_values(self.value(args, call))
        fields = args.fields if isinstance(args, Tuple) else (args,)
        groups = tuple(tuple(flatten_values(self.value(a, call))) for a in fields)
        result = tensors_of(result_type, lambda ty: MainTensor("result", ty, position))
        outputs = flatten_values(result)
        if isinstance(definition, PrimFunc):
            kind = "prim_func"
            kernel, ws = self.prim_func_kernel(call, definition, inputs, outputs)
        elif isinstance(definition, Function) and definition.has_nonzero_attr("Extern"):
            kind = "extern"
            if any(t.ty.is_dynamic for t in inputs + outputs):
                raise UnsupportedError(
                    f"@{callee.name_hint} is an external function of `?` shape; its C signature carries no "
                    "shapes (a codegen with relay_to_tir lowering passes them as DLTensors)", call.span)
            symbol = str(definition.attr("global_symbol", callee.name_hint))
            if symbol not in self.kernels:
                dtypes = tuple(t.ty.dtype for t in inputs + outputs)
                self.kernels[symbol] = (Kernel(symbol, dtypes, False, extern_prototype(symbol, dtypes)), 0)
            kernel, ws = self.kernels[symbol]
        else:
            raise UnsupportedError(
                f"@{callee.name_hint} is neither a lowered PrimFunc nor an Extern function", call.span
            )
        allocations = self.allocations.get(kernel.symbol, ())
        dim_args = kernel_dim_args(definition) if isinstance(definition, PrimFunc) else ()
        self.steps.append(Step(kind, kernel, ws, inputs, outputs, metadata, allocations=allocations,
                               arg_groups=groups, dim_args=dim_args,
                               param_types=kernel_types(definition, inputs + outputs),
                               equal_dims=tuple(definition.extra.get("equal_scalars", ()))  # type: ignore[arg-type]
                               if isinstance(definition, PrimFunc) else (),
                               equal_counts=tuple(definition.extra.get("equal_counts", ()))  # type: ignore[arg-type]
                               if isinstance(definition, PrimFunc) else ()))
        self.values[call] = result

    def prim_func_kernel(
        self, call: Call, func: PrimFunc, inputs: list[MainTensor], outputs: list[MainTensor]
    ) -> tuple[Kernel, int]:
        if func.num_inputs != len(inputs) or len(func.params) != len(inputs) + len(outputs):
            raise UnsupportedError(
                f"{func.name} takes {func.num_inputs} inputs and {len(func.params) - func.num_inputs} outputs, "
                f"called with {len(inputs)} inputs and {len(outputs)} outputs",
                call.span,
            )
        # The C code generator defines a PrimFunc under its name.
        known = self.kernels.get(func.name)
        if known is not None:
            return known
        if func.scalar_params and not self.dynamic:
            raise UnsupportedError(f"{DYNAMIC_MESSAGE}; {func.name} takes dynamic dimensions", call.span)
        takes_workspace = has_workspace(func)
        ws = workspace_bytes(func, self.workspace_alignment) if takes_workspace else 0
        if takes_workspace:
            layout = workspace_layout(func, self.workspace_alignment)
            self.allocations[func.name] = tuple(Allocation(b.name, o, b.nbytes()) for b, o in layout.items())
        kernel = Kernel(func.name, tuple(b.dtype for b in func.params), takes_workspace, prim_func_signature(func),
                        tuple(sorted(inplace_inputs(func).items())))
        self.kernels[func.name] = (kernel, ws)
        return kernel, ws


def static_dims_of(ty: TensorType) -> tuple[int, ...]:
    return tuple(int(d) for d in ty.shape)  # type: ignore[arg-type]  # static, checked by _static




def workspace_name(position: int) -> str:
    return f"workspace_{position}"


def check_tensors(ty: Type, what: str, span: Span | None) -> None:
    """Like check_static, but `?` dims are fine."""
    if isinstance(ty, TupleType):
        for f in ty.fields:
            check_tensors(f, what, span)
    elif not isinstance(ty, TensorType):
        raise UnsupportedError(f"the AOT executor handles tensors and tuples; {what} has type {ty}", span)


def tensor_info(name: str, ty: TensorType, field: str | None = None) -> TensorInfo:
    """The interface entry of an input or output; a `?` dim is -1 and its bytes 0. `field` is
    its struct field, when not the sanitized name (the results')."""
    field = c_name(name) if field is None else field
    if ty.is_dynamic:
        dims = tuple(-1 if d is ANY else int(d) for d in ty.shape)  # type: ignore[arg-type]  # ints or ANY
        return TensorInfo(name, field, dims, ty.dtype, 0)
    return TensorInfo(name, field, static_dims_of(ty), ty.dtype, ty.nbytes)


def kernel_dim_args(func: PrimFunc) -> tuple[tuple[int, int], ...]:
    """Which input dims a kernel's scalar parameters are: compiler/backend/symbolic_shapes.py
    makes one per `?` dim of the Relay function's parameters, tuple fields flattened, in order."""
    if not func.scalar_params:
        return ()
    func_type = func.func_type
    assert isinstance(func_type, FuncType)
    leaves = [leaf for arg in func_type.arg_types for leaf in leaf_types(arg)]
    pairs = tuple((i, k) for i, leaf in enumerate(leaves) for k, d in enumerate(leaf.shape) if d is ANY)
    if len(pairs) != len(func.scalar_params):
        raise UnsupportedError(f"{func.name}: {len(func.scalar_params)} dim parameters for {len(pairs)} `?` dims")
    return pairs


def output_infos(walk: MainWalk) -> list[TensorInfo]:
    """The outputs of @main."""
    return result_infos(walk.main.body.checked_type)


def result_infos(result: Type) -> list[TensorInfo]:
    """The interface entries of @main's result leaves: named `out<i>`, with TVM's struct fields
    (`output` for a single tensor, `output<i>` for a tuple's leaves)."""
    types = leaf_types(result)
    fields = output_names(len(types), not isinstance(result, TensorType))
    return [tensor_info(n, t, f) for n, t, f in zip(result_names(len(types)), types, fields)]


def has_dynamic_values(main: Function) -> bool:
    """Whether a parameter, a call's result or the result of @main has a `?` dim."""
    if any(is_dynamic(p.checked_type if p.has_type else p.type_annotation) for p in main.params):
        return True
    return any(
        is_dynamic(n.checked_type) for n in post_order(main.body, descend=lambda n: not isinstance(n, Function))
        if isinstance(n, (Call, Tuple, TupleGetItem, Var)) and n.has_type
    )


def kernel_types(definition: object, tensors: list[MainTensor]) -> tuple[TensorType, ...]:
    """The types a callee declares for its flattened inputs and outputs; the values' own types
    when it declares none."""
    func_type = definition.func_type if isinstance(definition, PrimFunc) else None
    if isinstance(func_type, FuncType):
        leaves = [leaf for arg in func_type.arg_types for leaf in leaf_types(arg)] + leaf_types(func_type.ret_type)
        if len(leaves) == len(tensors) and all(leaf.ndim == t.ty.ndim for leaf, t in zip(leaves, tensors)):
            return tuple(leaves)
    return tuple(t.ty for t in tensors)


def alias_reshapes(steps: list[Step], result: list[MainTensor], sizes_known: bool) -> None:
    """A reshape-only call whose result is not an output of @main does not run: buffers are
    dense and row-major, so its result is its input's memory. With `sizes_known` the two must
    also have the same bytes (with `?` dims a reshape keeps the element count by definition)."""
    outputs = set(result)
    for step in steps:
        if not is_reshape_only(step.metadata) or len(step.inputs) != 1 or len(step.outputs) != 1:
            continue
        src, dst = step.inputs[0], step.outputs[0]
        if dst in outputs or src.ty.dtype != dst.ty.dtype or (sizes_known and src.bytes != dst.bytes):
            continue
        dst.alias_of = src
        step.emitted = False


def assign_outputs(result: list[MainTensor]) -> tuple[dict[MainTensor, int], list[tuple[int, MainTensor]]]:
    """Which results are written straight into output i, and which outputs are copied after
    the last call (an input, a constant, or a value already written to another output)."""
    direct: dict[MainTensor, int] = {}
    copies: list[tuple[int, MainTensor]] = []
    for i, leaf in enumerate(result):
        root = leaf.root()
        if root.kind == "result" and root not in direct:
            direct[root] = i
        else:
            copies.append((i, root))
    return direct, copies

