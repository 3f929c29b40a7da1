"""C code generation from loop-level IR.

The output is plain C (gnu11 dialect) that includes only `<stdint.h>`, `<stddef.h>`,
`<string.h>` and `<math.h>`: no Python headers, so one build serves Python (through cffi) and
C users alike. The code compiles without warnings under `-Wall -Wextra`.

Conventions other parts of the compiler rely on:

* A PrimFunc becomes an externally visible function
  `int32_t <name>(const T* restrict <input>..., T* restrict <output>...,
  int64_t <scalar>..., uint8_t* restrict workspace)` returning 0 on success and -1 when an
  external call it checks fails. Buffer parameters come in `func.params` order (inputs, which
  are `const`, then outputs); then the scalar parameters (dynamic dimensions, always
  `int64_t`); the `workspace` parameter exists only when the function has global-scope
  Allocates. `restrict` means the caller must not pass overlapping buffers.
* Global-scope Allocates live inside `workspace` at the offsets of
  `compiler.tir.analysis.workspace_layout(func, alignment)` (multiples of
  `kernel_workspace_alignment(alignment)`, at least 64); the caller provides at least
  `workspace_bytes(func, alignment)` bytes, best aligned to that too (any alignment of the
  element types is correct, only slower). Local-scope Allocates are
  stack arrays aligned to 64 bytes and need a static size. Heap-scope Allocates (temporaries
  of `?` shape) are taken from the C heap for their body and freed on leaving it; the
  function returns -1 when there is no memory.
* Buffers are row-major and addressed with a flattened, simplified index (`A[(i * 8) + j]`);
  dynamic dimensions appear in the index as the scalar parameters they are.
* int32 loop counters are `int64_t` in C, and so is int32 index arithmetic on them
  while its bound shows it fits int32 (elsewhere it is truncated back to `int32_t`, so values
  wrap as the IR says): under `-fwrapv` gcc vectorizes only loops whose counters and addresses
  cannot wrap. Functions with loop nests are built without gcc's loop interchange.
* Loops: SERIAL is a plain `for`, PARALLEL adds `#pragma omp parallel for` (the build adds
  `-fopenmp` when it sees one), VECTORIZED `#pragma omp simd` (honoured with `-fopenmp-simd`),
  UNROLLED `#pragma GCC unroll`, ROLLED `#pragma GCC unroll 1`. A CLAIMED loop takes its iterations from a counter declared
  before its parallel loop (`__atomic_fetch_add`, relaxed: the barrier at the parallel loop's
  end orders the work); outside a parallel loop it is a plain `for`. A parallel loop inside another parallel or a simd loop, and a
  simd loop inside a simd loop, lose their pragma: nesting them is useless or invalid OpenMP.
* `Evaluate(CallExtern)` of dtype int32 checks the result: a non-zero value makes the function
  return -1 (inside an OpenMP loop, where `return` is not allowed, a flag is set and checked at
  the end). Buffers passed to external calls are passed as their data pointers. External
  functions are declared from the argument types of their calls unless `declare_externs=False`
  (then `header_includes` or `preamble` must declare them).
* Generated helper functions and locals start with `relaycc_`; user names that would collide
  with them, with C keywords or with math.h names are renamed, as are duplicates.

Operators, intrinsics and literals are in `compiler.backend.c_expr` (`code_for_op`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from compiler.backend.c_expr import ExprEmitter, strip_parens
from compiler.backend.c_helpers import HELPER_PREFIX, HELPERS, helpers_used
from compiler.backend.c_signature import (
    CNames,
    check_func_name,
    has_workspace,
    pointer_type,
    prim_func_signature,
    signature,
    signature_params,
)
from compiler.backend.fma_rows import fma_row
from compiler.backend.forked_map import ForkedMap
from compiler.diagnostics import UnsupportedError
from compiler.tir.analysis import expr_children, post_order, stmt_exprs, walk_stmts, workspace_layout
from compiler.tir.dtypes import c_type, itemsize
from compiler.tir.expr import Binary, Buffer, CallExtern, Cast, Const, Intrin, Load, PrimExpr, Select, Var, as_expr, cast
from compiler.tir.half_rounding import drop_clamped_roundings
from compiler.tir.simplify import ExprSimplifier, IntBound, const_int_bound, loop_range, simplify, split_constant_offset
from compiler.tir.stmt import Allocate, Evaluate, For, ForKind, IfThenElse, LetStmt, PrimFunc, Seq, Stmt, Store

STANDARD_INCLUDES = ("stdint.h", "stddef.h", "string.h", "math.h")
# Emission takes roughly half a millisecond of CPU per statement (ResNet-50: 4,275 statements,
# 1.5-2 s); below about 0.2 s of it, forking a worker (a few ms for a large process, and a
# process more for the compilers to share the cores with) is not worth it.
FORK_FROM_STATEMENTS = 400
LOCAL_ALIGNMENT = 64
_INT32_MAX = 2**31 - 1
_FAILED = HELPER_PREFIX + "failed"
# A parallel loop of at least this many iterations is handed out in shrinking chunks (guided).
DYNAMIC_MIN_ITERATIONS = 16
# A claimed loop under a parallel loop of at most this many constant iterations has a counter per iteration.
MAX_CLAIM_SLOTS = 64
# Operators that must stay parenthesized on the right of `<` (comparisons, logic, `?:`).
_BINDS_LOOSER_THAN_LESS = "<>=!&|?"


@dataclass
class _Extern:
    ret: str
    args: list[str]


def constant_offset_last(index: PrimExpr) -> PrimExpr:
    """A flat index with its constant part added last (`base + 16`, not `(m + 1) * 16 + k`):
    the rows of a register tile then index one shared address at constant displacements. Left
    inside, gcc gave each row an index register of its own and spilled the loop's other
    variables; a 1x1 convolution ran 5% slower so."""
    rest, offset = split_constant_offset(index)
    if rest is None:
        return Const(offset, index.dtype)
    if offset == 0 or rest is index:
        return index
    return Binary("+", rest, Const(offset, index.dtype), index.dtype)


def _merge_arg_types(name: str, old: list[str], new: list[str]) -> list[str]:
    if len(old) != len(new):
        raise ValueError(f"external function {name} is called with {len(old)} and with {len(new)} arguments")
    merged = []
    for a, b in zip(old, new):
        if a == b or a == f"const {b}":
            merged.append(a)
        elif b == f"const {a}":
            merged.append(b)
        else:
            raise ValueError(f"external function {name} is called with arguments of types {a} and {b}")
    return merged


class _FunctionEmitter:
    """Emits one PrimFunc; also implements the `CScope` the expression emitter asks."""

    def __init__(self, func: PrimFunc, alignment: int, reserved: frozenset[str]):
        check_func_name(func.name)
        self.func = func
        self.layout = workspace_layout(func, alignment)
        self.has_workspace = has_workspace(func)
        self.names = CNames(set(reserved) | ({"workspace"} if self.has_workspace else set()))
        self.var_names: dict[int, str] = {}
        self.buf_names: dict[int, str] = {}
        self.keep: list[object] = []  # keeps keyed objects alive, so ids stay unique
        self.used: set[int] = set()
        self.readonly = {id(b) for b in func.inputs}
        self.ranges: dict[Var, IntBound] = {}
        self.index_vars: dict[int, str] = {}  # see CScope.index_var
        self.lines: list[str] = []
        self.depth = 1
        self.in_parallel = False
        self.in_simd = False
        self.claims: dict[int, _Claim] = {}  # id of a CLAIMED loop -> how it claims
        self.needs_flag = False
        self.workspace_used = False
        self.externs: dict[str, _Extern] = {}

    # -- CScope -----------------------------------------------------------------------------------

    def var_name(self, var: Var) -> str:
        name = self.var_names.get(id(var))
        if name is None:
            raise ValueError(f"function {self.func.name}: variable {var.name} is used but not bound "
                             f"(not a loop, let or scalar parameter)")
        self.used.add(id(var))
        return name

    def buffer_name(self, buffer: Buffer) -> str:
        name = self.buf_names.get(id(buffer))
        if name is None:
            raise ValueError(f"function {self.func.name}: buffer {buffer.name} is neither a parameter "
                             f"nor allocated here")
        self.used.add(id(buffer))
        return name

    def flat_index(self, buffer: Buffer, indices: Sequence[PrimExpr], simplifier: ExprSimplifier) -> PrimExpr:
        if len(indices) != len(buffer.shape):
            raise ValueError(f"buffer {buffer.name} has {len(buffer.shape)} dims, indexed with {len(indices)}")
        if not indices:
            return Const(0, "int32")
        size = buffer.num_elements
        wide = isinstance(size, int) and size > _INT32_MAX
        dims: list[PrimExpr | int] = [Const(d, "int64") if wide and isinstance(d, int) else d for d in buffer.shape]
        idx = [cast("int64", i) if wide else i for i in indices]
        flat = idx[0]
        for dim, i in zip(dims[1:], idx[1:]):
            flat = flat * dim + i
        return constant_offset_last(simplifier(flat))

    def fresh(self, base: str) -> str:
        return self.names.take(base)

    def index_var(self, var: Var) -> str | None:
        return self.index_vars.get(id(var))

    def note_call(self, call: CallExtern) -> None:
        if call.name in HELPERS:
            return  # defined above the functions (c_helpers), not an extern to declare
        args = []
        for a in call.args:
            if isinstance(a, Buffer):
                args.append(pointer_type(a.dtype, id(a) in self.readonly, None))
            elif isinstance(a, PrimExpr):
                args.append(c_type(a.dtype))
            elif isinstance(a, bool):
                args.append("uint8_t")
            else:
                args.append("int32_t" if isinstance(a, int) else "float")
        ret = "void" if call.dtype == "void" else c_type(call.dtype)
        known = self.externs.get(call.name)
        if known is None:
            self.externs[call.name] = _Extern(ret, args)
        else:
            known.args = _merge_arg_types(call.name, known.args, args)

    # -- helpers ----------------------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def declare_var(self, var: Var) -> str:
        name = self.names.take(var.name)
        self.var_names[id(var)] = name
        self.keep.append(var)
        return name

    def declare_buffer(self, buffer: Buffer) -> str:
        name = self.names.take(buffer.name)
        self.buf_names[id(buffer)] = name
        self.keep.append(buffer)
        return name

    def void_if_unused(self, obj: object, name: str, at: int) -> None:
        """Inserts `(void)name;` after line `at` when `obj` was never used (keeps -Wunused quiet)."""
        if id(obj) not in self.used:
            indent = self.lines[at][: len(self.lines[at]) - len(self.lines[at].lstrip())]
            self.lines.insert(at + 1, f"{indent}(void){name};")

    def exprs(self, roots: Sequence[PrimExpr]) -> tuple[list[str], ExprSimplifier]:
        """C code for `roots`; hoisted sub-expressions are emitted right away."""
        codes, simp, _ = self.wide_exprs(roots)
        return codes, simp

    def wide_exprs(self, roots: Sequence[PrimExpr]) -> tuple[list[str], ExprSimplifier, list[str | None]]:
        """`exprs`, and for each root how an int32 value is held (`CScope.index_var`)."""
        simp = ExprSimplifier(self.ranges)
        emitter = ExprEmitter(self, simp)
        decls, codes = emitter.emit(roots)
        for d in decls:
            self.line(d)
        return codes, simp, emitter.wide_roots

    # -- statements -------------------------------------------------------------------------------

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Seq):
            for item in s.stmts:
                self.stmt(item)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, Allocate):
            self.allocate(s)
        elif isinstance(s, LetStmt):
            (value,), simp, (wide,) = self.wide_exprs([s.value])
            name = self.declare_var(s.var)
            ctype = "int64_t" if wide else c_type(s.var.dtype)
            self.line(f"const {ctype} {name} = {strip_parens(value)};")
            at = len(self.lines) - 1
            self.ranges[s.var] = simp.bound(s.value)
            if wide:
                self.index_vars[id(s.var)] = wide
            self.stmt(s.body)
            del self.ranges[s.var]
            self.void_if_unused(s.var, name, at)
        elif isinstance(s, IfThenElse):
            (cond,), _ = self.exprs([s.cond])
            self.line(f"if ({strip_parens(cond)}) {{")
            self.block(s.then_case)
            if s.else_case is not None:
                self.line("} else {")
                self.block(s.else_case)
            self.line("}")
        elif isinstance(s, Evaluate):
            self.evaluate(s)
        else:
            raise TypeError(f"unknown loop-level statement {type(s).__name__}")

    def block(self, s: Stmt) -> None:
        self.depth += 1
        self.stmt(s)
        self.depth -= 1

    def loop(self, s: For) -> None:
        row = fma_row(s)
        if row is not None:
            self.fma_row_call(row.acc, row.offset, row.scale, row.weight, row.width)
            return
        end_expr = s.begin + s.extent
        (begin, end), simp = self.exprs([s.begin, end_expr])
        lo, hi = simp.bound(s.begin)[0], simp.bound(end_expr)[1]
        wide = s.var.dtype == "int64" or (hi is not None and hi > _INT32_MAX) or (lo is not None and lo < -_INT32_MAX)
        var_range = loop_range(s.begin, s.extent, simp.bound)
        if s.kind is ForKind.PARALLEL:
            for claimed in _claimed_loops(s.body):
                self.declare_claim(s, claimed, simp)
        for pragma in self.pragmas(s, simp):
            self.line(pragma)
        name = self.declare_var(s.var)
        # int32 loops count in int64_t: see ExprEmitter._widen.
        ctype = "int64_t" if wide or s.var.dtype == "int32" else c_type(s.var.dtype)
        self.index_vars[id(s.var)] = "huge" if wide and s.var.dtype == "int32" else "exact"
        bound = strip_parens(end, keep_if=_BINDS_LOOSER_THAN_LESS)
        claim = self.claims.get(id(s))
        if claim is None:
            self.line(f"for ({ctype} {name} = {strip_parens(begin)}; {name} < {bound}; ++{name}) {{")
        else:
            self.claim_loop(claim, s, ctype, name, begin, bound)
        saved = (self.in_parallel, self.in_simd)
        self.in_parallel = self.in_parallel or (s.kind is ForKind.PARALLEL and not self.in_simd)
        self.in_simd = self.in_simd or s.kind is ForKind.VECTORIZED
        self.ranges[s.var] = var_range
        self.block(s.body)
        del self.ranges[s.var]
        self.in_parallel, self.in_simd = saved
        self.line("}")

    def fma_row_call(self, acc: Buffer, offset: int, scale: PrimExpr, weight: Load, width: int) -> None:
        """A tile row's step as one call of the vector helper (fma_rows.py)."""
        simp = ExprSimplifier(self.ranges)
        flat = self.flat_index(weight.buffer, weight.indices, simp)
        decls, (index, a) = ExprEmitter(self, simp).emit([flat, scale])
        for d in decls:
            self.line(d)
        at = f" + {offset}" if offset else ""
        self.line(f"{HELPER_PREFIX}fmarow_f32({self.buffer_name(acc)}{at}, {strip_parens(a)}, "
                  f"{self.buffer_name(weight.buffer)} + ({strip_parens(index)}), {width});")

    def declare_claim(self, parallel: For, claimed: For, simp: ExprSimplifier) -> None:
        """The counters of a CLAIMED loop, declared before its parallel loop (so that loop's
        threads share them, and set again each time it is reached). With constant extents each
        of the parallel loop's iterations owns an even, contiguous share with a counter of its
        own, and takes from the others' only when its own is done: balanced runs keep a static
        split's locality (bands next to each other share input rows). Else one counter."""
        # relaycc_ names are never a user's (CNames renames those), so numbering suffices.
        counter = f"{HELPER_PREFIX}next{len(self.claims)}"
        self.keep.append(claimed)
        slots = const_int_bound(simp(parallel.extent))
        items = const_int_bound(simp(claimed.extent))
        if slots[0] == slots[1] and items[0] == items[1] and slots[0] is not None and items[0] is not None \
                and 1 < slots[0] <= MAX_CLAIM_SLOTS:
            count, total = slots[0], items[0]
            per = -(-total // count)
            self.claims[id(claimed)] = _Claim(counter, parallel.var, count, per, total)
            starts = ", ".join(f"INT64_C({k * per})" for k in range(count))
            self.line(f"int64_t {counter}[{count}] = {{{starts}}};")
        else:
            self.claims[id(claimed)] = _Claim(counter)
            self.line(f"int64_t {counter} = 0;")

    def claim_loop(self, claim: _Claim, s: For, ctype: str, name: str, begin: str, bound: str) -> None:
        """The head of a CLAIMED loop: `name` is the next iteration taken, the loop ends when
        none is left."""
        start = "" if isinstance(s.begin, Const) and s.begin.value == 0 else f"{begin} + "
        if claim.slot is None:
            self.line("for (;;) {")
            self.line(f"  const {ctype} {name} = {start}__atomic_fetch_add(&{claim.counter}, 1, __ATOMIC_RELAXED);")
            self.line(f"  if ({name} >= {bound}) break;")
            return
        tried, owner, end, taken = (f"{claim.counter}_{part}" for part in ("tried", "owner", "end", "taken"))
        slot = self.var_name(claim.slot)
        self.line(f"int64_t {tried} = 0;")
        self.line(f"while ({tried} < {claim.slots}) {{")
        self.line(f"  const int64_t {owner} = ({slot} + {tried}) % {claim.slots};")
        self.line(f"  const int64_t {end} = {owner} < {claim.slots - 1} ? ({owner} + 1) * {claim.per} : {claim.items};")
        self.line(f"  const int64_t {taken} = __atomic_fetch_add(&{claim.counter}[{owner}], 1, __ATOMIC_RELAXED);")
        self.line(f"  if ({taken} >= {end}) {{")
        self.line(f"    ++{tried};")
        self.line("    continue;")
        self.line("  }")
        self.line(f"  const {ctype} {name} = {start}{taken};")

    def pragmas(self, s: For, simp: ExprSimplifier) -> list[str]:
        if s.kind is ForKind.UNROLLED:
            extent = const_int_bound(simp(s.extent))
            n = extent[1] if extent[0] == extent[1] and extent[1] is not None and extent[1] <= 16 else 8
            return [f"#pragma GCC unroll {n}"]
        if s.kind is ForKind.ROLLED:
            return ["#pragma GCC unroll 1"]
        if s.kind is ForKind.PARALLEL and not (self.in_parallel or self.in_simd):
            low, high = const_int_bound(simp(s.extent))
            if low is not None and low == high and low >= DYNAMIC_MIN_ITERATIONS:
                # Handed out as threads ask, not halved up front: on a shared host one thread is
                # often delayed, and with a fixed share the others wait for it at the loop's end.
                # Guided chunks (what is left over the thread count) keep each thread's run
                # contiguous and end in single iterations: equal chunks of 1/32 left the thread
                # that took the odd last one working alone for up to 3% of the loop.
                return ["#pragma omp parallel for schedule(guided)"]
            return ["#pragma omp parallel for"]
        if s.kind is ForKind.VECTORIZED and not self.in_simd:
            return ["#pragma omp simd"]
        return []

    def store(self, s: Store) -> None:
        if id(s.buffer) in self.readonly:
            raise ValueError(f"function {self.func.name} stores into its input buffer {s.buffer.name}")
        simp = ExprSimplifier(self.ranges)
        flat = self.flat_index(s.buffer, s.indices, simp)
        stored = drop_clamped_roundings(as_expr(s.value))
        # A float32 value stored as float16 converts in a helper gcc vectorizes (c_helpers).
        half = s.buffer.dtype == "float16" and isinstance(stored, Cast) and stored.value.dtype == "float32"
        decls, (index, value) = ExprEmitter(self, simp).emit([flat, stored.value if half else stored])
        for d in decls:
            self.line(d)
        target = f"{self.buffer_name(s.buffer)}[{strip_parens(index)}]"
        if half:
            self.line(f"{HELPER_PREFIX}halfstore_f32(&{target}, {strip_parens(value)});")
        elif s.buffer.dtype == "float16" and isinstance(s.value, Load) and s.value.dtype == "float16":
            # Copied as two bytes: gcc 12 moves a _Float16 through a vector register (a pinsrw
            # and a pextrw per element) and vectorizes no loop of them; a 16-bit copy it does.
            self.line(f"__builtin_memcpy(&{target}, &{strip_parens(value)}, 2);")
        else:
            self.line(f"{target} = {strip_parens(value)};")

    def allocate(self, s: Allocate) -> None:
        buf = s.buffer
        ctype = c_type(buf.dtype)
        name = self.declare_buffer(buf)
        if buf.scope == "global":
            offset = self.layout[buf]
            self.workspace_used = True
            self.line(f"{ctype}* restrict {name} = ({ctype}*)(workspace + {offset});")
        elif buf.scope == "heap":
            # Dynamic-size temporaries: the caller cannot size them ahead of the call, so the
            # kernel takes them from the C heap; `cleanup` frees them on every way out.
            (count,), _ = self.exprs([as_expr(buf.num_elements)])
            # The memory is held by a plain pointer (`cleanup` takes its address, which a
            # restrict-qualified one would not convert to) and used through a restrict one.
            memory = self.fresh(f"{name}_memory")
            self.line(f"void* {memory} __attribute__((cleanup({HELPER_PREFIX}heap_free))) = "
                      f"{HELPER_PREFIX}heap_alloc({strip_parens(count)}, {itemsize(buf.dtype)});")
            self.line(f"if ({memory} == NULL) return -1;")
            self.line(f"{ctype}* restrict {name} = ({ctype}*){memory};")
        elif buf.scope == "local":
            size = buf.num_elements
            if not isinstance(size, int):
                raise UnsupportedError(
                    f"function {self.func.name}: local buffer {buf.name} needs a static size")
            self.line(f"{ctype} {name}[{max(size, 1)}] __attribute__((aligned({LOCAL_ALIGNMENT})));")
        else:
            raise ValueError(f"function {self.func.name}: buffer {buf.name} has unknown scope {buf.scope!r}")
        at = len(self.lines) - 1
        self.stmt(s.body)
        self.void_if_unused(buf, name, at)

    def evaluate(self, s: Evaluate) -> None:
        value = s.value
        if isinstance(value, Const):
            return
        (code,), _ = self.exprs([value])
        if not (isinstance(value, CallExtern) and value.dtype == "int32"):
            self.line(f"{code};" if isinstance(value, CallExtern) else f"(void){code};")
            return
        if self.in_parallel or self.in_simd:
            # `return` may not leave an OpenMP region; every failing iteration stores the same 1.
            self.needs_flag = True
            self.line(f"if ({code} != 0) __atomic_store_n(&{_FAILED}, 1, __ATOMIC_RELAXED);")
        else:
            self.line(f"if ({code} != 0) return -1;")

    # -- the function -----------------------------------------------------------------------------

    def emit(self) -> str:
        func = self.func
        params = signature_params(func, self.names, True, None)
        param_objects: list[Buffer | Var] = [*func.params, *func.scalar_params]
        for obj, (_, name) in zip(param_objects, params):
            table = self.buf_names if isinstance(obj, Buffer) else self.var_names
            table[id(obj)] = name
        for var in func.scalar_params:
            self.ranges[var] = (0, None)  # dynamic dimensions are never negative
        body = simplify(func.body, self.ranges)
        self.stmt(body)
        prologue = [f"  (void){name};" for obj, (_, name) in zip(param_objects, params) if id(obj) not in self.used]
        if self.has_workspace and not self.workspace_used:
            prologue.append("  (void)workspace;")
        if self.needs_flag:
            prologue.append(f"  int32_t {_FAILED} = 0;")
        result = f"{_FAILED} ? -1 : 0" if self.needs_flag else "0"
        head = f"{signature(func.name, params)} {{"
        options = [NO_IF_CONVERSION] * _loads_under_select(body) + [NO_FP_CONTRACTION] * _rounds_float_products(body)
        options += [NO_LOOP_INTERCHANGE] * _has_loop_nest(body)
        if options:
            head = f"__attribute__((optimize({', '.join(options)})))\n{head}"
        return "\n".join([head, *prologue, *self.lines, f"  return {result};", "}"]) + "\n"


# gcc 12 at -O3 with AVX2 turns `cond ? buffer[i] : c` into masked loads and, when it then
# vectorizes an unrolled group of them, gives every load the first vector's mask: nn.pad,
# concatenate and where lost rows (see tests/regressions/test_gcc_masked_load_selects.py).
# Turning if-conversion off for just the functions that load under a select avoids it without
# giving up vectorization elsewhere (globally it made relu/clip 20x slower).
NO_IF_CONVERSION = '"no-tree-loop-if-convert"'
# gcc contracts `a * b + c` into one fused multiply-add at -march=native (GNU C's default
# -ffp-contract=fast); TVM's LLVM code rounds the product first. Where a float sum of products
# is then rounded to an integer (requantize's float path, resize coordinates), a value at a
# tie such as 180 * (0.125 / 3) - 5 = 2.5 lands on the other side (fuzz-diff seed 897): those
# functions are built without contraction; the others keep their FMAs.
NO_FP_CONTRACTION = '"fp-contract=off"'
# With int64 loop counters (see ExprEmitter._widen) gcc can analyze our loop nests, and -O3's
# loop interchange then reorders some: a transpose read along its rows scattered its stores and
# took 1.6x as long. A kernel's loop order is chosen on purpose, so gcc keeps it.
NO_LOOP_INTERCHANGE = '"no-loop-interchange"'
ROUNDING_INTRINSICS = ("round", "floor", "ceil", "trunc")


@dataclass(frozen=True)
class _Claim:
    """How a CLAIMED loop takes its iterations: from one counter, or (with `slot`, the parallel
    loop's variable) from `slots` counters, one per share of `per` of the `items` iterations."""

    counter: str
    slot: Var | None = None
    slots: int = 0
    per: int = 0
    items: int = 0


def _claimed_loops(body: Stmt) -> list[For]:
    """The CLAIMED loops a parallel loop's iterations share: those in `body` outside any
    parallel loop nested in it."""
    found: list[For] = []
    stack = [body]
    while stack:
        s = stack.pop()
        if isinstance(s, For) and s.kind is ForKind.PARALLEL:
            continue
        if isinstance(s, For) and s.kind is ForKind.CLAIMED:
            found.append(s)
        stack.extend(t for t in _children(s))
    return found


def _children(s: Stmt) -> list[Stmt]:
    if isinstance(s, Seq):
        return list(s.stmts)
    if isinstance(s, (For, Allocate, LetStmt)):
        return [s.body]
    if isinstance(s, IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    return []


def _has_loop_nest(body: Stmt) -> bool:
    """Whether a loop anywhere in `body` contains another loop."""
    return any(isinstance(s, For) and any(isinstance(t, For) for t in walk_stmts(s.body)) for s in walk_stmts(body))


def _loads_under_select(body: Stmt) -> bool:
    """Whether a select anywhere in `body` reads a buffer in one of its branches."""
    done: set[int] = set()
    for s in walk_stmts(body):
        for root in stmt_exprs(s):
            for e in post_order(root, done):
                if isinstance(e, Select) and any(
                    isinstance(x, Load) for side in (e.t, e.f) for x in post_order(side, set())
                ):
                    return True
    return False


def _rounds_float_products(body: Stmt) -> bool:
    """Whether a rounding intrinsic anywhere in `body` takes a float multiplication."""
    has_product: dict[int, bool] = {}  # node id -> a float multiply in its subtree
    done: set[int] = set()
    for s in walk_stmts(body):
        for root in stmt_exprs(s):
            for e in post_order(root, done):  # children first
                product = (isinstance(e, Binary) and e.op == "*" and e.dtype.startswith("float")) or any(
                    has_product.get(id(k), False) for k in expr_children(e))
                has_product[id(e)] = product
                if product and isinstance(e, Intrin) and e.name in ROUNDING_INTRINSICS:
                    return True
    return False


def _emit(func: PrimFunc, alignment: int, reserved: frozenset[str]) -> tuple[str, dict[str, _Extern]]:
    emitter = _FunctionEmitter(func, alignment, reserved)
    return emitter.emit(), emitter.externs


def _extern_names(func: PrimFunc) -> set[str]:
    """Names `func` calls; no local name may shadow them."""
    names: set[str] = set()
    done: set[int] = set()
    for s in walk_stmts(func.body):
        for root in stmt_exprs(s):
            names.update(e.name for e in post_order(root, done) if isinstance(e, CallExtern))
    return names


def emit_prim_func(func: PrimFunc, *, workspace_alignment: int = 16) -> str:
    """The C definition of `func`. It calls `relaycc_` helpers and external functions that
    `emit_c_module` defines or declares; use that to get a compilable file."""
    return _emit(func, workspace_alignment, frozenset(_extern_names(func)))[0]


def _include_line(header: str) -> str:
    return f"#include {header}" if header.startswith(("<", '"')) else f'#include "{header}"'


def emit_c_module(
    funcs: Sequence[PrimFunc],
    *,
    header_includes: Sequence[str] = (),
    preamble: str = "",
    declare_externs: bool = True,
    workspace_alignment: int = 16,
) -> str:
    """One C source file defining every function of `funcs`.

    `header_includes` are extra headers (`"x.h"` or `<x.h>`; bare names are quoted);
    `preamble` is C text placed before the functions (e.g. declarations of external functions,
    then pass `declare_externs=False`).
    """
    emitted = _emit_all(funcs, workspace_alignment)
    return _assemble(emitted, {}, header_includes, preamble, declare_externs)


def emit_c_files(
    funcs: Sequence[PrimFunc],
    split: Callable[[Sequence[str]], Sequence[Sequence[int]]],
    *,
    workspace_alignment: int = 16,
    workers: int = 0,
) -> list[str]:
    """The functions of `funcs` in several C files: `split` gets every function's definition
    and returns the groups (indices into `funcs`), one file per group. Each function is emitted
    once, with the names of all of `funcs` reserved, so its text does not depend on the group
    it lands in; one group of all functions in order gives exactly `emit_c_module`'s file.
    `workers` forked processes emit functions beside this one (`CFiles`)."""
    with CFiles(funcs, split, workspace_alignment=workspace_alignment, workers=workers) as files:
        return files.result()


class CFiles:
    """`emit_c_files`, started: with `workers`, forked processes (forked_map.py) begin emitting
    the functions, costliest first, as soon as this is made, and the caller does other work
    until `result()`, where it emits beside them. A function's text is the same whichever
    process emits it, so the files do not depend on timing; an error is the one a serial
    emission raises first. Leaving the `with` block ends the processes."""

    def __init__(
        self,
        funcs: Sequence[PrimFunc],
        split: Callable[[Sequence[str]], Sequence[Sequence[int]]],
        *,
        workspace_alignment: int = 16,
        workers: int = 0,
    ):
        self.funcs = list(funcs)
        self.split = split
        defined = _defined_names(self.funcs)

        def emit_one(index: int) -> tuple[str, dict[str, _Extern]]:
            func = self.funcs[index]
            return _emit(func, workspace_alignment, frozenset(defined | _extern_names(func)))

        # Statement count tracks emission time well enough to put the long functions first,
        # so no process is left with one of them at the end, and to leave small modules to
        # this process alone.
        sizes = [sum(1 for _ in walk_stmts(f.body)) for f in self.funcs]
        order = sorted(range(len(self.funcs)), key=lambda i: -sizes[i])
        if sum(sizes) < FORK_FROM_STATEMENTS:
            workers = 0
        self._map = ForkedMap(emit_one, len(self.funcs), workers, order)

    def __enter__(self) -> CFiles:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        self.close()

    @property
    def workers(self) -> list[int]:
        """The process ids of the workers still running."""
        return self._map.children

    def close(self) -> None:
        self._map.close()

    def result(self) -> list[str]:
        emitted = [_Emitted(f, body, called) for f, (body, called) in zip(self.funcs, self._map.results())]
        groups = [list(g) for g in self.split([e.body for e in emitted])]
        placed = sorted(i for g in groups for i in g)
        if placed != list(range(len(self.funcs))):
            raise ValueError("split must place every function in exactly one group")
        # A function that calls one defined in another file sees its real prototype there.
        signatures = {e.func.name: prim_func_signature(e.func) for e in emitted}
        return [_assemble([emitted[i] for i in g], signatures, (), "", True) for g in groups if g]


@dataclass(frozen=True)
class _Emitted:
    func: PrimFunc
    body: str
    called: dict[str, _Extern]


def _defined_names(funcs: Sequence[PrimFunc]) -> set[str]:
    names = [f.name for f in funcs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"functions defined twice: {', '.join(duplicates)}")
    return set(names)


def _emit_all(funcs: Sequence[PrimFunc], workspace_alignment: int) -> list[_Emitted]:
    defined = _defined_names(funcs)
    emitted = []
    for func in funcs:
        reserved = frozenset(defined | _extern_names(func))
        body, called = _emit(func, workspace_alignment, reserved)
        emitted.append(_Emitted(func, body, called))
    return emitted


def _assemble(
    emitted: Sequence[_Emitted],
    signatures: Mapping[str, str],
    header_includes: Sequence[str],
    preamble: str,
    declare_externs: bool,
) -> str:
    """The file of the already emitted functions; `signatures` are the prototypes of functions
    defined in other files of the same module."""
    defined = {e.func.name for e in emitted}
    bodies = [e.body for e in emitted]
    externs: dict[str, _Extern] = {}
    elsewhere: dict[str, str] = {}
    for e in emitted:
        for name, ext in e.called.items():
            if name in defined:
                continue
            if name in signatures:
                elsewhere[name] = signatures[name]
            elif name in externs:
                externs[name].args = _merge_arg_types(name, externs[name].args, ext.args)
            else:
                externs[name] = _Extern(ext.ret, list(ext.args))
    parts = ["/* Generated by relaycc. Conventions: compiler/backend/codegen_c.py. */"]
    parts.append("\n".join(_include_line(f"<{h}>") for h in STANDARD_INCLUDES))
    if header_includes:
        parts.append("\n".join(_include_line(h) for h in header_includes))
    helpers = helpers_used("".join(bodies))
    if helpers:
        parts.append("".join(helpers).rstrip("\n"))
    if preamble:
        parts.append(preamble.rstrip("\n"))
    if declare_externs and externs:
        parts.append("\n".join(f"{e.ret} {n}({', '.join(e.args) or 'void'});" for n, e in sorted(externs.items())))
    declared = [signatures[n] + ";" for n in sorted(elsewhere)]
    declared += [prim_func_signature(e.func) + ";" for e in emitted]
    if declared:
        parts.append("\n".join(declared))
    parts.extend(b.rstrip("\n") for b in bodies)
    return "\n\n".join(parts) + "\n"


__all__ = ["STANDARD_INCLUDES", "CFiles", "emit_c_files", "emit_c_module", "emit_prim_func", "prim_func_signature"]
