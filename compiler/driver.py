"""build(): the whole pipeline, one function, read top to bottom.

    Relay text ─parse─▶ IRModule ─StripDevices─▶ UnwrapCallLowered, UndoManifestAlloc ─▶ InferType─▶ BindParams ─▶ SimplifyInference, DynamicToStatic, FoldConstant, DCE
        ─▶ BYOC (per external codegen: partition, outline, its own passes)
        ─▶ FuseOps ─▶ LabelOps ─▶ LowerTE (codegen hooks, call_lowered, PrimFuncs, Extern=1 signatures)
        ─▶ AOT executor codegen (static memory plan) ─▶ C sources + header ─▶ report

`export()` writes the artifacts of DESIGN.md's OUTDIR and builds `lib<name>.so` with the system
C compiler, together with the external codegens' C and libraries: the files compile in parallel
and objects come from the compile cache when an earlier build made them (runtime/build.py,
runtime/compile_cache.py). Nothing here knows how a pass works; it only knows the order.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from compiler import __version__
from compiler.backend.aot_executor import AOTExecutorCodegen, AOTResult
from compiler.backend.codegen_c import CFiles, emit_c_module
from compiler.backend.constants import ConstantPool, is_separate, write_pool_bytes, write_pool_source
from compiler.backend.file_replace import replace_file
from compiler.backend.function_metadata import UpdateFunctionMetadata
from compiler.backend.interface_c import TensorInfo, c_prefix
from compiler.backend.kernel_files import kernel_groups
from compiler.backend.metadata_report import build_report
from compiler.backend.mlf import mlf_metadata, write_mlf
from compiler.backend.targets import TARGETS, compiler_names, compiler_spans
from compiler.backend.te_compiler import SCHEDULES_KEY, LowerTE
from compiler.byoc.codegen_config import CodegenSpec, builtin
from compiler.byoc.codegen_library import LibraryBuild, combined, write_library
from compiler.backend.dlpack import HEADER_NAME, HEADER_TEXT
from compiler.byoc.external_codegens import (
    ExternalCodegens,
    annotate_report,
    known_codegens,
    report_modules,
)
from compiler.byoc.external_module import ExternalModule
from compiler.config_registry import (
    OPT_LEVEL_DEFAULT,
    WORKSPACE_ALIGNMENT_DEFAULT,
    ConfigError,
    check_config_keys,
    check_opt_level,
    check_pass_config,
    suggestion,
)
from compiler.diagnostics import CompileError, InputError
from compiler.ir.module import IRModule
from compiler.parser.printer import astext, write_text
from compiler.passes.alter_op_layout import AlterOpLayout
from compiler.passes.bind_params import BindParams
from compiler.passes.check_compilable import CheckCompilable
from compiler.passes.convert_layout import DATA_LAYOUTS, ConvertLayout
from compiler.passes.dead_code_elimination import DeadCodeElimination
from compiler.passes.dynamic_to_static import DynamicToStatic
from compiler.passes.float16_compute import Float16ComputeInFloat32
from compiler.passes.fold_constant import FoldConstant
from compiler.passes.fold_scale_axis import FoldScaleAxis
from compiler.passes.fuse_ops import FuseOps
from compiler.passes.infer_type import InferType
from compiler.passes.inline_globals import InlineGlobals
from compiler.passes.label_ops import LabelOps
from compiler.passes.pass_infra import PassContext, PassInstrument, PassTimer, Sequential
from compiler.passes.simplify_inference import SimplifyInference
from compiler.passes.specialize_inputs import SpecializeInputs
from compiler.passes.strip_devices import StripDevices, device_placements
from compiler.passes.undo_manifest_alloc import UndoManifestAlloc
from compiler.passes.unwrap_call_lowered import UnwrapCallLowered
from compiler.runtime.build import Blob, LibraryBuilder
from compiler.runtime.build_cache import (
    BuildCache,
    KeyHasher,
    package_identity,
    remove_stale_sources,
    toolchain_identity,
)
from compiler.runtime.compile_cache import CompileCache
from compiler.runtime.front_cache import FrontCache
from compiler.runtime.threads import available_cores
from compiler.runtime.vector_width import VECTOR_LANES_KEY, configured_lanes, probe_vector_lanes
from compiler.tir.printer import tir_text
from compiler.tir.stmt import PrimFunc
from compiler.tuning_records import schedules_from

HOST_TARGETS = ("c",)
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Target:
    """A target string: external codegens first, the host last (`"acme_npu, c"`)."""

    host: str
    external: tuple[str, ...] = ()

    @staticmethod
    def parse(text: str, codegens: Sequence[str] = ()) -> Target:
        """`codegens` are the external codegens the target may name (built-in and given)."""
        kinds = [k.strip() for k in text.split(",") if k.strip()]
        if not kinds:
            raise InputError("empty target string; expected e.g. \"c\"")
        host, external = kinds[-1], tuple(kinds[:-1])
        if host not in HOST_TARGETS:
            raise InputError(f"unknown host target {host!r}; the host (last in the list) must be one of: "
                             + ", ".join(HOST_TARGETS))
        for name in external:
            if name not in codegens:
                raise InputError(f"unknown external codegen {name!r} in target {text!r}; known codegens: "
                                 f"{', '.join(codegens) or 'none'} (built in, or given with --codegen)")
        if len(set(external)) != len(external):
            raise InputError(f"target {text!r} names an external codegen twice")
        return Target(host, external)

    def __str__(self) -> str:
        return ", ".join((*self.external, self.host))


@dataclass(frozen=True)
class BuildOptions:
    target: str = "c"
    module_name: str = "default"
    opt_level: int = OPT_LEVEL_DEFAULT
    # pass_config entries (compiler/config_registry.py lists every key).
    config: Mapping[str, object] = field(default_factory=dict)
    workspace_byte_alignment: int = WORKSPACE_ALIGNMENT_DEFAULT
    cflags: tuple[str, ...] | None = None
    # External codegens described by JSON documents (built-in ones are found by name).
    codegens: tuple[CodegenSpec, ...] = ()
    # Passes skipped by name (tvmc's --disabled-pass); only the optional ones (DISABLEABLE_PASSES).
    disabled_passes: tuple[str, ...] = ()
    # tvmc's --desired-layout: the data layout of the host's nn.conv2d ("NCHW" or "NHWC").
    desired_layout: str | None = None
    # tvmc's --input-shapes: concrete shapes for @main's parameters, fixing their `?` dims.
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # tvmc's --tuning-records: kernel schedules by kernel key (compiler/tuning_records.py).
    schedules: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    @staticmethod
    def from_config(
        config: Mapping[str, object],
        target: str = "c",
        module_name: str = "default",
        codegens: Sequence[CodegenSpec] = (),
    ) -> BuildOptions:
        """Options from a `--config` JSON object: `opt_level`, `pass_config` (PassContext config),
        `cflags` (a list replacing the default C flags), `workspace_byte_alignment`,
        `disabled_pass` (a list of pass names), `desired_layout`, `tuning_records` (a `relaycc
        tune` records document)."""
        check_config_keys(config)
        opt_level = check_opt_level(config.get("opt_level", OPT_LEVEL_DEFAULT))
        pass_config = config.get("pass_config", {})
        cflags = config.get("cflags")
        alignment = config.get("workspace_byte_alignment", WORKSPACE_ALIGNMENT_DEFAULT)
        disabled = config.get("disabled_pass", [])
        layout = config.get("desired_layout")
        records = config.get("tuning_records")
        if not isinstance(pass_config, dict):
            raise ConfigError("config pass_config must be an object", "pass_config")
        if cflags is not None and not (isinstance(cflags, list) and all(isinstance(f, str) for f in cflags)):
            raise ConfigError("config cflags must be a list of strings", "cflags")
        if not isinstance(alignment, int) or isinstance(alignment, bool):
            raise ConfigError(f"config workspace_byte_alignment must be an integer, got {alignment!r}",
                              "workspace_byte_alignment")
        if not (isinstance(disabled, list) and all(isinstance(p, str) for p in disabled)):
            raise ConfigError("config disabled_pass must be a list of pass names", "disabled_pass")
        if layout is not None and not isinstance(layout, str):
            raise ConfigError(f"config desired_layout must be a string, got {layout!r}", "desired_layout")
        schedules = {}
        if records is not None:
            try:
                schedules = schedules_from(records, "config tuning_records")
            except InputError as err:
                raise ConfigError(str(err), "tuning_records") from None
        return BuildOptions(
            opt_level=opt_level,
            config=pass_config,
            cflags=tuple(cflags) if cflags is not None else None,
            workspace_byte_alignment=alignment,
            target=target,
            module_name=module_name,
            codegens=tuple(codegens),
            disabled_passes=tuple(disabled),
            desired_layout=layout,
            schedules=schedules,
        )

    def validated(self) -> BuildOptions:
        """These options, checked; pass_config values normalized (TVM's Bool takes 0 and 1)."""
        if not _MODULE_NAME.match(self.module_name):
            raise InputError(f"module name {self.module_name!r} must be a C identifier")
        check_opt_level(self.opt_level)
        alignment = self.workspace_byte_alignment
        if alignment < 1 or alignment & (alignment - 1):
            raise ConfigError(f"workspace_byte_alignment must be a power of two, got {alignment}",
                              "workspace_byte_alignment")
        for name in self.disabled_passes:
            check_disableable(name)
        if self.desired_layout is not None and self.desired_layout not in DATA_LAYOUTS:
            raise ConfigError(f"desired layout {self.desired_layout!r} is not one of {', '.join(DATA_LAYOUTS)}",
                              "desired_layout")
        Target.parse(self.target, known_codegens(self.codegens))
        checked = check_pass_config(self.config)
        if all(type(checked[k]) is type(v) for k, v in self.config.items()):
            return self
        return replace(self, config=checked)


# Passes that may be skipped by name: the optional ones. The rest (InferType, FuseOps' grouping,
# LowerTE, ...) are what turns a model into C at all. FuseOps disabled is fusion at opt level 0:
# every operator a kernel of its own, as in TVM.
DISABLEABLE_PASSES = ("AlterOpLayout", "ConvertLayout", "DeadCodeElimination", "DynamicToStatic",
                      "Float16ComputeInFloat32", "FoldConstant", "FoldScaleAxis", "FuseOps")
_REQUIRED_PASSES = ("InferType", "InlineGlobals", "SimplifyInference", "StripDevices", "UnwrapCallLowered",
                    "UndoManifestAlloc", "CheckCompilable", "BindParams", "LabelOps", "LowerTE",
                    "MergeComposite", "AnnotateTarget", "MergeCompilerRegions", "PartitionGraph")


def check_disableable(name: str) -> None:
    if name in DISABLEABLE_PASSES:
        return
    if name in _REQUIRED_PASSES:
        raise ConfigError(f"pass {name!r} cannot be disabled; these can: {', '.join(DISABLEABLE_PASSES)}",
                          "disabled_pass")
    raise ConfigError(f"unknown pass {name!r}{suggestion(name, DISABLEABLE_PASSES + _REQUIRED_PASSES)}; "
                      f"these can be disabled: {', '.join(DISABLEABLE_PASSES)}", "disabled_pass")


@dataclass
class CompiledModel:
    """Everything a build produced, before it is written to disk."""

    options: BuildOptions
    target: Target
    source: IRModule
    lowered: IRModule
    aot: AOTResult | None
    prim_funcs: list[PrimFunc]
    report: dict[str, object]
    params: dict[str, np.ndarray]
    functions: dict[str, dict[str, object]]
    codegens: ExternalCodegens = ExternalCodegens()
    external_modules: list[ExternalModule] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return f"tvmgen_{self.options.module_name}"

    def c_sources(self, kernels: CFiles | None = None) -> dict[str, str]:
        """File name → C text: the executor (lib0), the host kernels (lib1, lib2, ..., grouped
        by backend/kernel_files.py), then one file per external module (the codegens'
        generated C). A large constant pool has a file of its own: `pool_source`. `kernels`
        is the kernels' emission when `kernel_files` started it earlier."""
        assert self.aot is not None, "lower-only builds have no C"
        name = self.options.module_name
        if kernels is None:
            with self.kernel_files() as started:
                return self.c_sources(started)
        alignment = self.options.workspace_byte_alignment
        texts = kernels.result() or [emit_c_module([], workspace_alignment=alignment)]
        sources = {f"{name}_lib0.c": self.aot.main_source}
        sources.update((f"{name}_lib{k}.c", text) for k, text in enumerate(texts, start=1))
        sources.update((m.file_name, m.source) for m in self.external_modules)
        return sources

    def kernel_files(self, workers: int = 0) -> CFiles:
        """The host kernels' C files, their emission started (by `workers` forked processes
        beside this one, from now on): what `c_sources` takes."""
        external = {s for m in self.external_modules for s in m.symbols}
        host_funcs = [f for f in self.prim_funcs if f.name not in external]
        return CFiles(host_funcs, kernel_groups, workspace_alignment=self.options.workspace_byte_alignment,
                      workers=workers)

    def pool_source(self) -> tuple[str, str, ConstantPool] | None:
        """(file name, symbol, pool) of the constant pool the executor only declares, if any."""
        pool = self.aot.constant_pool if self.aot is not None else None
        if pool is None or not pool.arrays or not is_separate(pool):
            return None
        name = self.options.module_name
        return f"{name}_constants.c", f"{c_prefix(name)}_constant_pool", pool


def optimize(
    mod: IRModule, params: Mapping[str, np.ndarray], input_shapes: Mapping[str, tuple[int, ...]] | None = None
) -> IRModule:
    # One CPU: device placement (on_device, device_copy, virtual devices) means nothing here.
    mod = StripDevices()(mod)
    # A call_lowered of a Relay function in the text is a call of it; LowerTE lowers it anew.
    mod = UnwrapCallLowered()(mod)
    # Storages, tensors and invoke_tvm_op from TVM's ManifestAlloc: relaycc plans memory itself.
    mod = UndoManifestAlloc()(mod)
    mod = InferType()(mod)
    # ADTs, references and closures have no C form; say so before inlining trips on recursion.
    mod = CheckCompilable()(mod)
    if params:
        mod = BindParams(dict(params))(mod)
    # After binding: a bound parameter is no longer an input whose shape could be given.
    if input_shapes:
        mod = SpecializeInputs(dict(input_shapes))(mod)
    # Helpers are inlined first so the later passes (and fusion) see one straight-line @main.
    # DynamicToStatic where TVM has it: a dyn.* call with constant shapes becomes its static op
    # before FoldConstant and fusion see it.
    return Sequential(
        [InlineGlobals(), SimplifyInference(), DynamicToStatic(), FoldConstant(), DeadCodeElimination(), InferType()]
    )(mod)


def planned_passes(options: BuildOptions, *, params: bool = False) -> list[str]:
    """The names of the pipeline's passes in the order `lower` runs them, for `options` (and
    parameters bound or not): what a progress bar counts. Passes run inside another pass (a
    codegen's own pipeline over each of its functions) are not in it, since how often they run
    depends on the model. Kept in step with `optimize` and `lower` by a test that compares it
    with the report's `passes` of real builds."""

    def at(level: int, *names: str) -> list[str]:
        return [n for n in names if options.opt_level >= level and n not in options.disabled_passes]

    names = ["StripDevices", "UnwrapCallLowered", "UndoManifestAlloc", "InferType", "CheckCompilable"]
    names += ["BindParams"] if params else []
    names += ["SpecializeInputs"] if options.input_shapes else []
    names += ["InlineGlobals", "SimplifyInference", *at(2, "DynamicToStatic", "FoldConstant"),
              *at(1, "DeadCodeElimination"), "InferType"]
    # The codegens as ExternalCodegens.resolve orders them: the target's, then the other given
    # ones (those a model is already partitioned for are known only once it is parsed).
    given = {spec.name: spec for spec in options.codegens}
    external = Target.parse(options.target, known_codegens(options.codegens)).external
    for name in dict.fromkeys([*external, *given]):
        spec = given.get(name) or builtin(name)
        if spec is not None and spec.patterns:
            names += ["MergeComposite", "AnnotateTarget", "MergeCompilerRegions", "PartitionGraph", "InferType"]
        names += ["OutlineCompilerFunctionsWithExistingGlobalSymbols", "RunCodegenPasses"]
    if options.desired_layout is not None:
        names += ["ConvertLayout", *(["FoldConstant"] if "FoldConstant" not in options.disabled_passes else [])]
    return [*names, *at(3, "FoldScaleAxis"), *at(1, "Float16ComputeInFloat32"), *at(3, "AlterOpLayout"), "FuseOps",
            "LabelOps", "LowerTE"]


def build_vector_lanes(options: BuildOptions) -> int:
    """The float32 lanes a build's kernels are tiled for: `tir.vector_lanes` when the config
    sets it, else what the build's own C flags give. Tiles and packed weights follow the flags,
    not the build machine: a portable `-march=x86-64` build of 8-lane tiles on an AVX2 machine
    had 4-lane registers for them and spilled (ResNet-50 2.9x its native build; 4-lane tiles:
    see README)."""
    given = options.config.get(VECTOR_LANES_KEY)
    if given is not None or options.cflags is None:
        return configured_lanes(options.config)
    return probe_vector_lanes(tuple(options.cflags))


def lower(
    mod: IRModule,
    options: BuildOptions = BuildOptions(),
    params: Mapping[str, np.ndarray] | None = None,
    *,
    executor: bool = True,
    instruments: Sequence[PassInstrument] = (),
    onnx_names: Mapping[str, str] | None = None,
) -> CompiledModel:
    """Run the pipeline up to the executor codegen (`executor=False` stops after LowerTE).

    `instruments` see each pass as it finishes (the service reports job progress with one).
    `onnx_names` (Relay parameter → ONNX name, for a model imported from ONNX) is recorded
    beside each input of the report's `interface`, so runs can name inputs either way."""
    options = options.validated()
    target = Target.parse(options.target, known_codegens(options.codegens))
    # Before anything runs: every codegen exists and its library defines what it calls.
    codegens = ExternalCodegens.resolve(
        target.external, options.codegens, options.cflags, compiler_names(mod), compiler_spans(mod)
    )
    timer = PassTimer()
    config = dict(options.config)
    if options.cflags is not None and VECTOR_LANES_KEY not in config:
        config[VECTOR_LANES_KEY] = build_vector_lanes(options)
    ctx = PassContext(
        opt_level=options.opt_level, config=config, instruments=(timer, *instruments),
        disabled_passes=frozenset(options.disabled_passes),
    )
    functions = UpdateFunctionMetadata(options.workspace_byte_alignment)
    prefix = f"tvmgen_{options.module_name}"
    # The codegens' target kinds (their LowerTE hooks) exist only while this build runs.
    placements = device_placements(mod)
    with ctx.scope(), TARGETS.scoped(*codegens.target_kinds()):
        mod = optimize(mod, params or {}, options.input_shapes)
        # BYOC: each external codegen, in target order, takes what its patterns match; its own
        # passes then run on its functions only.
        mod = codegens.partition(mod, options.module_name)
        if options.desired_layout is not None:
            # Asked for by name, so not subject to the opt level (tvmc runs it at 3 whatever
            # --opt-level says); after partitioning, it converts the host's convolutions only:
            # a codegen asks for its own layouts in its passes. FoldConstant then turns the
            # weights' transforms into constants.
            mod = ConvertLayout({"nn.conv2d": (options.desired_layout,)})(mod)
            mod = Sequential([FoldConstant()])(mod)
        # After partitioning (a codegen takes its ops as they are), before fusion: a constant
        # per-channel scale after a product goes into its weight (TVM's FoldScaleAxis), float16
        # host ops compute in float32 (gcc vectorizes no _Float16 arithmetic), then constant
        # weights packed for the host's product kernel. FoldScaleAxis runs on its own, so the
        # module before it (its unscaled weights) is dropped before AlterOpLayout packs a
        # third copy of them (ResNet-50's build peaked 90 MB higher).
        mod = Sequential([FoldScaleAxis()])(mod)
        mod = Sequential([Float16ComputeInFloat32(), AlterOpLayout()])(mod)
        # Fusion decides the kernels; labels name them; LowerTE turns them into PrimFuncs.
        mod = FuseOps(fuse_opt_level=0 if "FuseOps" in options.disabled_passes else -1)(mod)
        mod = LabelOps()(mod)
        lowered = LowerTE(prefix, {"host": target.host, **options.config, SCHEDULES_KEY: options.schedules},
                          functions)(mod)
        external_modules = codegens.external_modules(lowered, options.workspace_byte_alignment)
        aot = None
        if executor:
            aot = AOTExecutorCodegen(options.module_name, options.workspace_byte_alignment).codegen(lowered)
    prim_funcs = [f for _, f in lowered.items() if isinstance(f, PrimFunc)]
    memory = aot.memory_report() if aot is not None else {}
    report = build_report(
        module_name=options.module_name,
        host=target.host,
        external=codegens.names,
        lowered=lowered,
        functions=functions.functions,
        memory=memory,
        passes=timer.records,
        external_modules=report_modules(external_modules, codegens),
    )
    annotate_report(report, lowered, codegens)
    report["compiler_version"] = __version__
    if placements:
        # On one CPU, placement is an identity; the report says what was seen and dropped.
        report["devices"] = placements
    if aot is not None:
        report["interface"] = interface_section(aot, options, onnx_names)
    return CompiledModel(
        options, target, mod, lowered, aot, prim_funcs, report, dict(params or {}), dict(functions.functions),
        codegens, external_modules,
    )


def interface_section(
    aot: AOTResult, options: BuildOptions, onnx_names: Mapping[str, str] | None = None
) -> dict[str, object]:
    """How to call the library: what `relaycc run` and other tools need besides the header."""

    def tensors(infos: Sequence[TensorInfo]) -> list[dict[str, object]]:
        return [
            {"name": t.name, "c_name": t.c_name, "shape": list(t.shape), "dtype": t.dtype, "bytes": t.bytes}
            for t in infos
        ]

    inputs = tensors(aot.inputs)
    if onnx_names is not None:
        # Imported from ONNX: every input names its graph input (the same name where it was
        # already a Relay identifier).
        for entry in inputs:
            entry["onnx_name"] = onnx_names.get(str(entry["name"]), entry["name"])
    return {
        "entry": aot.entry,
        "header": f"include/{aot.header_name}",
        "library": f"lib{options.module_name}.so",
        "inputs": inputs,
        "outputs": tensors(aot.outputs),
        "workspace_byte_alignment": options.workspace_byte_alignment,
        # `?` dims (shape -1): the entry takes DLTensors and computes shapes at run time.
        "dynamic": aot.arena is not None,
    }


FROM_ENVIRONMENT: Literal["environment"] = "environment"


def export(
    model: CompiledModel,
    outdir: Path,
    relay_text: str,
    *,
    build_library: bool = True,
    cache: CompileCache | None | Literal["environment"] = FROM_ENVIRONMENT,
    c_progress: Callable[[int, int], None] | None = None,
    written: list[Path] | None = None,
) -> Path:
    """Write the OUTDIR artifacts (DESIGN.md) and, unless told otherwise, build the library.
    `cache` is where compiled objects are kept and reused: by default the one the environment
    names (compile_cache.py), None for none. `c_progress(done, total)` hears how many of the
    library's C files are compiled (runtime/build.py). `written`, when given, gets the path of
    every file written (what the whole-build cache keeps)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    files = written if written is not None else []
    if model.aot is None:
        _write_lowered(model, outdir, files)
    else:
        # The kernels' C (the longest pure-Python step) is emitted from here on by forked
        # processes on the other cores too, while this one writes the codegens' libraries, the
        # executor and the pool, and then joins them. Forked before the builder starts threads.
        with model.kernel_files(workers=available_cores() - 1) as kernels:
            _export_executor(model, outdir, relay_text, files, kernels, build_library, cache, c_progress)
    _write(outdir / "metadata.json", json.dumps(model.report, indent=2) + "\n")
    files.append(outdir / "metadata.json")
    return outdir


def _export_executor(
    model: CompiledModel,
    outdir: Path,
    relay_text: str,
    files: list[Path],
    kernels: CFiles,
    build_library: bool,
    cache: CompileCache | None | Literal["environment"],
    c_progress: Callable[[int, int], None] | None,
) -> None:
    if not build_library:
        _export_sources(model, outdir, relay_text, files, combined(_write_codegen_libraries(model, outdir)), kernels,
                        None)
        return
    name = model.options.module_name
    codegen_libraries = combined(_write_codegen_libraries(model, outdir))
    # The compilers start on each file as soon as it is written, and the artifacts nothing
    # is compiled from (lowered.relay, the pool's C, the MLF archive) are written while they
    # run: the build takes about the longer of the two, not their sum.
    with tempfile.TemporaryDirectory(prefix="relaycc-pool-") as work, LibraryBuilder(
        outdir / f"lib{name}.so",
        cflags=model.options.cflags,
        include_dirs=[outdir / "include", *codegen_libraries.include_dirs],
        cache=CompileCache.from_environment() if cache == FROM_ENVIRONMENT else cache,
        progress=c_progress,
    ) as library:
        _export_sources(model, outdir, relay_text, files, codegen_libraries, kernels, (library, Path(work)))
        library.link(libraries=codegen_libraries.libraries, library_dirs=codegen_libraries.library_dirs)
    files.insert(-1, outdir / f"lib{name}.so")  # before the archive, as the files were always listed


def _write_lowered(model: CompiledModel, outdir: Path, files: list[Path]) -> None:
    _write_stream(outdir / "lowered.relay", lambda stream: write_text(stream, model.lowered), text=True)
    files.append(outdir / "lowered.relay")


def _export_sources(
    model: CompiledModel,
    outdir: Path,
    relay_text: str,
    files: list[Path],
    codegen_libraries: LibraryBuild,
    kernels: CFiles,
    build: tuple[LibraryBuilder, Path] | None,
) -> None:
    """Writes the executor's artifacts but the library (the codegens' libraries are written
    already); with `build` (the library's builder and a scratch directory), hands each file to
    be compiled as soon as it is written: the glue and the constant pool first, the kernels
    once emitted, then the rest is written while they compile."""
    aot = model.aot
    assert aot is not None
    name = model.options.module_name
    src = outdir / "src"
    _write(outdir / "include" / aot.header_name, aot.header)
    lib0 = f"{name}_lib0.c"
    _write(src / lib0, aot.main_source)
    pool_source = model.pool_source()
    if build is not None:
        library, work = build
        library.add([src / lib0], glue=True)
        if pool_source is not None:
            pool_name, symbol, pool = pool_source
            data = work / "pool.bin"
            with open(data, "wb") as stream:
                write_pool_bytes(stream, pool)
            library.add_blob(Blob(data, symbol, pool.total_bytes + 1, pool.alignment, src / pool_name))
    # The pool's C text (four bytes per byte of weights) is formatted by numpy and written by
    # the kernel, both without the GIL: on a thread, it takes the core the kernels' emission
    # (pure Python) leaves idle.
    with ThreadPoolExecutor(1, thread_name_prefix="relaycc-pool-source") as writer:
        pool_written = None
        if pool_source is not None:
            pool_name, symbol, pool = pool_source
            pool_written = writer.submit(_write_stream, src / pool_name, lambda stream: write_pool_source(
                stream, symbol, pool, f"Read-only constant pool of the module \"{name}\", generated by relaycc."))
        sources = model.c_sources(kernels)
        for file_name, text in sources.items():
            if file_name != lib0:
                _write(src / file_name, text)
        if build is not None:
            library.add([src / f for f in sources if f != lib0] + list(codegen_libraries.sources))
            library.seal()
        if pool_written is not None:
            pool_written.result()
    files += [src / f for f in sources]
    if pool_source is not None:
        files.append(src / pool_source[0])
    remove_stale_sources(src, name, {*sources, *([pool_source[0]] if pool_source else [])})
    files.append(outdir / "include" / aot.header_name)
    files += codegen_libraries.sources
    if model.codegens.codegens:
        files.append(outdir / "include" / HEADER_NAME)
    _write_lowered(model, outdir, files)
    operator_workspaces = {
        fname: int(str(info.get("workspace_bytes", 0)))
        for fname, info in model.functions.items()
        if info.get("kind") == "prim_func"
    }
    write_mlf(
        outdir / f"{name}.tar",
        module_name=name,
        metadata=mlf_metadata(
            module_name=name,
            target=model.target.host,
            inputs=aot.inputs,
            outputs=aot.outputs,
            workspace_bytes=aot.workspace_bytes,
            constant_bytes=aot.constant_bytes,
            io_bytes=aot.io_bytes,
            operator_workspaces=operator_workspaces,
        ),
        c_sources=[*sources.values(), *([src / pool_source[0]] if pool_source else [])],
        header_name=aot.header_name,
        header=aot.header,
        relay_text=relay_text,
        params=model.params,
    )
    files.append(outdir / f"{name}.tar")


DUMP_KINDS = ("relay", "tir", "c")


def check_dump_kinds(kinds: Sequence[str]) -> None:
    for kind in kinds:
        if kind not in DUMP_KINDS:
            raise ConfigError(f"--dump-code {kind!r} is not one of {', '.join(DUMP_KINDS)}"
                              f"{suggestion(kind, DUMP_KINDS)}", "dump_code")


def dump_code(model: CompiledModel, outdir: Path, kinds: Sequence[str]) -> list[Path]:
    """tvmc's --dump-code: `<name>.relay` (the fused module LowerTE starts from), `<name>.tir`
    (every PrimFunc) and `<name>.c` (every C source in one file), written into OUTDIR."""
    check_dump_kinds(kinds)
    name = model.options.module_name
    written = []
    for kind in dict.fromkeys(kinds):
        if kind == "relay":
            text = astext(model.source)
        elif kind == "tir":
            text = "\n\n".join(tir_text(f) for f in model.prim_funcs) + "\n"
        else:
            if model.aot is None:
                raise InputError("--dump-code c needs the C: `relaycc lower` stops before it")
            text = "".join(f"// ---- {file_name}\n{source}\n" for file_name, source in model.c_sources().items())
        path = Path(outdir) / f"{name}.{kind}"
        _write(path, text)
        written.append(path)
    return written


def _write_codegen_libraries(model: CompiledModel, outdir: Path) -> list[LibraryBuild]:
    """include/relaycc_dlpack.h and each external codegen's library under src/<codegen>/."""
    if not model.codegens.codegens:
        return []
    include = outdir / "include"
    _write(include / HEADER_NAME, HEADER_TEXT)
    # A codegen's library is linked when the codegen produced code for this model.
    used = {m.codegen for m in model.external_modules}
    return [write_library(spec, outdir / "src" / spec.name, include)
            for spec in model.codegens.specs if spec.name in used]


def _write(path: Path, text: str) -> None:
    """Write atomically: a reader never sees a half-written artifact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    replace_file(tmp, path)


def _write_stream(path: Path, write: Callable[[Any], None], *, text: bool = False) -> None:
    """Like `_write`, for a file written piece by piece (to a text stream with `text`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") if text else open(tmp, "wb") as stream:
        write(stream)
    replace_file(tmp, path)


def build(
    relay_text: str,
    outdir: Path,
    options: BuildOptions = BuildOptions(),
    params: Mapping[str, np.ndarray] | None = None,
    *,
    source_name: str = "<string>",
    executor: bool = True,
    build_library: bool = True,
    instruments: Sequence[PassInstrument] = (),
    cache: CompileCache | None | Literal["environment"] = FROM_ENVIRONMENT,
    onnx_names: Mapping[str, str] | None = None,
    c_progress: Callable[[int, int], None] | None = None,
    dump_kinds: Sequence[str] = (),
    front_key: str | None = None,
) -> CompiledModel:
    """Parse, compile and export: what `relaycc compile` (and `lower`) do. `instruments` see
    each pass finish, `c_progress` each C file of the library compiled; `dump_kinds` are
    written as `dump_code` writes them.

    With a cache (the environment's by default), an identical earlier build's files are put
    into `outdir` instead (runtime/build_cache.py): no pass runs, the report says
    `"build_cache": {"hit": true}`, and the model returned lowers again only if its IR is
    asked for. `front_key`, a command line's key (runtime/front_cache.py), is pointed at the
    build's key, so the same command line finds it without importing the compiler."""
    from compiler.parser import parse

    def make() -> CompiledModel:
        mod = parse(relay_text, source_name)
        return lower(mod, options, params, executor=executor, instruments=instruments, onnx_names=onnx_names)

    check_dump_kinds(dump_kinds)
    return _cached_build(
        ("relay", relay_text.encode()), make, outdir, relay_text, options, params, source_name=source_name,
        build_library=build_library and executor, executor=executor, cache=cache, onnx_names=onnx_names,
        c_progress=c_progress, dump_kinds=dump_kinds, front_key=front_key,
    )


def build_onnx(
    data: bytes,
    outdir: Path,
    options: BuildOptions = BuildOptions(),
    params: Mapping[str, np.ndarray] | None = None,
    *,
    source_name: str = "<bytes>",
    executor: bool = True,
    instruments: Sequence[PassInstrument] = (),
    cache: CompileCache | None | Literal["environment"] = FROM_ENVIRONMENT,
    c_progress: Callable[[int, int], None] | None = None,
    dump_kinds: Sequence[str] = (),
    front_key: str | None = None,
) -> CompiledModel:
    """`build` for an ONNX model's bytes: imported first, its inputs' ONNX names recorded in
    the report; the whole-build cache is keyed by the bytes, so a hit imports nothing."""
    from compiler.frontend.onnx import from_onnx, load_model

    imported: list[str] = []

    def make() -> CompiledModel:
        result = from_onnx(load_model(data, source_name))
        names = {p.name_hint: p.name_hint for p in result.module.main.params}
        names.update(result.onnx_names)
        imported.append(astext(result.module))
        return lower(result.module, options, params, executor=executor, onnx_names=names, instruments=instruments)

    check_dump_kinds(dump_kinds)
    return _cached_build(
        ("onnx", data), make, outdir, lambda: imported[-1], options, params, source_name=source_name,
        build_library=executor, executor=executor, cache=cache, onnx_names=None, c_progress=c_progress,
        dump_kinds=dump_kinds, front_key=front_key,
    )


def _cached_build(
    source: tuple[str, bytes],
    make: Callable[[], CompiledModel],
    outdir: Path,
    relay_text: str | Callable[[], str],
    options: BuildOptions,
    params: Mapping[str, np.ndarray] | None,
    *,
    source_name: str,
    build_library: bool,
    executor: bool,
    cache: CompileCache | None | Literal["environment"],
    onnx_names: Mapping[str, str] | None,
    c_progress: Callable[[int, int], None] | None,
    dump_kinds: Sequence[str],
    front_key: str | None = None,
) -> CompiledModel:
    """Serve the build from the whole-build cache, or `make` it, export it (with the dumps)
    and keep its files there."""
    objects = CompileCache.from_environment() if cache == FROM_ENVIRONMENT else cache
    builds = BuildCache(objects.root) if isinstance(objects, CompileCache) else None
    key = None
    if builds is not None:
        key = build_key(source, options, params, source_name=source_name, executor=executor,
                        build_library=build_library, dump_kinds=dump_kinds, onnx_names=onnx_names)
    if builds is not None and key is not None:
        report = builds.restore_build(key, Path(outdir), options.module_name)
        if report is not None:
            _remember_front(builds, front_key, key, options)
            return _ReusedModel(options, params or {}, report, make)
    model = make()
    written: list[Path] = []
    text = relay_text if isinstance(relay_text, str) else relay_text()
    export(model, outdir, text, build_library=build_library, cache=objects, c_progress=c_progress, written=written)
    if dump_kinds:
        written += dump_code(model, outdir, dump_kinds)
    if builds is not None and key is not None:
        builds.store(key, Path(outdir), written)
        _remember_front(builds, front_key, key, options)
    return model


def _remember_front(builds: BuildCache, front_key: str | None, key: str, options: BuildOptions) -> None:
    """Point the command line's front key at `key` (runtime/front_cache.py), unless a library
    the key looked for was not found: the front key could not tell when one is installed."""
    if front_key is None or not builds.entry(key).is_dir():
        return
    found = [path for _, path in _prebuilt_library_files(options.codegens)]
    if all(path is not None for path in found):
        FrontCache(builds.root).store(front_key, key, [p for p in found if p is not None])


# Read from the environment by tools a build runs (runtime/build.py, byoc/codegen_library.py).
_TOOL_VARIABLES = {"NM": "nm"}


def build_key(
    source: tuple[str, bytes],
    options: BuildOptions,
    params: Mapping[str, np.ndarray] | None,
    *,
    source_name: str,
    executor: bool,
    build_library: bool,
    dump_kinds: Sequence[str],
    onnx_names: Mapping[str, str] | None = None,
) -> str | None:
    """The whole-build cache's key: a sha256 over everything that decides the files a build
    writes; None when something the build reads cannot be followed (a codegen library's
    `#include MACRO`). Every field of `options` takes part, so a field added later does too."""
    import os
    import shlex
    import sys

    import compiler
    from compiler.runtime.build import c_compiler

    key = KeyHasher()
    kind, data = source
    key.add("source kind", kind)
    key.add("source", data)
    key.add("source name", source_name)
    key.add_arrays("params", dict(params or {}))
    key.add("options", json.dumps(_canonical(options), sort_keys=True))
    key.add("outputs", json.dumps({"executor": executor, "library": build_library, "dump": list(dump_kinds),
                                   "onnx_names": dict(onnx_names) if onnx_names is not None else None}))
    for spec in options.codegens:
        headers = _codegen_headers(spec)
        if headers is None:
            return None
        key.add(f"codegen {spec.name} headers", headers)
    key.add("prebuilt libraries", _prebuilt_libraries(options.codegens))
    # Built-in codegens are relaycc's own files, but the system libraries they link are not.
    key.add("relaycc", f"{__version__}\n{sys.version}\nnumpy {np.__version__}\n"
            + package_identity(Path(compiler.__file__).parent))
    if kind == "onnx":
        from importlib.metadata import version

        key.add("onnx", version("onnx"))
    tools = [shlex.split(os.environ.get(variable, "").strip()) or [default]
             for variable, default in _TOOL_VARIABLES.items()]
    key.add("toolchain", toolchain_identity(c_compiler(), tools))
    return key.hexdigest()


def _canonical(value: object) -> object:
    """A JSON-able form of an option value; dataclass fields left out of comparison (a
    codegen's `origin`, a pattern's check function) are left out here too: relaycc's own
    identity covers the functions."""
    from dataclasses import fields, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        return {"@": type(value).__name__,
                **{f.name: _canonical(getattr(value, f.name)) for f in fields(value) if f.compare}}
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda item: str(item[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, Path):
        return str(value.resolve())
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _codegen_headers(spec: CodegenSpec) -> bytes | None:
    """The text of every header a codegen's library sources include from its directories."""
    from compiler.runtime.compile_cache import included_headers

    dirs = [*spec.library.include_dirs, *spec.library.source_dirs()]
    parts = []
    for source in spec.library.sources:
        where = source.path if source.path is not None else Path(".") / source.name
        headers = included_headers(where, source.text.encode(), [Path(d) for d in dirs])
        if headers is None:
            return None
        parts += [name + b"\0" + text for name, text in headers]
    return b"\0\0".join(parts)


def _prebuilt_libraries(given: Sequence[CodegenSpec]) -> str:
    """Where each library a codegen links is found, with its size and time (a static one is
    copied into the model's library)."""
    lines = []
    for label, path in _prebuilt_library_files(given):
        if path is None:
            lines.append(f"{label}: not found")
        else:
            info = path.stat()
            lines.append(f"{label}: {path}:{info.st_size}:{info.st_mtime_ns}")
    return "\n".join(lines)


def _prebuilt_library_files(given: Sequence[CodegenSpec]) -> list[tuple[str, Path | None]]:
    """Each library the given and the built-in codegens link, and where it is found."""
    from compiler.byoc.codegen_config import builtin_names

    specs = [*given, *(s for s in (builtin(n) for n in builtin_names()) if s is not None)]
    return [(f"{spec.name} -l{library}", _library_file(library, tuple(spec.library.library_dirs)))
            for spec in specs for library in spec.library.libraries]


@lru_cache(maxsize=None)
def _library_file(name: str, library_dirs: tuple[Path, ...]) -> Path | None:
    from compiler.byoc.codegen_library import find_library

    try:
        path = find_library(name, library_dirs)
    except CompileError:
        return None
    return None if path is None else path.resolve()


class _ReusedModel(CompiledModel):
    """A build served from the whole-build cache: its options, parameters and report (read
    back from metadata.json) at hand; the rest (the IR, the C) made again by lowering when
    something asks for it, since a caller of `build` may still want them."""

    def __init__(self, options: BuildOptions, params: Mapping[str, np.ndarray], report: dict[str, object],
                 make: Callable[[], CompiledModel]):
        # Not the dataclass's __init__: the other fields are filled by `_lowered` when needed.
        self.__dict__.update(options=options, params=dict(params), report=report, _make=make)

    def _lowered(self) -> None:
        model = self.__dict__["_make"]()
        for item in fields(CompiledModel):
            self.__dict__.setdefault(item.name, getattr(model, item.name))

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") or name == "_make":
            raise AttributeError(name)
        self._lowered()
        if name not in self.__dict__:
            raise AttributeError(name)
        return self.__dict__[name]

    @property  # a class attribute on CompiledModel, so __getattr__ would never see it
    def codegens(self) -> ExternalCodegens:  # type: ignore[override]
        if "codegens" not in self.__dict__:
            self._lowered()
        return self.__dict__["codegens"]


