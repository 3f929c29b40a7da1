"""A compile request in its normal form: what the module id is the hash of, and what a worker
builds from.

Two requests that mean the same build have the same normal form: the target is one string
(a tvmc-style config object is folded into the target string and the config), the config lists
every option with its value (defaults included), and params are named by a digest of their
dtype, shape and bytes rather than by their .npz encoding, whose zip headers carry timestamps.
The compiler version is part of it, so a new compiler never serves an old build.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from compiler import __version__
from compiler.diagnostics import InputError
from compiler.byoc.codegen_config import CodegenSpec
from compiler.config_registry import ALLOWED_CFLAGS, DEFINE_FLAG, ConfigError, is_allowed_cflag
from compiler.driver import BuildOptions
from compiler.tuning_records import FORMAT as TUNING_FORMAT

REQUEST_FORMAT = "relaycc.request/1"
# The name parse and type errors give the Relay text: the request field it came in.
SOURCE_NAME = "relay"


# tvmc executor options that describe what relaycc always generates.
_EXECUTOR_FIXED = {"link-params": True, "interface-api": "c", "unpacked-api": True}


def fold_tvmc_config(
    targets: Sequence[Mapping[str, object]],
    executor: Mapping[str, object] | None,
    runtime: Mapping[str, object] | None,
    pass_config: Mapping[str, object],
) -> tuple[str, dict[str, object]]:
    """A tvmc `--config` object as (target string, config entries it implies)."""
    kinds = []
    for entry in targets:
        kind = entry.get("kind")
        if not isinstance(kind, str) or not kind.strip():
            raise InputError("every entry of target.targets needs a non-empty \"kind\"")
        extra = sorted(set(entry) - {"kind"})
        if extra:
            raise InputError(f"target {kind!r}: option {extra[0]!r} is not supported")
        kinds.append(kind.strip())
    config: dict[str, object] = {}
    if pass_config:
        config["pass_config"] = dict(pass_config)
    if executor is not None:
        options = dict(executor)
        kind = options.pop("kind", "aot")
        if kind != "aot":
            raise InputError(f"executor {kind!r} is not supported; relaycc generates an AOT executor")
        alignment = options.pop("workspace-byte-alignment", None)
        if alignment is not None:
            config["workspace_byte_alignment"] = alignment
        for name, value in options.items():
            if _EXECUTOR_FIXED.get(name, object()) != value:
                raise InputError(f"executor option {name}={value!r} is not supported")
    if runtime is not None and (runtime.get("kind", "crt") != "crt" or set(runtime) - {"kind"}):
        raise InputError("only the \"crt\" runtime without options is supported")
    return ", ".join(kinds), config


def merge_config(implied: Mapping[str, object], given: Mapping[str, object]) -> dict[str, object]:
    """The request's own `config` over what its tvmc target object implied; pass configs merge
    key by key."""
    merged = {**implied, **given}
    if "pass_config" in implied and "pass_config" in given:
        implied_pc, given_pc = implied["pass_config"], given["pass_config"]
        if isinstance(implied_pc, Mapping) and isinstance(given_pc, Mapping):
            merged["pass_config"] = {**implied_pc, **given_pc}
    return merged


def normal_target(text: str) -> str:
    return ", ".join(kind.strip() for kind in text.split(",") if kind.strip())


def codegen_specs(codegens: Sequence[Mapping[str, object]]) -> tuple[CodegenSpec, ...]:
    """The specs of codegens in request form: `{"document": ..., "sources": {name: text}}`."""
    specs = []
    for index, entry in enumerate(codegens):
        sources = entry.get("sources") or {}
        if not isinstance(sources, Mapping):
            raise InputError(f"codegens[{index}]: sources must be an object")
        specs.append(CodegenSpec.from_document(
            entry.get("document"), {str(k): str(v) for k, v in sources.items()}, origin=f"codegens[{index}]"
        ))
    return tuple(specs)


def checked_options(
    target: str, module_name: str, config: Mapping[str, object], codegens: Sequence[CodegenSpec] = ()
) -> BuildOptions:
    """Build options for the request, validated against the configuration registry
    (compiler/config_registry.py); the C flags must be allowed ones."""
    options = BuildOptions.from_config(config, target=target, module_name=module_name, codegens=codegens).validated()
    for flag in options.cflags or ():
        if not is_allowed_cflag(flag):
            raise ConfigError(f"C flag {flag!r} is not allowed; allowed: {', '.join(sorted(ALLOWED_CFLAGS))}, "
                              f"{DEFINE_FLAG}", "cflags")
    return options


def params_digest(params: Mapping[str, np.ndarray]) -> dict[str, dict[str, object]]:
    digest = {}
    for name in sorted(params):
        given = np.asarray(params[name])
        # Not the contiguous copy's shape: np.ascontiguousarray makes a 0-d array 1-d.
        array = np.ascontiguousarray(given)
        digest[name] = {
            "dtype": str(given.dtype),
            "shape": list(given.shape),
            "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
        }
    return digest


def normal_form(
    relay: str, options: BuildOptions, params: Mapping[str, np.ndarray], onnx_names: Mapping[str, str] | None = None,
    record_passes: bool = False,
) -> dict[str, object]:
    normal: dict[str, object] = {
        "format": REQUEST_FORMAT,
        "compiler_version": __version__,
        "relay": relay,
        "target": normal_target(options.target),
        "module_name": options.module_name,
        "config": config_of(options),
        "params": params_digest(params),
        # Re-written from the specs, so that defaults spelled out or left out hash the same.
        "codegens": [{"document": s.to_document(), "sources": s.library_texts()} for s in options.codegens],
    }
    if onnx_names is not None:
        # Imported from ONNX: the input names travel to the report (absent otherwise, so a
        # Relay request's id is what it always was).
        normal["onnx_names"] = dict(onnx_names)
    if record_passes:
        # Only when asked for, so that other requests keep their ids.
        normal["record_passes"] = True
    return normal


def config_of(options: BuildOptions) -> dict[str, object]:
    config: dict[str, object] = {
        "opt_level": options.opt_level,
        "pass_config": dict(options.config),
        "workspace_byte_alignment": options.workspace_byte_alignment,
    }
    if options.cflags is not None:
        config["cflags"] = list(options.cflags)
    # Only when given, so that the requests made before these options existed keep their ids.
    if options.disabled_passes:
        config["disabled_pass"] = list(options.disabled_passes)
    if options.desired_layout is not None:
        config["desired_layout"] = options.desired_layout
    if options.schedules:
        # Only what a build reads, in key order: records that differ in their notes for people
        # (times, kernel names) or in order make one module.
        config["tuning_records"] = {"format": TUNING_FORMAT, "records": [
            {"key": key, "schedule": dict(sorted(schedule.items()))} for key, schedule in sorted(options.schedules.items())]}
    return config


def build_options(normal: Mapping[str, object]) -> BuildOptions:
    """The build options a worker compiles a stored normal form with."""
    config, codegens = normal["config"], normal["codegens"]
    target, module_name = normal["target"], normal["module_name"]
    if not (isinstance(config, Mapping) and isinstance(codegens, list)
            and isinstance(target, str) and isinstance(module_name, str)):
        raise InputError("stored request is malformed")
    return BuildOptions.from_config(
        dict(config), target=target, module_name=module_name, codegens=codegen_specs(codegens)
    ).validated()
