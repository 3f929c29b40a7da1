"""Target kinds: the host and the external codegens, with the hooks LowerTE calls.

A function attribute `Compiler="x"` names the target kind `x`. A kind may carry two hooks,
the two ways TVM lets an external compiler take over the functions partitioned for it:

* `relay_to_tir` (IRModule at a time, TVM's `RelayToTIR` target hook): a pass run once on the
  whole module before anything is lowered. It may replace Relay functions by PrimFuncs, mark
  functions `Extern=1`, rewrite calls, and append external modules to
  `mod.attrs["external_mods"]`.
* `codegen` (function at a time, TVM's `relay.ext.<x>`): called by LowerTE with each distinct
  `Primitive` function carrying `Compiler="x"` (its `global_symbol` names the symbol it must
  define). It returns an external module object, which LowerTE collects into
  `mod.attrs["external_mods"]`, or None when there is nothing to add (the symbol is provided
  some other way, e.g. by a `relay_to_tir` hook or a library linked with the model).
* `tir_to_runtime` (TVM's `TIRToRuntime` target hook): emits the C of the PrimFuncs whose
  `target` attribute names this kind (typically made by its `relay_to_tir` hook), given the
  workspace alignment the memory planner used; returns an external module object. The C must
  define each PrimFunc with compiler/backend/c_signature.py's signature, so the executor calls
  it like any kernel.

What an external module object is belongs to the code generators (the BYOC issue defines
them); LowerTE only collects them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from compiler.diagnostics import Span
from compiler.ir.expr import Function
from compiler.ir.module import IRModule
from compiler.ir.visitor import post_order
from compiler.tir.stmt import PrimFunc

HOST = "c"

RelayToTIR = Callable[[IRModule], IRModule]
# Returns an external module object, or None when the codegen adds no module.
Codegen = Callable[[Function], object]
# (the kind's PrimFuncs, workspace alignment) -> an external module object.
TIRToRuntime = Callable[[Sequence[PrimFunc], int], object]


@dataclass(frozen=True)
class TargetKind:
    name: str
    relay_to_tir: RelayToTIR | None = None
    codegen: Codegen | None = None
    tir_to_runtime: TIRToRuntime | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a target kind needs a non-empty name, got {self.name!r}")

    @property
    def codegen_name(self) -> str:
        return codegen_name(self.name)


def codegen_name(kind: str) -> str:
    """The name TVM registers the function-at-a-time codegen of target kind `kind` under."""
    return f"relay.ext.{kind}"


class TargetRegistry:
    """Target kinds by name. One process-wide instance, `TARGETS`, is what LowerTE consults."""

    def __init__(self, kinds: tuple[TargetKind, ...] = ()):
        self._kinds: dict[str, TargetKind] = {}
        for kind in kinds:
            self.register(kind)

    def register(self, kind: TargetKind, replace: bool = False) -> TargetKind:
        if kind.name in self._kinds and not replace:
            raise ValueError(f"target kind {kind.name} is already registered")
        self._kinds[kind.name] = kind
        return kind

    def unregister(self, name: str) -> None:
        self._kinds.pop(name, None)

    def lookup(self, name: str) -> TargetKind | None:
        return self._kinds.get(name)

    def names(self) -> list[str]:
        return sorted(self._kinds)

    @contextmanager
    def scoped(self, *kinds: TargetKind) -> Iterator[None]:
        """Register `kinds` (replacing same-named ones) until the block ends, then restore."""
        saved = {k.name: self._kinds.get(k.name) for k in kinds}
        for kind in kinds:
            self._kinds[kind.name] = kind
        try:
            yield
        finally:
            for name, previous in saved.items():
                if previous is None:
                    self._kinds.pop(name, None)
                else:
                    self._kinds[name] = previous


TARGETS = TargetRegistry((TargetKind(HOST),))


def register_target_kind(
    name: str,
    *,
    relay_to_tir: RelayToTIR | None = None,
    codegen: Codegen | None = None,
    tir_to_runtime: TIRToRuntime | None = None,
    replace: bool = False,
) -> TargetKind:
    return TARGETS.register(TargetKind(name, relay_to_tir, codegen, tir_to_runtime), replace=replace)


def lookup_target_kind(name: str) -> TargetKind | None:
    return TARGETS.lookup(name)


def compiler_names(mod: IRModule) -> list[str]:
    """The distinct `Compiler` values on the module's functions, global or literal, sorted."""
    names: set[str] = set()
    for _, func in mod.functions():
        for node in post_order(func):
            if isinstance(node, Function):
                compiler = node.attrs.get("Compiler")
                if isinstance(compiler, str):
                    names.add(compiler)
    return sorted(names)


def compiler_spans(mod: IRModule) -> dict[str, Span | None]:
    """Where each `Compiler` value is first used: the span of the first function (global or
    literal, globals in name order) that carries it."""
    spans: dict[str, Span | None] = {}
    for _, func in mod.functions():
        for node in post_order(func):
            if isinstance(node, Function):
                compiler = node.attrs.get("Compiler")
                if isinstance(compiler, str) and spans.get(compiler) is None:
                    spans[compiler] = node.span
    return spans


def run_relay_to_tir_hooks(mod: IRModule, registry: TargetRegistry | None = None) -> IRModule:
    """Run, once each and in name order, the `relay_to_tir` hooks of the kinds the module's
    `Compiler` attributes name. Kinds without a hook (or not registered) are left to LowerTE."""
    registry = registry or TARGETS
    for name in compiler_names(mod):
        kind = registry.lookup(name)
        if kind is None or kind.relay_to_tir is None:
            continue
        result = kind.relay_to_tir(mod)
        if not isinstance(result, IRModule):
            raise TypeError(f"the relay_to_tir hook of target {name} returned {type(result).__name__}, not an IRModule")
        mod = result
    return mod
