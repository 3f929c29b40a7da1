"""Per-client job limits kept in Redis, for the Celery queue: every API process of the service
counts against the same numbers, so a client gets its limit once, not once per process.

Each client has a sorted set: its compile jobs (module ids, counted until the store says they
finished, as in client_limits.py) and its pending tokens (a run waiting for its result, or a
compile between admission and storage). A token's score is when it stops counting even if
nobody releases it: an API process that dies mid-request must not hold a client's place forever.
Changes to one client's set happen under a Redis lock of that client.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable

import redis

from service.jobs.client_limits import PENDING, ClientJobLimiter, too_many_jobs

_PREFIX = "relaycc:client-jobs:"
_LOCK_SECONDS = 10.0


class RedisJobLimiter(ClientJobLimiter):
    def __init__(self, client: redis.Redis, limit: int, is_finished: Callable[[str], bool], *,
                 pending_seconds: float):
        """`pending_seconds`: the longest a token counts unless it is released or bound first."""
        super().__init__(limit, is_finished)
        self._redis = client
        self._pending_seconds = pending_seconds

    def acquire(self, client: str) -> str:
        key = _PREFIX + client
        with self._redis.lock(key + ":lock", timeout=_LOCK_SECONDS, blocking_timeout=_LOCK_SECONDS):
            now = time.time()
            self._redis.zremrangebyscore(key, "-inf", now)
            members = [m.decode() for m in self._redis.zrange(key, 0, -1)]
            finished = [m for m in members if not m.startswith(PENDING) and self._is_finished(m)]
            if finished:
                self._redis.zrem(key, *finished)
            count = len(members) - len(finished)
            if count >= self._limit:
                raise too_many_jobs(count, self._limit)
            token = f"{PENDING}{uuid.uuid4().hex}"
            self._redis.zadd(key, {token: now + self._pending_seconds})
            return token

    def bind(self, client: str, token: str, module_id: str) -> None:
        key = _PREFIX + client
        pipe = self._redis.pipeline()
        pipe.zrem(key, token)
        pipe.zadd(key, {module_id: math.inf})
        pipe.execute()

    def release(self, client: str, token: str) -> None:
        self._redis.zrem(_PREFIX + client, token)
