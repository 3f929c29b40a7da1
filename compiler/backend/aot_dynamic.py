"""AOT executor of a model with `?` shapes: shapes, memory and output buffers decided at run time.

Before: a `MainWalk` of @main made with `dynamic=True` (tensors may have `?` dims; a kernel
takes its `?` input dims as int64 scalars, see compiler/backend/symbolic_shapes.py).
After: `AOTResult` whose C entry `tvmgen_<name>_run(inputs, outputs)` takes DLTensors.

What the entry does, call by call in execution order (TVM's VM does the same work at run time;
here it is straight-line C):
* the inputs' DLTensors are checked against the declared types (rank, dtype, static dims);
* a call whose result type has a `?` dim first runs its shape function (LowerTE cross-linked it
  as `prim_shape_fn_var`), passing each argument's shape and/or data as its states say, and
  gets its result dims;
* each result that is not an output of @main gets a buffer in one arena, placed first-fit among
  the buffers still live (lifetimes are the static plan's: from the producing call to the last
  reader), the arena growing when a placement does not fit, so a shape that depends on a
  computed value (a `dyn.reshape` of a `shape_of`) is no harder than one known from the inputs;
* a result that is an output of @main goes straight into the caller's buffer, whose shape is
  checked; when the caller left `data` NULL the entry allocates it (`tvmgen_<name>_free`
  releases it) and writes the dims into the caller's `shape` array;
* the kernel is called with its buffers and its `?` dims.
A reshape-only call that is not an output still does not run: its result is its input's memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.backend.aot_main_walk import AOTResult, CallInfo, MainTensor, MainWalk, Step
from compiler.backend.aot_c import Kernel, profile_support
from compiler.backend.aot_main_walk import alias_reshapes, assign_outputs, output_infos, workspace_name
from compiler.backend.c_signature import prim_func_signature
from compiler.backend.constants import ConstantPool, ConstantPoolBuilder, emit_pool
from compiler.backend.dlpack import HEADER_TEXT, dtype_code
from compiler.backend.interface_c import (
    TensorInfo, c_prefix, check_names, dynamic_cffi_cdef, dynamic_declarations, header_name, macro_prefix,
)
from compiler.backend.memory_planner import MemoryPlan
from compiler.diagnostics import UnsupportedError
from compiler.ir.expr import GlobalVar
from compiler.ir.types import ANY, TensorType
from compiler.tir.analysis import kernel_workspace_alignment
from compiler.tir.dtypes import c_type, itemsize
from compiler.tir.stmt import PrimFunc

DATA_STATE, SHAPE_STATE = 1, 2  # compiler/backend/shape_func.py
# Return codes of the entry, documented in the header.
INPUT_MISMATCH, OUTPUT_MISMATCH, OUT_OF_MEMORY, KERNEL_SHAPE_MISMATCH = -2, -3, -4, -5


def describe_type(ty: TensorType) -> str:
    return f"{ty.dtype}[{', '.join('?' if d is ANY else str(d) for d in ty.shape)}]"


@dataclass(frozen=True)
class _Buffer:
    """An arena buffer: a call's result (`tensor`) or a kernel's workspace (`static_bytes`)."""

    name: str
    first: int
    last: int
    alignment: int
    tensor: MainTensor | None = None
    static_bytes: int = 0


class DynamicAssembler:
    def __init__(self, module_name: str, workspace_alignment: int, constant_alignment: int, walk: MainWalk):
        self.module_name = module_name
        self.prefix = c_prefix(module_name)
        self.workspace_alignment = workspace_alignment
        self.walk = walk
        self.steps = walk.steps
        self.pool = ConstantPoolBuilder(constant_alignment)
        self.outputs: list[TensorInfo] = []
        self.direct: dict[MainTensor, int] = {}  # result written straight into output i
        self.copies: list[tuple[int, MainTensor]] = []
        self.buffers: list[_Buffer] = []  # in placement order
        self.buffer_of: dict[MainTensor, int] = {}
        self.workspace_of: dict[int, int] = {}  # step -> its kernel workspace's buffer
        # A result's buffer -> (the dying input buffer it takes when the run's shapes are equal,
        # the kernel's view of that input).
        self.in_place: dict[int, tuple[int, MainTensor]] = {}
        self.slots: dict[MainTensor, int] = {}  # where a tensor's dims start in `dims[]`
        self.slot_count = 0
        self.written: set[MainTensor] = set()  # static tensors whose dims are in their slot
        self.shape_funcs: dict[str, str] = {}  # name -> prototype
        self.shape_func_of: dict[int, str] = {}  # step -> its shape function
        self.timed: list[str] = []  # the kernel of each timed call, in execution order (profiling)

    # -- decisions -------------------------------------------------------------------------

    def assemble(self) -> AOTResult:
        walk = self.walk
        self.outputs = outputs = output_infos(walk)
        check_names(self.module_name, walk.inputs, outputs, walk.input_spans)
        alias_reshapes(self.steps, walk.result, sizes_known=False)
        self.direct, self.copies = assign_outputs(walk.result)
        self.lifetimes()
        body = self.run_body()
        pool = self.pool.build()
        return AOTResult(
            module_name=self.module_name,
            main_source=self.source(pool, body),
            header=emit_dynamic_header(self.module_name, walk.inputs, outputs, pool.total_bytes),
            header_name=header_name(self.module_name),
            cdef=dynamic_cffi_cdef(self.module_name, walk.inputs, outputs),
            entry=f"{self.prefix}_run",
            memory=MemoryPlan({}, 0, 0, [], self.arena_alignment()),
            calls=self.call_infos(),
            inputs=list(walk.inputs),
            outputs=outputs,
            constants=list(pool.arrays),
            constant_offsets=list(pool.offsets),
            constant_pool=pool,
            workspace_bytes=0,
            constant_bytes=pool.total_bytes,
            io_bytes=0,
            arena=self.arena_report(),
        )

    def lifetimes(self) -> None:
        """The arena's buffers in the order the entry places them: per call, its results, then
        its kernel's workspace; each lives from its call to its last reader."""
        kernel_alignment = kernel_workspace_alignment(self.workspace_alignment)
        last: dict[int, int] = {}
        for position, step in enumerate(self.steps):
            if not step.emitted:
                continue
            for t in step.inputs:
                b = self.buffer_of.get(t.root())
                if b is not None:
                    last[b] = position
            for t in step.outputs:
                if t not in self.direct:
                    self.buffer_of[t] = b = len(self.buffers)
                    last[b] = position
                    self.buffers.append(_Buffer(f"sid_{len(self.buffer_of) - 1}", position, position,
                                                self.workspace_alignment, tensor=t))
            if step.kernel.takes_workspace:
                self.workspace_of[position] = b = len(self.buffers)
                last[b] = position
                self.buffers.append(_Buffer(workspace_name(position), position, position, kernel_alignment,
                                            static_bytes=step.workspace_bytes))
        for _, src in self.copies:
            b = self.buffer_of.get(src)
            if b is not None:
                last[b] = len(self.steps)
        self.buffers = [_Buffer(b.name, b.first, last[i], b.alignment, b.tensor, b.static_bytes)
                        for i, b in enumerate(self.buffers)]
        self.write_in_place()

    def write_in_place(self) -> None:
        """A kernel's result may take the buffer of an input it can overwrite (Kernel.inplace)
        that no later call reads; whether it does is decided at run time, by the shapes."""
        for position, step in enumerate(self.steps):
            if not step.emitted or not step.kernel.inplace:
                continue
            roots = [t.root() for t in step.inputs]
            for o, i in step.kernel.inplace:
                out, view = step.outputs[o], step.inputs[i]
                src = self.buffer_of.get(roots[i])
                dst = self.buffer_of.get(out)
                if (src is None or dst is None or self.buffers[src].last != position or roots.count(roots[i]) != 1
                        or view.ty.dtype != out.ty.dtype or view.ty.ndim != out.ty.ndim
                        or any(a is not ANY and b is not ANY and a != b for a, b in zip(view.ty.shape, out.ty.shape))):
                    continue
                self.in_place[dst] = (src, view)

    def arena_alignment(self) -> int:
        return max([64, self.workspace_alignment] + [b.alignment for b in self.buffers])

    # -- C of the entry ----------------------------------------------------------------------

    def slot(self, t: MainTensor) -> int:
        if t not in self.slots:
            self.slots[t] = self.slot_count
            self.slot_count += max(t.ty.ndim, 1)
        return self.slots[t]

    def dim(self, t: MainTensor, k: int) -> str:
        d = t.ty.shape[k]
        return f"dims[{self.slot(t) + k}]" if d is ANY else f"INT64_C({d})"

    def nbytes(self, t: MainTensor) -> str:
        if not t.ty.is_dynamic:
            return f"INT64_C({t.ty.nbytes})"
        return " * ".join([f"INT64_C({itemsize(t.ty.dtype)})"] + [self.dim(t, k) for k in range(t.ty.ndim)])

    def pointer(self, t: MainTensor) -> str:
        root = t.root()
        if root.kind == "input":
            return f"inputs->{self.walk.inputs[root.index].c_name}->data"
        if root.kind == "constant":
            assert root.data is not None
            k = self.pool.add(root.data)
            return f"({self.prefix}_constant_pool + {self.pool.offset(k)})"
        if root in self.direct:
            return f"outputs->{self.outputs[self.direct[root]].c_name}->data"
        return f"(arena.base + offset[{self.buffer_of[root]}])"

    def typed(self, t: MainTensor, dtype: str | None = None) -> str:
        return f"({c_type(dtype or t.ty.dtype)}*){self.pointer(t)}"

    def run_body(self) -> list[str]:
        lines: list[str] = []
        for i, info in enumerate(self.walk.inputs):
            t = self.walk.values[self.walk.main.params[i]]
            assert isinstance(t, MainTensor)
            lines += self.check_input(info, t)
        for position, step in enumerate(self.steps):
            lines.append(f"  /* call {position}: {step.kernel.symbol} */")
            lines += self.shape_lines(step, position)
            if not step.emitted:
                continue
            for t in step.outputs:
                if t in self.direct:
                    lines += self.output_lines(self.direct[t], t)
                else:
                    lines += self.place(self.buffer_of[t], self.nbytes(t), position)
            if position in self.workspace_of:
                b = self.workspace_of[position]
                lines += self.place(b, f"INT64_C({self.buffers[b].static_bytes})", position)
            lines += self.static_param_checks(step)
            timed = len(self.timed)
            self.timed.append(step.kernel.symbol)
            lines.append("  if (profile) started = relaycc_now_ns();")
            lines.append(f"  if ({self.kernel_call(step, position)} != 0) goto failed;")
            lines.append(f"  if (profile) profile[{timed}] += relaycc_now_ns() - started;")
        for i, src in self.copies:
            lines += self.output_lines(i, src)
            lines.append(f"  memcpy(outputs->{self.outputs[i].c_name}->data, {self.pointer(src)}, "
                         f"(size_t)({self.nbytes(src)}));")
        return lines

    def place(self, b: int, nbytes: str, position: int) -> list[str]:
        placed = (f"if (!relaycc_place(&arena, offset, size, last_use, {b}, {position}, {self.buffers[b].alignment})) "
                  "goto out_of_memory;")
        lines = [f"  size[{b}] = {nbytes};"]
        if b not in self.in_place:
            return lines + [f"  {placed}"]
        src, view = self.in_place[b]
        out = self.buffers[b].tensor
        assert out is not None
        same = [f"{self.dim(view, k)} == {self.dim(out, k)}" for k in range(out.ty.ndim)
                if view.ty.shape[k] is ANY or out.ty.shape[k] is ANY]
        if not same:
            return lines + [f"  offset[{b}] = offset[{src}];"]
        return lines + [f"  if ({' && '.join(same)}) offset[{b}] = offset[{src}];", f"  else {placed}"]

    def check_input(self, info: TensorInfo, t: MainTensor) -> list[str]:
        name = f"inputs->{info.c_name}"
        declared = ", ".join(str(d) for d in info.shape) or "0"
        lines = [
            f"  {{ static const int64_t declared[] = {{{declared}}};",
            f"    if (!relaycc_conforms({name}, {t.ty.ndim}, {dtype_code(t.ty.dtype)}, {itemsize(t.ty.dtype) * 8}, "
            f"declared)) {{ status = {INPUT_MISMATCH}; goto done; }} }}",
        ]
        lines += [f"  dims[{self.slot(t) + k}] = {name}->shape[{k}];" for k in range(t.ty.ndim)]
        self.written.add(t)
        return lines

    def shape_lines(self, step: Step, position: int) -> list[str]:
        """Dims of the step's results: constants, or what its shape function computes."""
        if not any(t.ty.is_dynamic for t in step.outputs):
            return []
        shape_fn = step.metadata.get("prim_shape_fn_var")
        func = self.walk.mod[shape_fn] if isinstance(shape_fn, GlobalVar) and shape_fn in self.walk.mod else None
        if not isinstance(func, PrimFunc):
            raise UnsupportedError(f"call {position} ({step.kernel.symbol}) has a result of `?` shape but no "
                                   "shape function (prim_shape_fn_var) in its metadata")
        states = step.metadata.get("prim_shape_fn_states")
        assert isinstance(states, tuple) and len(states) == len(step.arg_groups), (states, step.arg_groups)
        args: list[str] = []
        lines: list[str] = []
        for state, group in zip(states, step.arg_groups):
            if int(state) & DATA_STATE:
                if len(group) != 1:
                    raise UnsupportedError(f"shape function {func.name} reads the data of a tuple")
                args.append(self.typed(group[0]))
            if int(state) & SHAPE_STATE:
                for t in group:
                    lines += self.static_dims(t)
                    args.append(f"&dims[{self.slot(t)}]")
        args += [f"&dims[{self.slot(t)}]" for t in step.outputs]
        if len(args) != len(func.params):
            raise UnsupportedError(f"shape function {func.name} takes {len(func.params)} buffers; "
                                   f"call {position} has {len(args)}")
        self.shape_funcs[func.name] = prim_func_signature(func)
        self.shape_func_of[position] = func.name
        lines.append(f"  if ({func.name}({', '.join(args)}) != 0) goto failed;")
        return lines

    def static_dims(self, t: MainTensor) -> list[str]:
        """A static tensor's dims, written into its slot once for shape functions to read."""
        if t in self.written or t.ty.is_dynamic:
            return []
        self.written.add(t)
        return [f"  dims[{self.slot(t) + k}] = INT64_C({d});" for k, d in enumerate(t.ty.shape)]

    def output_lines(self, index: int, t: MainTensor) -> list[str]:
        info = self.outputs[index]
        dims = ", ".join(self.dim(t, k) for k in range(t.ty.ndim)) or "0"
        return [
            f"  {{ const int64_t computed[] = {{{dims}}};",
            f"    if (!relaycc_output(outputs->{info.c_name}, {t.ty.ndim}, {dtype_code(t.ty.dtype)}, "
            f"{itemsize(t.ty.dtype) * 8}, computed, (size_t)({self.nbytes(t)}), &allocated[{index}])) "
            f"{{ status = {OUTPUT_MISMATCH}; goto done; }} }}",
        ]

    def static_param_checks(self, step: Step) -> list[str]:
        """A kernel compiled for a static dim that a `?` value reaches checks it at run time
        (type inference allows the meeting, the kernel would read out of bounds)."""
        declared = step.param_types
        checks = [f"{self.dim(t, k)} != INT64_C({d})"
                  for t, ty in zip(step.inputs + step.outputs, declared)
                  for k, d in enumerate(ty.shape) if d is not ANY and t.ty.shape[k] is ANY]
        for a, b in step.equal_dims:
            (ia, ka), (ib, kb) = step.dim_args[a], step.dim_args[b]
            # The kernel keeps the first dim; the other may still broadcast from 1.
            first, other = self.dim(step.inputs[ia], ka), self.dim(step.inputs[ib], kb)
            checks.append(f"({other} != {first} && {other} != 1)")

        def product(scalars: tuple[int, ...], constant: int) -> str:
            factors = [self.dim(step.inputs[step.dim_args[s][0]], step.dim_args[s][1]) for s in scalars]
            return "(" + " * ".join([f"INT64_C({constant})", *factors]) + ")"

        checks += [f"{product(*lhs)} != {product(*rhs)}" for lhs, rhs in step.equal_counts]
        if not checks:
            return []
        return [f"  if ({' || '.join(checks)}) {{ status = {KERNEL_SHAPE_MISMATCH}; goto done; }}"]

    def kernel_call(self, step: Step, position: int) -> str:
        kernel = step.kernel
        args = [self.typed(t, dtype) for t, dtype in zip(step.inputs + step.outputs, kernel.param_dtypes)]
        args += [self.dim(step.inputs[i], k) for i, k in step.dim_args]
        if kernel.takes_workspace:
            args.append(f"(arena.base + offset[{self.workspace_of[position]}])")
        return f"{kernel.symbol}({', '.join(args)})"

    def source(self, pool: ConstantPool, body: list[str]) -> str:
        prefix = self.prefix
        kernels: dict[str, Kernel] = {}
        for step in self.steps:
            if step.emitted:
                kernels.setdefault(step.kernel.symbol, step.kernel)
        prototypes = [k.prototype for k in kernels.values()] + list(self.shape_funcs.values())
        lines = preamble(self.module_name, "shapes known at run time", prototypes, pool)
        lines += _runtime_helpers(self.arena_alignment())
        lines += profile_support(self.timed, prefix, f"{prefix}_profile_ns")
        n_buffers = max(len(self.buffers), 1)
        last_use = ", ".join(str(b.last) for b in self.buffers) or "0"
        n_outputs = max(len(self.outputs), 1)
        text = "\n".join(body)
        lines += [
            f"int32_t {prefix}_run(struct {prefix}_inputs* inputs, struct {prefix}_outputs* outputs) {{",
            f"  static const int32_t last_use[{n_buffers}] = {{{last_use}}};",
            f"  int64_t dims[{max(self.slot_count, 1)}];",
            f"  int64_t offset[{n_buffers}];",
            f"  int64_t size[{n_buffers}];",
            f"  int allocated[{n_outputs}] = {{0}};",
            "  relaycc_arena arena = relaycc_arena_take();",
            "  int32_t status = 0;",
            f"  int64_t* profile = {prefix}_profile_ns;",
            "  int64_t started = 0;",
            "  (void)profile; (void)started;",
            "  (void)inputs; (void)outputs; (void)dims; (void)offset; (void)size; (void)last_use;",
            *body,
            "  goto done;",
        ]
        if "goto failed" in text:
            lines += ["failed:", "  status = -1;", "  goto done;"]
        if "goto out_of_memory" in text:
            lines += ["out_of_memory:", f"  status = {OUT_OF_MEMORY};", "  goto done;"]
        lines += ["done:", "  relaycc_arena_keep(&arena);", "  if (status != 0) {"]
        for i, info in enumerate(self.outputs):
            lines.append(f"    if (allocated[{i}]) {{ free(outputs->{info.c_name}->data); "
                         f"outputs->{info.c_name}->data = NULL; }}")
        lines += ["  }", "  return status;", "}", "",
                  f"void {prefix}_free(void* data) {{", "  free(data);", "}", "",
                  f"void {prefix}_release(void) {{", "  relaycc_arena_release();", "}", ""]
        return "\n".join(lines)

    # -- the report --------------------------------------------------------------------------

    def name_of(self, t: MainTensor) -> str:
        root = t.root()
        if root.kind == "input":
            return f"%{self.walk.inputs[root.index].name}"
        if root.kind == "constant":
            assert root.data is not None
            k = self.pool.index_of(root.data)
            return "constant" if k is None else f"constant_{k}"
        if root in self.direct:  # the header's field, as TVM's report names an output buffer
            return self.outputs[self.direct[root]].c_name
        return self.buffers[self.buffer_of[root]].name

    def call_infos(self) -> list[CallInfo]:
        return [
            CallInfo(
                callee=step.kernel.symbol,
                kind=step.kind,
                args=tuple(self.name_of(t) for t in step.inputs),
                outputs=tuple(self.name_of(t) for t in step.outputs),
                metadata=step.metadata,
                emitted=step.emitted,
                workspace=workspace_name(position) if step.kernel.takes_workspace and step.emitted else None,
            )
            for position, step in enumerate(self.steps)
        ]

    def arena_report(self) -> dict[str, object]:
        """The arena's buffers with their sizes as formulas of run-time dims (`sid_0.shape[0]`
        is the first dim its shape function computed)."""
        rows: list[dict[str, object]] = []
        for index, b in enumerate(self.buffers):
            row: dict[str, object] = {"name": b.name, "first_use": b.first, "last_use": b.last,
                                      "alignment": b.alignment}
            if index in self.in_place:  # the input's bytes when the run's shapes are equal
                row["in_place_of"] = self.buffers[self.in_place[index][0]].name
            if b.tensor is None:
                row["bytes"] = b.static_bytes
            else:
                ty = b.tensor.ty
                row["type"] = describe_type(ty)
                row["bytes"] = ty.nbytes if not ty.is_dynamic else " * ".join(
                    [str(itemsize(ty.dtype))] + [f"{b.name}.shape[{k}]" if d is ANY else str(d)
                                                 for k, d in enumerate(ty.shape)])
                shape_func = self.shape_func_of.get(b.first)
                if shape_func is not None and ty.is_dynamic:
                    row["shape_func"] = shape_func
            rows.append(row)
        return {
            "size": "decided at run time: each buffer is placed first-fit among the buffers live at its call, "
                    "so the arena is at most the largest sum of bytes live at one call",
            "alignment": self.arena_alignment(),
            "buffers": rows,
        }


def preamble(module_name: str, what: str, prototypes: list[str], pool: ConstantPool) -> list[str]:
    """The start of a DLTensor entry's C file (this one's, and aot_control.py's): includes, the
    kernels' and shape functions' prototypes, the constant pool and the input check."""
    lines = [
        f"/* AOT executor of the module \"{module_name}\" ({what}), generated by relaycc. */",
        "#define _POSIX_C_SOURCE 200112L",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        "#include <time.h>",
        "#include <pthread.h>",
        "",
        f'#include "{header_name(module_name)}"',
        "",
    ]
    if prototypes:
        lines.append("/* Kernels and shape functions, defined in the module's other C files. */")
        lines += [p + ";" for p in prototypes]
        lines.append("")
    pool_lines = emit_pool(f"{c_prefix(module_name)}_constant_pool", pool, separable=True)
    if pool_lines:
        lines += ["/* Read-only constant pool; constants sit at the offsets used below. */", *pool_lines, ""]
    lines += """/* Whether `t` is a dense tensor of the declared rank and dtype whose dims match every
 * declared dim that is not -1 (a `?`). */
static int relaycc_conforms(const DLTensor* t, int32_t ndim, uint8_t code, uint8_t bits, const int64_t* declared) {
  if (t == NULL || t->ndim != ndim || t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1) return 0;
  if (t->strides != NULL || t->byte_offset != 0 || (ndim > 0 && t->shape == NULL)) return 0;
  int64_t elements = 1;
  for (int32_t k = 0; k < ndim; ++k) {
    if (t->shape[k] < 0 || (declared[k] >= 0 && t->shape[k] != declared[k])) return 0;
    elements *= t->shape[k];
  }
  return t->data != NULL || elements == 0;
}
""".split("\n")
    return lines


def _runtime_helpers(arena_alignment: int) -> list[str]:
    """The output check, the arena's first-fit placement and the per-thread arena kept between
    runs, static in the entry's file."""
    return f"""typedef struct {{
  uint8_t* base;
  size_t capacity;
}} relaycc_arena;

/* Each thread keeps its arena between runs: a fresh one would meet fresh pages (a page fault
 * per 4 KiB of every intermediate) and be grown again on every run. The key's destructor frees
 * it when the thread exits; the library's destructor drops the key, so a thread that outlives
 * an unloaded library never calls into it. */
static pthread_key_t relaycc_arena_key;
static pthread_once_t relaycc_arena_once = PTHREAD_ONCE_INIT;
static int relaycc_arena_key_made = 0;

static void relaycc_arena_drop(void* kept) {{
  if (kept == NULL) return;
  free(((relaycc_arena*)kept)->base);
  free(kept);
}}

static void relaycc_arena_make_key(void) {{
  relaycc_arena_key_made = pthread_key_create(&relaycc_arena_key, relaycc_arena_drop) == 0;
}}

__attribute__((destructor)) static void relaycc_arena_unload(void) {{
  if (!relaycc_arena_key_made) return;
  relaycc_arena_drop(pthread_getspecific(relaycc_arena_key));
  pthread_key_delete(relaycc_arena_key);
  relaycc_arena_key_made = 0;
}}

/* The calling thread's kept arena, now owned by the run (empty when it has none). */
static relaycc_arena relaycc_arena_take(void) {{
  relaycc_arena arena = {{NULL, 0}};
  pthread_once(&relaycc_arena_once, relaycc_arena_make_key);
  if (!relaycc_arena_key_made) return arena;
  relaycc_arena* kept = (relaycc_arena*)pthread_getspecific(relaycc_arena_key);
  if (kept != NULL) {{
    arena = *kept;
    kept->base = NULL;
    kept->capacity = 0;
  }}
  return arena;
}}

/* Gives the run's arena back to the calling thread for its next run (or frees it). */
static void relaycc_arena_keep(relaycc_arena* arena) {{
  relaycc_arena* kept = relaycc_arena_key_made ? (relaycc_arena*)pthread_getspecific(relaycc_arena_key) : NULL;
  if (kept == NULL && relaycc_arena_key_made && arena->base != NULL) {{
    kept = (relaycc_arena*)calloc(1, sizeof(relaycc_arena));
    if (kept != NULL && pthread_setspecific(relaycc_arena_key, kept) != 0) {{
      free(kept);
      kept = NULL;
    }}
  }}
  if (kept == NULL) {{
    free(arena->base);
  }} else {{
    free(kept->base);
    *kept = *arena;
  }}
  arena->base = NULL;
  arena->capacity = 0;
}}

static void relaycc_arena_release(void) {{
  relaycc_arena arena = relaycc_arena_take();
  free(arena.base);
}}

/* An output of the computed dims: the caller's buffer when it gave one of that shape, or one
 * allocated here (dims written into the caller's shape array) when its data is NULL. */
static int relaycc_output(DLTensor* t, int32_t ndim, uint8_t code, uint8_t bits, const int64_t* dims,
                          size_t nbytes, int* allocated) {{
  if (t == NULL || t->ndim != ndim || t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1) return 0;
  if (t->strides != NULL || t->byte_offset != 0 || (ndim > 0 && t->shape == NULL)) return 0;
  if (t->data == NULL) {{
    void* data = NULL;
    if (posix_memalign(&data, 64, nbytes > 0 ? nbytes : 1) != 0) return 0;
    t->data = data;
    *allocated = 1;
    for (int32_t k = 0; k < ndim; ++k) t->shape[k] = dims[k];
    return 1;
  }}
  for (int32_t k = 0; k < ndim; ++k) {{
    if (t->shape[k] != dims[k]) return 0;
  }}
  return 1;
}}

/* Places buffer `id` first-fit among the buffers placed before it that are still live at
 * call `step`, and grows the arena (keeping its contents) when the buffer does not fit. */
static int relaycc_place(relaycc_arena* arena, int64_t* offset, const int64_t* size, const int32_t* last_use,
                         int32_t id, int32_t step, int64_t alignment) {{
  int64_t start = 0;
  int moved = 1;
  while (moved) {{
    moved = 0;
    for (int32_t j = 0; j < id; ++j) {{
      if (last_use[j] < step || size[j] == 0) continue;
      if (offset[j] < start + size[id] && start < offset[j] + size[j]) {{
        start = (offset[j] + size[j] + alignment - 1) / alignment * alignment;
        moved = 1;
      }}
    }}
  }}
  offset[id] = start;
  size_t need = (size_t)(start + size[id]);
  if (need > arena->capacity) {{
    size_t capacity = arena->capacity * 2 > need ? arena->capacity * 2 : need;
    void* grown = NULL;
    if (posix_memalign(&grown, {arena_alignment}, capacity) != 0) return 0;
    if (arena->base != NULL) {{
      memcpy(grown, arena->base, arena->capacity);
      free(arena->base);
    }}
    arena->base = (uint8_t*)grown;
    arena->capacity = capacity;
  }}
  return 1;
}}
""".split("\n")


def _describe(t: TensorInfo) -> str:
    return f"{t.dtype}[{', '.join('?' if d < 0 else str(d) for d in t.shape)}]"


def emit_dynamic_header(module_name: str, inputs: list[TensorInfo], outputs: list[TensorInfo],
                        constant_bytes: int) -> str:
    prefix, macros = c_prefix(module_name), macro_prefix(module_name)
    guard = f"{macros}_H_"
    doc = [
        f"/* C interface of the module \"{module_name}\", compiled ahead of time by relaycc.",
        " *",
        " * Some shapes are known only at run time (`?` below), so tensors are passed as DLTensors:",
        " * dense and row-major (strides NULL, byte_offset 0), of the rank and dtype shown, with every",
        " * dim that is not `?` as shown.",
        " *",
    ]
    doc += [f" *   input  {t.name} (field {t.c_name}): {_describe(t)}" for t in inputs]
    doc += [f" *   output {t.name} (field {t.c_name}): {_describe(t)}" for t in outputs]
    doc += [
        " *",
        f" * {prefix}_run() computes every shape from the inputs' (with each call's shape function),",
        " * keeps intermediates in memory that the calling thread may keep for its next run (freed",
        f" * when the thread exits, or now by {prefix}_release()), and writes each output into",
        " * the caller's DLTensor when `data` is set (its shape must equal the computed one); when",
        " * `data` is NULL it allocates the output, writes its dims into `shape` (which must point",
        f" * to `ndim` int64_t) and the caller releases it with {prefix}_free(). The function is",
        " * reentrant.",
        " *",
        " * It returns 0 on success, -1 when a kernel or shape function failed, -2 when an input",
        " * does not conform to its declared type, -3 when an output does not (wrong rank, dtype or",
        " * shape, or NULL `shape`), -4 when memory ran out, -5 when a run-time dim reached a kernel",
        " * compiled for another (static) one. On failure the outputs it allocated are",
        " * released and their `data` is NULL again.",
        " */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        *HEADER_TEXT.rstrip("\n").split("\n"),
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        f"#define {macros}_DYNAMIC 1",
        f"#define {macros}_CONSTANT_POOL_SIZE {constant_bytes}",
        "",
        *dynamic_declarations(module_name, inputs, outputs),
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif  /* {guard} */",
        "",
    ]
    return "\n".join(doc)


