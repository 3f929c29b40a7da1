"""What the app holds while it runs: settings, the store, the job queue, the client limiter and
the counters behind /metrics. Built when the app starts (its lifespan), closed when it stops.

It stays at the top of service/, next to app.py, because it is what ties the layers together:
it builds the store (service/store/) and the queue and limiter (service/jobs/) and hands them to
the HTTP face (service/api/). Only app.py and service/api/ import it; jobs/ and store/ never do."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, FastAPI, Request

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
class Counters:
    """Per-process counters; Prometheus adds them up over processes and restarts."""

    cache_hits: int = 0
    compile_requests: int = 0
    runs: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)


@dataclass
class ServiceState:
    settings: Settings
    store: ModuleStoreBase
    queue: JobQueue
    limiter: ClientJobLimiter
    counters: Counters
    lock: StoreLock | S3Lease | None = None

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
        try:
            quarantined = store.check_entries()
            if quarantined:
                log.warning("%d corrupt module entries quarantined at start-up: %s",
                            len(quarantined), ", ".join(quarantined))

            def finished(module_id: str) -> bool:
                status = store.status(module_id)
                return status is None or status["state"] not in IN_FLIGHT

            limiter = ClientJobLimiter(settings.max_jobs_per_client, finished)
            state = ServiceState(settings, store, make_queue(settings, store), limiter, Counters(), lock)
        except BaseException:
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
            if self.lock is not None:
                self.lock.release()


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
