"""Pass infrastructure: Pass, Sequential, PassContext.

A pass is a small frozen dataclass: its name is a class variable, its options are fields, and
`run(mod, ctx)` returns a new module. Calling a pass runs it under the current PassContext, whose
instruments see every pass's name and duration (the metadata report's `passes` list comes from
the `PassTimer` instrument).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

from compiler.ir.module import IRModule


class PassInstrument(Protocol):
    def after_pass(self, name: str, seconds: float) -> None: ...


@runtime_checkable
class ModuleInstrument(Protocol):
    """An instrument that also sees the module each pass returned (to print it, say); the
    others never pay for it."""

    def after_pass_module(self, name: str, mod: IRModule) -> None: ...


@dataclass
class PassTimer:
    """Records (pass name, milliseconds) for every pass run, in order."""

    records: list[tuple[str, float]] = field(default_factory=list)

    def after_pass(self, name: str, seconds: float) -> None:
        self.records.append((name, seconds * 1000.0))


@dataclass(frozen=True)
class PassContext:
    """Options for a pipeline run: opt level, a config mapping, instruments."""

    opt_level: int = 3
    config: Mapping[str, object] = field(default_factory=dict)
    instruments: tuple[PassInstrument, ...] = ()
    disabled_passes: frozenset[str] = frozenset()

    def get(self, key: str, default: object = None) -> object:
        return self.config.get(key, default)

    @staticmethod
    def current() -> PassContext:
        return _CURRENT.get()

    @contextmanager
    def scope(self) -> Iterator[PassContext]:
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)


_CURRENT: contextvars.ContextVar[PassContext] = contextvars.ContextVar(
    "relaycc_pass_context", default=PassContext()
)


@dataclass(frozen=True)
class Pass:
    """Base of all passes. Subclasses set `name` and implement `run`."""

    name: ClassVar[str] = "Pass"
    # Passes below this opt level are skipped by Sequential (InferType and friends use 0).
    opt_level: ClassVar[int] = 0

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        raise NotImplementedError

    def __call__(self, mod: IRModule, ctx: PassContext | None = None) -> IRModule:
        ctx = ctx or PassContext.current()
        start = time.perf_counter()
        out = self.run(mod, ctx)
        elapsed = time.perf_counter() - start
        for instrument in ctx.instruments:
            instrument.after_pass(self.name, elapsed)
            if isinstance(instrument, ModuleInstrument):
                instrument.after_pass_module(self.name, out)
        return out


@dataclass(frozen=True)
class Sequential(Pass):
    """Runs passes in order, skipping those above the context's opt level or disabled by name."""

    name: ClassVar[str] = "Sequential"
    passes: Sequence[Pass] = ()

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        for p in self.passes:
            if p.opt_level > ctx.opt_level or p.name in ctx.disabled_passes:
                continue
            mod = p(mod, ctx)
        return mod

    def __call__(self, mod: IRModule, ctx: PassContext | None = None) -> IRModule:
        # A Sequential is not itself an entry in the pass timings: its members are.
        return self.run(mod, ctx or PassContext.current())
