"""The work of a job, wherever it runs: compile a request into an OUTDIR, run a built module.

These functions know nothing of the store or of how they are isolated. A worker calls them in a
bubblewrap sandbox (service/jobs/sandbox/entry.py) or, where the machine has no sandbox, in a forked
child (service/jobs/isolation.py); either way they read plain inputs and write into a directory.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from compiler.backend.interface_c import result_names
from compiler.diagnostics import CompileError, InputError
from compiler.runtime.build import BuildError
from compiler.runtime.module import CompiledModule
from service.arrays import NO_LIMIT, decode_npz, encode_npz
from service.problems import Problem, compile_error_problem, make_problem
from service.store.module_store import StoreError, unavailable_reason

# The key of the run result archive that holds the per-run latencies (outputs are out0, ...).
TIMES_KEY = "times_us"
# A profiled run's archive also holds, as UTF-8 JSON bytes (archives carry numbers only), each
# kernel call's name and mean time per run in µs, in the executor's order:
# {"kernels": [...], "us": [...]}.
PROFILE_KEY = "profile_json"
# The artifact a request with `record_passes` gets: the module as text after every pass.
PASSES_ARTIFACT = "passes.json"
_OUT_OF_MEMORY_MARKS = ("out of memory", "virtual memory exhausted", "cannot allocate memory")
_NO_SPACE_MARK = "no space left on device"

Progress = Callable[[Mapping[str, object]], None]
# The stage while the C compiler builds the library; `done` and `total` count its files.
BUILDING_C = "building C"


def compile_request(
    request: Mapping[str, object],
    params: Mapping[str, np.ndarray],
    outdir: Path,
    progress: Progress,
    delay_seconds: float = 0.0,
) -> dict[str, object]:
    """Build the stored request (its normal form) into `outdir`; returns the timings."""
    # Imported here: a run, which starts a fresh interpreter in its sandbox, never needs them.
    from compiler.driver import build, planned_passes
    from compiler.passes.ir_snapshots import IRSnapshots
    from service.jobs.normalize import SOURCE_NAME, build_options

    if delay_seconds > 0:
        time.sleep(delay_seconds)
    relay = request["relay"]
    if not isinstance(relay, str):
        raise TypeError("stored request has no Relay text")
    options = build_options(request)
    plan = planned_passes(options, params=bool(params))
    progress({"stage": "compiling", "done": 0, "total": len(plan)})
    start = time.monotonic()
    # No compile cache: objects a job wrote would be linked into other tenants' libraries, and
    # a job (sandboxed or a forked child) is exactly what must not write shared state.
    onnx_names = request.get("onnx_names")
    snapshots = IRSnapshots() if request.get("record_passes") is True else None
    instruments = (_PassProgress(progress, plan), *((snapshots,) if snapshots is not None else ()))
    model = build(relay, outdir, options, dict(params), source_name=SOURCE_NAME,
                  instruments=instruments, cache=None,
                  c_progress=lambda done, total: progress({"stage": BUILDING_C, "done": done, "total": total}),
                  onnx_names=dict(onnx_names) if isinstance(onnx_names, dict) else None)
    if snapshots is not None:
        (outdir / PASSES_ARTIFACT).write_text(json.dumps(snapshots.records), encoding="utf-8")
    passes = model.report.get("passes", [])
    return {
        "compile_seconds": time.monotonic() - start,
        "passes": len(passes) if isinstance(passes, list) else 0,
    }


class _PassProgress:
    """A pass instrument reporting which pass finished last, how many have (`passes_done`), and
    how far the build is through the planned passes (`done` of `total`, for a progress bar).

    A pass counts towards `done` when it is the next one of the plan: passes run inside another
    (a codegen's pipeline over each of its functions) are not in the plan and leave `done` as
    it is, so it only grows and ends at `total`."""

    def __init__(self, progress: Progress, plan: list[str]):
        self.progress = progress
        self.plan = plan
        self.passes_done = 0
        self.done = 0

    def after_pass(self, name: str, seconds: float) -> None:
        self.passes_done += 1
        if self.done < len(self.plan) and self.plan[self.done] == name:
            self.done += 1
        self.progress({"stage": "compiling", "last_pass": name, "passes_done": self.passes_done,
                       "done": self.done, "total": len(self.plan)})


def run_module(
    outdir: Path, inputs_npz: bytes, repeat: int, threads: int | None = None, profile: bool = False
) -> bytes:
    """Load the library of `outdir`, run it `repeat` times (on `threads` threads when given);
    outputs and latencies as .npz, with every kernel call's time when `profile` is set (as
    `relaycc run --profile` measures it)."""
    inputs = decode_npz(inputs_npz, "inputs", max_elements=NO_LIMIT)
    module = CompiledModule(outdir)
    try:
        timed = module.profile(inputs, repeat=repeat, threads=threads) if profile else None
    except InputError as err:
        # Its message starts with the library's directory: a path of the service, not the client's.
        raise InputError(err.message.removeprefix(f"{outdir}: ")) from None
    result = timed.result if timed is not None else module.run(inputs, repeat=repeat, threads=threads)
    arrays = dict(zip(result_names(len(result.outputs)), result.outputs))
    arrays[TIMES_KEY] = np.asarray(result.times_us, dtype="float64")
    if timed is not None:
        packed = json.dumps({"kernels": timed.kernels, "us": timed.kernel_us}).encode()
        arrays[PROFILE_KEY] = np.frombuffer(packed, dtype=np.uint8)
    return encode_npz(arrays)


def profile_of(archive: Mapping[str, np.ndarray]) -> tuple[list[str], list[float]] | None:
    """The (kernel names, µs) of a run result archive, None when the run was not profiled;
    ValueError when the entry is not what run_module writes."""
    if PROFILE_KEY not in archive:
        return None
    raw = archive[PROFILE_KEY]
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise ValueError("the run result's profile is not JSON bytes")
    try:
        data = json.loads(raw.tobytes())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("the run result's profile is not JSON") from None
    kernels, times = (data.get(key) if isinstance(data, dict) else None for key in ("kernels", "us"))
    if (not isinstance(kernels, list) or not isinstance(times, list) or len(kernels) != len(times)
            or not all(isinstance(k, str) for k in kernels)
            or not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in times)):
        raise ValueError("the run result's profile is not kernel names and their times")
    return kernels, [float(t) for t in times]


def describe_error(err: BaseException) -> Problem:
    """The problem for an exception a job raised."""
    if isinstance(err, BuildError) and any(m in err.output.lower() for m in _OUT_OF_MEMORY_MARKS):
        return make_problem("memory-limit", f"the C compiler ran out of memory: {err.message}")
    if isinstance(err, StoreError):  # the store filled up or went read-only under the job
        return err.problem
    reason = unavailable_reason(err) if isinstance(err, OSError) else None
    if reason is not None or (isinstance(err, BuildError) and _NO_SPACE_MARK in err.output.lower()):
        return make_problem(
            "store-unavailable",
            f"the build's output directory is {reason or 'full'}; try again once an operator has freed space",
        )
    if isinstance(err, CompileError):
        return compile_error_problem(err)
    # A bug in the compiler, not in the request: say where, for the report a user files.
    where = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
    location = f" at {Path(where[0].filename).name}:{where[0].lineno}" if where else ""
    return make_problem("internal-error", f"{type(err).__name__}: {err}{location}")


def describe_error_json(err: BaseException) -> bytes:
    return json.dumps(describe_error(err)).encode()
