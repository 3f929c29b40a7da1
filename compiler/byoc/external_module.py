"""External modules: the C an external codegen produced for the model.

LowerTE collects the modules of function-at-a-time codegens in `mod.attrs["external_mods"]`;
the driver asks TIRToRuntime hooks for the modules of the PrimFuncs they own. Each module is
written as `src/<file_name>` and compiled and linked into `lib<name>.so` together with the host
module and the codegen's library.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExternalModule:
    """C source defining `symbols` for codegen `codegen`; `calls` are the library symbols
    the source calls (empty for self-contained code)."""

    codegen: str
    file_name: str
    source: str
    symbols: tuple[str, ...]
    calls: tuple[str, ...] = ()
