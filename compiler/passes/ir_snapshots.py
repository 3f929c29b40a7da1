"""The module as Relay text after every pass: what the explorer's "IR after each pass" pane and
`passes.json` show.

An instrument (pass_infra.ModuleInstrument): opt-in, since printing the module after each of
dozens of passes costs more than most passes do. A pass that left the text as it was is
recorded without it, so a long pipeline of no-ops stays small.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.ir.module import IRModule
from compiler.parser.printer import astext


@dataclass
class IRSnapshots:
    """`records`: one `{"pass", "changed", "text"}` per pass run, in order; `text` is None when
    the pass did not change the printed module."""

    records: list[dict[str, object]] = field(default_factory=list)
    _last: str | None = None

    def after_pass(self, name: str, seconds: float) -> None:
        pass  # the module comes through after_pass_module

    def after_pass_module(self, name: str, mod: IRModule) -> None:
        text = astext(mod)
        changed = text != self._last
        self.records.append({"pass": name, "changed": changed, "text": text if changed else None})
        self._last = text
