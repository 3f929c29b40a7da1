"""The external codegens of one build, from the target string to the report.

The driver uses this in four steps:
1. `ExternalCodegens.resolve(names, given, ...)` finds each codegen of the target string, and
   each one the input was already partitioned for, among the specs given with `--codegen` and
   the built-in ones (given specs the target does not name are used too, after the named
   ones), and checks each library: it compiles and must define the symbols its patterns call
   (before anything else runs);
2. `target_kinds()` are registered for the duration of the build: a `relay_to_tir` codegen
   gets the extern-call codegen's RelayToTIR and TIRToRuntime hooks, a `function_at_a_time`
   one the C source codegen;
3. `partition(mod)` runs after the Relay optimizations: for each codegen in target order,
   partitioning by its patterns (the first codegen gets first pick), outlining its functions
   (input that was already partitioned has them inline) and its own passes;
4. after LowerTE, `external_modules(lowered)` collects the function-at-a-time modules and asks
   the TIRToRuntime hooks for the C of their PrimFuncs; `annotate_report` marks external
   calls and functions in the metadata report and lists the modules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from compiler.backend.targets import TargetKind
from compiler.byoc.c_source_codegen import CSourceCodegen
from compiler.byoc.codegen_config import FUNCTION_AT_A_TIME, CodegenSpec, builtin, builtin_names
from compiler.byoc.codegen_library import check_library, check_shipped_library
from compiler.byoc.codegen_passes import RunCodegenPasses
from compiler.byoc.compiler_function_utils import OutlineCompilerFunctionsWithExistingGlobalSymbols
from compiler.byoc.extern_call_codegen import ExternCallCodegen
from compiler.byoc.external_module import ExternalModule
from compiler.byoc.partition import partition_for
from compiler.diagnostics import InputError, Span
from compiler.ir.module import IRModule
from compiler.tir.stmt import PrimFunc


def known_codegens(given: Sequence[CodegenSpec]) -> list[str]:
    return sorted({s.name for s in given} | set(builtin_names()))


@dataclass(frozen=True)
class ExternalCodegen:
    """A codegen taking part in a build, with the symbols its library defines (None: unknown)."""

    spec: CodegenSpec
    defined: frozenset[str] | None

    @property
    def name(self) -> str:
        return self.spec.name

    def target_kind(self) -> TargetKind:
        if self.spec.mode == FUNCTION_AT_A_TIME:
            return TargetKind(self.name, codegen=CSourceCodegen(self.name))
        hooks = ExternCallCodegen(self.spec, self.defined)
        return TargetKind(self.name, relay_to_tir=hooks.relay_to_tir, tir_to_runtime=hooks.tir_to_runtime)


@dataclass(frozen=True)
class ExternalCodegens:
    codegens: tuple[ExternalCodegen, ...] = ()

    @staticmethod
    def resolve(
        names: Sequence[str],
        given: Sequence[CodegenSpec],
        cflags: Sequence[str] | None = None,
        partitioned_for: Sequence[str] = (),
        spans: Mapping[str, Span | None] | None = None,
    ) -> ExternalCodegens:
        """The codegens `names` (a target string's external part), then the given specs it does
        not name, then those the model was already partitioned for (`Compiler` attributes), each
        with its library checked. `spans` locates the functions of each `Compiler` name, for the
        error when no codegen of that name exists."""
        by_name: dict[str, CodegenSpec] = {}
        for spec in given:
            if spec.name in by_name:
                raise InputError(f"codegen {spec.name} is given twice")
            by_name[spec.name] = spec
        specs = []
        for name in dict.fromkeys([*names, *by_name]):
            spec = by_name.get(name) or builtin(name)
            if spec is None:
                raise InputError(f"unknown external codegen {name!r}; known codegens: "
                                 f"{', '.join(known_codegens(given)) or 'none'} (built in, or given with --codegen)")
            specs.append(spec)
        for name in partitioned_for:
            if name in by_name or name in names:
                continue
            spec = builtin(name)
            if spec is None:
                raise InputError(f'the model has functions for Compiler="{name}", a codegen that is neither '
                                 "built in nor given with --codegen", (spans or {}).get(name))
            specs.append(spec)
        return ExternalCodegens(tuple(
            ExternalCodegen(s, check_shipped_library(s) if builtin(s.name) is s else check_library(s, cflags=cflags))
            for s in specs))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.codegens)

    @property
    def specs(self) -> tuple[CodegenSpec, ...]:
        return tuple(c.spec for c in self.codegens)

    def target_kinds(self) -> list[TargetKind]:
        return [c.target_kind() for c in self.codegens]

    def partition(self, mod: IRModule, module_name: str) -> IRModule:
        for codegen in self.codegens:
            spec = codegen.spec
            if spec.patterns:
                mod = partition_for(mod, spec.name, spec.pattern_table(), mod_name=module_name)
            # Per-codegen passes work on globals: outline what arrived already partitioned.
            mod = OutlineCompilerFunctionsWithExistingGlobalSymbols(spec.name)(mod)
            mod = RunCodegenPasses(spec.name, spec.passes)(mod)
        return mod

    def external_modules(self, lowered: IRModule, workspace_alignment: int) -> list[ExternalModule]:
        """The function-at-a-time modules LowerTE collected, then one module per codegen whose
        TIRToRuntime hook emits its PrimFuncs."""
        modules = [m for m in _as_list(lowered.attrs.get("external_mods")) if isinstance(m, ExternalModule)]
        for codegen in self.codegens:
            kind = codegen.target_kind()
            funcs = owned_prim_funcs(lowered, codegen.name)
            if kind.tir_to_runtime is not None and funcs:
                module = kind.tir_to_runtime(funcs, workspace_alignment)
                assert isinstance(module, ExternalModule)
                modules.append(module)
        return modules


def owned_prim_funcs(lowered: IRModule, codegen: str) -> list[PrimFunc]:
    return [f for _, f in lowered.items() if isinstance(f, PrimFunc) and f.attrs.get("Compiler") == codegen]


def report_modules(modules: Sequence[ExternalModule], codegens: ExternalCodegens) -> list[dict[str, object]]:
    """The report's `external_modules`: per module its codegen, the symbols it defines and the
    sources built for it (generated, then the codegen's library)."""
    libraries = {c.name: [f"src/{c.name}/{s.name.rsplit('/', 1)[-1]}" for s in c.spec.library.sources]
                 for c in codegens.codegens}
    return [
        {"name": m.codegen, "symbols": list(m.symbols), "calls": list(m.calls),
         "sources": [f"src/{m.file_name}", *libraries.get(m.codegen, [])]}
        for m in modules
    ]


def annotate_report(report: dict[str, object], lowered: IRModule, codegens: ExternalCodegens) -> None:
    """Calls and functions of external codegens get `kind: "extern"`, their codegen as
    `target` and `compiler`."""
    compilers = set(codegens.names)
    owners: dict[str, str] = {}
    for gv, definition in lowered.items():
        compiler = getattr(definition, "attrs", {}).get("Compiler")
        if isinstance(definition, PrimFunc) and compiler in compilers:
            owners[gv.name_hint] = str(compiler)
    functions = report.get("functions")
    if isinstance(functions, dict):
        for name, info in functions.items():
            compiler = owners.get(name) or (info.get("compiler") if isinstance(info, dict) else None)
            if isinstance(info, dict) and compiler in compilers:
                info.update(kind="extern", target=compiler, compiler=compiler)
    calls = report.get("calls")
    if isinstance(calls, list):
        for call in calls:
            compiler = owners.get(call["callee"]) or (call["target"] if call["target"] in compilers else None)
            if compiler is not None:
                call.update(kind="extern", target=compiler, compiler=compiler)


def _as_list(value: object) -> Iterable[object]:
    if value is None:
        return []
    return value if isinstance(value, (list, tuple)) else [value]
