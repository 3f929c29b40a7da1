"""Every configuration key a build accepts, in one table: what `--config`, `--pass-config`, a
compile request's `config` and `relaycc config` / `GET /targets` all read.

A pass_config key is one of three kinds:
* `used`: relaycc reads it and it changes the build;
* `ignored`: TVM registers it (TVM_REGISTER_PASS_CONFIG_OPTION) and configs written for `tvmc`
  carry it; relaycc already does what the key asks for, or the key governs machinery relaycc
  does not have, so the value is checked against TVM's type and otherwise has no effect (each
  entry's help says why that is safe);
* `refused`: TVM's key asks for something relaycc does not do; accepting it would silently
  change nothing, so a value other than TVM's default is an error that says so (the default
  itself asks for nothing and is accepted, as tvmc configs often spell defaults out).

Anything else is an unknown key, an error that names it and suggests the nearest known one, as
`tvmc` refuses unknown keys. This module is a leaf (it imports only diagnostics), so every layer
may read it; the passes keep reading their keys by name and a test holds them to this table.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from compiler.diagnostics import InputError

ValueType = Literal["bool", "int", "str", "object", "list"]
Support = Literal["used", "ignored", "refused"]

OPT_LEVEL_MIN, OPT_LEVEL_MAX, OPT_LEVEL_DEFAULT = 0, 4, 3
WORKSPACE_ALIGNMENT_DEFAULT = 16


class ConfigError(InputError):
    """A configuration key that is unknown, refused or has a value of the wrong type; `key` is
    the key as the user wrote it (`pass_config.<name>` for pass config entries)."""

    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: ValueType
    default: object
    help: str
    support: Support = "used"
    minimum: int | None = None

    def as_json(self) -> dict[str, object]:
        entry: dict[str, object] = {"name": self.name, "type": self.type, "default": self.default,
                                    "support": self.support, "help": self.help}
        if self.minimum is not None:
            entry["minimum"] = self.minimum
        return entry


def _used(name: str, type_: ValueType, default: object, help_: str, minimum: int | None = None) -> ConfigKey:
    return ConfigKey(name, type_, default, help_, "used", minimum)


def _ignored(name: str, type_: ValueType, default: object, why: str) -> ConfigKey:
    return ConfigKey(name, type_, default, f"TVM's key, accepted and ignored: {why}", "ignored")


def _refused(name: str, type_: ValueType, default: object, why: str) -> ConfigKey:
    return ConfigKey(name, type_, default, f"TVM's key, refused unless {json.dumps(default)} (TVM's default): {why}",
                     "refused")


PASS_CONFIG: dict[str, ConfigKey] = {k.name: k for k in (
    _used("relay.FuseOps.max_depth", "int", 256,
          "most operators fused into one kernel (TVM's kMaxFusedOps)", minimum=1),
    _used("relay.FuseOps.link_params", "bool", False,
          "fuse constants into the kernels that use them instead of passing them as arguments"),
    _used("tir.parallel", "bool", True,
          "relaycc's own: allow OpenMP parallel loops in the kernels"),
    _used("tir.vector_lanes", "int", None,
          "relaycc's own: float32 lanes of the widest vector unit the kernels are tiled for; "
          "default: what gcc makes of an `omp simd` loop on the build machine", minimum=1),
    _used("relaycc.max_tensor_bytes", "int", 1 << 32,
          "relaycc's own: largest tensor a model may have, in bytes", minimum=1),
    _ignored("relay.backend.use_auto_scheduler", "bool", False,
             "relaycc reads no TVM tuning logs; its kernels follow their tiling rules, or the records "
             "of `relaycc tune` given with --tuning-records"),
    _ignored("relay.backend.use_meta_schedule", "bool", False,
             "relaycc reads no TVM tuning logs; its kernels follow their tiling rules, or the records "
             "of `relaycc tune` given with --tuning-records"),
    _ignored("tir.noalias", "bool", True,
             "relaycc's kernels never receive aliased buffers and always declare them `restrict`"),
    _ignored("tir.usmp.enable", "bool", True,
             "relaycc always plans every intermediate buffer statically into one workspace"),
    _ignored("relay.fallback_device_type", "int", 1,
             "there is one device (the CPU); device annotations are dropped"),
    _refused("tir.disable_vectorize", "bool", False, "relaycc's kernels are tiled for the vector unit "
             "and carry `omp simd`; for scalar code build with cflags without -fopenmp-simd and with "
             "-fno-tree-vectorize"),
    _refused("tir.disable_assert", "bool", False, "relaycc's generated C keeps its shape and status checks"),
    _refused("tir.instrument_bound_checkers", "bool", False, "relaycc does not instrument buffer accesses"),
    _refused("tir.disable_storage_rewrite", "bool", False, "relaycc's memory planner has no switch; "
             "the plan is in metadata.json"),
    _refused("tir.usmp.algorithm", "str", "greedy_by_size",
             "relaycc has one memory planner and no choice of algorithm"),
    _refused("relay.ToMixedPrecision.keep_orig_output_dtype", "bool", False, "relaycc has no ToMixedPrecision pass"),
    _refused("relay.backend.use_meta_schedule_dispatch", "int", 0,
             "relaycc reads no meta-schedule database; `relaycc tune` writes records of its own"),
    _refused("relay.backend.tir_converter", "str", "default", "relaycc lowers with its own rules only"),
)}

# Top-level keys of a `--config` object (and of a compile request's `config`).
BUILD_CONFIG: dict[str, ConfigKey] = {k.name: k for k in (
    _used("opt_level", "int", OPT_LEVEL_DEFAULT,
          f"{OPT_LEVEL_MIN} to {OPT_LEVEL_MAX}: passes above it are skipped (0: no fusion, "
          "2: FoldConstant, 3: layout passes)", minimum=OPT_LEVEL_MIN),
    ConfigKey("pass_config", "object", {}, "an object of pass_config keys (below) and their values"),
    ConfigKey("cflags", "list", None, "a list of C flags replacing the defaults (-fwrapv always added); "
              "over HTTP only the allowed ones"),
    _used("workspace_byte_alignment", "int", WORKSPACE_ALIGNMENT_DEFAULT,
          "alignment of the planned workspace buffers, a power of two", minimum=1),
    ConfigKey("disabled_pass", "list", [], "passes skipped by name (tvmc's --disabled-pass): "
              "AlterOpLayout, ConvertLayout, DeadCodeElimination, DynamicToStatic, Float16ComputeInFloat32, "
              "FoldConstant, FoldScaleAxis, FuseOps"),
    ConfigKey("desired_layout", "str", None, "NCHW or NHWC: the data layout of the host's nn.conv2d "
              "(tvmc's --desired-layout; ConvertLayout)"),
    ConfigKey("tuning_records", "object", None, "a records document of `relaycc tune` "
              "(format relaycc.tuning/1): kernel schedules by kernel key (tvmc's --tuning-records)"),
)}

# C flags a compile request may choose over HTTP; anything else could read or write files on
# the server (`-o`, `@file`, `-fplugin=`, `-include`) or change what is linked. The CLI runs as
# its user and takes any flag.
ALLOWED_CFLAGS = frozenset({
    "-O0", "-O1", "-O2", "-O3", "-Os", "-Ofast",
    "-march=native", "-mtune=native",
    # Portable builds, for a fleet of other machines than the build server: the x86-64 levels
    # (baseline SSE2; v2 SSE4.2; v3 AVX2 and FMA; v4 AVX-512) and the vector width gcc prefers.
    "-march=x86-64", "-march=x86-64-v2", "-march=x86-64-v3", "-march=x86-64-v4", "-mtune=generic",
    "-mprefer-vector-width=256", "-mprefer-vector-width=512",
    "-std=c99", "-std=c11", "-std=gnu99", "-std=gnu11", "-std=c17", "-std=gnu17",
    "-fPIC", "-shared", "-fopenmp", "-fopenmp-simd", "-ffast-math", "-fno-fast-math", "-fno-math-errno",
    "-funroll-loops", "-fno-tree-vectorize", "-g", "-g0", "-w", "-Wall", "-Wextra",
})
DEFINE_FLAG = "-DNAME[=VALUE]"


def suggestion(name: str, known: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the nearest known name, or nothing when none is near."""
    near = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def check_pass_config(config: Mapping[str, object]) -> dict[str, object]:
    """The pass config with its values checked against the table (TVM's Bool also takes 0 and
    1, which become booleans); the first bad key is a ConfigError naming it."""
    checked: dict[str, object] = {}
    for name, value in config.items():
        key = PASS_CONFIG.get(name)
        if key is None:
            raise ConfigError(f"unknown pass_config key {name!r}{suggestion(name, PASS_CONFIG)}; "
                              "`relaycc config` lists them", f"pass_config.{name}")
        checked[name] = check_value(key, value, f"pass_config key {name!r}", f"pass_config.{name}")
        if key.support == "refused" and checked[name] != key.default:
            raise ConfigError(f"pass_config key {name!r} is not supported: {key.help}", f"pass_config.{name}")
    return checked


def check_value(key: ConfigKey, value: object, what: str, where: str) -> object:
    if key.type == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ConfigError(f"{what} takes a boolean (true or false), got {value!r}", where)
    if key.type == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{what} takes an integer, got {value!r}", where)
        if key.minimum is not None and value < key.minimum:
            raise ConfigError(f"{what} must be at least {key.minimum}, got {value}", where)
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{what} takes a string, got {value!r}", where)
    return value


def parse_pass_config_item(text: str) -> tuple[str, object]:
    """`KEY=VALUE` from the command line, the value parsed to the key's type."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ConfigError(f"--pass-config takes KEY=VALUE, got {text!r}", "pass_config")
    key = PASS_CONFIG.get(name)
    if key is None:
        check_pass_config({name: raw})  # raises the same error as in a config file
        raise AssertionError("unreachable")
    raw = raw.strip()
    value: object = raw
    if key.type == "bool":
        words = {"true": True, "1": True, "yes": True, "on": True,
                 "false": False, "0": False, "no": False, "off": False}
        if raw.lower() not in words:
            raise ConfigError(f"pass_config key {name!r} takes a boolean (true or false), got {raw!r}",
                              f"pass_config.{name}")
        value = words[raw.lower()]
    elif key.type == "int":
        try:
            value = int(raw, 0)
        except ValueError:
            raise ConfigError(f"pass_config key {name!r} takes an integer, got {raw!r}",
                              f"pass_config.{name}") from None
    return name, check_pass_config({name: value})[name]


def check_config_keys(config: Mapping[str, object]) -> None:
    """A `--config` object names only known top-level keys."""
    for name in config:
        if name not in BUILD_CONFIG:
            raise ConfigError(f"unknown config key {name!r}{suggestion(name, BUILD_CONFIG)}; known keys: "
                              f"{', '.join(sorted(BUILD_CONFIG))}", name)


def check_opt_level(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"config opt_level must be an integer, got {value!r}", "opt_level")
    if not OPT_LEVEL_MIN <= value <= OPT_LEVEL_MAX:
        raise ConfigError(f"opt level must be between {OPT_LEVEL_MIN} and {OPT_LEVEL_MAX}, got {value}", "opt_level")
    return value


def is_allowed_cflag(flag: str) -> bool:
    """Whether a compile request over HTTP may pass this C flag."""
    if flag in ALLOWED_CFLAGS:
        return True
    name = flag[2:].split("=", 1)[0]
    return flag.startswith("-D") and name.isidentifier() and name.isascii()


def _listing_order(key: ConfigKey) -> tuple[int, str]:
    return ("used", "ignored", "refused").index(key.support), key.name


def catalog() -> dict[str, object]:
    """The registry as JSON-able data: what `relaycc config --json` prints and `GET /targets`
    carries under `config`."""
    return {
        "config": [k.as_json() for k in BUILD_CONFIG.values()],
        "opt_level": {"minimum": OPT_LEVEL_MIN, "maximum": OPT_LEVEL_MAX, "default": OPT_LEVEL_DEFAULT},
        "pass_config": [k.as_json() for k in sorted(PASS_CONFIG.values(), key=_listing_order)],
        "allowed_cflags": sorted(ALLOWED_CFLAGS) + [DEFINE_FLAG],
    }
