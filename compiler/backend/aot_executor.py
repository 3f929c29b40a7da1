"""AOT executor codegen: the lowered @main as one C function calling the kernels in order.

Before: a lowered IRModule (after LowerTE) whose @main is built only from
`call_lowered(@f, (args...), metadata)` calls, tuples, projections, lets, @main's parameters
and constants; every callee is a PrimFunc or an `Extern=1` function; all shapes are static.
After: `AOTResult` with the C source of the executor, the interface header, the memory plan
and what the report needs about every call.

How @main's values get memory (tvm-facts §6, with a few liberties):
* each tensor a call produces gets a workspace buffer `sid_<n>`, live from that call to the
  last call reading it, placed by the static memory planner; a kernel's internal workspace is
  a buffer `workspace_<step>` live only during its call, placed at a multiple of
  `kernel_workspace_alignment` (64 bytes or more) because the kernel lays its own buffers out
  at that alignment; the report lists those buffers by name under the workspace's row;
* a result that is an output of @main is written straight into the caller's output buffer,
  and later calls read it from there (no copy, no workspace);
* a reshape-only call (`relay.reshape_only=1`) whose result is not an output of @main does not
  run: buffers are dense and row-major, so its result is its input's memory;
* constants live in a read-only pool;
* outputs that are an input, a constant or a value already written to another output are
  copied into place after the last call.

Steps are numbered by position among all `call_lowered` calls of @main in execution order
(the order of the report's `calls`); the output copies happen at step `len(calls)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from compiler.backend.aot_c import Kernel, KernelCall, MainProgram, OutputCopy, Ref, emit_main_source
from compiler.backend.aot_c import extern_prototype, input_param, output_param
from compiler.backend.c_signature import has_workspace, prim_func_signature
from compiler.backend.constants import ConstantPoolBuilder
from compiler.backend.interface_c import TensorInfo, c_name, c_prefix, cffi_cdef, check_names, emit_header, header_name
from compiler.backend.interface_c import sanitize
from compiler.backend.memory_planner import BufferLifetime, MemoryPlan, plan_memory
from compiler.diagnostics import InputError, Span, UnsupportedError
from compiler.ir.attrs import EMPTY_ATTRS, Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType, TupleType, Type
from compiler.ir.visitor import post_order
from compiler.passes.infer_type import describe, infer_expr
from compiler.tir.analysis import kernel_workspace_alignment, workspace_bytes, workspace_layout
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
        }


@dataclass(eq=False)
class _Tensor:
    """A tensor value of @main. kind: "input" (index = parameter position), "constant" (with
    `data`) or "result" (of the call at step `index`). `alias_of` is set for the result of a
    reshape that does not run."""

    kind: str
    ty: TensorType
    index: int
    data: np.ndarray | None = None
    alias_of: _Tensor | None = None

    @property
    def bytes(self) -> int:
        return self.ty.nbytes

    def root(self) -> _Tensor:
        t = self
        while t.alias_of is not None:
            t = t.alias_of
        return t


_Value = _Tensor | tuple  # a tensor, or a (nested) tuple of values


def _flatten(value: _Value) -> list[_Tensor]:
    out: list[_Tensor] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, _Tensor):
            out.append(v)
        else:
            stack.extend(reversed(v))
    return out


@dataclass(frozen=True)
class _Allocation:
    """A buffer a kernel allocates inside its workspace, at `offset` from the workspace's start."""

    name: str
    offset: int
    bytes: int


@dataclass(eq=False)
class _Step:
    """One call_lowered of @main. `workspace_bytes` is the kernel's internal workspace and
    `allocations` the buffers it holds."""

    kind: str
    kernel: Kernel
    workspace_bytes: int
    inputs: list[_Tensor]
    outputs: list[_Tensor]
    metadata: Attrs
    emitted: bool = True
    allocations: tuple[_Allocation, ...] = ()


def _static(ty: Type, what: str, span: Span | None) -> None:
    if isinstance(ty, TensorType):
        if ty.is_dynamic:
            raise UnsupportedError(f"{DYNAMIC_MESSAGE}; {what} has type {ty}", span)
    elif isinstance(ty, TupleType):
        for f in ty.fields:
            _static(f, what, span)
    else:
        raise UnsupportedError(f"the AOT executor handles tensors and tuples; {what} has type {ty}", span)


def _tensors_of(ty: Type, make: Callable[[TensorType], _Tensor]) -> _Value:
    """A value shaped like `ty` whose leaves are `make(tensor_type)`, left to right (this
    recurses over the nesting of a tuple type, which is shallow, not over expressions)."""
    if isinstance(ty, TensorType):
        return make(ty)
    assert isinstance(ty, TupleType)
    return tuple(_tensors_of(f, make) for f in ty.fields)


def _leaf_types(ty: Type) -> list[TensorType]:
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


def _is_call_lowered(node: Expr) -> bool:
    return isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == "call_lowered"


def _reshape_only(metadata: Attrs) -> bool:
    relay_attrs = metadata.get("relay_attrs")
    in_relay_attrs = isinstance(relay_attrs, Attrs) and relay_attrs.get("relay.reshape_only") in (1, True)
    return metadata.get("relay.reshape_only") in (1, True) or in_relay_attrs


class AOTExecutorCodegen:
    def __init__(
        self,
        module_name: str = "default",
        workspace_byte_alignment: int = 16,
        constant_byte_alignment: int = 16,
    ):
        if not sanitize(module_name).strip("_"):
            raise InputError(f"module name {module_name!r} has no letters or digits")
        if workspace_byte_alignment <= 0 or constant_byte_alignment <= 0:
            raise ValueError("byte alignments must be positive")
        self.module_name = module_name
        self.workspace_alignment = workspace_byte_alignment
        self.constant_alignment = constant_byte_alignment

    def codegen(self, mod: IRModule) -> AOTResult:
        main = mod.main
        if not main.body.has_type:
            infer_expr(main, mod)
        walk = _MainWalk(mod, main, self.workspace_alignment)
        walk.run()
        return _Assembler(self, walk).assemble()


class _MainWalk:
    """Evaluates @main symbolically: which tensor every expression is, and the calls in order."""

    def __init__(self, mod: IRModule, main: Function, workspace_alignment: int):
        self.mod = mod
        self.main = main
        self.workspace_alignment = workspace_alignment
        # Per callee, computed at its first call: (kernel, internal workspace bytes).
        self.kernels: dict[str, tuple[Kernel, int]] = {}
        self.allocations: dict[str, tuple[_Allocation, ...]] = {}  # per PrimFunc with a workspace
        self.values: dict[Expr, _Value] = {}
        self.steps: list[_Step] = []
        self.inputs: list[TensorInfo] = []
        self.input_spans: list[Span | None] = []
        self.result: list[_Tensor] = []
        self.output_types: list[TensorType] = []

    def run(self) -> None:
        main = self.main
        for i, p in enumerate(main.params):
            ty = p.checked_type if p.has_type else p.type_annotation
            if not isinstance(ty, TensorType):
                raise UnsupportedError(f"the AOT executor needs tensor inputs; %{p.name_hint} has type {ty}", p.span)
            _static(ty, f"input %{p.name_hint}", p.span)
            self.values[p] = _Tensor("input", ty, i)
            self.inputs.append(TensorInfo(p.name_hint, c_name(p.name_hint), _dims(ty), ty.dtype, ty.nbytes))
            self.input_spans.append(p.span)
        let_value: dict[Var, Expr] = {}

        def descend(node: Expr) -> bool:
            if isinstance(node, Let):
                let_value[node.var] = node.value
            return not isinstance(node, Function)

        for node in post_order(main.body, descend=descend):
            self.visit(node, let_value)
        body_type = main.body.checked_type
        _static(body_type, "the result of @main", main.body.span)
        self.result = _flatten(self.values[main.body])
        self.output_types = _leaf_types(body_type)

    def value(self, expr: Expr, user: Expr) -> _Value:
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
            self.values[node] = _Tensor("constant", ty, -1, data=node.data)
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
            if not _is_call_lowered(node):
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
        _static(result_type, f"the result of @{callee.name_hint}", call.span)
        inputs = _flatten(self.value(args, call))
        result = _tensors_of(result_type, lambda ty: _Tensor("result", ty, position))
        outputs = _flatten(result)
        if isinstance(definition, PrimFunc):
            kind = "prim_func"
            kernel, ws = self.prim_func_kernel(call, definition, inputs, outputs)
        elif isinstance(definition, Function) and definition.has_nonzero_attr("Extern"):
            kind = "extern"
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
        self.steps.append(_Step(kind, kernel, ws, inputs, outputs, metadata, allocations=allocations))
        self.values[call] = result

    def prim_func_kernel(
        self, call: Call, func: PrimFunc, inputs: list[_Tensor], outputs: list[_Tensor]
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
        if func.scalar_params:
            raise UnsupportedError(f"{DYNAMIC_MESSAGE}; {func.name} takes dynamic dimensions", call.span)
        takes_workspace = has_workspace(func)
        ws = workspace_bytes(func, self.workspace_alignment) if takes_workspace else 0
        if takes_workspace:
            layout = workspace_layout(func, self.workspace_alignment)
            self.allocations[func.name] = tuple(_Allocation(b.name, o, b.nbytes()) for b, o in layout.items())
        kernel = Kernel(func.name, tuple(b.dtype for b in func.params), takes_workspace, prim_func_signature(func))
        self.kernels[func.name] = (kernel, ws)
        return kernel, ws


def _dims(ty: TensorType) -> tuple[int, ...]:
    return tuple(int(d) for d in ty.shape)  # type: ignore[arg-type]  # static, checked by _static


class _Assembler:
    """Decides memory for the walked @main and prints the C."""

    def __init__(self, gen: AOTExecutorCodegen, walk: _MainWalk):
        self.gen = gen
        self.walk = walk
        self.steps = walk.steps
        self.pool = ConstantPoolBuilder(gen.constant_alignment)
        self.sid_names: dict[_Tensor, str] = {}
        self.direct: dict[_Tensor, int] = {}  # result written straight into output i
        self.copies: list[tuple[int, _Tensor]] = []

    def assemble(self) -> AOTResult:
        gen, walk = self.gen, self.walk
        outputs = self.output_infos()
        check_names(gen.module_name, walk.inputs, outputs, walk.input_spans)
        self.alias_reshapes()
        self.assign_outputs()
        plan = self.plan()
        kernel_calls, copies = self.kernel_calls(plan, outputs)
        calls = self.call_infos(outputs)
        pool = self.pool.build()
        # The static pool is aligned for the kernel workspaces in it, not only for `sid_*`.
        prog = MainProgram(gen.module_name, tuple(walk.inputs), tuple(outputs), tuple(kernel_calls), copies,
                           plan.total_bytes, plan.alignment, pool)
        decl = (gen.module_name, walk.inputs, outputs, plan.total_bytes, gen.workspace_alignment, pool.total_bytes)
        return AOTResult(
            module_name=gen.module_name,
            main_source=emit_main_source(prog),
            header=emit_header(*decl),
            header_name=header_name(gen.module_name),
            cdef=cffi_cdef(*decl),
            entry=f"{c_prefix(gen.module_name)}_run",
            memory=plan,
            calls=calls,
            inputs=list(walk.inputs),
            outputs=outputs,
            constants=list(pool.arrays),
            constant_offsets=list(pool.offsets),
            workspace_bytes=plan.total_bytes,
            constant_bytes=pool.total_bytes,
            io_bytes=sum(t.bytes for t in walk.inputs) + sum(t.bytes for t in outputs),
            workspace_allocations=self.workspace_allocations(plan),
        )

    def output_infos(self) -> list[TensorInfo]:
        types = self.walk.output_types
        single = len(types) == 1 and isinstance(self.walk.main.body.checked_type, TensorType)
        names = ["output"] if single else [f"output{i}" for i in range(len(types))]
        return [TensorInfo(n, c_name(n), _dims(t), t.dtype, t.nbytes) for n, t in zip(names, types)]

    def alias_reshapes(self) -> None:
        outputs = set(self.walk.result)
        for step in self.steps:
            if not _reshape_only(step.metadata) or len(step.inputs) != 1 or len(step.outputs) != 1:
                continue
            src, dst = step.inputs[0], step.outputs[0]
            if dst in outputs or src.bytes != dst.bytes or src.ty.dtype != dst.ty.dtype:
                continue
            dst.alias_of = src
            step.emitted = False

    def assign_outputs(self) -> None:
        for i, leaf in enumerate(self.walk.result):
            root = leaf.root()
            if root.kind == "result" and root not in self.direct:
                self.direct[root] = i
            else:
                self.copies.append((i, root))

    def plan(self) -> MemoryPlan:
        """Lifetimes of the intermediates and kernel workspaces, then their placement."""
        first: dict[_Tensor, int] = {}
        last: dict[_Tensor, int] = {}
        for position, step in enumerate(self.steps):
            if not step.emitted:
                continue
            for t in step.outputs:
                if t not in self.direct:
                    first[t] = last[t] = position
                    self.sid_names[t] = f"sid_{len(self.sid_names)}"
            for t in step.inputs:
                root = t.root()
                if root in first:
                    last[root] = max(last[root], position)
        for _, src in self.copies:
            if src in first:
                last[src] = len(self.steps)
        buffers = [BufferLifetime(self.sid_names[t], t.bytes, first[t], last[t]) for t in first]
        kernel_alignment = kernel_workspace_alignment(self.gen.workspace_alignment)
        for position, step in enumerate(self.steps):
            if step.emitted and step.kernel.takes_workspace:
                buffers.append(BufferLifetime(_workspace_name(position), step.workspace_bytes, position, position,
                                              kernel_alignment))
        return plan_memory(buffers, self.gen.workspace_alignment)

    def workspace_allocations(self, plan: MemoryPlan) -> dict[str, list[dict[str, int | str]]]:
        """The report rows of the buffers inside each planned kernel workspace."""
        rows: dict[str, list[dict[str, int | str]]] = {}
        for position, step in enumerate(self.steps):
            if step.emitted and step.kernel.takes_workspace and step.allocations:
                name = _workspace_name(position)
                base = plan.offsets[name]
                rows[name] = [{"name": f"{step.kernel.symbol}/{a.name}", "offset": base + a.offset, "bytes": a.bytes}
                              for a in step.allocations]
        return rows

    def ref(self, tensor: _Tensor, plan: MemoryPlan, outputs: list[TensorInfo]) -> Ref:
        """Where `tensor` is; a constant is added to the pool the first time it is referenced,
        so the pool holds exactly the constants the C code reads."""
        t = tensor.root()
        dtype = t.ty.dtype
        if t.kind == "input":
            return Ref("input", input_param(self.walk.inputs[t.index]), dtype)
        if t.kind == "constant":
            assert t.data is not None
            k = self.pool.add(t.data)
            return Ref("constant", f"constant_{k}", dtype, self.pool.offset(k))
        if t in self.direct:
            return self.output_ref(self.direct[t], outputs)
        name = self.sid_names[t]
        return Ref("sid", name, dtype, plan.offsets[name])

    def output_ref(self, index: int, outputs: list[TensorInfo]) -> Ref:
        info = outputs[index]
        return Ref("output", output_param(info), info.dtype)

    def report_name(self, tensor: _Tensor, outputs: list[TensorInfo]) -> str:
        """How the report names the place `tensor` lives in."""
        t = tensor.root()
        if t.kind == "input":
            return f"%{self.walk.inputs[t.index].name}"
        if t.kind == "constant":
            assert t.data is not None
            k = self.pool.index_of(t.data)
            return "constant" if k is None else f"constant_{k}"  # None: read by no code at all
        if t in self.direct:
            return outputs[self.direct[t]].name
        return self.sid_names[t]

    def kernel_calls(
        self, plan: MemoryPlan, outputs: list[TensorInfo]
    ) -> tuple[list[KernelCall], tuple[OutputCopy, ...]]:
        emitted: list[KernelCall] = []
        for position, step in enumerate(self.steps):
            if not step.emitted:
                continue
            tensors = step.inputs + step.outputs
            offset = plan.offsets[_workspace_name(position)] if step.kernel.takes_workspace else None
            emitted.append(KernelCall(step.kernel, tuple(self.ref(t, plan, outputs) for t in tensors), offset))
        copies = tuple(
            OutputCopy(self.output_ref(i, outputs), self.ref(src, plan, outputs), outputs[i].bytes)
            for i, src in self.copies
        )
        return emitted, copies

    def call_infos(self, outputs: list[TensorInfo]) -> list[CallInfo]:
        infos = []
        for position, step in enumerate(self.steps):
            infos.append(CallInfo(
                callee=step.kernel.symbol,
                kind=step.kind,
                args=tuple(self.report_name(t, outputs) for t in step.inputs),
                outputs=tuple(self.report_name(t, outputs) for t in step.outputs),
                metadata=step.metadata,
                emitted=step.emitted,
                workspace=_workspace_name(position) if step.kernel.takes_workspace else None,
            ))
        return infos


def _workspace_name(position: int) -> str:
    return f"workspace_{position}"
