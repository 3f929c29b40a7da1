"""CheckCompilable: refuse, with one located error, what the AOT executor cannot compile.

Before: a typed module.
After: the same module, unchanged, if @main and the globals it reaches use only what the back
end compiles. Otherwise an UnsupportedError at the first offending expression of @main in the
source (when @main has none, the first one in the globals it reaches, and the message names that
global) names the construct and points to `relaycc interpret`, which runs every construct:
* match expressions and ADT constructors (`type List[A] {...}` values),
* references (`ref`, `ref_read`, `ref_write`),
* closures outside @main: a function literal bound by a let or passed around as a value, and
  calls of a function held in a variable; in @main the AOT executor compiles let-bound
  functions (a recursive one whose self-calls are tail calls is a loop) and their calls, but
  not a function used as a value,
* @main inputs or results whose type is not made of tensors and tuples,
* tensors of more than MAX_TENSOR_BYTES bytes (4 GiB; the pass config key
  `relaycc.max_tensor_bytes` changes it): a parameter, constant or call result that large is
  refused where it appears, before FoldConstant would allocate it or the memory planner would
  place it (a `Tensor[(1000000, 1000000), float32]` type checks, as in TVM, but is 4 TB),
* what TVM writes after LowerTE and ManifestAlloc (`call_lowered`, `memory.*`, `vm.*`) that
  UnwrapCallLowered and UndoManifestAlloc could not turn back into plain calls: the back end
  lowers and plans memory itself. These are reported before anything else in the module,
  since they say which module to give instead.

The driver runs it before InlineGlobals, which would otherwise stop at the first recursive
call (recursive functions over lists are the usual way these constructs appear) with an error
that does not name the construct. Polymorphic helpers are not refused here: InlineGlobals
inlines the non-recursive ones, and the recursive ones are reported by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from compiler.diagnostics import Span, UnsupportedError
from compiler.ir.expr import (
    Call,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Var,
    children,
)
from compiler.ir.module import IRModule
from compiler.ir.types import FuncType, TensorType, TupleType, Type, is_valid_dtype, np_dtype
from compiler.ir.visitor import post_order
from compiler.ops.memory import MEMORY_OPS
from compiler.passes.pass_infra import Pass, PassContext

_HINT = "; run it with relaycc interpret"
MAX_TENSOR_BYTES = 1 << 32
MAX_TENSOR_BYTES_KEY = "relaycc.max_tensor_bytes"
_OWNED = ("Primitive", "Compiler", "Composite")
# Op -> (what it is, the pass of TVM that writes it).
_LOWERED_FORMS = {"call_lowered": "LowerTE", **{name: "ManifestAlloc" for name in MEMORY_OPS}}
_LOWERED_FORMS["memory.kill"] = "ManifestLifetimes"


def _lowered_form(node: Expr) -> str | None:
    """What a call TVM's lowering writes is, or None for any other node."""
    if not (isinstance(node, Call) and isinstance(node.op, Op) and node.op.name in _LOWERED_FORMS):
        return None
    name = node.op.name
    return (
        f"`{name}` calls, which TVM's {_LOWERED_FORMS[name]} writes; give the module as it was "
        f"before {_LOWERED_FORMS[name]}, or run it with relaycc interpret"
    )


def _tensors_only(ty: Type) -> bool:
    if isinstance(ty, TensorType):
        return True
    return isinstance(ty, TupleType) and all(_tensors_only(f) for f in ty.fields)


def _offences(func: Function, in_main: bool = False) -> list[tuple[Expr, str]]:
    """(node, what it is) for every construct of `func` the back end cannot compile. In @main,
    functions bound by `let` and their calls compile (loops and inlined calls,
    compiler/backend/aot_control.py), unless one is passed around as a value."""
    found: list[tuple[Expr, str]] = []
    callees: set[Expr] = set()
    let_bound: set[Expr] = set()
    nodes = list(post_order(func))
    for node in nodes:
        if isinstance(node, Call):
            callees.add(node.op)
        elif isinstance(node, Let):
            let_bound.add(node.value)
    for node in nodes:
        # A constructor is one shared node located at its definition: report where it is used.
        if isinstance(node, Match):
            found.append((node, "match expressions"))
        used = [c for c in children(node) if isinstance(c, Constructor)]
        if used:
            found.append((node, f"algebraic data type constructors (`{used[0].name}`)"))
        if isinstance(node, (RefCreate, RefRead, RefWrite)):
            found.append((node, "references (`ref`, `ref_read`, `ref_write`)"))
        elif isinstance(node, Let) and isinstance(node.value, Function) and not in_main:
            found.append((node.value, "closures (a function bound by `let`)"))
        elif isinstance(node, Call) and isinstance(node.op, Var) and not in_main:
            found.append((node, f"closures (a call of the function held in %{node.op.name_hint})"))
        elif (
            isinstance(node, Function)
            and node is not func
            and node not in callees
            and node not in let_bound
            and not any(key in node.attrs for key in _OWNED)
        ):
            found.append((node, "closures (a function used as a value)"))
    return found


def _tensor_bytes(ty: Type) -> int:
    """The bytes of the largest static tensor in `ty` (0 for none); dynamic dims count as 1."""
    if isinstance(ty, TupleType):
        return max((_tensor_bytes(f) for f in ty.fields), default=0)
    if not isinstance(ty, TensorType):
        return 0
    count = 1
    for dim in ty.shape:
        count *= dim if isinstance(dim, int) else 1
    return count * (np_dtype(ty.dtype).itemsize if is_valid_dtype(ty.dtype) else 1)


def _oversized(funcs: list[tuple[str, Function]], limit: int) -> list[tuple[Expr, str]]:
    found: list[tuple[Expr, str]] = []
    for _, func in funcs:
        for node in post_order(func):
            if isinstance(node, (Function, Op, GlobalVar, Constructor)) or not node.has_type:
                continue
            size = _tensor_bytes(node.checked_type)
            if size > limit:
                found.append((node, f"{node.checked_type} holds {size:,} bytes"))
    return found


def _position(span: Span | None) -> tuple[int, int, int]:
    return (0, span.line, span.column) if span is not None else (1, 0, 0)


@dataclass(frozen=True)
class CheckCompilable(Pass):
    name: ClassVar[str] = "CheckCompilable"

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        if "main" not in mod or not isinstance(mod["main"], Function):
            return mod
        main = mod.main
        for param in main.params:
            if param.has_type and not _tensors_only(param.checked_type):
                raise UnsupportedError(
                    f"the AOT executor cannot compile @main inputs of type {param.checked_type}{_HINT}", param.span
                )
        ty = main.checked_type if main.has_type else None
        if isinstance(ty, FuncType) and not _tensors_only(ty.ret_type):
            raise UnsupportedError(
                f"the AOT executor cannot compile a @main result of type {ty.ret_type}{_HINT}", main.span
            )
        reachable = _reachable_functions(mod)
        lowered: list[tuple[Expr, str]] = []
        for _, func in reachable:
            lowered += [(n, what) for n in post_order(func) if (what := _lowered_form(n)) is not None]
        if lowered:
            node, what = min(lowered, key=lambda o: _position(o[0].span))
            raise UnsupportedError(f"the AOT executor cannot compile {what}", node.span)
        limit = int(ctx.get(MAX_TENSOR_BYTES_KEY, MAX_TENSOR_BYTES)) if ctx is not None else MAX_TENSOR_BYTES
        oversized = _oversized(reachable, limit)
        if oversized:
            node, what = min(oversized, key=lambda o: _position(o[0].span))
            raise UnsupportedError(
                f"a tensor of type {what}, more than the {limit:,} bytes a tensor may have "
                f"(pass config {MAX_TENSOR_BYTES_KEY})",
                node.span,
            )
        # @main's own constructs first: in a printed module the prelude (List, tensor arrays, ...)
        # comes before @main, and an error inside a library helper says little about the model.
        in_main = [(o, "") for name, f in reachable if name == "main" for o in _offences(f, in_main=True)]
        in_helpers = [
            (o, f" (in @{name}, reached from @main)") for name, f in reachable if name != "main" for o in _offences(f)
        ]
        offences = in_main or in_helpers
        if offences:
            (node, what), where = min(offences, key=lambda o: _position(o[0][0].span))
            raise UnsupportedError(f"the AOT executor cannot compile {what}{where}{_HINT}", node.span)
        return mod


def _reachable_functions(mod: IRModule) -> list[tuple[str, Function]]:
    """@main and the Relay globals it calls, directly or not (not Primitive/Compiler ones)."""
    order: list[tuple[str, Function]] = []
    seen: set[str] = set()
    stack = ["main"]
    while stack:
        name = stack.pop()
        if name in seen or name not in mod:
            continue
        seen.add(name)
        func = mod[name]
        if not isinstance(func, Function) or any(func.has_nonzero_attr(k) for k in ("Primitive", "Extern")):
            continue
        if "Compiler" in func.attrs:
            continue
        order.append((name, func))
        stack += [n.name_hint for n in post_order(func) if isinstance(n, GlobalVar)]
    return order
