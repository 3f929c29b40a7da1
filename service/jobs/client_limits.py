"""How many jobs each client has in flight, and the 429 when it wants one more.

A compile job counts until its module is finished (the store says so, whichever process ran
it); a run counts while its request waits for the result.

This limiter keeps its counts in the API process: right for the embedded queue, whose store one
API process owns (StoreLock). With Celery, several API processes share a store, and the counts
are kept in Redis instead (service/jobs/redis_client_limits.py).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from service.problems import ProblemError

PENDING = "pending:"


def too_many_jobs(count: int, limit: int) -> ProblemError:
    return ProblemError.of(
        "too-many-jobs",
        f"this client already has {count} jobs queued or running; the limit is {limit} "
        "(RELAYCC_MAX_JOBS_PER_CLIENT)",
        headers={"Retry-After": "1"},
    )


class ClientJobLimiter:
    def __init__(self, limit: int, is_finished: Callable[[str], bool]):
        """`is_finished(module_id)` tells whether a compile job no longer counts."""
        self._limit = limit
        self._is_finished = is_finished
        self._jobs: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def acquire(self, client: str) -> str:
        """A token for one more job of `client`, or a 429 problem when it has too many."""
        with self._lock:
            jobs = self._jobs.setdefault(client, set())
            jobs.difference_update({j for j in jobs if not j.startswith(PENDING) and self._is_finished(j)})
            if len(jobs) >= self._limit:
                raise too_many_jobs(len(jobs), self._limit)
            token = f"{PENDING}{uuid.uuid4().hex}"
            jobs.add(token)
            return token

    def bind(self, client: str, token: str, module_id: str) -> None:
        """The token becomes the compile job of `module_id`, counted until it finishes."""
        with self._lock:
            jobs = self._jobs.setdefault(client, set())
            jobs.discard(token)
            jobs.add(module_id)

    def release(self, client: str, token: str) -> None:
        with self._lock:
            self._jobs.get(client, set()).discard(token)

    @contextmanager
    def holding(self, client: str) -> Iterator[None]:
        token = self.acquire(client)
        try:
            yield
        finally:
            self.release(client, token)
