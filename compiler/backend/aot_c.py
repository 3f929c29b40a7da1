"""C text of the AOT executor: the static pools, `tvmgen_<name>___tvm_main__` and the entry
points `tvmgen_<name>_run` / `tvmgen_<name>_run_with_workspace`.

This module only prints a `MainProgram` that aot_executor.py has already decided: which kernel
runs with which pointers, where every intermediate lives, which outputs are copied. The
source includes the module's header and defines the entry points with exactly the prototypes
declared there, so the two can never disagree (TVM issues #8640 / #14871 / #17194 come from a
generated file re-declaring them differently).

Every kernel call can be timed (`relaycc run --profile`): `tvmgen_<name>_profile(ns)` hands the
executor an array of `tvmgen_<name>_profile_calls()` int64 counters, to which each call adds its
nanoseconds; `tvmgen_<name>_profile_name(i)` names the kernel of call i. Without an array (the
default) a call costs one extra well-predicted branch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compiler.backend.constants import ConstantPool, emit_pool
from compiler.backend.interface_c import (
    TensorInfo,
    c_prefix,
    header_name,
    run_prototype,
    run_with_workspace_prototype,
)
from compiler.tir.dtypes import c_type


@dataclass(frozen=True)
class Ref:
    """A tensor as @main's C code names it.

    kind "input" / "output": a pointer parameter of __tvm_main__; "sid": an intermediate at
    `offset` in the workspace; "constant": a constant at `offset` in the constant pool.
    """

    kind: str
    name: str
    dtype: str
    offset: int = 0


@dataclass(frozen=True)
class Kernel:
    """A function main calls: `int32_t symbol(<dtype>* ..., [uint8_t* workspace])`.

    `prototype` is its declaration without the `;`; for PrimFuncs it is the one the C code
    generator writes, so the two files agree on it exactly. `inplace` pairs (output, input)
    positions whose buffers may be one (compiler/tir/inplace.py).
    """

    symbol: str
    param_dtypes: tuple[str, ...]
    takes_workspace: bool
    prototype: str
    inplace: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class KernelCall:
    kernel: Kernel
    args: tuple[Ref, ...]  # inputs, then outputs
    workspace_offset: int | None = None


@dataclass(frozen=True)
class OutputCopy:
    dst: Ref
    src: Ref
    nbytes: int


@dataclass(frozen=True)
class MainProgram:
    module_name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    calls: tuple[KernelCall, ...]
    copies: tuple[OutputCopy, ...]
    workspace_bytes: int
    workspace_alignment: int
    constant_pool: ConstantPool


def input_param(t: TensorInfo) -> str:
    return f"in_{t.c_name}"


def output_param(t: TensorInfo) -> str:
    return f"out_{t.c_name}"


def _kernels(calls: Sequence[KernelCall]) -> list[Kernel]:
    seen: dict[str, Kernel] = {}
    for call in calls:
        seen.setdefault(call.kernel.symbol, call.kernel)
    return list(seen.values())


def extern_prototype(symbol: str, param_dtypes: Sequence[str]) -> str:
    """The declaration of an external kernel: a plain pointer per tensor, inputs then outputs."""
    params = [f"{c_type(dtype)}*" for dtype in param_dtypes]
    return f"int32_t {symbol}({', '.join(params) or 'void'})"


def _arg(ref: Ref, dtype: str) -> str:
    return ref.name if ref.dtype == dtype else f"({c_type(dtype)}*){ref.name}"


def _locals(prog: MainProgram, pool_symbol: str) -> list[str]:
    """Typed pointers to every intermediate and constant the body uses, in first-use order."""
    declared: dict[str, Ref] = {}
    for ref in _all_refs(prog):
        if ref.kind in ("sid", "constant"):
            declared.setdefault(ref.name, ref)
    lines = []
    for ref in declared.values():
        ctype = c_type(ref.dtype)
        base = "workspace" if ref.kind == "sid" else pool_symbol
        lines.append(f"  {ctype}* {ref.name} = ({ctype}*)({base} + {ref.offset});")
    return lines


def _used_names(prog: MainProgram) -> set[str]:
    used = {ref.name for call in prog.calls for ref in call.args}
    used.update(copy.src.name for copy in prog.copies)
    used.update(copy.dst.name for copy in prog.copies)
    if any(ref.kind == "sid" for ref in _all_refs(prog)) or any(c.kernel.takes_workspace for c in prog.calls):
        used.add("workspace")
    return used


def _all_refs(prog: MainProgram) -> list[Ref]:
    refs = [ref for call in prog.calls for ref in call.args]
    refs += [copy.src for copy in prog.copies]
    return refs


def _main_function(prog: MainProgram, main_symbol: str, pool_symbol: str, profile_symbol: str) -> list[str]:
    params = [(c_type(t.dtype) + "*", input_param(t)) for t in prog.inputs]
    params += [(c_type(t.dtype) + "*", output_param(t)) for t in prog.outputs]
    params.append(("uint8_t*", "workspace"))
    used = _used_names(prog)
    lines = [f"static int32_t {main_symbol}({', '.join(f'{ty} {name}' for ty, name in params)}) {{"]
    # An input no kernel reads or a workspace nobody uses is voided, so -Wextra stays quiet.
    lines += [f"  (void){name};" for _, name in params if name not in used]
    lines += _locals(prog, pool_symbol)
    if prog.calls:
        lines += [f"  int64_t* profile = {profile_symbol};", "  int64_t started = 0;"]
    for index, call in enumerate(prog.calls):
        args = [_arg(ref, dtype) for ref, dtype in zip(call.args, call.kernel.param_dtypes)]
        if call.kernel.takes_workspace:
            args.append(f"workspace + {call.workspace_offset}")
        lines.append("  if (profile) started = relaycc_now_ns();")
        lines.append(f"  if ({call.kernel.symbol}({', '.join(args)}) != 0) return -1;")
        lines.append(f"  if (profile) profile[{index}] += relaycc_now_ns() - started;")
    for copy in prog.copies:
        lines.append(f"  memcpy({copy.dst.name}, {copy.src.name}, {copy.nbytes});")
    lines += ["  return 0;", "}"]
    return lines


def emit_main_source(prog: MainProgram) -> str:
    prefix = c_prefix(prog.module_name)
    main_symbol = f"{prefix}___tvm_main__"
    pool_symbol = f"{prefix}_constant_pool"
    workspace_symbol = f"{prefix}_global_workspace"
    lines = [
        f"/* AOT executor of the module \"{prog.module_name}\", generated by relaycc. */",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <string.h>",
        "#include <time.h>",
        "",
        f'#include "{header_name(prog.module_name)}"',
        "",
    ]
    kernels = _kernels(prog.calls)
    if kernels:
        lines.append("/* Kernels, defined in the module's other C files. */")
        lines += [k.prototype + ";" for k in kernels]
        lines.append("")
    pool = emit_pool(pool_symbol, prog.constant_pool, separable=True)
    if pool:
        lines.append("/* Read-only constant pool; constants sit at the offsets used below. */")
        lines += pool
        lines.append("")
    if prog.workspace_bytes:
        lines.append(f"/* Workspace of {prefix}_run(): intermediates at their planned offsets. */")
        lines.append(
            f"static uint8_t {workspace_symbol}[{prog.workspace_bytes}] "
            f"__attribute__((aligned({prog.workspace_alignment})));"
        )
        lines.append("")
    profile_symbol = f"{prefix}_profile_ns"
    lines += profile_support([call.kernel.symbol for call in prog.calls], prefix, profile_symbol)
    lines += _main_function(prog, main_symbol, pool_symbol, profile_symbol)
    lines.append("")
    lines += _entry_points(prog, main_symbol, workspace_symbol if prog.workspace_bytes else "NULL")
    return "\n".join(lines)


def profile_support(symbols: Sequence[str], prefix: str, profile_symbol: str) -> list[str]:
    """The clock, the counters' pointer and the three profile functions of the module docstring,
    for kernel calls of `symbols` in execution order (the dynamic executor has them too)."""
    names = ", ".join(f'"{symbol}"' for symbol in symbols) or "NULL"
    count = len(symbols)
    return [
        "/* Kernel timing for profilers (off unless an array of counters is given). */",
        f"static int64_t* {profile_symbol} = NULL;",
        f"static const char* const {prefix}_profile_names[] = {{{names}}};",
        "static inline int64_t relaycc_now_ns(void) {",
        "  struct timespec now;",
        "  clock_gettime(CLOCK_MONOTONIC, &now);",
        "  return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;",
        "}",
        f"int32_t {prefix}_profile_calls(void) {{ return {count}; }}",
        f"const char* {prefix}_profile_name(int32_t call) {{",
        f"  return call >= 0 && call < {count} ? {prefix}_profile_names[call] : NULL;",
        "}",
        f"void {prefix}_profile(int64_t* nanoseconds) {{ {profile_symbol} = nanoseconds; }}",
        "",
    ]


def _entry_points(prog: MainProgram, main_symbol: str, static_workspace: str) -> list[str]:
    """run_with_workspace() unpacks the structs into __tvm_main__'s pointers; run() passes the
    static workspace."""
    prefix = c_prefix(prog.module_name)
    unpacked = [f"({c_type(t.dtype)}*)inputs->{t.c_name}" for t in prog.inputs]
    unpacked += [f"({c_type(t.dtype)}*)outputs->{t.c_name}" for t in prog.outputs]
    unpacked.append("workspace")
    lines = [run_with_workspace_prototype(prog.module_name) + " {"]
    if not prog.inputs:
        lines.append("  (void)inputs;")
    if not prog.outputs:
        lines.append("  (void)outputs;")
    lines += [
        f"  return {main_symbol}({', '.join(unpacked)});",
        "}",
        "",
        run_prototype(prog.module_name) + " {",
        f"  return {prefix}_run_with_workspace(inputs, outputs, {static_workspace});",
        "}",
        "",
    ]
    return lines
