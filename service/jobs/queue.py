"""Job queues: where the API sends compile and run jobs.

`JobQueue` is what the API needs of a queue. `EmbeddedQueue`, the default, is a pool of worker
processes owned by the API process; the Celery queue (RELAYCC_QUEUE=celery) lives in
service/jobs/celery_app.py and is imported only when selected.

The embedded pool is a set of slots, each one worker process fed by one thread of the API
process. A slot sends one job at a time to its worker and waits for the answer or for the
worker's death. When a worker dies (killed, crashed, or stopped after overrunning the hard
deadline), only the job it was running fails; the slot starts a new worker and goes on with the
queue. (concurrent.futures' pool instead breaks as a whole and fails every pending job.)
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import queue
import itertools
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Protocol

from service import metrics
from service.jobs.isolation import describe_exit
from service.log_format import configure_process
from service.jobs.worker import RunFailed, run_compile_job, run_model_job
from service.problems import Problem, internal_problem, make_problem
from service.store.module_store import ModuleStoreBase, StoreError, open_store

# A worker gets this long past a job's own limit before its slot kills it: the job enforces
# its limit itself, this only catches a worker that stopped answering.
HARD_DEADLINE_GRACE_SECONDS = 30.0

log = logging.getLogger("relaycc.queue")


class JobQueue(Protocol):
    def submit_compile(self, module_id: str) -> None:
        """Queue the compile job of a stored module (its status says `queued`)."""

    def submit_run(
        self, module_id: str, inputs_npz: bytes, *, repeat: int, seconds: float, memory_bytes: int,
        sandbox: str = "auto", threads: int | None = None, profile: bool = False,
    ) -> Future[bytes]:
        """Run a built module in a worker; the future holds run_model_job's archive or raises
        RunFailed."""

    def depth(self) -> int:
        """Jobs waiting for a worker."""

    def ready(self) -> bool:
        """Whether jobs submitted now will be executed."""

    def close(self) -> None:
        """Stop accepting jobs and release the workers."""


@dataclass
class _CompileTask:
    module_id: str

    def message(self, store_root: str) -> tuple[str, tuple[object, ...]]:
        return "compile", (store_root, self.module_id)


@dataclass
class _RunTask:
    module_id: str
    inputs_npz: bytes
    repeat: int
    seconds: float
    memory_bytes: int
    sandbox: str = "auto"
    threads: int | None = None
    profile: bool = False
    future: Future[bytes] = field(default_factory=Future)

    def message(self, store_root: str) -> tuple[str, tuple[object, ...]]:
        return "run", (store_root, self.module_id, self.inputs_npz, self.repeat, self.seconds,
                       self.memory_bytes, self.sandbox, self.threads, self.profile)


_Task = _CompileTask | _RunTask


class _TaskQueue:
    """Runs first, then compiles, then the slots' stop marks; each kind in arrival order."""

    def __init__(self) -> None:
        self._heap: queue.PriorityQueue[tuple[int, int, _Task | None]] = queue.PriorityQueue()
        self._arrivals = itertools.count()

    def put(self, task: _Task | None) -> None:
        rank = 0 if isinstance(task, _RunTask) else 1 if task is not None else 2
        self._heap.put((rank, next(self._arrivals), task))

    def get(self) -> _Task | None:
        return self._heap.get()[2]

    def get_nowait(self) -> _Task | None:
        return self._heap.get_nowait()[2]

    def qsize(self) -> int:
        return self._heap.qsize()


class EmbeddedQueue:
    def __init__(
        self, store: ModuleStoreBase | Path | str, workers: int, *, compile_seconds: float, run_seconds: float,
        metrics_dir: Path | None = None, log_format: str = "text",
    ):
        # A directory path or an s3:// URL opens the store there.
        self._store = store if isinstance(store, ModuleStoreBase) else open_store(store)
        self._metrics_dir = metrics_dir
        self._log_format = log_format
        self._tasks = _TaskQueue()
        self._compile_deadline = compile_seconds + HARD_DEADLINE_GRACE_SECONDS
        self._run_deadline = run_seconds + HARD_DEADLINE_GRACE_SECONDS
        self._context = _worker_context()
        self._closed = False
        self._slots = [_Slot(self, index) for index in range(workers)]

    def submit_compile(self, module_id: str) -> None:
        self._put(_CompileTask(module_id))

    def submit_run(
        self, module_id: str, inputs_npz: bytes, *, repeat: int, seconds: float, memory_bytes: int,
        sandbox: str = "auto", threads: int | None = None, profile: bool = False,
    ) -> Future[bytes]:
        task = _RunTask(module_id, inputs_npz, repeat, seconds, memory_bytes, sandbox, threads, profile)
        self._put(task)
        return task.future

    def depth(self) -> int:
        return self._tasks.qsize()

    def ready(self) -> bool:
        return not self._closed and all(slot.thread.is_alive() for slot in self._slots)

    def worker_pids(self) -> list[int]:
        """The pids of the worker processes started so far (for operators and tests)."""
        return [pid for slot in self._slots if (pid := slot.pid()) is not None]

    def close(self) -> None:
        """Stop the workers. Compile jobs they were running stay `running` in the store, where
        the next start of the service finds and queues them again (store.recover)."""
        self._closed = True
        for _ in self._slots:
            self._tasks.put(None)
        for slot in self._slots:
            slot.stop_worker()
        for slot in self._slots:
            slot.thread.join(timeout=5)
        # Runs nobody will execute any more end now; compile jobs stay queued in the store.
        while True:
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                break
            if isinstance(task, _RunTask) and not task.future.done():
                task.future.set_exception(RunFailed(make_problem("worker-died", "the service is stopping")))

    def _put(self, task: _Task) -> None:
        if self._closed:
            raise RuntimeError("the job queue is closed")
        self._tasks.put(task)


class _Slot:
    """One worker process and the thread that feeds it."""

    def __init__(self, owner: EmbeddedQueue, index: int):
        self._owner = owner
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name=f"relaycc-slot-{index}", daemon=True)
        self.thread.start()

    def pid(self) -> int | None:
        with self._lock:
            return self._process.pid if self._process is not None and self._process.is_alive() else None

    def _loop(self) -> None:
        # Start the worker before the first job arrives, so that job does not wait for it.
        try:
            self._worker()
        except OSError:
            pass  # tried again when a job comes
        while True:
            task = self._owner._tasks.get()
            if task is None or self._owner._closed:
                if isinstance(task, _RunTask):
                    task.future.set_exception(RunFailed(make_problem("worker-died", "the service is stopping")))
                return
            try:
                self._execute(task)
            except Exception as err:  # a slot must outlive any single job
                self._settle(task, None, internal_problem(err, "a job slot"))

    def _execute(self, task: _Task) -> None:
        process, conn = self._worker()
        deadline = self._owner._compile_deadline if isinstance(task, _CompileTask) else self._owner._run_deadline
        timed_out = False
        try:
            conn.send(task.message(self._owner._store.location))
            ready = multiprocessing.connection.wait([conn, process.sentinel], timeout=deadline)
            if conn in ready:
                outcome, value = conn.recv()
                self._resolve(task, outcome, value)
                return
            timed_out = not ready
        except (EOFError, OSError):
            pass  # the worker died while we talked to it
        pid = process.pid
        if not timed_out:
            process.join(timeout=1)  # let a dying worker finish dying, for its exit code
        self.stop_worker()
        if timed_out:
            self._settle(task, pid, make_problem(
                "time-limit" if isinstance(task, _CompileTask) else "run-time-limit",
                f"the worker did not answer within {deadline:g} s and was stopped",
            ))
        else:
            what = "compiling the module" if isinstance(task, _CompileTask) else "running the model"
            how = describe_exit(process.exitcode) if process.exitcode is not None else "its exit was not seen"
            self._settle(task, pid, make_problem(
                "worker-died" if isinstance(task, _CompileTask) else "run-crashed",
                f"the worker process {pid} died while {what} ({how})",
            ), retryable=True)

    def _resolve(self, task: _Task, outcome: str, value: object) -> None:
        if isinstance(task, _CompileTask):
            return  # the job wrote its outcome to the store itself
        if outcome == "ok" and isinstance(value, bytes):
            task.future.set_result(value)
        else:
            problem = value if isinstance(value, dict) else make_problem("internal-error", repr(value))
            task.future.set_exception(RunFailed(self._owner._store.without_paths(problem)))

    def _settle(self, task: _Task, pid: int | None, problem: Problem, retryable: bool = False) -> None:
        """Fail a task whose worker could not finish it."""
        if self._owner._closed:
            problem = make_problem("worker-died", "the service stopped before the job finished")
            if isinstance(task, _CompileTask):
                return  # left in flight for the next start of the service
        if isinstance(task, _CompileTask):
            try:
                self._owner._store.fail(task.module_id, problem, retryable=retryable, only_if_pid=pid)
            except (StoreError, KeyError) as err:
                # A store that cannot be written (or a module quarantined meanwhile) must not end
                # the slot: the job stays in flight and the next start of the service recovers it.
                log.error("module %s: its failure could not be recorded: %s", task.module_id, err)
        elif not task.future.done():
            task.future.set_exception(RunFailed(problem))

    def _worker(self) -> tuple[BaseProcess, Connection]:
        with self._lock:
            if self._process is not None and self._conn is not None and self._process.is_alive():
                return self._process, self._conn
            ours, theirs = self._owner._context.Pipe(duplex=True)
            process = self._owner._context.Process(
                target=_worker_main, args=(theirs, self._owner._metrics_dir, self._owner._log_format), name="relaycc-worker", daemon=True
            )
            process.start()
            theirs.close()
            self._process, self._conn = process, ours
            return process, ours

    def stop_worker(self) -> None:
        with self._lock:
            process, conn = self._process, self._conn
            self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is not None:
            process.kill()
            process.join(timeout=5)


def _worker_context() -> BaseContext:
    # Workers must not inherit the API process's threads and sockets: `forkserver` starts them
    # from a clean process that has the compiler imported once; `spawn` where it is missing.
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["service.jobs.worker"])
        return context
    return multiprocessing.get_context("spawn")


def _worker_main(conn: Connection, metrics_dir: Path | None = None, log_format: str = "text") -> None:
    """A worker process: executes jobs sent over `conn` one at a time until it closes."""
    # Ctrl-C reaches the whole process group; the API process decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Passed, not inherited: the forkserver that starts workers may predate this service.
    configure_process(log_format)
    if metrics_dir is not None:
        metrics.use(metrics_dir)
    handlers: dict[str, Callable[..., bytes | None]] = {"compile": run_compile_job, "run": _run}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        kind, args = message
        try:
            reply: tuple[str, object] = ("ok", handlers[kind](*args))
        except (RunFailed, StoreError) as err:  # a store error: the artifacts failed their check
            reply = ("failed", err.problem)
        except Exception as err:  # reported to the API; the worker keeps serving
            reply = ("failed", internal_problem(err, "a worker process"))
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return


def _run(
    store_root: str, module_id: str, inputs_npz: bytes, repeat: int, seconds: float, memory_bytes: int,
    sandbox: str, threads: int | None = None, profile: bool = False,
) -> bytes:
    return run_model_job(
        store_root, module_id, inputs_npz, repeat=repeat, seconds=seconds, memory_bytes=memory_bytes,
        sandbox=sandbox, threads=threads, profile=profile,
    )
