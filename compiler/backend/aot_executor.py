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

from compiler.backend.aot_c import KernelCall, MainProgram, OutputCopy, Ref, emit_main_source
from compiler.backend.aot_c import input_param, output_param
from compiler.backend.aot_control import ControlFlowAssembler, has_control_flow
from compiler.backend.aot_dynamic import DynamicAssembler
from compiler.backend.aot_main_walk import AOTResult, CallInfo, MainTensor, MainWalk
from compiler.backend.aot_main_walk import alias_reshapes, assign_outputs, has_dynamic_values, output_infos
from compiler.backend.aot_main_walk import workspace_name
from compiler.backend.constants import ConstantPoolBuilder
from compiler.backend.interface_c import TensorInfo, c_prefix, cffi_cdef, check_names, emit_header, header_name
from compiler.backend.interface_c import sanitize
from compiler.backend.memory_planner import BufferLifetime, MemoryPlan, plan_memory
from compiler.diagnostics import InputError
from compiler.ir.module import IRModule
from compiler.passes.infer_type import infer_expr
from compiler.tir.analysis import kernel_workspace_alignment

__all__ = ["AOTExecutorCodegen", "AOTResult", "CallInfo"]


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
        if has_control_flow(main):
            return ControlFlowAssembler(self.module_name, self.workspace_alignment, self.constant_alignment, mod,
                                        main).assemble()
        dynamic = has_dynamic_values(main)
        walk = MainWalk(mod, main, self.workspace_alignment, dynamic)
        walk.run()
        if dynamic:
            return DynamicAssembler(self.module_name, self.workspace_alignment, self.constant_alignment, walk).assemble()
        return _Assembler(self, walk).assemble()


class _Assembler:
    """Decides memory for the walked @main and prints the C."""

    def __init__(self, gen: AOTExecutorCodegen, walk: MainWalk):
        self.gen = gen
        self.walk = walk
        self.steps = walk.steps
        self.pool = ConstantPoolBuilder(gen.constant_alignment)
        self.sid_names: dict[MainTensor, str] = {}
        self.direct: dict[MainTensor, int] = {}  # result written straight into output i
        self.copies: list[tuple[int, MainTensor]] = []

    def assemble(self) -> AOTResult:
        gen, walk = self.gen, self.walk
        outputs = output_infos(walk)
        check_names(gen.module_name, walk.inputs, outputs, walk.input_spans)
        alias_reshapes(self.steps, walk.result, sizes_known=True)
        self.direct, self.copies = assign_outputs(walk.result)
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
            constant_pool=pool,
            workspace_bytes=plan.total_bytes,
            constant_bytes=pool.total_bytes,
            io_bytes=sum(t.bytes for t in walk.inputs) + sum(t.bytes for t in outputs),
            workspace_allocations=self.workspace_allocations(plan),
        )

    def plan(self) -> MemoryPlan:
        """Lifetimes of the intermediates and kernel workspaces, then their placement."""
        first: dict[MainTensor, int] = {}
        last: dict[MainTensor, int] = {}
        for position, step in enumerate(self.steps):
            if not step.emitted:
                continue
            for t in step.outputs:
                if t not in self.direct:
                    first[t] = last[t] = position
            for t in step.inputs:
                root = t.root()
                if root in first:
                    last[root] = max(last[root], position)
        for _, src in self.copies:
            if src in first:
                last[src] = len(self.steps)
        in_place_at = self.write_in_place(first, last)
        for t in sorted(first, key=first.__getitem__):
            self.sid_names[t] = f"sid_{len(self.sid_names)}"
        buffers = [BufferLifetime(self.sid_names[t], t.bytes, first[t], last[t]) for t in first]
        kernel_alignment = kernel_workspace_alignment(self.gen.workspace_alignment)
        for position, step in enumerate(self.steps):
            if step.emitted and step.kernel.takes_workspace:
                buffers.append(BufferLifetime(workspace_name(position), step.workspace_bytes, position, position,
                                              kernel_alignment))
        plan = plan_memory(buffers, self.gen.workspace_alignment)
        # The report says where a buffer's value gave way to the next, so each value's own
        # lifetime can still be read from it.
        steps = {self.sid_names[t]: at for t, at in in_place_at.items()}
        for row in plan.buffers:
            if row["name"] in steps:
                row["in_place_at"] = steps[str(row["name"])]
        return plan

    def write_in_place(self, first: dict[MainTensor, int], last: dict[MainTensor, int]) -> dict[MainTensor, list[int]]:
        """A kernel's result takes the buffer of an input it may overwrite (Kernel.inplace)
        when that input is an intermediate read by no later call: the result becomes an alias
        of it, whose lifetime grows to the result's. Returns, per buffer so shared, the steps
        at which a result was written over it."""
        at: dict[MainTensor, list[int]] = {}
        for position, step in enumerate(self.steps):
            if not step.emitted or not step.kernel.inplace:
                continue
            roots = [t.root() for t in step.inputs]
            for o, i in step.kernel.inplace:
                out, src = step.outputs[o], roots[i]
                if (out not in first or src not in first or last[src] != position or roots.count(src) != 1
                        or src.bytes != out.bytes):
                    continue
                last[src] = last.pop(out)
                del first[out]
                out.alias_of = src
                at.setdefault(src, []).append(position)
        return at

    def workspace_allocations(self, plan: MemoryPlan) -> dict[str, list[dict[str, int | str]]]:
        """The report rows of the buffers inside each planned kernel workspace."""
        rows: dict[str, list[dict[str, int | str]]] = {}
        for position, step in enumerate(self.steps):
            if step.emitted and step.kernel.takes_workspace and step.allocations:
                name = workspace_name(position)
                base = plan.offsets[name]
                rows[name] = [{"name": f"{step.kernel.symbol}/{a.name}", "offset": base + a.offset, "bytes": a.bytes}
                              for a in step.allocations]
        return rows

    def ref(self, tensor: MainTensor, plan: MemoryPlan, outputs: list[TensorInfo]) -> Ref:
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

    def report_name(self, tensor: MainTensor, outputs: list[TensorInfo]) -> str:
        """How the report names the place `tensor` lives in."""
        t = tensor.root()
        if t.kind == "input":
            return f"%{self.walk.inputs[t.index].name}"
        if t.kind == "constant":
            assert t.data is not None
            k = self.pool.index_of(t.data)
            return "constant" if k is None else f"constant_{k}"  # None: read by no code at all
        if t in self.direct:  # the header's field, as TVM's report names an output buffer
            return outputs[self.direct[t]].c_name
        return self.sid_names[t]

    def kernel_calls(
        self, plan: MemoryPlan, outputs: list[TensorInfo]
    ) -> tuple[list[KernelCall], tuple[OutputCopy, ...]]:
        emitted: list[KernelCall] = []
        for position, step in enumerate(self.steps):
            if not step.emitted:
                continue
            tensors = step.inputs + step.outputs
            offset = plan.offsets[workspace_name(position)] if step.kernel.takes_workspace else None
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
                workspace=workspace_name(position) if step.kernel.takes_workspace else None,
            ))
        return infos
