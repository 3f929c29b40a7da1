"""The "C source" codegen: a function-at-a-time codegen that compiles a partitioned function to
loops with the host's own machinery.

TVM's `relay.ext.<name>` codegens receive one partitioned function and return a module that
defines its `global_symbol`. This one is what a `function_at_a_time` codegen
(compiler/byoc/codegen_config.py) uses: its patterns choose what is offloaded, its passes
reshape the offloaded functions (seed 002: ConvertLayout only there), and the code is ours.

Given a typed function with `Compiler` and `global_symbol` attributes, `c_source_module`:
1. inlines the composite functions it calls (their bodies replace the calls);
2. turns its non-scalar constants into parameters, so the kernel reads them from a constant
   pool in the module (the loop lowering takes tensors as parameters only);
3. lowers the result with compiler/backend/lower_primitive.py into `<symbol>_kernel` and emits
   it with compiler/backend/codegen_c.py;
4. adds `int32_t <symbol>(T* in..., T* out...)`, the external-function convention the AOT
   executor calls (compiler/backend/aot_c.py `extern_prototype`), which passes the constants
   and a workspace. An external function has no share in the static memory plan, so the
   wrapper allocates the kernel's workspace itself (and fails with -1 when it cannot).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from compiler.backend.c_signature import has_workspace
from compiler.backend.codegen_c import emit_c_module
from compiler.backend.constants import ConstantPoolBuilder, emit_pool
from compiler.backend.lower_primitive import lower_primitive
from compiler.backend.te_compiler import PARALLEL_KEY
from compiler.runtime.vector_width import configured_lanes
from compiler.byoc.external_module import ExternalModule
from compiler.diagnostics import CompileError
from compiler.ir.attrs import EMPTY_ATTRS
from compiler.ir.expr import Call, Constant, Expr, Function, Let, Var
from compiler.ir.visitor import ExprMutator, post_order
from compiler.passes.infer_type import infer_expr
from compiler.passes.pass_infra import PassContext
from compiler.tir.analysis import workspace_bytes
from compiler.tir.compute import KernelContext
from compiler.tir.dtypes import c_type

ALIGNMENT = 64


def is_composite(func: object) -> bool:
    return isinstance(func, Function) and isinstance(func.attrs.get("Composite"), str)


class _Substitute(ExprMutator):
    """A copy of a body with parameters replaced by arguments."""

    def __init__(self, mapping: Mapping[Expr, Expr]):
        super().__init__()
        self.memo.update(mapping)


class InlineComposites(ExprMutator):
    """Replaces every call of a composite function (in place or let-bound) by its body."""

    def __init__(self, root: Expr):
        super().__init__()
        self.bound: dict[Var, Function] = {}
        for node in post_order(root, descend=lambda n: not isinstance(n, Function)):
            if isinstance(node, Let) and isinstance(node.value, Function) and is_composite(node.value):
                self.bound[node.var] = node.value

    def descend(self, node: Expr) -> bool:
        return not isinstance(node, Function)

    def rewrite_call(self, pre: Call, post: Call) -> Expr:
        callee = post.op
        func = callee if isinstance(callee, Function) else self.bound.get(callee) if isinstance(callee, Var) else None
        if func is None or not is_composite(func):
            return post
        return _Substitute(dict(zip(func.params, post.args))).visit(func.body)

    def rewrite_let(self, pre: Let, post: Let) -> Expr:
        return post.body if pre.var in self.bound else post


@dataclass(frozen=True)
class _Prepared:
    """The function to lower: original parameters, then one per lifted constant."""

    func: Function
    constants: tuple[Constant, ...]


def prepare(func: Function) -> _Prepared:
    body = InlineComposites(func.body).visit(func.body)
    constants: dict[Constant, Var] = {}
    for node in post_order(body):
        if isinstance(node, Constant) and node.data.ndim > 0 and node not in constants:
            constants[node] = Var(f"constant_{len(constants)}", node.tensor_type)
    if constants:
        body = _Substitute(constants).visit(body)
    prepared = Function((*func.params, *constants.values()), body, None, EMPTY_ATTRS, func.span)
    infer_expr(prepared)
    return _Prepared(prepared, tuple(constants))


def c_source_module(func: Function, codegen: str) -> ExternalModule:
    """The C module defining `func`'s global_symbol (see the module docstring)."""
    symbol = func.attrs.get("global_symbol")
    if not isinstance(symbol, str) or not symbol:
        raise CompileError(f'a function for Compiler="{codegen}" has no global_symbol to name it', func.span)
    prepared = prepare(func)
    config = PassContext.current().config
    ctx = KernelContext(parallel=bool(config.get(PARALLEL_KEY, True)), vector_lanes=configured_lanes(config))
    kernel = lower_primitive(prepared.func, f"{symbol}_kernel", ctx)
    pool = ConstantPoolBuilder(ALIGNMENT)
    offsets = [pool.offset(pool.add(c.data)) for c in prepared.constants]
    pool_symbol = f"{symbol}_constants"
    num_inputs = kernel.num_inputs - len(prepared.constants)
    inputs, outputs = kernel.params[:num_inputs], kernel.outputs
    # A plain pointer per tensor, inputs then outputs: aot_c.extern_prototype, with names.
    params = [(f"{c_type(b.dtype)}*", f"in{k}") for k, b in enumerate(inputs)]
    params += [(f"{c_type(b.dtype)}*", f"out{k}") for k, b in enumerate(outputs)]
    args = [name for _, name in params[:num_inputs]]
    args += [f"(const {c_type(c.tensor_type.dtype)}*)({pool_symbol} + {offset})"
             for c, offset in zip(prepared.constants, offsets)]
    args += [name for _, name in params[num_inputs:]]
    lines = [f"int32_t {symbol}({', '.join(f'{t} {n}' for t, n in params) or 'void'}) {{"]
    if has_workspace(kernel):
        size = workspace_bytes(kernel, ALIGNMENT)
        lines += [
            f"  uint8_t* workspace = (uint8_t*)aligned_alloc({ALIGNMENT}, {size});",
            "  if (workspace == NULL) return -1;",
            f"  int32_t status = {kernel.name}({', '.join([*args, 'workspace'])});",
            "  free(workspace);",
            "  return status;",
        ]
    else:
        lines.append(f"  return {kernel.name}({', '.join(args)});")
    lines += ["}", ""]
    source = emit_c_module([kernel], header_includes=["<stdlib.h>"], workspace_alignment=ALIGNMENT)
    pieces = [source.rstrip("\n"), ""]
    constant_lines = emit_pool(pool_symbol, pool.build())
    if constant_lines:
        pieces += [*constant_lines, ""]
    pieces.append("/* The external function the executor calls. */")
    pieces += lines
    return ExternalModule(codegen, f"{symbol}.c", "\n".join(pieces), (symbol,))


@dataclass(frozen=True)
class CSourceCodegen:
    """The function-at-a-time hook of a codegen named `codegen` (a target kind's `codegen`)."""

    codegen: str

    def __call__(self, func: Function) -> ExternalModule:
        return c_source_module(func, self.codegen)

