"""The scale-out job queue: the job functions of service/jobs/worker.py as Celery tasks over Redis.

Selected with RELAYCC_QUEUE=celery. The API process submits through `CeleryQueue`; any number of
workers, started with `celery -A service.jobs.celery_app worker`, take the jobs from Redis and share
the module store with the API (RELAYCC_STORE must name the same directory, or the same
`s3://bucket/prefix`, everywhere).

Redis carries no tensors back: a run task writes the run's outputs to the store and returns
their reference; the API process takes (reads and removes) them from there.

A compile job must survive the death of its worker but must not loop on a job that kills every
worker it reaches:

* `acks_late` + `reject_on_worker_lost`: the message is acknowledged only when the job returns,
  and a job whose worker process died goes back to the queue at once; prefetch 1 keeps every
  other job in Redis, where an idle worker can take it.
* The store counts attempts (`ModuleStore.begin_attempt`): a delivery past RELAYCC_MAX_ATTEMPTS
  fails the job instead of running it. A job whose isolated compile child crashed (while its
  worker lived) is failed as retryable by the job itself; the task puts it back in the queue
  under the same count.
* Time limits stand behind the job's own: the job stops its compile after
  RELAYCC_COMPILE_SECONDS; Celery's soft limit comes `TIME_LIMIT_GRACE_SECONDS` later and its
  hard limit (the worker process is killed, the job fails with a time-limit problem) as much
  again. Redis hands an unacknowledged message to another worker after the broker's visibility
  timeout, so that timeout is longer than the hard limit: a job still running is never
  delivered twice.

Nothing reads settings at import time: the worker's app (`app` below, what `celery -A` finds)
takes its configuration from `get_settings()` the first time Celery asks for it, and each
`CeleryQueue` builds an app of its own from the settings it is given.
"""

from __future__ import annotations

import base64
import logging
import multiprocessing
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cached_property
from pathlib import Path

import redis
from celery import Celery, Task, signals
from celery.exceptions import TimeLimitExceeded
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.result import AsyncResult

from service import metrics
from service.log_format import formatter
from service.jobs.worker import RunFailed, run_compile_job, run_model_job
from service.problems import internal_problem, make_problem
from service.settings import Settings, get_settings
from service.store.module_store import ModuleStoreBase, StoreError, open_store

QUEUE_NAME = "relaycc"
COMPILE_TASK = "relaycc.compile"
RUN_TASK = "relaycc.run"

# How much later than the job's own limit Celery's soft limit fires, and the hard limit after
# the soft one: the job stops its compile itself, Celery only catches a worker that hangs.
TIME_LIMIT_GRACE_SECONDS = 30.0
# Redis redelivers an unacknowledged message after this long past the hard limit.
VISIBILITY_MARGIN_SECONDS = 300.0
# A worker process is replaced after this many jobs, so memory it leaked is given back.
MAX_TASKS_PER_CHILD = 100
# Results of runs are read at once by the API; Redis drops any left behind after this long.
RESULT_EXPIRES_SECONDS = 3600
# Threads of the API process that wait for run results; more runs at once queue for them.
RUN_WAITERS = 32


def time_limits(settings: Settings) -> tuple[float, float]:
    """Celery's (soft, hard) time limits of a compile task."""
    soft = settings.compile_seconds + TIME_LIMIT_GRACE_SECONDS
    return soft, soft + TIME_LIMIT_GRACE_SECONDS


def celery_config(settings: Settings) -> dict[str, object]:
    soft, hard = time_limits(settings)
    return {
        "broker_url": settings.redis_url,
        "result_backend": settings.redis_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {"visibility_timeout": hard + VISIBILITY_MARGIN_SECONDS},
        # JSON only: a worker never unpickles what the broker hands it.
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": QUEUE_NAME,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_soft_time_limit": soft,
        "task_time_limit": hard,
        "worker_prefetch_multiplier": 1,
        "worker_concurrency": settings.workers,
        "worker_max_tasks_per_child": MAX_TASKS_PER_CHILD,
        # A worker that loses Redis stops its running jobs; Redis redelivers them to a worker
        # that has a connection, instead of their running twice.
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "result_expires": RESULT_EXPIRES_SECONDS,
    }


class RelayccCelery(Celery):
    """A Celery app configured from relaycc's Settings, with the compile and run tasks."""

    def __init__(self, settings_source: Callable[[], Settings]):
        super().__init__("relaycc", set_as_current=False)
        self._settings_source = settings_source
        # A promise: Celery calls it when the configuration is first read, not now.
        self.add_defaults(lambda: celery_config(self.relaycc_settings))
        self.compile_task = self.task(
            name=COMPILE_TASK, base=CompileTask, bind=True, ignore_result=True, shared=False
        )(_compile_module)
        # A run is answered to a client that is waiting: when its worker dies it fails at once
        # (acknowledged on receipt, never redelivered), and the run reports the crash.
        self.run_task = self.task(name=RUN_TASK, bind=True, acks_late=False, shared=False)(_run_module)

    @cached_property
    def relaycc_settings(self) -> Settings:
        return self._settings_source()

    @property
    def store(self) -> ModuleStoreBase:
        # The worker's own RELAYCC_STORE: where this host mounts the shared store, or the bucket.
        settings = self.relaycc_settings
        return open_store(settings.store, cache=settings.store_cache)


def _relaycc_app(task: Task) -> RelayccCelery:
    app = task.app
    if not isinstance(app, RelayccCelery):
        raise TypeError(f"task {task.name} belongs to {app!r}, not to a relaycc Celery app")
    return app


def _compile_module(task: Task, module_id: str) -> None:
    app = _relaycc_app(task)
    store = app.store
    run_compile_job(store, module_id)
    # The job's compile child crashed but this worker lived: Celery saw a normal return, so
    # the retry is ours. The store refuses it once the attempts are used up.
    status = store.status(module_id)
    crashed = status is not None and status["state"] == "failed" and bool(status.get("retryable"))
    if crashed and store.requeue(module_id):
        app.compile_task.apply_async((module_id,))


def _run_module(
    task: Task, module_id: str, inputs_b64: str, repeat: int, seconds: float, memory_bytes: int,
    sandbox: str = "auto", threads: int | None = None, profile: bool = False,
) -> dict[str, object]:
    store = _relaycc_app(task).store
    try:
        archive = run_model_job(
            store, module_id, base64.b64decode(inputs_b64),
            repeat=repeat, seconds=seconds, memory_bytes=memory_bytes, sandbox=sandbox, threads=threads,
            profile=profile,
        )
    except (RunFailed, StoreError) as err:  # a store error: the artifacts failed their check
        return {"problem": store.without_paths(err.problem)}
    # The tensors go to the store; Redis (the result backend) carries only their reference.
    return {"outputs_ref": store.put_run_output(archive)}


class CompileTask(Task):
    """The compile task's class: a job Celery itself gives up on still gets a final status."""

    def on_failure(
        self, exc: BaseException, task_id: str, args: tuple[object, ...], kwargs: dict[str, object],
        einfo: object,
    ) -> None:
        """Fail the module of a task Celery gave up on. Runs in the worker's main process for a
        hard time limit (the process that ran the job is gone and wrote nothing)."""
        app = _relaycc_app(self)
        if not args or not isinstance(args[0], str):
            return
        if isinstance(exc, TimeLimitExceeded):
            problem = make_problem(
                "time-limit",
                f"the worker did not finish the job within {time_limits(app.relaycc_settings)[1]:g} s "
                "and was stopped",
            )
        else:
            problem = internal_problem(exc, f"Celery task {task_id}")
        # Only a job still queued or running changes; a finished one keeps its outcome.
        app.store.fail(args[0], problem)


# What `celery -A service.jobs.celery_app worker` runs.
app = RelayccCelery(get_settings)


@signals.worker_init.connect
def _join_metrics(sender: object = None, **_: object) -> None:
    """A Celery worker adds its numbers to those of the API processes on this machine (its pool
    processes are forked from it and write files of their own)."""
    global _metrics_hold
    settings = get_settings()
    _metrics_hold = metrics.attach(settings.metrics_directory())
    if _metrics_hold.first:
        location = settings.store_location()
        if isinstance(location, str):
            # An object store's client runs a tokio runtime, which a fork leaves without its
            # threads: opened here, before the pool forks, it would hang every pool process.
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                counts = pool.apply(_job_counts, (location, settings.store_cache))
        else:
            counts = _job_counts(location, settings.store_cache)
        metrics.set_job_counts(counts)


def _job_counts(location: str | Path, cache: Path | None) -> dict[str, int]:
    store = open_store(location, cache=cache)
    return metrics.count_states(str(s.get("state")) for s in store.statuses())


_metrics_hold: metrics.Attachment | None = None


@signals.after_setup_logger.connect
def _quiet_task_results(logger: logging.Logger | None = None, **_: object) -> None:
    # Celery's tracer logs each task's return value with its success at INFO; a run's return
    # value holds its outputs. Failures are still logged (at ERROR).
    logging.getLogger("celery.app.trace").setLevel(logging.WARNING)
    _use_log_format(logger)


@signals.after_setup_task_logger.connect
def _task_log_format(logger: logging.Logger | None = None, **_: object) -> None:
    _use_log_format(logger)


def _use_log_format(logger: logging.Logger | None) -> None:
    if logger is None or get_settings().log_format != "json":
        return
    for handler in logger.handlers:
        handler.setFormatter(formatter("json"))


class CeleryQueue:
    """The API's side of the Celery queue: a JobQueue (service/jobs/queue.py) over Redis.

    A run's future is resolved by a thread of the API process that waits for the task's result
    (Celery's result consumer, safe to share between threads); compile jobs report to the store.
    """

    def __init__(self, settings: Settings):
        self._settings = settings
        self._app = RelayccCelery(lambda: settings)
        self._store = open_store(settings.store_location(), cache=settings.store_cache)
        self._waiters = ThreadPoolExecutor(max_workers=RUN_WAITERS, thread_name_prefix="relaycc-run-wait")
        self._closed = False
        # For the queue's own questions (depth, readiness): bounded waits, never Celery's
        # connection retries.
        self._redis = redis.Redis.from_url(settings.redis_url, socket_timeout=2, socket_connect_timeout=2)

    def submit_compile(self, module_id: str) -> None:
        self._check_open()
        self._app.compile_task.apply_async((module_id,))

    def submit_run(
        self, module_id: str, inputs_npz: bytes, *, repeat: int, seconds: float, memory_bytes: int,
        sandbox: str = "auto", threads: int | None = None, profile: bool = False,
    ) -> Future[bytes]:
        self._check_open()
        result = self._app.run_task.apply_async(
            (module_id, base64.b64encode(inputs_npz).decode("ascii"), repeat, seconds, memory_bytes, sandbox,
             threads, profile),
            soft_time_limit=seconds + TIME_LIMIT_GRACE_SECONDS,
            time_limit=seconds + 2 * TIME_LIMIT_GRACE_SECONDS,
        )
        # A run may wait in the queue behind compiles; the client is not kept waiting longer
        # than the run's own limits plus the longest the service holds any request.
        patience = seconds + 2 * TIME_LIMIT_GRACE_SECONDS + self._settings.max_wait_seconds
        return self._waiters.submit(_await_run, result, patience, self._store)

    def depth(self) -> int:
        """Compile and run jobs waiting in Redis for a worker; 0 while Redis is unreachable
        (`ready()` says so)."""
        try:
            # Kombu keeps a queue's messages in a Redis list named after the queue.
            return int(self._redis.llen(QUEUE_NAME))
        except redis.RedisError:
            return 0

    def ready(self) -> bool:
        if self._closed:
            return False
        try:
            return bool(self._redis.ping())
        except redis.RedisError:
            return False

    def close(self) -> None:
        self._closed = True
        # Runs still waiting end with the service; their tasks' results expire in Redis.
        self._waiters.shutdown(wait=False, cancel_futures=True)
        self._redis.close()
        self._app.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the job queue is closed")


def _await_run(result: AsyncResult, patience: float, store: ModuleStoreBase) -> bytes:
    """The archive of a finished run task, or RunFailed with the problem."""
    try:
        outcome = result.get(timeout=patience, propagate=False)
    except CeleryTimeoutError:
        result.revoke()
        raise RunFailed(make_problem(
            "run-time-limit", f"no worker finished the run within {patience:g} s; it was withdrawn",
        )) from None
    succeeded = result.successful()
    result.forget()
    if not succeeded:
        if isinstance(outcome, TimeLimitExceeded):
            raise RunFailed(make_problem(
                "run-time-limit", "the worker running the model did not finish in time and was stopped",
            ))
        raise RunFailed(make_problem(
            "run-crashed", f"the worker running the model failed: {type(outcome).__name__}: {outcome}",
        ))
    ref = outcome.get("outputs_ref") if isinstance(outcome, dict) else None
    problem = outcome.get("problem") if isinstance(outcome, dict) else None
    if isinstance(ref, str):
        try:
            return store.take_run_output(ref)
        except KeyError:
            raise RunFailed(make_problem("internal-error", "a run's outputs were not found in the store")) from None
    if isinstance(problem, dict):
        raise RunFailed({str(key): value for key, value in problem.items()})
    raise RunFailed(make_problem("internal-error", "a run task answered without outputs or a problem"))
