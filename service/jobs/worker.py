"""The job functions a worker process executes: compile a stored module, run a built one.

They are the whole contract between the API and its workers, embedded or Celery: arguments are
a store path, a module id and plain bytes, everything else is read from the store, and nothing
here imports FastAPI. The work itself (service/jobs/work.py) runs in a bubblewrap sandbox
(service/jobs/sandbox/) under the limits the API recorded with the job: the sandbox sees a scratch
directory holding the job's inputs and nothing of the store, and the worker checks what the job
left there before any of it is stored or returned. Where the machine has no sandbox and the
service allows that (RELAYCC_SANDBOX=auto or off), a job without user C runs in a forked child
instead (service/jobs/isolation.py); a job with user C never does.

`run_compile_job` never raises for a failed build: the outcome, success or the problem saying
what went wrong, is written to the module's status. It may be called again for the same module
(a redelivered Celery task, a requeue after a restart); a finished module is left alone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np

from compiler.backend.interface_c import result_names
from compiler.diagnostics import InputError
from service import log_format, metrics
from service.arrays import decode_npz, encode_npz
from service.jobs.isolation import run_isolated
from service.jobs.sandbox import bwrap
from service.jobs.sandbox.entry import MODULE_DIR
from service.jobs.work import (
    PROFILE_KEY,
    TIMES_KEY,
    compile_request,
    describe_error_json,
    profile_of,
    run_module,
)
from service.problems import Problem, make_problem
from service.store.module_store import (
    JobLimits,
    ModuleStoreBase,
    StoreError,
    StoreUnavailable,
    open_store,
    worker_identity,
    writing,
)

__all__ = ["PROFILE_KEY", "TIMES_KEY", "RunFailed", "RunLimits", "profile_of", "run_compile_job", "run_model_job",
           "sandbox_refusal"]

log = logging.getLogger("relaycc.worker")

# What a run may use besides its time and memory (RELAYCC_RUN_SECONDS, RELAYCC_MEMORY_BYTES):
# OpenMP threads count as processes; a run writes only its outputs.
RUN_PROCESSES = 64
RUN_FILE_BYTES = 1 << 30
# Each file a job leaves in its scratch directory is copied only if it is a regular file, and
# only this much in all (the build's own file-size limit bounds each file).
_MAX_ARTIFACT_BYTES = 8 << 30


class RunFailed(Exception):
    """A run that produced no outputs; `problem` says why (bad inputs, crash, time limit)."""

    def __init__(self, problem: Problem):
        super().__init__(problem)
        self.problem = problem


T = TypeVar("T")


@dataclass(frozen=True)
class RunLimits:
    seconds: float = 60.0
    memory_bytes: int | None = None
    sandbox: str = "auto"
    processes: int = RUN_PROCESSES
    file_bytes: int = RUN_FILE_BYTES


@dataclass
class _Done:
    """How a job's work ended: `ok` (with its result), `error` (with its problem), `memory`,
    `timeout` or `crashed` (with how its process exited)."""

    outcome: str
    value: object = None
    exit: str = ""


def sandbox_refusal(mode: str, user_c: bool) -> str | None:
    """Why a job may not run here, or None. `required` needs the sandbox for every job; user C
    needs it whatever the mode."""
    if mode == "off" and not user_c:
        return None
    available = bwrap.probe()
    if available.ok:
        return None if mode != "off" else "the sandbox is turned off (RELAYCC_SANDBOX=off)"
    if mode == "required" or user_c:
        return f"no sandbox on this machine: {available.reason}"
    return None


def _use_sandbox(mode: str) -> bool:
    return mode != "off" and bwrap.probe().ok


def brings_user_c(request: Mapping[str, object]) -> bool:
    """Whether a stored request compiles C sources or links libraries a client sent."""
    for codegen in request.get("codegens") or []:
        if not isinstance(codegen, Mapping):
            continue
        document = codegen.get("document")
        library = document.get("library") if isinstance(document, Mapping) else None
        if codegen.get("sources") or (isinstance(library, Mapping) and (library.get("sources") or library.get("libraries"))):
            return True
    return False


def _opened(store: str | ModuleStoreBase) -> ModuleStoreBase:
    """The store a job was handed: its location (a worker process of the embedded queue opens it
    with the default cache) or the store itself (a Celery worker's, with its settings' cache)."""
    return store if isinstance(store, ModuleStoreBase) else open_store(store)


# --- compile ------------------------------------------------------------------------------------


def run_compile_job(store_root: str | ModuleStoreBase, module_id: str) -> None:
    with log_format.job(module_id):
        _compile_job(store_root, module_id)


def _compile_job(store_root: str | ModuleStoreBase, module_id: str) -> None:
    store = _opened(store_root)
    # A store that is full or read-only when the job starts: wait for an operator as a failure
    # does (the job stays queued, and the next start of the service recovers it if we give up).
    queued = store.status(module_id)
    if queued is None:
        return
    status = _when_writable(lambda: store.begin_attempt(module_id, worker_identity()),
                            patience_seconds=JobLimits.from_json(queued["limits"]).compile_seconds)
    if status is None:
        return
    if isinstance(status.get("started_at"), (int, float)) and isinstance(status.get("queued_at"), (int, float)):
        metrics.queued_for(float(status["started_at"]) - float(status["queued_at"]))
    limits = JobLimits.from_json(status["limits"])
    log.info("compile job started, attempt %s", status.get("attempts"))
    work: Path | None = None
    try:
        work = store.new_work_dir(module_id)
        failure = _build(store, module_id, work, limits)
    except StoreError as err:  # the store filled up or went read-only under the job
        failure = err.problem, True
    except Exception as err:  # the job's status must never stay `running` after it returns
        failure = make_problem("internal-error", f"{type(err).__name__}: {err}"), False
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    if failure is not None:
        # The problem's type only: its detail may quote the model (a located compile error).
        log.info("compile job failed: %s", str(failure[0].get("type", "")).rsplit("/", 1)[-1])
        _record_failure(store, module_id, *failure, patience_seconds=limits.compile_seconds)
    else:
        log.info("compile job succeeded")


def _build(store: ModuleStoreBase, module_id: str, work: Path, limits: JobLimits) -> tuple[Problem, bool] | None:
    """Build the module and store it; the problem (and whether it is worth retrying) if not."""
    started = time.monotonic()
    request = store.request(module_id)
    refusal = sandbox_refusal(limits.sandbox, brings_user_c(request))
    if refusal is not None:
        return make_problem("sandbox-unavailable", f"the module cannot be built: {refusal}"), False
    if _use_sandbox(limits.sandbox):
        done = _compile_sandboxed(store, module_id, request, work, limits)
    else:
        done = _compile_forked(store, module_id, request, work, limits)
    if done.outcome != "ok":
        problem = _compile_failure(done, limits)
        # A crash, or a store that filled up under the child, is worth another attempt later.
        return problem, done.outcome == "crashed" or str(problem.get("type", "")).endswith("/store-unavailable")
    store.set_progress(module_id, "storing artifacts")
    timings = dict(done.value) if isinstance(done.value, Mapping) else {}
    timings["total_seconds"] = time.monotonic() - started
    store.succeed(module_id, work, timings)
    metrics.compiled_in(timings["total_seconds"])
    return None


def _record_failure(store: ModuleStoreBase, module_id: str, problem: Problem, retryable: bool, *, patience_seconds: float) -> None:
    """Record a failed job, waiting while the store cannot be written (an operator frees space or
    makes it writable again) so that the job does not stay `running`; up to `patience_seconds`,
    after which the next start of the service finds it in flight and queues it again."""
    _when_writable(lambda: store.fail(module_id, problem, retryable=retryable), patience_seconds=patience_seconds)


def _when_writable(write: Callable[[], T], *, patience_seconds: float) -> T:
    """`write()`, tried again while the store is full or read-only, for up to `patience_seconds`."""
    deadline = time.monotonic() + patience_seconds
    pause = 0.2
    while True:
        try:
            return write()
        except StoreUnavailable:
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


def _compile_sandboxed(
    store: ModuleStoreBase, module_id: str, request: Mapping[str, object], work: Path, limits: JobLimits
) -> _Done:
    scratch = _scratch()
    try:
        task = {"kind": "compile", "request": request, "delay_seconds": limits.start_delay_seconds}
        (scratch / "task.json").write_text(json.dumps(task), encoding="utf-8")
        params = store.params(module_id)
        if params:
            (scratch / "params.npz").write_bytes(encode_npz(params))
        (scratch / "out").mkdir()

        def progress(message: Mapping[str, object]) -> None:
            details = message.get("progress")
            if isinstance(details, Mapping):
                details = {str(k): v for k, v in details.items() if isinstance(v, (str, int, float))}
                store.set_progress(module_id, str(details.pop("stage", "compiling")), **details)

        finished = _sandboxed(scratch, limits=bwrap.Limits(
            seconds=limits.compile_seconds, memory_bytes=limits.memory_bytes,
            cpu_seconds=_cpu_seconds(limits.compile_seconds), file_bytes=limits.file_bytes,
            processes=limits.processes,
        ), mounts=[], on_message=progress, on_start=partial(store.set_job_pid, module_id))
        done = _from_sandbox(finished)
        if done.outcome == "ok":
            try:
                with writing("storing the module's artifacts"):
                    _copy_checked(scratch / "out", work)
            except ValueError as err:
                return _Done("error", make_problem("internal-error", f"the build left files that cannot be stored: {err}"))
        return done
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _compile_forked(
    store: ModuleStoreBase, module_id: str, request: Mapping[str, object], work: Path, limits: JobLimits
) -> _Done:
    def task() -> bytes:
        progress = lambda details: store.set_progress(  # noqa: E731
            module_id, str(details.get("stage", "compiling")),
            **{k: v for k, v in details.items() if k != "stage"})
        timings = compile_request(request, store.params(module_id), work, progress, limits.start_delay_seconds)
        return json.dumps(timings).encode()

    result = run_isolated(
        task, seconds=limits.compile_seconds, memory_bytes=limits.memory_bytes,
        describe_error=describe_error_json, on_start=partial(store.set_job_pid, module_id),
    )
    value: object = json.loads(result.payload) if result.outcome in ("ok", "error") else None
    return _Done(result.outcome, value, result.exit)


def _compile_failure(done: _Done, limits: JobLimits) -> Problem:
    if done.outcome == "error" and isinstance(done.value, dict):
        return done.value
    if done.outcome == "timeout":
        return make_problem(
            "time-limit",
            f"compiling took longer than {limits.compile_seconds:g} s, the service's limit "
            "(RELAYCC_COMPILE_SECONDS); the compile was stopped",
        )
    if done.outcome == "memory":
        return _memory_problem("compiling", limits.memory_bytes)
    return make_problem("worker-died", f"the process compiling the module died ({done.exit})")


def _memory_problem(what: str, memory_bytes: int | None) -> Problem:
    limit = f"{memory_bytes // (1024 * 1024)} MiB" if memory_bytes else "the available memory"
    return make_problem(
        "memory-limit",
        f"{what} needed more memory than {limit}, the service's limit (RELAYCC_MEMORY_BYTES)",
    )


# --- run ----------------------------------------------------------------------------------------


def run_model_job(
    store_root: str | ModuleStoreBase,
    module_id: str,
    inputs_npz: bytes,
    *,
    repeat: int = 1,
    seconds: float = 60.0,
    memory_bytes: int | None = None,
    sandbox: str = "auto",
    threads: int | None = None,
    profile: bool = False,
) -> bytes:
    """Run a built module on the arrays of `inputs_npz` (named after @main's parameters).

    Returns an .npz archive holding the outputs `out0, out1, ...` and `times_us`, the latency
    of each of the `repeat` runs in microseconds (with `profile`, also each kernel call's name and
    mean time under PROFILE_KEY). Raises RunFailed with the problem otherwise.
    The model runs in the sandbox (no network, no view of the store but its own artifacts,
    read-only), or where there is none and the service allows it, in a forked child.
    """
    started = time.monotonic()
    with log_format.job(f"run-{uuid.uuid4().hex[:12]}"):
        outcome = "failed"
        try:
            archive = _run_model(store_root, module_id, inputs_npz, repeat, seconds, memory_bytes, sandbox, threads,
                                 profile)
            outcome = "succeeded"
            return archive
        except RunFailed as err:
            outcome = "failed: " + str(err.problem.get("type", "")).rsplit("/", 1)[-1]
            raise
        finally:
            elapsed = time.monotonic() - started
            metrics.ran_in(elapsed)
            log.info("run of module %s %s in %.3f s", module_id, outcome, elapsed)


def _run_model(
    store_root: str | ModuleStoreBase, module_id: str, inputs_npz: bytes, repeat: int, seconds: float,
    memory_bytes: int | None, sandbox: str, threads: int | None, profile: bool = False,
) -> bytes:
    store = _opened(store_root)
    # Raises ArtifactCorrupt (a StoreError with its problem); an object store's artifacts are
    # downloaded into its local cache here, checked, and loaded from there.
    outdir = store.verified_artifacts_dir(module_id)
    status = store.status(module_id)
    if status is None:
        raise RunFailed(make_problem("not-found", f"no module {module_id}"))
    if status["state"] != "succeeded":
        raise RunFailed(make_problem("module-not-ready", f"module {module_id} is {status['state']}"))
    limits = RunLimits(seconds=seconds, memory_bytes=memory_bytes, sandbox=sandbox)
    assert outdir is not None
    refusal = sandbox_refusal(sandbox, brings_user_c(store.request(module_id)))
    if refusal is not None:
        raise RunFailed(make_problem("sandbox-unavailable", f"the module cannot be run: {refusal}"))
    if _use_sandbox(sandbox):
        done = _run_sandboxed(outdir, inputs_npz, repeat, limits, threads, profile)
    else:
        result = run_isolated(
            partial(run_module, outdir, inputs_npz, repeat, threads, profile), seconds=seconds,
            memory_bytes=memory_bytes,
            describe_error=describe_error_json, deny_network=True,
        )
        value: object = result.payload if result.outcome == "ok" else (
            json.loads(result.payload) if result.outcome == "error" else None)
        done = _Done(result.outcome, value, result.exit)
    if done.outcome == "ok" and isinstance(done.value, bytes):
        return done.value
    if done.outcome == "error" and isinstance(done.value, dict):
        raise RunFailed(done.value)
    if done.outcome == "timeout":
        raise RunFailed(make_problem(
            "run-time-limit",
            f"the run took longer than {seconds:g} s, the service's limit (RELAYCC_RUN_SECONDS)",
        ))
    if done.outcome == "memory":
        raise RunFailed(_memory_problem("the run", memory_bytes))
    raise RunFailed(make_problem("run-crashed", f"the process running the model died ({done.exit})"))


def _run_sandboxed(
    outdir: Path, inputs_npz: bytes, repeat: int, limits: RunLimits, threads: int | None, profile: bool = False,
) -> _Done:
    scratch = _scratch()
    try:
        task = {"kind": "run", "repeat": repeat, "threads": threads, "profile": profile}
        (scratch / "task.json").write_text(json.dumps(task), encoding="utf-8")
        (scratch / "inputs.npz").write_bytes(inputs_npz)
        memory = limits.memory_bytes or (64 << 30)
        finished = _sandboxed(scratch, limits=bwrap.Limits(
            seconds=limits.seconds, memory_bytes=memory, cpu_seconds=_cpu_seconds(limits.seconds),
            file_bytes=limits.file_bytes, processes=limits.processes,
        ), mounts=[bwrap.Mount(outdir, MODULE_DIR)])
        done = _from_sandbox(finished)
        if done.outcome == "ok":
            # The run's own code (user C included) wrote this file: it is read within the run's
            # memory limit and must hold exactly a model's outputs before the API sees it.
            result = _read_regular(scratch / "result.npz", memory)
            _check_run_result(decode_npz(result, "run result", max_bytes=memory))
            done.value = result
        return done
    except (OSError, ValueError, InputError) as err:
        return _Done("error", make_problem("run-crashed", f"the run left no usable result ({type(err).__name__})"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _check_run_result(arrays: Mapping[str, np.ndarray]) -> None:
    # out0, out1, ... in order: the API answers them in the archive's order.
    names = [name for name in arrays if name not in (TIMES_KEY, PROFILE_KEY)]
    if (TIMES_KEY not in arrays or names != result_names(len(names))
            or arrays[TIMES_KEY].ndim != 1 or arrays[TIMES_KEY].dtype != np.float64):
        raise ValueError("the run result is not a model's outputs and latencies")
    profile_of(arrays)  # raises ValueError when the profile is malformed


# --- the sandbox ---------------------------------------------------------------------------------


def _scratch() -> Path:
    """A job's scratch directory, outside the store: the only place the job can write."""
    scratch = Path(tempfile.mkdtemp(prefix="relaycc-job-"))
    (scratch / "tmp").mkdir()
    if os.geteuid() == 0:
        os.chown(scratch / "tmp", bwrap.job_uid(), bwrap.job_uid())
    return scratch


def _sandboxed(
    scratch: Path, *, limits: bwrap.Limits, mounts: list[bwrap.Mount], on_message=lambda message: None,
    on_start: Callable[[int], None] | None = None,
) -> bwrap.Finished:
    uid = bwrap.job_uid()
    if os.geteuid() == 0:
        for path in scratch.rglob("*"):
            os.chown(path, uid, uid, follow_symlinks=False)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": bwrap.JOB_DIR,
        "TMPDIR": f"{bwrap.JOB_DIR}/tmp",
        "LANG": "C.UTF-8",
        "PYTHONPATH": bwrap.python_path(),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for name in ("CC", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        if name in os.environ:
            env[name] = os.environ[name]
    return bwrap.run(
        [sys.executable, "-m", "service.jobs.sandbox.entry"], scratch=scratch,
        mounts=[*bwrap.python_mounts(), *mounts], limits=limits, env=env, on_message=on_message,
        on_start=on_start, uid=uid,
    )


def _from_sandbox(finished: bwrap.Finished) -> _Done:
    if finished.outcome == "ok":
        return _Done("ok", finished.final.get("result"))
    if finished.outcome == "error":
        problem = finished.final.get("problem")
        if isinstance(problem, dict) and isinstance(problem.get("type"), str):
            return _Done("error", problem)
        return _Done("crashed", exit="it reported an error that is not a problem")
    return _Done(finished.outcome, exit=finished.exit)


def _cpu_seconds(wall_seconds: float) -> int:
    """CPU time for a job given `wall_seconds`: every core busy the whole time, and a margin,
    so that the wall-clock limit (which says what happened more clearly) comes first."""
    return int(wall_seconds * (os.cpu_count() or 1)) + 10


def _copy_checked(source: Path, dest: Path) -> None:
    """Copy the OUTDIR a job left in its scratch directory: directories and regular files only
    (a symbolic link could point at a file of the worker's), at most _MAX_ARTIFACT_BYTES."""
    total = 0
    for root, dirs, files in os.walk(source, followlinks=False):
        relative = Path(root).relative_to(source)
        for name in dirs:
            info = os.lstat(Path(root) / name)
            if not stat.S_ISDIR(info.st_mode):
                raise ValueError(f"{relative / name}: not a directory")
            (dest / relative / name).mkdir(exist_ok=True)
        for name in files:
            data = _read_regular(Path(root) / name, _MAX_ARTIFACT_BYTES - total)
            total += len(data)
            (dest / relative / name).write_bytes(data)


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of `path` if it is a regular file (not a link) of at most `limit` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path.name}: not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{path.name}: larger than the job may leave")
        with os.fdopen(os.dup(fd), "rb") as stream:
            data = stream.read(info.st_size + 1)  # a file that grew since fstat shows here
        if len(data) > limit:
            raise ValueError(f"{path.name}: larger than the job may leave")
        return data
    finally:
        os.close(fd)
