"""The `relaycc` command line.

User errors (a bad model, a missing or unreadable file, a missing input) end the command with
exit status 1 and one line on stderr, naming the file, line and column where there is one.
Usage errors are argparse's: exit status 2.

Each command imports what it needs when it runs: `relaycc --help` and `relaycc run` start
without numpy's full import, the compiler's passes or the service.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from compiler import __version__
from compiler.diagnostics import CompileError, InputError

if TYPE_CHECKING:
    import numpy as np

    from compiler.driver import BuildOptions, CompiledModel
    from compiler.progress_bar import CompileProgress

STDIO = "-"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["remote"]:  # the service's client has its own parser, imported only when used
        from service.remote_cli import main as remote_main

        return remote_main(argv[1:])
    args = _build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except CompileError as err:
        print(err.one_line(), file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`relaycc ops | head`): stop quietly, as other tools do, and keep
        # Python's final flush of stdout from failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relaycc", description="Compile and run TVM Relay text models."
    )
    parser.add_argument("--version", action="version", version=f"relaycc {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    interpret = commands.add_parser(
        "interpret", help="run a model with the reference interpreter"
    )
    interpret.add_argument("model", type=Path, metavar="MODEL.relay", help="the Relay text model to run")
    interpret.add_argument(
        "--inputs", type=Path, required=True, metavar="INPUTS.npz",
        help="arrays named after @main's parameters (without %%); - reads the .npz from stdin",
    )
    interpret.add_argument(
        "-o", "--output", type=Path, required=True, metavar="OUTPUTS.npz",
        help="where to save the results as out0, out1, ...; - writes the .npz to stdout",
    )
    interpret.add_argument(
        "--params", type=Path, metavar="PARAMS.npz",
        help="arrays bound to @main's parameters as constants",
    )
    interpret.set_defaults(handler=_interpret)

    for name, help_text in (
        ("compile", "compile a model to C and build lib<name>.so with its artifacts"),
        ("lower", "run the pipeline up to LowerTE: the metadata report and lowered IR, no C"),
    ):
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("model", type=Path, metavar="MODEL.relay",
                         help="Relay text, or an ONNX model (.onnx), imported first")
        sub.add_argument("-o", "--output", type=Path, required=True, metavar="OUTDIR",
                         help="the directory the artifacts are written to (created if missing)")
        _add_build_flags(sub)
        sub.add_argument("--no-stored-records", action="store_true",
                         help="tile every kernel by the rules, not by the records `relaycc tune` stored for this "
                              "machine in the cache directory")
        sub.add_argument("--dump-code", metavar="relay,tir,c",
                         help="also write OUTDIR/<module-name>.relay (fused Relay), .tir (loop IR) "
                              "and/or .c (every C source in one file)")
        sub.set_defaults(handler=_compile, executor=(name == "compile"))

    tune = commands.add_parser(
        "tune", help="measure alternatives to the tiling rules of a model's kernels on this machine; "
                     "write the winners as tuning records for compile --tuning-records")
    tune.add_argument("model", type=Path, metavar="MODEL.relay",
                      help="Relay text, or an ONNX model (.onnx), imported first as compile imports it")
    tune.add_argument("-o", "--output", type=Path, metavar="RECORDS.json",
                      help="also write the records to this file (they are always stored in the cache "
                           "directory, for later builds on this machine)")
    _add_build_flags(tune)
    tune.add_argument("--repeat", type=int, default=10, metavar="N",
                      help="profiled runs of each candidate build, taking turns (default 10); each kernel "
                           "keeps its least time")
    tune.add_argument("--threads", type=int, metavar="N",
                      help="threads the kernels are measured on (default: every core)")
    tune.set_defaults(handler=_tune, executor=True, codegen=[], dump_code=None, no_stored_records=True)

    importer = commands.add_parser("import", help="convert an ONNX model to Relay text")
    importer.add_argument("model", type=Path, metavar="MODEL.onnx", help="the ONNX model to convert")
    importer.add_argument("-o", "--output", type=Path, required=True, metavar="MODEL.relay",
                          help="where the Relay text is written")
    importer.add_argument("--keep-params", action="store_true",
                          help="leave the initializers as @main parameters instead of constants")
    importer.add_argument("--params-out", type=Path, metavar="PARAMS.npz",
                          help="save the initializers kept as parameters here (implies --keep-params)")
    importer.set_defaults(handler=_import)
    config_cmd = commands.add_parser(
        "config", help="list the configuration keys: pass_config entries, opt levels, allowed C flags"
    )
    config_cmd.add_argument("--json", action="store_true", help="print the registry as JSON")
    config_cmd.set_defaults(handler=_config)

    ops_cmd = commands.add_parser("ops", help="list the supported operators with their attributes and defaults")
    ops_cmd.add_argument("names", nargs="*", metavar="OP", help="only these operators (default: all)")
    ops_cmd.add_argument("--json", action="store_true", help="print the catalog as JSON")
    ops_cmd.set_defaults(handler=_ops)

    inspect = commands.add_parser(
        "inspect", help="describe a model: inputs, outputs, operators, functions, whether it compiles"
    )
    inspect.add_argument("model", type=Path, metavar="MODEL.relay", help="the Relay text model to describe")
    inspect.add_argument("--target", default="c", help='target to check compilation for (default "c")')
    inspect.add_argument("--json", action="store_true", help="print the description as JSON")
    inspect.set_defaults(handler=_inspect)

    run = commands.add_parser("run", help="run a compiled model directory with numpy inputs")
    run.add_argument("outdir", type=Path, metavar="OUTDIR", help="a directory built by `relaycc compile`")
    run.add_argument("--inputs", type=Path, metavar="INPUTS.npz",
                     help="the model's inputs by name (- reads the .npz from stdin); without it, inputs "
                          "are made up (--fill-mode)")
    run.add_argument("-o", "--output", type=Path, metavar="OUTPUTS.npz",
                     help="where to save the outputs (out0, out1, ...; - writes the .npz to stdout); "
                          "without it, nothing is saved")
    run.add_argument("--repeat", type=int, metavar="N",
                     help="run N times and print {\"median_us\": ..., \"min_us\": ...} as one JSON line")
    run.add_argument("--fill-mode", choices=("random", "zeros", "ones"), default=None,
                     help="without --inputs: fill every input with random values (the default), zeros or ones")
    run.add_argument("--threads", type=int, metavar="N",
                     help="threads for the model's kernels, BLAS calls included (default: every core)")
    run.add_argument("--profile", action="store_true",
                     help="time every kernel and print a table (kernel, calls, mean µs per run, %% of the run)")
    run.set_defaults(handler=_run)

    serve = commands.add_parser("serve", help="run the HTTP compile service")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8000)")
    serve.add_argument(
        "--workers", type=int, metavar="N",
        help="number of compile worker processes (default: one per CPU)",
    )
    serve.set_defaults(handler=_serve)
    # Listed here for --help; parsed and run by service/remote_cli.py (see main).
    commands.add_parser("remote", help="compile, run and list modules on a relaycc service (relaycc remote -h)",
                        add_help=False)
    return parser


def _add_build_flags(sub: argparse.ArgumentParser) -> None:
    """The flags that decide what a build makes of a model (compile, lower, tune)."""
    sub.add_argument("--target", default="c", help='external codegens first, the host last (default "c")')
    sub.add_argument("--module-name", default="default", help="name used in C symbols (default: default)")
    sub.add_argument("--params", type=Path, metavar="PARAMS.npz",
                     help="arrays bound to @main's parameters as constants at compile time")
    sub.add_argument("--config", type=Path, metavar="CONFIG.json",
                     help="a JSON object of opt_level, pass_config, cflags, workspace_byte_alignment, "
                          "disabled_pass, desired_layout (`relaycc config` lists them); the flags "
                          "below override it")
    if sub.prog.split()[-1] != "tune":
        sub.add_argument("--codegen", type=Path, action="append", default=[], metavar="CODEGEN.json",
                         help="an external codegen described in JSON (repeatable); one not named in "
                              "--target is used after those that are")
    sub.add_argument("--pass-config", action="append", default=[], metavar="KEY=VALUE",
                     help="a pass_config entry, the value read as the key's type (repeatable; "
                          "`relaycc config` lists the keys)")
    sub.add_argument("--opt-level", type=int, metavar="N",
                     help="0 to 4 (default 3): passes above it are skipped")
    sub.add_argument("--disabled-pass", action="append", default=[], metavar="NAME[,NAME]",
                     help="skip these passes (repeatable): AlterOpLayout, ConvertLayout, "
                          "DeadCodeElimination, DynamicToStatic, FoldConstant, FoldScaleAxis, FuseOps")
    sub.add_argument("--desired-layout", choices=("NCHW", "NHWC"),
                     help="compute the host's nn.conv2d in this data layout (ConvertLayout); "
                          "codegens choose theirs in their passes")
    sub.add_argument("--input-shapes", metavar="'x:[1,3,224,224] y:[8]'",
                     help="concrete shapes for @main's inputs, fixing their ? dims at build time")
    sub.add_argument("--tuning-records", type=Path, metavar="RECORDS.json",
                     help="kernel schedules measured by `relaycc tune`; kernels the file does not "
                          "name keep the rules' tiling")


def _interpret(args: argparse.Namespace) -> int:
    model = _existing_file(args.model)
    inputs = load_arrays(args.inputs)
    params = load_arrays(args.params) if args.params is not None else None

    # Imported here so that `relaycc serve` and `--help` do not load the whole compiler.
    from compiler.parser import parse_file
    from compiler.runtime.interpreter import run_main

    outputs = run_main(parse_file(model), inputs, params)
    save_outputs(args.output, outputs)
    return 0


def _compile(args: argparse.Namespace) -> int:
    model = _existing_file(args.model)
    front = _front_key(args, model)
    if front is not None and _served_from_front(front, args):
        return 0
    params = load_arrays(args.params) if args.params is not None else None
    config = load_json(args.config) if args.config is not None else {}

    from compiler.byoc.codegen_config import CodegenSpec
    from compiler.driver import BuildOptions

    codegens = [CodegenSpec.from_json_file(path) for path in args.codegen]
    options = _build_options(args, config, codegens)
    dump = _dump_kinds(args.dump_code)
    try:
        data = model.read_bytes()
    except OSError as err:
        raise InputError(f"{model}: cannot read: {err}") from err
    from compiler.driver import planned_passes
    from compiler.progress_bar import compile_progress

    with compile_progress(planned_passes(options, params=bool(params))) as bar:
        _build_model(model, data, options, params, args, bar, dump, front)
    return 0


def _build_options(args: argparse.Namespace, config: dict[str, object], codegens: Sequence[object] = ()) -> object:
    """The BuildOptions of the build flags (`_add_build_flags`) over `config`."""
    from compiler.driver import BuildOptions

    options = BuildOptions.from_config(
        _with_flags(config, args), target=args.target, module_name=args.module_name,
        codegens=codegens,  # type: ignore[arg-type]  # CodegenSpecs, typed loosely to keep the import lazy
    )
    if args.input_shapes is not None:
        from compiler.passes.specialize_inputs import parse_input_shapes

        options = dataclasses.replace(options, input_shapes=parse_input_shapes(args.input_shapes))
    if args.tuning_records is not None:
        from compiler.tuning_records import load_records

        options = dataclasses.replace(options, schedules=load_records(_existing_file(args.tuning_records)))
    elif _uses_stored_records(args, config):
        options = dataclasses.replace(options, schedules=_stored_schedules())
    return options


def _uses_stored_records(args: argparse.Namespace, config: Mapping[str, object]) -> bool:
    """Whether a build takes the records stored for this machine: it is given none of its own
    (flag or config), may (no --no-stored-records; tune measures against the rules) and has a
    cache directory."""
    from compiler.runtime.compile_cache import CompileCache

    return (args.tuning_records is None and "tuning_records" not in config and not args.no_stored_records
            and CompileCache.from_environment() is not None)


def _stored_schedules() -> dict[str, dict[str, object]]:
    """The schedules stored for this machine (runtime/tuning_store.py); none, with a warning,
    when the stored document is not a valid one."""
    from compiler.runtime.compile_cache import CompileCache
    from compiler.runtime.tuning_store import store_path, stored_document
    from compiler.tuning_records import schedules_from

    cache = CompileCache.from_environment()
    assert cache is not None
    document = stored_document(cache.root)
    if document is None:
        return {}
    try:
        return schedules_from(document, str(store_path(cache.root)))
    except InputError as err:
        print(f"relaycc: warning: stored tuning records ignored: {err}", file=sys.stderr)
        return {}


def _tune(args: argparse.Namespace) -> int:
    model = _existing_file(args.model)
    if args.repeat < 1:
        raise InputError(f"--repeat must be at least 1, got {args.repeat}")
    if args.threads is not None and args.threads < 1:
        raise InputError(f"--threads must be at least 1, got {args.threads}")
    from compiler.runtime.compile_cache import CompileCache

    if args.output is None and CompileCache.from_environment() is None:
        raise InputError("relaycc tune: the cache directory is off (RELAYCC_CACHE_DIR), so the records "
                         "need a file: give -o RECORDS.json")
    params = load_arrays(args.params) if args.params is not None else None
    config = load_json(args.config) if args.config is not None else {}
    options = _build_options(args, config)
    from compiler.tuning import tune

    text, source_name = _model_text(model)
    document = tune(text, options, params, source_name=source_name, repeat=args.repeat, threads=args.threads,
                    log=lambda line: print(f"relaycc tune: {line}", file=sys.stderr))
    from compiler.runtime.tuning_store import remember

    cache = CompileCache.from_environment()
    kept = []
    if cache is not None:
        kept.append(str(remember(cache.root, document)))
    if args.output is not None:
        args.output.write_text(json.dumps(document, indent=1) + "\n")
        kept.append(str(args.output))
    records = document["records"]
    assert isinstance(records, list)
    for record in records:
        rule, us = float(record["rule_us"]), float(record["us"])
        choice = ", ".join(f"{k}={v}" for k, v in record["schedule"].items()) or "rules"
        print(f"{record['kernel'][-60:]:60s} {rule:10.1f} us -> {us:10.1f} us ({us / rule:.3f})  {choice}")
    changed = sum(1 for r in records if r["schedule"])
    print(f"{changed} of {len(records)} kernels changed; records in {' and '.join(kept)}")
    return 0


def _model_text(model: Path) -> tuple[str, str]:
    """A Relay text model's text and source name; ONNX is imported first (its weights stay
    constants in the text), as `compile` imports it, so its kernels have the same keys."""
    try:
        data = model.read_bytes()
    except OSError as err:
        raise InputError(f"{model}: cannot read: {err}") from err
    if is_onnx(model, data):
        from compiler.frontend.onnx import from_onnx, load_model
        from compiler.parser.printer import astext

        return astext(from_onnx(load_model(data, str(model))).module), str(model)
    try:
        return data.decode("utf-8"), str(model)
    except UnicodeDecodeError as err:
        raise InputError(f"{model}: not UTF-8 text: {err}") from err


def _front_key(args: argparse.Namespace, model: Path) -> str | None:
    """The command line's key in front of the whole-build cache (runtime/front_cache.py), read
    without importing the compiler; None when there is no cache, a file cannot be read (the
    build reports it), or `--codegen` documents are given (their libraries are read through the
    compiler)."""
    from compiler.runtime.compile_cache import CompileCache

    cache = CompileCache.from_environment()
    if args.codegen or cache is None:
        return None
    from compiler.runtime.front_cache import front_key

    parts: list[tuple[str, bytes | str]] = [
        ("command", "compile" if args.executor else "lower"),
        ("flags", json.dumps([args.target, args.module_name, args.pass_config, args.opt_level, args.disabled_pass,
                              args.desired_layout, args.input_shapes, args.dump_code, args.no_stored_records])),
        ("model name", str(model)),
    ]
    if args.tuning_records is None and not args.no_stored_records:
        from compiler.runtime.tuning_store import stored_bytes

        parts.append(("stored tuning records", stored_bytes(cache.root)))
    try:
        parts.append(("model", model.read_bytes()))
        for label, path in (("params", args.params), ("config", args.config),
                            ("tuning records", args.tuning_records)):
            parts.append((label, b"" if path is None else Path(path).read_bytes()))
    except OSError:
        return None
    return front_key(parts)


def _served_from_front(front: str, args: argparse.Namespace) -> bool:
    """Whether the build the front key points at was put into OUTDIR."""
    from compiler.runtime.build_cache import BuildCache
    from compiler.runtime.compile_cache import CompileCache
    from compiler.runtime.front_cache import FrontCache

    cache = CompileCache.from_environment()
    assert cache is not None  # _front_key gives no key without one
    key = FrontCache(cache.root).lookup(front)
    try:
        return key is not None and BuildCache(cache.root).restore_build(key, args.output, args.module_name) is not None
    except OSError:
        return False  # an OUTDIR that cannot be written: the build says so, with its own message


def _build_model(
    model: Path, data: bytes, options: BuildOptions, params: dict[str, np.ndarray] | None,
    args: argparse.Namespace, bar: CompileProgress | None, dump: list[str], front: str | None = None,
) -> CompiledModel:
    from compiler.runtime.compile_cache import CompileCache

    instruments = (bar,) if bar is not None else ()
    c_progress = bar.c_files if bar is not None else None
    # The dumps are part of the build, so a cached build has them too.
    if is_onnx(model, data):
        from compiler.driver import build_onnx

        return build_onnx(data, args.output, options, params, source_name=str(model), executor=args.executor,
                          cache=CompileCache.from_environment(), instruments=instruments, c_progress=c_progress,
                          dump_kinds=dump, front_key=front)
    from compiler.driver import build
    from compiler.parser import decode_source

    text = decode_source(data, str(model))  # not UTF-8: located at the first bad byte
    return build(text, args.output, options, params, source_name=str(model), executor=args.executor,
                 cache=CompileCache.from_environment(), instruments=instruments, c_progress=c_progress,
                 dump_kinds=dump, front_key=front)


def _with_flags(config: dict[str, object], args: argparse.Namespace) -> dict[str, object]:
    """The --config object with the command line's flags over it (pass configs merge by key)."""
    from compiler.config_registry import parse_pass_config_item

    merged = dict(config)
    if args.opt_level is not None:
        merged["opt_level"] = args.opt_level
    if args.pass_config:
        given = merged.get("pass_config", {})
        pass_config = dict(given) if isinstance(given, dict) else {}
        pass_config.update(parse_pass_config_item(item) for item in args.pass_config)
        merged["pass_config"] = pass_config
    if args.disabled_pass:
        given = merged.get("disabled_pass", [])
        names = [n.strip() for item in args.disabled_pass for n in item.split(",") if n.strip()]
        merged["disabled_pass"] = [*(given if isinstance(given, list) else []), *names]
    if args.desired_layout is not None:
        merged["desired_layout"] = args.desired_layout
    return merged


def _dump_kinds(text: str | None) -> list[str]:
    if text is None:
        return []
    from compiler.driver import check_dump_kinds

    kinds = [k.strip() for k in text.split(",") if k.strip()]
    check_dump_kinds(kinds)  # before the build, not after it
    return kinds


def _config(args: argparse.Namespace) -> int:
    from compiler.config_registry import catalog

    registry = catalog()
    if args.json:
        print(json.dumps(registry, indent=1))
        return 0
    opt = registry["opt_level"]
    assert isinstance(opt, dict)
    print(f"opt_level: {opt['minimum']} to {opt['maximum']} (default {opt['default']})")
    print("\nconfig keys (--config CONFIG.json, or a compile request's config):")
    for entry in registry["config"]:  # type: ignore[attr-defined]
        print(f"  {entry['name']:<26} {entry['type']:<7} {json.dumps(entry['default']):<8} {entry['help']}")
    print("\npass_config keys (--pass-config KEY=VALUE):")
    for entry in registry["pass_config"]:  # type: ignore[attr-defined]
        print(f"  {entry['name']:<46} {entry['type']:<5} {json.dumps(entry['default']):<18} "
              f"{entry['support']:<8} {entry['help']}")
    print("\nC flags a compile request over HTTP may choose (the command line takes any):")
    print("  " + " ".join(registry["allowed_cflags"]))  # type: ignore[arg-type]
    return 0


def is_onnx(path: Path, data: bytes) -> bool:
    """An ONNX model by its suffix or its first byte: a serialized ModelProto starts with the
    tag of field 1 (ir_version), 0x08, which no Relay text (nor UTF-8 BOM) starts with."""
    return path.suffix.lower() == ".onnx" or data[:1] == b"\x08"


def _import(args: argparse.Namespace) -> int:
    model = _existing_file(args.model)
    keep_params = args.keep_params or args.params_out is not None

    from compiler.frontend.onnx import from_onnx, load_model
    from compiler.parser.printer import astext

    imported = from_onnx(load_model(model), keep_params=keep_params)
    text = astext(imported.module)
    try:
        args.output.write_text(text)
    except OSError as err:
        raise InputError(f"{args.output}: cannot write: {err.strerror}") from err
    if args.params_out is not None:
        import numpy as np

        try:
            with open(args.params_out, "wb") as stream:
                np.savez(stream, **imported.params)
        except OSError as err:
            raise InputError(f"{args.params_out}: cannot write: {err.strerror}") from err
    for relay, onnx_name in imported.onnx_names.items():
        print(f"input %{relay}: ONNX {onnx_name!r}", file=sys.stderr)
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.inputs is not None and args.fill_mode is not None:
        raise InputError("--fill-mode makes up inputs; it cannot be given with --inputs")
    if args.threads is not None and args.threads < 1:
        raise InputError(f"--threads must be at least 1, got {args.threads}")
    if str(args.output) == STDIO and (args.repeat is not None or args.profile):
        raise InputError("-o - writes the outputs to stdout; it cannot be given with --repeat or --profile, "
                         "which print there too")
    inputs = load_arrays(args.inputs) if args.inputs is not None else None

    from compiler.runtime.fill import fill_inputs
    from compiler.runtime.module import CompiledModule

    module = CompiledModule(args.outdir)
    if inputs is None:
        inputs = fill_inputs(module.inputs, args.fill_mode or "random")
    if args.profile:
        profile = module.profile(inputs, repeat=args.repeat or 1, threads=args.threads)
        result = profile.result
        _print_profile(profile.rows(module.report.get("functions")), sum(result.times_us) / len(result.times_us))
    else:
        result = module.run(inputs, repeat=args.repeat or 1, threads=args.threads)
    if args.output is not None:
        save_outputs(args.output, result.outputs)
    if args.repeat is not None:
        print(json.dumps({"median_us": round(result.median_us, 3), "min_us": round(result.min_us, 3)}))
    return 0


def _print_profile(rows: Sequence[dict[str, object]], run_us: float) -> None:
    width = max([len("kernel")] + [len(str(row["kernel"])) for row in rows])
    shapes = ["x".join(str(d) for d in row["shape"]) if row.get("shape") else "" for row in rows]  # type: ignore[union-attr]  # a list
    shape_width = max([len("shape"), *map(len, shapes)])
    print(f"{'kernel':<{width}}  {'shape':<{shape_width}}  {'calls':>5}  {'us':>12}  {'%':>6}  {'GFLOP/s':>8}")
    for row, shape in zip(rows, shapes):
        rate = f"{row['gflops']:.1f}" if row.get("gflops") is not None else ""
        print(f"{row['kernel']:<{width}}  {shape:<{shape_width}}  {row['calls']:>5}  {row['us']:>12.1f}  "
              f"{row['percent']:>6.2f}  {rate:>8}")
    # Means, as the kernels' times are: a run the machine interrupted counts in both.
    print(f"{'whole run (mean)':<{width}}  {'':<{shape_width}}  {'':>5}  {run_us:>12.1f}  {100.0:>6.2f}")


def _ops(args: argparse.Namespace) -> int:
    from compiler import ops  # noqa: F401  registers every family
    from compiler.ops.catalog import catalog

    entries = catalog()
    if args.names:
        known = {e["name"] for e in entries}
        unknown = [n for n in args.names if n not in known]
        if unknown:
            raise InputError(f"unknown operator {unknown[0]!r}; `relaycc ops` lists them all")
        entries = [e for e in entries if e["name"] in args.names]
    if args.json:
        print(json.dumps(entries, indent=1))
        return 0
    for entry in entries:
        attrs = ", ".join(
            f"{a['name']}" + ("" if a["required"] else f"={json.dumps(a['default'])}")
            for a in entry["attrs"]  # type: ignore[attr-defined]
        )
        print(f"{entry['name']:<36} {entry['family']:<14} {entry['pattern']:<21} {attrs}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    model = _existing_file(args.model)

    from compiler.driver import BuildOptions
    from compiler.inspection import inspect_module, render
    from compiler.parser import parse_file

    info = inspect_module(parse_file(str(model)), BuildOptions(target=args.target))
    print(json.dumps(info, indent=1) if args.json else render(info))
    return 0


def load_json(path: Path) -> dict[str, object]:
    _existing_file(path)
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {err}") from err
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from err
    if not isinstance(value, dict):
        raise InputError(f"{path}: expected a JSON object")
    return value


def _check_store_free(settings: object) -> None:
    """Refuse at once, in one line, to serve a store another service holds. The app takes the
    lock itself when it starts (service/state.py) and holds it; this check only spares the
    operator the server's traceback in the common case."""
    from service.settings import Settings
    from service.state import acquire_lock
    from service.store.module_store import DirectoryStore, StoreError, StoreLock, StoreLocked, open_store

    assert isinstance(settings, Settings)
    store = open_store(settings.store_location(), cache=settings.store_cache)
    exclusive = settings.queue == "embedded"
    try:
        store.ensure()
        if isinstance(store, DirectoryStore):
            StoreLock.acquire(store.root, exclusive=exclusive, queue=settings.queue, record=False).release()
        else:
            acquire_lock(store, exclusive=exclusive, queue=settings.queue).release()
    except StoreLocked as err:
        raise InputError(str(err)) from None
    except StoreError as err:
        raise InputError(f"{store.location}: {err}") from None


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from service.settings import get_settings

    # The app reads its options from Settings, whose source is the environment; passing the
    # command line options there keeps one way of configuring the service.
    for name, value in (("HOST", args.host), ("PORT", args.port), ("WORKERS", args.workers)):
        if value is not None:
            os.environ[f"RELAYCC_{name}"] = str(value)
    get_settings.cache_clear()
    try:
        settings = get_settings()
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(map(str, problem['loc']))}: {problem['msg']}" for problem in err.errors()
        )
        raise InputError(f"invalid service settings: {problems}") from err
    _check_store_free(settings)
    # uvicorn would believe X-Forwarded-For from 127.0.0.1 and rewrite the client address
    # before the app sees it; the app decides whom to believe (RELAYCC_TRUSTED_PROXIES).
    from service.log_format import uvicorn_log_config

    # Text: uvicorn's own look, as before; json: every logger of the API process in one format.
    logging = {"log_config": uvicorn_log_config("json")} if settings.log_format == "json" else {}
    uvicorn.run(
        "service.app:create_app", factory=True, host=settings.host, port=settings.port, proxy_headers=False,
        timeout_keep_alive=settings.keep_alive_seconds, **logging,
    )
    return 0


def _existing_file(path: Path) -> Path:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    return path


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz file by name (`-`: read from stdin); an unreadable file is an
    InputError. Any readable file will do, not only a regular one (`/dev/stdin`, a pipe)."""
    import numpy as np

    if str(path) == STDIO:
        data = sys.stdin.buffer.read()
        path = Path("<stdin>")
    else:
        if not path.exists():
            raise InputError(f"{path}: no such file")
        try:
            data = path.read_bytes()
        except OSError as err:
            raise InputError(f"{path}: cannot read arrays: {err.strerror or err}") from err
    try:
        loaded = np.load(io.BytesIO(data), allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise InputError(f"{path}: cannot read arrays: {err}") from err
    # np.load hands back a bare array for a .npy file; inputs must be named.
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise InputError(f"{path}: not an .npz archive")
    with loaded:
        try:
            return {name: loaded[name] for name in loaded.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
            raise InputError(f"{path}: cannot read arrays: {err}") from err


def save_outputs(path: Path, outputs: Sequence[np.ndarray]) -> None:
    """Saves the results as out0, out1, ... at exactly `path` (np.savez would add `.npz`); `-`
    writes the archive to stdout."""
    import numpy as np

    from compiler.backend.interface_c import result_names

    arrays = {name: np.asarray(value) for name, value in zip(result_names(len(outputs)), outputs)}
    if str(path) == STDIO:
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        sys.stdout.flush()
        sys.stdout.buffer.write(buffer.getvalue())
        sys.stdout.buffer.flush()
        return
    try:
        with open(path, "wb") as stream:
            np.savez(stream, **arrays)
    except OSError as err:
        raise InputError(f"{path}: cannot write outputs: {err.strerror}") from err
