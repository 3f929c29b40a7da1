"""What the app holds while it runs: settings, the store, the job queue, the client limiter and
its hold on the metrics directory. Built when the app starts (its lifespan), closed when it stops.

It stays at the top of service/, next to app.py, because it is what ties the layers together:
it builds the store (service/store/) and the queue and limiter (service/jobs/) and hands them to
the HTTP face (service/api/). Only app.py and service/api/ import it; jobs/ and store/ never do."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, FastAPI, Request

from service import metrics
from service.jobs.client_limits import ClientJobLimiter
from service.jobs.queue import EmbeddedQueue, JobQueue
from service.jobs.sandbox.policy import sandbox_status, user_c_refusal
from service.settings import Settings, get_settings
from service.store.module_store import IN_FLIGHT, DirectoryStore, JobLimits, ModuleStoreBase, StoreLock, open_store

if TYPE_CHECKING:
    from service.store.s3_lease import S3Lease

# uvicorn's own logger: `relaycc serve` shows its lines at start-up, next to the address.
log = logging.getLogger("uvicorn.error")


@dataclass
class ServiceState:
    settings: Settings
    store: ModuleStoreBase
    queue: JobQueue
    limiter: ClientJobLimiter
    lock: StoreLock | S3Lease | None = None
    metrics: metrics.Attachment | None = None

    @staticmethod
    def start(settings: Settings) -> ServiceState:
        """Lock the store (StoreLocked when another service holds it; nothing is touched
        then), set corrupt entries aside, start the queue and recover interrupted jobs."""
        sandboxed, detail = sandbox_status(settings)
        if settings.sandbox == "required" and not sandboxed:
            raise RuntimeError(f"RELAYCC_SANDBOX=required, but there is no sandbox: {detail}")
        log.info("sandbox: %s", detail)
        refusal = user_c_refusal(settings)
        if refusal is not None:
            log.info("user C is refused: %s", refusal)
        store = open_store(settings.store_location(), cache=settings.store_cache)
        store.ensure()
        embedded = settings.queue == "embedded"
        lock = acquire_lock(store, exclusive=embedded, queue=settings.queue)
        attachment: metrics.Attachment | None = None
        try:
            quarantined = store.check_entries()
            if quarantined:
                log.warning("%d corrupt module entries quarantined at start-up: %s",
                            len(quarantined), ", ".join(quarantined))

            def finished(module_id: str) -> bool:
                status = store.status(module_id)
                return status is None or status["state"] not in IN_FLIGHT

            limiter = make_limiter(settings, finished)
            attachment = metrics.attach(settings.metrics_directory())
            if attachment.first:
                # The one scan of the store for metrics: from here on, transitions keep the count.
                metrics.set_job_counts(metrics.count_states(str(s.get("state")) for s in store.statuses()))
            state = ServiceState(settings, store, make_queue(settings, store), limiter, lock, attachment)
        except BaseException:
            if attachment is not None:
                attachment.release()
            lock.release()
            raise
        # With Celery, jobs in flight belong to the broker, which delivers them again; the
        # embedded queue died with the previous process, so its jobs are submitted anew.
        if embedded:
            try:
                for module_id in store.recover(state.job_limits()):
                    state.queue.submit_compile(module_id)
            except BaseException:
                state.close()
                raise
        return state

    def job_limits(self) -> JobLimits:
        return JobLimits(
            compile_seconds=self.settings.compile_seconds,
            memory_bytes=self.settings.memory_bytes,
            max_attempts=self.settings.max_attempts,
            start_delay_seconds=self.settings.job_start_delay_seconds,
            sandbox=self.settings.sandbox,
            file_bytes=self.settings.build_file_bytes,
            processes=self.settings.build_processes,
        )

    def close(self) -> None:
        try:
            self.queue.close()
        finally:
            if self.metrics is not None:
                self.metrics.release()
            if self.lock is not None:
                self.lock.release()


def make_limiter(settings: Settings, finished: Callable[[str], bool]) -> ClientJobLimiter:
    if settings.queue == "celery":
        # Several API processes share a Celery store: they count in one place, Redis.
        import redis

        from service.jobs.redis_client_limits import RedisJobLimiter

        client = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=5)
        return RedisJobLimiter(client, settings.max_jobs_per_client, finished,
                               pending_seconds=settings.run_seconds + settings.max_wait_seconds + 60)
    return ClientJobLimiter(settings.max_jobs_per_client, finished)


def acquire_lock(store: ModuleStoreBase, *, exclusive: bool, queue: str) -> StoreLock | S3Lease:
    """One embedded-queue service per store: a flock on a directory, a lease in a bucket."""
    if isinstance(store, DirectoryStore):
        return StoreLock.acquire(store.root, exclusive=exclusive, queue=queue)
    from service.store.s3 import S3ModuleStore
    from service.store.s3_lease import S3Lease

    assert isinstance(store, S3ModuleStore)
    return S3Lease.acquire(store, exclusive=exclusive, queue=queue)


def make_queue(settings: Settings, store: ModuleStoreBase) -> JobQueue:
    if settings.queue == "celery":
        # Imported only when selected: the embedded default needs neither Celery nor Redis.
        from service.jobs.celery_app import CeleryQueue

        return CeleryQueue(settings)
    return EmbeddedQueue(
        store,
        settings.workers,
        metrics_dir=settings.metrics_directory(),
        log_format=settings.log_format,
        compile_seconds=settings.compile_seconds,
        run_seconds=settings.run_seconds,
    )


def settings_of(app: FastAPI) -> Settings:
    """The app's settings, honouring a test's `dependency_overrides[get_settings]`."""
    provider = app.dependency_overrides.get(get_settings, get_settings)
    settings = provider()
    assert isinstance(settings, Settings)
    return settings


def get_state(request: Request) -> ServiceState:
    state = request.app.state.relaycc
    assert isinstance(state, ServiceState)
    return state


StateDep = Annotated[ServiceState, Depends(get_state)]
