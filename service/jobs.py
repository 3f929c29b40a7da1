"""The job functions a worker process executes: compile a stored module, run a built one.

They are the whole contract between the API and its workers, embedded or Celery: arguments are
a store path, a module id and plain bytes, everything else is read from the store, and nothing
here imports FastAPI. Each job does its work in an isolated child process
(service/isolation.py) under the limits the API recorded with the job.

`run_compile_job` never raises for a failed build: the outcome, success or the problem saying
what went wrong, is written to the module's status. It may be called again for the same module
(a redelivered Celery task, a requeue after a restart); a finished module is left alone.
"""

from __future__ import annotations

import json
import shutil
import time
import traceback
from functools import partial
from pathlib import Path

import numpy as np

from compiler.diagnostics import CompileError
from compiler.driver import build
from compiler.runtime.build import BuildError
from compiler.runtime.module import CompiledModule
from service.arrays import NO_LIMIT, decode_npz, encode_npz
from service.isolation import Isolated, run_isolated
from service.normalize import SOURCE_NAME, build_options
from service.problems import Problem, compile_error_problem, make_problem
from service.store import JobLimits, ModuleStore, worker_identity

# The key of the run result archive that holds the per-run latencies (outputs are out0, ...).
TIMES_KEY = "times_us"
_OUT_OF_MEMORY_MARKS = ("out of memory", "virtual memory exhausted", "cannot allocate memory")


class RunFailed(Exception):
    """A run that produced no outputs; `problem` says why (bad inputs, crash, time limit)."""

    def __init__(self, problem: Problem):
        super().__init__(problem)
        self.problem = problem


def run_compile_job(store_root: str, module_id: str) -> None:
    store = ModuleStore(store_root)
    status = store.begin_attempt(module_id, worker_identity())
    if status is None:
        return
    limits = JobLimits.from_json(status["limits"])
    work = store.new_work_dir(module_id)
    started = time.monotonic()
    try:
        result = run_isolated(
            partial(_compile, store, module_id, work, limits.start_delay_seconds),
            seconds=limits.compile_seconds,
            memory_bytes=limits.memory_bytes,
            describe_error=_describe_error,
            on_start=partial(store.set_job_pid, module_id),
        )
        if result.outcome == "ok":
            timings = json.loads(result.payload)
            store.set_progress(module_id, "storing artifacts")
            timings["total_seconds"] = time.monotonic() - started
            store.succeed(module_id, work, timings)
        else:
            store.fail(module_id, _compile_failure(result, limits), retryable=result.outcome == "crashed")
    except Exception as err:  # the job's status must never stay `running` after it returns
        store.fail(module_id, make_problem("internal-error", f"{type(err).__name__}: {err}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compile(store: ModuleStore, module_id: str, work: Path, delay_seconds: float) -> bytes:
    """In the job's child process: build the stored request into `work`."""
    if delay_seconds > 0:
        time.sleep(delay_seconds)
    request = store.request(module_id)
    params = store.params(module_id)
    relay = request["relay"]
    assert isinstance(relay, str)
    options = build_options(request)
    store.set_progress(module_id, "compiling")
    start = time.monotonic()
    progress = _PassProgress(store, module_id)
    model = build(relay, work, options, params, source_name=SOURCE_NAME, instruments=(progress,))
    passes = model.report.get("passes", [])
    return json.dumps({
        "compile_seconds": time.monotonic() - start,
        "passes": len(passes) if isinstance(passes, list) else 0,
    }).encode()


class _PassProgress:
    """A pass instrument recording in the job's status which pass finished last."""

    def __init__(self, store: ModuleStore, module_id: str):
        self.store = store
        self.module_id = module_id
        self.done = 0

    def after_pass(self, name: str, seconds: float) -> None:
        self.done += 1
        self.store.set_progress(self.module_id, "compiling", last_pass=name, passes_done=self.done)


def _compile_failure(result: Isolated, limits: JobLimits) -> Problem:
    if result.outcome == "error":
        problem: Problem = json.loads(result.payload)
        return problem
    if result.outcome == "timeout":
        return make_problem(
            "time-limit",
            f"compiling took longer than {limits.compile_seconds:g} s, the service's limit "
            "(RELAYCC_COMPILE_SECONDS); the compile was stopped",
        )
    if result.outcome == "memory":
        return _memory_problem("compiling", limits.memory_bytes)
    return make_problem("worker-died", f"the process compiling the module died ({result.exit})")


def _memory_problem(what: str, memory_bytes: int | None) -> Problem:
    limit = f"{memory_bytes // (1024 * 1024)} MiB" if memory_bytes else "the available memory"
    return make_problem(
        "memory-limit",
        f"{what} needed more memory than {limit}, the service's limit (RELAYCC_MEMORY_BYTES)",
    )


def _describe_error(err: BaseException) -> bytes:
    """In the child: the problem for an exception, as JSON."""
    if isinstance(err, BuildError) and any(m in err.output.lower() for m in _OUT_OF_MEMORY_MARKS):
        problem = make_problem("memory-limit", f"the C compiler ran out of memory: {err.message}")
    elif isinstance(err, CompileError):
        problem = compile_error_problem(err)
    else:
        # A bug in the compiler, not in the request: say where, for the report a user files.
        where = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
        location = f" at {where[0].filename}:{where[0].lineno}" if where else ""
        problem = make_problem("internal-error", f"{type(err).__name__}: {err}{location}")
    return json.dumps(problem).encode()


def run_model_job(
    store_root: str,
    module_id: str,
    inputs_npz: bytes,
    *,
    repeat: int = 1,
    seconds: float = 60.0,
    memory_bytes: int | None = None,
) -> bytes:
    """Run a built module on the arrays of `inputs_npz` (named after @main's parameters).

    Returns an .npz archive holding the outputs `out0, out1, ...` and `times_us`, the latency
    of each of the `repeat` runs in microseconds. Raises RunFailed with the problem otherwise.
    The model runs in a child process without network access where the platform allows it.
    """
    store = ModuleStore(store_root)
    store.verified_artifacts_dir(module_id)  # raises ArtifactCorrupt (a StoreError with its problem)
    status = store.status(module_id)
    if status is None:
        raise RunFailed(make_problem("not-found", f"no module {module_id}"))
    if status["state"] != "succeeded":
        raise RunFailed(make_problem("module-not-ready", f"module {module_id} is {status['state']}"))
    outdir = store.artifacts_dir(module_id)
    result = run_isolated(
        partial(_run, outdir, inputs_npz, repeat),
        seconds=seconds,
        memory_bytes=memory_bytes,
        describe_error=_describe_error,
        deny_network=True,
    )
    if result.outcome == "ok":
        return result.payload
    if result.outcome == "error":
        raise RunFailed(json.loads(result.payload))
    if result.outcome == "timeout":
        raise RunFailed(make_problem(
            "run-time-limit",
            f"the run took longer than {seconds:g} s, the service's limit (RELAYCC_RUN_SECONDS)",
        ))
    if result.outcome == "memory":
        raise RunFailed(_memory_problem("the run", memory_bytes))
    raise RunFailed(make_problem("run-crashed", f"the process running the model died ({result.exit})"))


def _run(outdir: Path, inputs_npz: bytes, repeat: int) -> bytes:
    """In the run's child process: load the library, run, pack outputs and latencies."""
    inputs = decode_npz(inputs_npz, "inputs", max_elements=NO_LIMIT)
    result = CompiledModule(outdir).run(inputs, repeat=repeat)
    arrays = {f"out{index}": output for index, output in enumerate(result.outputs)}
    arrays[TIMES_KEY] = np.asarray(result.times_us, dtype="float64")
    return encode_npz(arrays)
