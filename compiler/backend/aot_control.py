"""AOT executor of a @main with control flow: `if`, loops written as tail-recursive closures,
and function literals bound by `let`, compiled to structured C.

Before: a lowered @main (after LowerTE) whose body may hold `if` expressions and let-bound
function literals besides `call_lowered` calls, tuples, projections, lets and constants:
* a call of a let-bound function that calls itself only in tail position (TensorFlow's and
  ONNX's while loops as TVM prints them) becomes a `for (;;)` loop: a tail call rebinds the
  loop variables and continues, any other tail value leaves the loop as its result;
* a call of a let-bound function that does not call itself, or of a function literal, is
  inlined;
* `if (%c)` on a scalar becomes a C `if` whose branches each compute the result.
After: `AOTResult` with the same DLTensor interface as aot_dynamic.py (the header documents
it); shapes may be `?` and are computed at run time by the calls' shape functions.

Memory: a value the branches or iterations of a loop create cannot have a static place, so
every computed tensor is allocated when it is computed (its shape known by then) and released
when the C block it was computed in ends, unless it moved out of the block as the block's
result (a branch's value, the next iteration's loop variables, the loop's result). A value
from an enclosing block is passed on as an alias and stays its block's to release. Every
allocation is also recorded for the run, so a failing kernel releases everything it held. The
interpreter stays the oracle for all of it (tests/compiler/backend/test_aot_control.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.backend.aot_c import Kernel, extern_prototype
from compiler.backend.aot_dynamic import DATA_STATE, INPUT_MISMATCH, KERNEL_SHAPE_MISMATCH, OUT_OF_MEMORY
from compiler.backend.aot_dynamic import OUTPUT_MISMATCH, SHAPE_STATE, emit_dynamic_header, preamble
from compiler.backend.aot_main_walk import AOTResult, CallInfo, kernel_dim_args, kernel_types, leaf_types
from compiler.backend.aot_main_walk import result_infos, tensor_info
from compiler.backend.c_signature import has_workspace, prim_func_signature
from compiler.backend.constants import ConstantPool, ConstantPoolBuilder
from compiler.backend.dlpack import dtype_code
from compiler.backend.interface_c import TensorInfo, c_prefix, check_names, dynamic_cffi_cdef, header_name
from compiler.backend.memory_planner import MemoryPlan
from compiler.diagnostics import UnsupportedError
from compiler.ir.attrs import EMPTY_ATTRS, Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, TensorType, Type
from compiler.ir.visitor import post_order
from compiler.passes.infer_type import describe
from compiler.tir.analysis import workspace_bytes
from compiler.tir.dtypes import c_type, itemsize
from compiler.tir.stmt import PrimFunc

_Val = object  # a leaf name (str), or a tuple of values


def has_control_flow(main: Function) -> bool:
    """Whether @main's body holds an `if` or a function literal (a loop or a local function)."""
    return any(isinstance(n, (If, Function)) for n in post_order(main.body))


@dataclass
class _Leaf:
    name: str
    ty: TensorType
    depth: int  # the block that releases it (-1: never, an input or a constant)


@dataclass
class _Closure:
    var: Var
    func: Function
    recursive: bool


@dataclass
class _Loop:
    closure: _Closure
    depth: int  # the depth of one iteration's block
    variables: list[str]  # the loop variables' leaves, parameters flattened
    results: list[str]


@dataclass
class _Block:
    leaves: list[str] = field(default_factory=list)
    memo: dict[Expr, _Val] = field(default_factory=dict)


class ControlFlowAssembler:
    def __init__(self, module_name: str, workspace_alignment: int, constant_alignment: int, mod: IRModule,
                 main: Function):
        self.module_name = module_name
        self.prefix = c_prefix(module_name)
        self.workspace_alignment = workspace_alignment
        self.mod = mod
        self.main = main
        self.pool = ConstantPoolBuilder(constant_alignment)
        self.lines: list[str] = []
        self.indent = 1
        self.blocks: list[_Block] = []
        self.leaves: dict[str, _Leaf] = {}
        self.env: dict[Var, _Val | _Closure] = {}
        self.kernels: dict[str, Kernel] = {}
        self.shape_funcs: dict[str, str] = {}
        self.calls: list[CallInfo] = []
        self.loops: list[_Loop] = []
        self.scratch_bytes = 0
        self.max_ndim = 1
        self.count = 0

    # -- the module ------------------------------------------------------------------------

    def assemble(self) -> AOTResult:
        main = self.main
        inputs: list[TensorInfo] = []
        for p in main.params:
            ty = p.checked_type
            if not isinstance(ty, TensorType):
                raise UnsupportedError(f"the AOT executor needs tensor inputs; %{p.name_hint} has type {ty}", p.span)
            inputs.append(tensor_info(p.name_hint, ty))
        result_types = leaf_types(main.body.checked_type)
        outputs = result_infos(main.body.checked_type)
        check_names(self.module_name, inputs, outputs, [p.span for p in main.params])
        self.max_ndim = max([1] + [t.ndim for t in result_types] + [_max_ndim(n) for n in post_order(main)])

        self.open_block()
        for p, info in zip(main.params, inputs):
            self.env[p] = self.input_leaf(p, info)
        result = self.value(main.body)
        for i, (leaf, info) in enumerate(zip(_flatten(result), outputs)):
            self.line(f"if (!relaycc_give(&heap, &{leaf}, outputs->{info.c_name}, "
                      f"{dtype_code(info.dtype)}, {itemsize(info.dtype) * 8})) "
                      f"{{ status = {OUTPUT_MISMATCH}; goto done; }}")
        self.close_block()
        pool = self.pool.build()
        return AOTResult(
            module_name=self.module_name,
            main_source=self.source(pool, inputs, outputs),
            header=emit_dynamic_header(self.module_name, inputs, outputs, pool.total_bytes),
            header_name=header_name(self.module_name),
            cdef=dynamic_cffi_cdef(self.module_name, inputs, outputs),
            entry=f"{self.prefix}_run",
            memory=MemoryPlan({}, 0, 0, [], 64),
            calls=self.calls,
            inputs=inputs,
            outputs=outputs,
            constants=list(pool.arrays),
            constant_offsets=list(pool.offsets),
            constant_pool=pool,
            workspace_bytes=0,
            constant_bytes=pool.total_bytes,
            io_bytes=0,
            arena={
                "size": "no arena: @main has control flow, so each value is allocated when it is computed and "
                        "released when the block (branch, loop iteration) that computed it ends",
                "scratch_bytes": self.scratch_bytes,
                "buffers": [],
            },
        )

    # -- blocks and leaves -----------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    def open_block(self) -> None:
        self.blocks.append(_Block())

    def close_block(self) -> None:
        self.release(len(self.blocks) - 1)
        self.blocks.pop()

    def release(self, down_to: int) -> None:
        """Release the leaves of the blocks from the innermost one down to `down_to`."""
        for block in reversed(self.blocks[down_to:]):
            for leaf in reversed(block.leaves):
                self.line(f"relaycc_release(&heap, &{leaf});")

    def new_leaf(self, ty: TensorType, base: str = "v", owned_here: bool = True) -> str:
        self.count += 1
        name = f"{base}{self.count}"
        depth = len(self.blocks) - 1 if owned_here else -1
        self.leaves[name] = _Leaf(name, ty, depth)
        if owned_here:
            self.blocks[-1].leaves.append(name)
        return name

    def declare(self, name: str, init: str = "RELAYCC_NO_VALUE") -> None:
        self.line(f"relaycc_value {name} = {init};")

    def input_leaf(self, p: Var, info: TensorInfo) -> str:
        ty = p.checked_type
        assert isinstance(ty, TensorType)
        name = self.new_leaf(ty, "in_", owned_here=False)
        field_ = f"inputs->{info.c_name}"
        declared = ", ".join(str(d) for d in info.shape) or "0"
        self.line(f"{{ static const int64_t declared[] = {{{declared}}};")
        self.line(f"  if (!relaycc_conforms({field_}, {ty.ndim}, {dtype_code(ty.dtype)}, {itemsize(ty.dtype) * 8}, "
                  f"declared)) {{ status = {INPUT_MISMATCH}; goto done; }} }}")
        self.declare(name)
        self.line(f"relaycc_borrow(&{name}, {field_});")
        return name

    def move(self, src: str, dst: str, boundary: int) -> None:
        """`dst` takes `src`: its ownership too when `src` belongs to a block at `boundary` or
        deeper (released on leaving it), else as an alias."""
        if self.leaves[src].depth >= boundary:
            self.line(f"{dst} = {src}; {src}.owned = 0;")
        else:
            self.line(f"{dst} = {src}; {dst}.owned = 0;")

    # -- expressions -----------------------------------------------------------------------

    def value(self, expr: Expr) -> _Val:
        for block in reversed(self.blocks):
            if expr in block.memo:
                return block.memo[expr]
        result = self.compute(expr)
        self.blocks[-1].memo[expr] = result
        return result

    def compute(self, expr: Expr) -> _Val:
        if isinstance(expr, Var):
            bound = self.env.get(expr)
            if bound is None:
                raise UnsupportedError(f"%{expr.name_hint} is free in @main", expr.span)
            if isinstance(bound, _Closure):
                raise UnsupportedError(f"the AOT executor calls %{expr.name_hint} but cannot pass it as a value",
                                       expr.span)
            return bound
        if isinstance(expr, Constant):
            return self.constant(expr)
        if isinstance(expr, Tuple):
            return tuple(self.value(f) for f in expr.fields)
        if isinstance(expr, TupleGetItem):
            whole = self.value(expr.tuple_value)
            assert isinstance(whole, tuple)
            return whole[expr.index]
        if isinstance(expr, Let):
            self.bind(expr)
            return self.value(expr.body)
        if isinstance(expr, If):
            return self.branch(expr)
        if isinstance(expr, Call):
            return self.call(expr)
        if isinstance(expr, Function):
            raise UnsupportedError("the AOT executor calls function literals but cannot pass one as a value",
                                   expr.span)
        raise UnsupportedError(f"the AOT executor cannot compute {describe(expr)}", expr.span)

    def arguments(self, args: tuple[Expr, ...] | list[Expr], call: Call) -> list[_Val]:
        """The values of a call's arguments; a local function passed as one is refused at the call."""
        for a in args:
            if isinstance(a, Var) and isinstance(self.env.get(a), _Closure) or isinstance(a, Function):
                raise UnsupportedError(f"the AOT executor calls local functions but cannot pass one as a value "
                                       f"({describe(a)})", call.span)
        return [self.value(a) for a in args]

    def bind(self, let: Let) -> None:
        if isinstance(let.value, Function):
            recursive = any(isinstance(n, Call) and n.op is let.var for n in post_order(let.value.body))
            self.env[let.var] = _Closure(let.var, let.value, recursive)
        else:
            self.env[let.var] = self.value(let.value)

    def constant(self, c: Constant) -> str:
        ty = c.tensor_type
        k = self.pool.add(c.data)
        name = self.new_leaf(ty, "c", owned_here=False)
        self.declare(name)
        self.line(f"relaycc_point(&{name}, {self.prefix}_constant_pool + {self.pool.offset(k)}, "
                  f"{_dims_array(ty)}, {ty.ndim});")
        return name

    def call(self, call: Call) -> _Val:
        op = call.op
        if isinstance(op, Op) and op.name == "call_lowered":
            return self.call_lowered(call)
        if isinstance(op, Var):
            closure = self.env.get(op)
            if not isinstance(closure, _Closure):
                raise UnsupportedError(f"%{op.name_hint} is not a function the AOT executor knows", call.span)
            if closure.recursive:
                return self.loop(closure, call)
            return self.inline(closure.func, call)
        if isinstance(op, Function):
            return self.inline(op, call)
        raise UnsupportedError(f"the AOT executor runs only lowered calls; found a {describe(call)}", call.span)

    def inline(self, func: Function, call: Call) -> _Val:
        args = self.arguments(call.args, call)
        saved = {p: self.env.get(p) for p in func.params}
        for p, a in zip(func.params, args):
            self.env[p] = a
        # A fresh memo: a function inlined twice computes its body twice.
        outer_memo = self.blocks[-1].memo
        self.blocks[-1].memo = {}
        try:
            return self.value(func.body)
        finally:
            self.blocks[-1].memo = outer_memo
            for p, v in saved.items():
                if v is None:
                    self.env.pop(p, None)
                else:
                    self.env[p] = v

    def branch(self, node: If) -> _Val:
        cond = self.value(node.cond)
        assert isinstance(cond, str)
        results = [self.new_leaf(t, "r") for t in leaf_types(node.checked_type)]
        for r in results:
            self.declare(r)
        self.line(f"if (((const uint8_t*){cond}.data)[0] != 0) {{")
        for arm in (node.true_branch, node.false_branch):
            self.indent += 1
            self.open_block()
            depth = len(self.blocks) - 1
            for leaf, r in zip(_flatten(self.value(arm)), results):
                self.move(leaf, r, depth)
            self.close_block()
            self.indent -= 1
            self.line("} else {" if arm is node.true_branch else "}")
        return _nest(results, node.checked_type)

    # -- loops -------------------------------------------------------------------------------

    def loop(self, closure: _Closure, call: Call) -> _Val:
        if any(loop.closure is closure for loop in self.loops):
            raise UnsupportedError(f"%{closure.var.name_hint} calls itself other than as its last action "
                                   "(only tail calls become loops)", call.span)
        func = closure.func
        args = self.arguments(call.args, call)
        variables: list[str] = []
        for p, a in zip(func.params, args):
            leaves = [self.new_leaf(t, "lv", owned_here=False) for t in leaf_types(p.checked_type)]
            for leaf, src in zip(leaves, _flatten(a)):
                self.declare(leaf, src)
                self.line(f"{leaf}.owned = 0;")
            variables += leaves
            self.env[p] = _nest(leaves, p.checked_type)
        results = [self.new_leaf(t, "r") for t in leaf_types(call.checked_type)]
        for r in results:
            self.declare(r)
        self.line("for (;;) {")
        self.indent += 1
        self.open_block()
        loop = _Loop(closure, len(self.blocks) - 1, variables, results)
        for leaf in variables:
            self.leaves[leaf].depth = loop.depth  # the loop's: moved on, or released after it
        self.loops.append(loop)
        self.tail(func.body, loop)
        self.loops.pop()
        self.blocks.pop()  # every path through the body already released it and jumped
        self.indent -= 1
        self.line("}")
        for leaf in variables:
            self.line(f"relaycc_release(&heap, &{leaf});")
        return _nest(results, call.checked_type)

    def tail(self, expr: Expr, loop: _Loop) -> None:
        """`expr` in tail position of the loop's body: continue with new loop variables, or
        break with the loop's result."""
        if isinstance(expr, Let):
            self.bind(expr)
            self.tail(expr.body, loop)
            return
        if isinstance(expr, If):
            cond = self.value(expr.cond)
            assert isinstance(cond, str)
            self.line(f"if (((const uint8_t*){cond}.data)[0] != 0) {{")
            for arm in (expr.true_branch, expr.false_branch):
                self.indent += 1
                self.open_block()
                self.tail(arm, loop)
                self.blocks.pop()
                self.indent -= 1
                self.line("} else {" if arm is expr.true_branch else "}")
            return
        if isinstance(expr, Call) and expr.op is loop.closure.var:
            news = [leaf for a in self.arguments(expr.args, expr) for leaf in _flatten(a)]
            temps = []
            for new, variable in zip(news, loop.variables):
                self.count += 1
                temp = f"next{self.count}"
                self.leaves[temp] = _Leaf(temp, self.leaves[variable].ty, -1)
                self.declare(temp)
                self.move(new, temp, loop.depth)
                temps.append(temp)
            for variable, temp in zip(loop.variables, temps):
                self.line(f"relaycc_release(&heap, &{variable}); {variable} = {temp};")
            self.release(loop.depth)
            self.line("continue;")
            return
        for leaf, r in zip(_flatten(self.value(expr)), loop.results):
            self.move(leaf, r, loop.depth)
        self.release(loop.depth)
        self.line("break;")

    # -- kernels -----------------------------------------------------------------------------

    def call_lowered(self, call: Call) -> _Val:
        callee, args = call.args[0], call.args[1]
        if not isinstance(callee, GlobalVar) or callee not in self.mod:
            raise UnsupportedError(f"call_lowered needs a global callee, found {describe(callee)}", call.span)
        definition = self.mod[callee]
        metadata = call.attrs.get("metadata") or EMPTY_ATTRS
        assert isinstance(metadata, Attrs)
        fields = args.fields if isinstance(args, Tuple) else (args,)
        groups = [_flatten(a) for a in self.arguments(fields, call)]
        inputs = [leaf for g in groups for leaf in g]
        out_types = leaf_types(call.checked_type)
        outputs = [self.new_leaf(t, "v") for t in out_types]
        kernel, dim_args, param_types, checks = self.kernel(callee, definition, call, inputs, outputs)
        for out, ty in zip(outputs, out_types):
            self.declare(out)
            self.line(f"relaycc_shape(&{out}, {_dims_array(ty)}, {ty.ndim});")
        if any(t.is_dynamic for t in out_types):
            self.shape_function(call, metadata, groups, outputs)
        tensors = inputs + outputs
        conditions = [f"{leaf}.shape[{k}] != INT64_C({d})" for leaf, ty in zip(tensors, param_types)
                      for k, d in enumerate(ty.shape) if d is not ANY and self.leaves[leaf].ty.shape[k] is ANY]
        conditions += [c(tensors) for c in checks]
        if conditions:
            self.line(f"if ({' || '.join(conditions)}) {{ status = {KERNEL_SHAPE_MISMATCH}; goto done; }}")
        for out, ty in zip(outputs, out_types):
            self.line(f"if (!relaycc_alloc(&heap, &{out}, {itemsize(ty.dtype)})) goto out_of_memory;")
        pointers = [f"({c_type(dtype)}*){leaf}.data" for leaf, dtype in zip(tensors, kernel.param_dtypes)]
        pointers += [f"{tensors[i]}.shape[{k}]" for i, k in dim_args]
        if kernel.takes_workspace:
            pointers.append("scratch")
        self.line(f"if ({kernel.symbol}({', '.join(pointers)}) != 0) goto failed;")
        self.calls.append(CallInfo(kernel.symbol, "prim_func" if isinstance(definition, PrimFunc) else "extern",
                                   tuple(inputs), tuple(outputs), metadata))
        return _nest(outputs, call.checked_type)

    def kernel(self, callee: GlobalVar, definition: object, call: Call, inputs: list[str], outputs: list[str]
               ) -> tuple[Kernel, tuple[tuple[int, int], ...], tuple[TensorType, ...], list]:
        if isinstance(definition, PrimFunc):
            if definition.num_inputs != len(inputs) or len(definition.params) != len(inputs) + len(outputs):
                raise UnsupportedError(f"{definition.name} takes {definition.num_inputs} inputs; called with "
                                       f"{len(inputs)}", call.span)
            kernel = self.kernels.get(definition.name)
            if kernel is None:
                takes = has_workspace(definition)
                if takes:
                    self.scratch_bytes = max(self.scratch_bytes, workspace_bytes(definition, self.workspace_alignment))
                kernel = Kernel(definition.name, tuple(b.dtype for b in definition.params), takes,
                                prim_func_signature(definition))
                self.kernels[definition.name] = kernel
            dim_args = kernel_dim_args(definition)
            types = [self.leaves[leaf].ty for leaf in inputs + outputs]
            param_types = kernel_types(definition, [_Typed(t) for t in types])  # type: ignore[arg-type]
            return kernel, dim_args, param_types, self.equal_checks(definition, dim_args)
        if isinstance(definition, Function) and definition.has_nonzero_attr("Extern"):
            symbol = str(definition.attr("global_symbol", callee.name_hint))
            types = [self.leaves[leaf].ty for leaf in inputs + outputs]
            if any(t.is_dynamic for t in types):
                raise UnsupportedError(f"@{callee.name_hint} is an external function of `?` shape; its C signature "
                                       "carries no shapes", call.span)
            dtypes = tuple(t.dtype for t in types)
            kernel = self.kernels.setdefault(symbol, Kernel(symbol, dtypes, False, extern_prototype(symbol, dtypes)))
            return kernel, (), tuple(types), []
        raise UnsupportedError(f"@{callee.name_hint} is neither a lowered PrimFunc nor an Extern function", call.span)

    @staticmethod
    def equal_checks(func: PrimFunc, dim_args: tuple[tuple[int, int], ...]) -> list:
        def dim(tensors: list[str], s: int) -> str:
            i, k = dim_args[s]
            return f"{tensors[i]}.shape[{k}]"

        checks = []
        for a, b in func.extra.get("equal_scalars", ()):  # type: ignore[attr-defined]
            checks.append(lambda t, a=a, b=b: f"({dim(t, b)} != {dim(t, a)} && {dim(t, b)} != 1)")
        for lhs, rhs in func.extra.get("equal_counts", ()):  # type: ignore[attr-defined]
            def product(t: list[str], side: tuple[tuple[int, ...], int]) -> str:
                return "(" + " * ".join([f"INT64_C({side[1]})", *(dim(t, s) for s in side[0])]) + ")"

            checks.append(lambda t, lhs=lhs, rhs=rhs: f"{product(t, lhs)} != {product(t, rhs)}")
        return checks

    def shape_function(self, call: Call, metadata: Attrs, groups: list[list[str]], outputs: list[str]) -> None:
        shape_fn = metadata.get("prim_shape_fn_var")
        func = self.mod[shape_fn] if isinstance(shape_fn, GlobalVar) and shape_fn in self.mod else None
        if not isinstance(func, PrimFunc):
            raise UnsupportedError("a call whose result has `?` dims has no shape function (prim_shape_fn_var)",
                                   call.span)
        states = metadata.get("prim_shape_fn_states")
        assert isinstance(states, tuple) and len(states) == len(groups)
        args: list[str] = []
        for state, group in zip(states, groups):
            if int(state) & DATA_STATE:
                args.append(f"({c_type(self.leaves[group[0]].ty.dtype)}*){group[0]}.data")
            if int(state) & SHAPE_STATE:
                args += [f"{leaf}.shape" for leaf in group]
        args += [f"{leaf}.shape" for leaf in outputs]
        self.shape_funcs[func.name] = prim_func_signature(func)
        self.line(f"if ({func.name}({', '.join(args)}) != 0) goto failed;")

    # -- the C file --------------------------------------------------------------------------

    def source(self, pool: ConstantPool, inputs: list[TensorInfo], outputs: list[TensorInfo]) -> str:
        prefix = self.prefix
        prototypes = [k.prototype for k in self.kernels.values()] + list(self.shape_funcs.values())
        lines = preamble(self.module_name, "control flow", prototypes, pool)
        lines += _helpers(self.max_ndim)
        body = "\n".join(self.lines)
        lines += [
            f"int32_t {prefix}_run(struct {prefix}_inputs* inputs, struct {prefix}_outputs* outputs) {{",
            "  relaycc_heap heap = {NULL, 0, 0};",
            "  int32_t status = 0;",
            "  uint8_t* scratch = NULL;",
            "  (void)inputs; (void)outputs;",
        ]
        if self.scratch_bytes:
            lines.append(f"  if (posix_memalign((void**)&scratch, 64, {self.scratch_bytes}) != 0) "
                         f"return {OUT_OF_MEMORY};")
        lines += [body, "  goto done;"]
        if "goto failed" in body:
            lines += ["failed:", "  status = -1;", "  goto done;"]
        if "goto out_of_memory" in body:
            lines += ["out_of_memory:", f"  status = {OUT_OF_MEMORY};", "  goto done;"]
        lines += ["done:", "  relaycc_heap_clear(&heap);", "  free(scratch);", "  return status;", "}", "",
                  f"void {prefix}_free(void* data) {{", "  free(data);", "}", "",
                  "/* Every value is freed by the run that made it, so nothing is kept between runs. */",
                  f"void {prefix}_release(void) {{", "}", ""]
        return "\n".join(lines)


@dataclass
class _Typed:
    """What kernel_types reads of a value: its type."""

    ty: TensorType


def _flatten(value: _Val) -> list[str]:
    if isinstance(value, str):
        return [value]
    assert isinstance(value, tuple)
    return [leaf for v in value for leaf in _flatten(v)]


def _nest(leaves: list[str], ty: Type) -> _Val:
    it = iter(leaves)

    def build(t: Type) -> _Val:
        if isinstance(t, TensorType):
            return next(it)
        return tuple(build(f) for f in t.fields)  # type: ignore[attr-defined]

    return build(ty)


def _max_ndim(node: Expr) -> int:
    if not node.has_type:
        return 0
    try:
        return max([t.ndim for t in leaf_types(node.checked_type)] or [0])
    except (AssertionError, AttributeError):
        return 0  # a function's or another non-tensor type


def _dims_array(ty: TensorType) -> str:
    dims = ", ".join("-1" if d is ANY else str(d) for d in ty.shape) or "0"
    return f"(const int64_t[]){{{dims}}}"


def _helpers(max_ndim: int) -> list[str]:
    """The run's value record and heap, and the input/output checks, static in the file."""
    return f"""#define RELAYCC_MAX_NDIM {max_ndim}
typedef struct {{
  void* data;
  int64_t shape[RELAYCC_MAX_NDIM];
  int32_t ndim;
  int32_t owned; /* released by the block holding it */
  int64_t slot;  /* its entry in the run's heap */
}} relaycc_value;
#define RELAYCC_NO_VALUE {{NULL, {{0}}, 0, 0, -1}}

/* Every block the run allocates, so a failing run releases what it still holds. */
typedef struct {{
  void** blocks;
  int64_t count;
  int64_t capacity;
}} relaycc_heap;

static __attribute__((unused)) void relaycc_shape(relaycc_value* v, const int64_t* dims, int32_t ndim) {{
  v->ndim = ndim;
  for (int32_t k = 0; k < ndim; ++k) v->shape[k] = dims[k];
}}

static __attribute__((unused)) void relaycc_point(relaycc_value* v, const void* data, const int64_t* dims, int32_t ndim) {{
  v->data = (void*)data;
  v->owned = 0;
  relaycc_shape(v, dims, ndim);
}}

static __attribute__((unused)) void relaycc_borrow(relaycc_value* v, const DLTensor* t) {{
  relaycc_point(v, t->data, t->shape, t->ndim);
}}

static __attribute__((unused)) int relaycc_alloc(relaycc_heap* heap, relaycc_value* v, int64_t item_bytes) {{
  int64_t bytes = item_bytes;
  for (int32_t k = 0; k < v->ndim; ++k) bytes *= v->shape[k];
  if (heap->count == heap->capacity) {{
    int64_t capacity = heap->capacity ? 2 * heap->capacity : 64;
    void** grown = (void**)realloc(heap->blocks, (size_t)capacity * sizeof(void*));
    if (grown == NULL) return 0;
    heap->blocks = grown;
    heap->capacity = capacity;
  }}
  void* data = NULL;
  if (posix_memalign(&data, 64, bytes > 0 ? (size_t)bytes : 1) != 0) return 0;
  v->data = data;
  v->owned = 1;
  v->slot = heap->count;
  heap->blocks[heap->count++] = data;
  return 1;
}}

static __attribute__((unused)) void relaycc_release(relaycc_heap* heap, relaycc_value* v) {{
  if (!v->owned) return;
  free(v->data);
  heap->blocks[v->slot] = NULL;
  v->owned = 0;
}}

static __attribute__((unused)) void relaycc_heap_clear(relaycc_heap* heap) {{
  for (int64_t i = 0; i < heap->count; ++i) free(heap->blocks[i]);
  free(heap->blocks);
}}

/* Hands a result to the caller's output: the block itself when the caller left `data` NULL
 * and the run owns it, else a copy (into the caller's buffer, whose shape must match). */
static __attribute__((unused)) int relaycc_give(relaycc_heap* heap, relaycc_value* v, DLTensor* t, uint8_t code, uint8_t bits) {{
  if (t == NULL || t->ndim != v->ndim || t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1) return 0;
  if (t->strides != NULL || t->byte_offset != 0 || (v->ndim > 0 && t->shape == NULL)) return 0;
  size_t bytes = (size_t)(bits / 8);
  for (int32_t k = 0; k < v->ndim; ++k) bytes *= (size_t)v->shape[k];
  if (t->data == NULL) {{
    for (int32_t k = 0; k < v->ndim; ++k) t->shape[k] = v->shape[k];
    if (v->owned) {{
      t->data = v->data;
      heap->blocks[v->slot] = NULL;
      v->owned = 0;
      return 1;
    }}
    void* data = NULL;
    if (posix_memalign(&data, 64, bytes > 0 ? bytes : 1) != 0) return 0;
    memcpy(data, v->data, bytes);
    t->data = data;
    return 1;
  }}
  for (int32_t k = 0; k < v->ndim; ++k) {{
    if (t->shape[k] != v->shape[k]) return 0;
  }}
  memcpy(t->data, v->data, bytes);
  return 1;
}}
""".split("\n")
