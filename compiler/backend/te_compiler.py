"""LowerTE: lower primitive functions to PrimFuncs and turn every call of lowered or external
code into `call_lowered(@f, (args...), metadata)`.

Before: a typed module after FuseOps (and usually LabelOps). Primitive functions (`Primitive=1`)
are called in place (`fn (...) {...}(args)`), through a let (`let %f = fn ...; %f(args)`) or as
globals (`@g(args)`); external ones also carry `Compiler="x"` and a `global_symbol`.

First the RelayToTIR hooks of the target kinds named by `Compiler` attributes run, once each on
the whole module (compiler/backend/targets.py). Then, in every Relay function that is neither
primitive, nor extern, nor owned by an external compiler, each call is one of six forms:

1. a primitive function without `Compiler`: lowered (compiler/backend/lower_primitive.py) to a
   PrimFunc bound to a new global `<module_name>_<kernel name>` (`test_fused_add`, see
   label_ops.primitive_name; `_1`, `_2`... for distinct functions with one name); structurally
   equal functions are lowered once and share that global;
2. a primitive function with `Compiler="x"`: handed to the function-at-a-time codegen of target
   kind `x`, which may return an external module (collected in `mod.attrs["external_mods"]`) or
   None; the function stays in the module, under its `global_symbol`, as a bare signature with
   the single attribute `Extern=1`;
3. a global function marked `Extern=1`: nothing to lower;
4. a global bound to a PrimFunc (e.g. made by a RelayToTIR hook): nothing to lower (a hook that
   lowered a function of `?` result leaves it under the PrimFunc's `extra[SHAPE_SOURCE]`, and
   the call gets that function's shape function, named as an external function's);
5. an existing `call_lowered`: unchanged;
6. anything else: unchanged.
Forms 1-4 become `call_lowered` with TVM's metadata: `relay_attrs` (the callee's attributes),
`all_prim_fn_vars`, `relay.reshape_only` for reshape-only primitives, and, when the result type
has `?` dims, the companion shape function (compiler/backend/shape_func.py) and how to call it.
Let-bindings of primitive functions disappear with their calls; global primitive functions are
replaced by their PrimFuncs.

After: the same module with the PrimFuncs and shape functions added, typed again. Every lowered,
external or shape function is reported once to `process_fn` as a `LoweredFunction`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from compiler.backend import targets
from compiler.backend.lower_primitive import lower_primitive
from compiler.backend.shape_func import ShapeFunction, lower_shape_func, shape_func_label
from compiler.diagnostics import CompileError, Span, UnsupportedError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Expr, Function, GlobalVar, If, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.structural import structural_equal, structural_hash
from compiler.ir.types import is_dynamic
from compiler.ir.visitor import ExprMutator, post_order
from compiler.passes.infer_type import InferType
from compiler.passes.label_ops import primitive_name
from compiler.passes.pass_infra import Pass, PassContext
from compiler.runtime.vector_width import VECTOR_LANES_KEY, configured_lanes
from compiler.tir.compute import KernelContext
from compiler.tir.stmt import PrimFunc

T = TypeVar("T")

CALL_LOWERED = Op.get("call_lowered")
# PrimFunc.extra key: the typed Relay function a RelayToTIR hook lowered, when its result has
# `?` dims, for the call's shape function (its parameters are the PrimFunc's Relay arguments).
SHAPE_SOURCE = "shape_source"
RESHAPE_ONLY = "relay.reshape_only"

# Keys LowerTE reads from its config (or, without one, the PassContext's config).
HOST_KEY = "host"  # the host target kind, "c" by default
PARALLEL_KEY = "tir.parallel"  # allow OpenMP parallel loops (default True)
# Tuning records' schedules by kernel key (`schedule_key`), from the driver's options.
SCHEDULES_KEY = "relaycc.schedules"
# A lowered PrimFunc's key and, as JSON, the schedule choices its kernel made (schedule.py).
SCHEDULE_KEY_ATTR = "relaycc.schedule_key"
DECISIONS_ATTR = "relaycc.schedule_decisions"
# VECTOR_LANES_KEY ("tir.vector_lanes"): float32 lanes of the widest vector unit; by default
# what gcc makes of our loops on this machine (compiler/runtime/vector_width.py).


@dataclass(frozen=True)
class LoweredFunction:
    """What LowerTE tells `process_fn` about one function it lowered or took as external.

    `kind` is "prim_func" (lowered here, or a PrimFunc global found in the module),
    "extern" (implemented outside: `prim_funcs` is empty) or "shape_func". `relay_function` is
    the Relay function the code implements (None for PrimFunc globals that had none).
    """

    global_var: GlobalVar
    relay_function: Function | None
    prim_funcs: Mapping[GlobalVar, PrimFunc]
    target: str
    compiler: str | None
    kind: str = "prim_func"


ProcessFn = Callable[[LoweredFunction], None]


@dataclass(frozen=True)
class LowerTE(Pass):
    name: ClassVar[str] = "LowerTE"
    module_name: str = "default"
    config: Mapping[str, object] | None = None
    process_fn: ProcessFn | None = None

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        config = self.config if self.config is not None else ctx.config
        with ctx.scope():
            mod = targets.run_relay_to_tir_hooks(mod)
        # Hooks may leave new, untyped expressions behind; lowering needs every type.
        mod = InferType().run(mod, ctx)
        lowered = _ModuleLowering(mod, self.module_name, config, self.process_fn).run()
        return InferType().run(lowered, ctx)


def schedule_key(func: Function) -> str:
    """The key a tuning record names a kernel by: the structural hash of its primitive function
    (operators, attributes, shapes and dtypes; not variable names), in hex."""
    return f"{structural_hash(func) & ((1 << 64) - 1):016x}"


def is_primitive(func: Function) -> bool:
    return func.has_nonzero_attr("Primitive")


def is_extern(func: Function) -> bool:
    return func.has_nonzero_attr("Extern")


@dataclass(frozen=True)
class _Lowered:
    """The code a callee became: the global to call and the PrimFuncs made for it."""

    global_var: GlobalVar
    prim_fn_vars: tuple[GlobalVar, ...]
    compiler: str | None


class _StructuralCache(Generic[T]):
    """Functions keyed by structure: equal functions (same ops, attrs, types, constants; any
    variable names) map to one entry. The same object is found without hashing again."""

    def __init__(self) -> None:
        self._by_identity: dict[Function, T] = {}
        self._by_hash: dict[int, list[tuple[Function, T]]] = {}

    def get(self, func: Function) -> T | None:
        hit = self._by_identity.get(func)
        if hit is not None:
            return hit
        for other, value in self._by_hash.get(structural_hash(func), ()):
            if structural_equal(func, other):
                self._by_identity[func] = value
                return value
        return None

    def put(self, func: Function, value: T) -> None:
        self._by_identity[func] = value
        self._by_hash.setdefault(structural_hash(func), []).append((func, value))


class _ModuleLowering:
    def __init__(
        self, mod: IRModule, module_name: str, config: Mapping[str, object], process_fn: ProcessFn | None
    ):
        self.source = mod
        self.out = mod.copy()
        self.module_name = module_name
        self.host = str(config.get(HOST_KEY, targets.HOST))
        self.parallel = bool(config.get(PARALLEL_KEY, True))
        self.vector_lanes = configured_lanes(config)
        schedules = config.get(SCHEDULES_KEY)
        self.schedules: Mapping[str, Mapping[str, object]] = schedules if isinstance(schedules, Mapping) else {}
        self.process_fn = process_fn
        self.lowered: _StructuralCache[_Lowered] = _StructuralCache()
        self.shape_funcs: _StructuralCache[tuple[GlobalVar, ShapeFunction]] = _StructuralCache()
        self.reported: set[GlobalVar] = set()
        # Every call of one callee carries the same metadata: build it once.
        self.call_metadata: dict[tuple[GlobalVar, Function | None], Attrs] = {}
        self.external_mods: list[object] = list(_as_list(mod.attrs.get("external_mods")))
        # Globals whose definitions were replaced (by a PrimFunc or an extern under another
        # name); dropped at the end unless something still refers to them.
        self.replaced: set[GlobalVar] = set()

    def run(self) -> IRModule:
        for gv, func in self.source.functions():
            # Primitive, external and compiler-owned functions are callees, not callers.
            if is_primitive(func) or is_extern(func) or func.attrs.get("Compiler") is not None:
                continue
            self.out.add(gv, _CallRewriter(self, func).visit(func))
        self._drop_replaced_globals()
        if self.external_mods:
            self.out.attrs["external_mods"] = self.external_mods
        return self.out

    # -- the six call forms ----------------------------------------------------------------

    def rewrite_call(self, call: Call, let_bound: Mapping[Var, Function]) -> Expr:
        op = call.op
        if isinstance(op, Op):
            return call  # forms 5 (call_lowered) and 6 (operators)
        if isinstance(op, GlobalVar):
            if not self.source.has(op.name_hint):
                return call
            # By name: the module's own GlobalVar is the one every rewritten call refers to.
            gv = self.source.get_global_var(op.name_hint)
            definition = self.source[gv]
            if isinstance(definition, PrimFunc):
                return self._call_prim_func(call, gv, definition)
            if not isinstance(definition, Function):
                return call
            if is_extern(definition):
                return self._call_extern(call, gv, definition)
            if is_primitive(definition):
                return self._call_primitive(call, definition, gv)
            return call
        func = op if isinstance(op, Function) else let_bound.get(op) if isinstance(op, Var) else None
        if func is not None and is_primitive(func):
            return self._call_primitive(call, func, None)
        return call

    def _call_primitive(self, call: Call, func: Function, global_var: GlobalVar | None) -> Expr:
        compiler = func.attrs.get("Compiler")
        if compiler is not None:
            lowered = self._lower_external(func, str(compiler), global_var)
        else:
            try:
                lowered = self._lower_primitive(func)
            except UnsupportedError as err:
                if err.span is not None:
                    raise
                raise UnsupportedError(err.message, _blame_span(func) or call.span) from err
            if global_var is not None:
                self.replaced.add(global_var)
        return self._call_lowered(call, lowered.global_var, func, func.attrs, lowered.prim_fn_vars, lowered.compiler)

    def _call_extern(self, call: Call, global_var: GlobalVar, func: Function) -> Expr:
        if global_var not in self.reported:
            self.reported.add(global_var)
            self._report(LoweredFunction(global_var, func, {}, self.host, None, "extern"))
        return self._call_lowered(call, global_var, func, func.attrs, (), None)

    def _call_prim_func(self, call: Call, global_var: GlobalVar, prim_func: PrimFunc) -> Expr:
        if global_var not in self.reported:
            self.reported.add(global_var)
            target = prim_func.attrs.get("target")
            self._report(LoweredFunction(
                global_var, None, {global_var: prim_func}, target if isinstance(target, str) else self.host, None))
        source = prim_func.extra.get(SHAPE_SOURCE)
        if isinstance(source, Function):
            # Made by a RelayToTIR hook from a function of `?` result: its calls need the shape
            # function of that function, unprefixed like an external function's.
            compiler = source.attrs.get("Compiler")
            return self._call_lowered(call, global_var, source, prim_func.attrs, (global_var,),
                                      str(compiler) if compiler is not None else None)
        return self._call_lowered(call, global_var, None, prim_func.attrs, (global_var,), None)

    # -- lowering ----------------------------------------------------------------------------

    def _lower_primitive(self, func: Function) -> _Lowered:
        cached = self.lowered.get(func)
        if cached is not None:
            return cached
        gv = self.out.fresh_global(_prefixed(self.module_name, primitive_name(func)))
        key = schedule_key(func)
        ctx = KernelContext(parallel=self.parallel, vector_lanes=self.vector_lanes, schedule=self.schedules.get(key, {}))
        prim_func = lower_primitive(func, gv.name_hint, ctx)
        attrs = prim_func.attrs.with_attr("target", self.host)
        if ctx.decisions:
            attrs = attrs.with_attr(SCHEDULE_KEY_ATTR, key).with_attr(DECISIONS_ATTR,
                                                                       json.dumps(ctx.decisions, sort_keys=True))
        prim_func = dataclasses.replace(prim_func, attrs=attrs)
        self.out.add(gv, prim_func)
        lowered = _Lowered(gv, (gv,), None)
        self.lowered.put(func, lowered)
        self._report(LoweredFunction(gv, func, {gv: prim_func}, self.host, None))
        return lowered

    def _lower_external(self, func: Function, compiler: str, global_var: GlobalVar | None) -> _Lowered:
        cached = self.lowered.get(func)
        if cached is not None:
            return cached
        symbol = func.attrs.get("global_symbol")
        if not isinstance(symbol, str) or not symbol:
            raise CompileError(f'a function for Compiler="{compiler}" has no global_symbol to name it', func.span)
        kind = targets.lookup_target_kind(compiler)
        if kind is None or kind.codegen is None:
            raise UnsupportedError(
                f'no external codegen for Compiler="{compiler}": register {targets.codegen_name(compiler)} '
                f"(a function-at-a-time codegen) or a relay_to_tir hook for target kind {compiler}",
                func.span,
            )
        gv = self._extern_global(symbol, func, global_var)
        module = kind.codegen(func)
        if module is not None:
            self.external_mods.append(module)
        self.out.add(gv, Function(func.params, func.body, func.ret_type, Attrs(Extern=1), func.span))
        lowered = _Lowered(gv, (), compiler)
        self.lowered.put(func, lowered)
        self._report(LoweredFunction(gv, func, {}, compiler, compiler, "extern"))
        return lowered

    def _extern_global(self, symbol: str, func: Function, global_var: GlobalVar | None) -> GlobalVar:
        """The global named `symbol`; an existing one may only hold this very function."""
        if global_var is not None and global_var.name_hint != symbol:
            self.replaced.add(global_var)
        if not self.out.has(symbol):
            return GlobalVar(symbol)
        existing_gv = self.out.get_global_var(symbol)
        existing = self.out[existing_gv]
        if existing is func or (isinstance(existing, Function) and structural_equal(existing, func)):
            return existing_gv
        raise CompileError(
            f"global_symbol {symbol} of a function for Compiler=\"{func.attrs.get('Compiler')}\" "
            "is already the name of a different global", func.span)

    def _shape_function(self, func: Function, extern: bool) -> tuple[GlobalVar, ShapeFunction]:
        cached = self.shape_funcs.get(func)
        if cached is not None:
            return cached
        label = shape_func_label(func)
        # External functions' shape functions carry no module prefix, as in TVM.
        gv = self.out.fresh_global(label if extern else _prefixed(self.module_name, label))
        shape_func = lower_shape_func(func, gv.name_hint, self.host)
        self.out.add(gv, shape_func.prim_func)
        entry = (gv, shape_func)
        self.shape_funcs.put(func, entry)
        self._report(LoweredFunction(gv, func, {gv: shape_func.prim_func}, self.host, None, "shape_func"))
        return entry

    # -- the call ----------------------------------------------------------------------------

    def _call_lowered(
        self,
        call: Call,
        callee: GlobalVar,
        func: Function | None,
        relay_attrs: Attrs,
        prim_fn_vars: tuple[GlobalVar, ...],
        compiler: str | None,
    ) -> Call:
        key = (callee, func)
        cached = self.call_metadata.get(key)
        if cached is None:
            cached = self.call_metadata[key] = self._metadata(func, relay_attrs, prim_fn_vars, compiler)
        return Call(CALL_LOWERED, (callee, Tuple(call.args, call.span)), cached, call.span)

    def _metadata(
        self, func: Function | None, relay_attrs: Attrs, prim_fn_vars: tuple[GlobalVar, ...], compiler: str | None
    ) -> Attrs:
        metadata: dict[str, object] = {"relay_attrs": relay_attrs, "all_prim_fn_vars": prim_fn_vars}
        if func is not None and compiler is None and func.has_nonzero_attr(RESHAPE_ONLY):
            metadata[RESHAPE_ONLY] = 1
        if func is not None and is_dynamic(func.result_type):
            extern = compiler is not None or is_extern(func)
            shape_gv, shape_func = self._shape_function(func, extern)
            metadata["prim_shape_fn_var"] = shape_gv
            metadata["prim_shape_fn_states"] = shape_func.param_states
            metadata["prim_shape_fn_num_inputs"] = shape_func.num_inputs
            metadata["prim_shape_fn_num_outputs"] = shape_func.num_outputs
            metadata["all_prim_shape_fn_vars"] = (shape_gv,)
        return Attrs(metadata=Attrs(metadata))

    def _report(self, lowered: LoweredFunction) -> None:
        if self.process_fn is not None:
            self.process_fn(lowered)

    def _drop_replaced_globals(self) -> None:
        if not self.replaced:
            return
        referenced: set[GlobalVar] = set()
        for gv, func in self.out.functions():
            if gv in self.replaced:
                continue
            referenced.update(n for n in post_order(func) if isinstance(n, GlobalVar))
        for gv in self.replaced:
            if gv not in referenced and gv in self.out:
                self.out.remove(gv)


class _CallRewriter(ExprMutator):
    """Rewrites the calls of one non-primitive function, leaving primitive bodies alone."""

    def __init__(self, lowering: _ModuleLowering, func: Function):
        super().__init__()
        self.lowering = lowering
        self.let_bound, self.droppable = _primitive_lets(func)

    def descend(self, node: Expr) -> bool:
        return not (isinstance(node, Function) and (is_primitive(node) or is_extern(node)))

    def rewrite_call(self, pre: Call, post: Call) -> Expr:
        return self.lowering.rewrite_call(post, self.let_bound)

    def rewrite_let(self, pre: Let, post: Let) -> Expr:
        return post.body if post.var in self.droppable else post


def _primitive_lets(func: Function) -> tuple[dict[Var, Function], set[Var]]:
    """Let-bound primitive functions of `func`, and those only ever called (whose lets can go
    once their calls are rewritten)."""
    bound: dict[Var, Function] = {}
    value_uses: set[Var] = set()
    nodes = list(post_order(func, descend=lambda n: not (isinstance(n, Function) and is_primitive(n))))
    for node in nodes:
        if isinstance(node, Let) and isinstance(node.value, Function) and is_primitive(node.value):
            bound[node.var] = node.value
    if not bound:
        return bound, set()
    for node in nodes:
        for used in _value_operands(node):
            if isinstance(used, Var) and used in bound:
                value_uses.add(used)
    return bound, set(bound) - value_uses


def _value_operands(node: Expr) -> tuple[Expr, ...]:
    """The operands `node` uses as values (a callee position is not a value use)."""
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Tuple):
        return node.fields
    if isinstance(node, TupleGetItem):
        return (node.tuple_value,)
    if isinstance(node, Let):
        return (node.value, node.body)
    if isinstance(node, If):
        return (node.cond, node.true_branch, node.false_branch)
    if isinstance(node, Function):
        return (node.body,)
    return ()


def _prefixed(module_name: str, label: str) -> str:
    return f"{module_name}_{label}" if module_name else label


def _as_list(value: object) -> list[object]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _blame_span(func: Function) -> Span | None:
    """Where a primitive function that cannot be lowered points in the source: its first call
    with a dynamic result (the usual reason), else its first call with a location."""
    calls = [n for n in post_order(func.body, descend=lambda n: not isinstance(n, Function)) if isinstance(n, Call)]
    for call in calls:
        if call.span is not None and is_dynamic(call.checked_type):
            return call.span
    return next((c.span for c in calls if c.span is not None), None)
