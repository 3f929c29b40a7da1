from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import redis

from service.jobs.redis_client_limits import RedisJobLimiter
from service.problems import ProblemError
from tests.service.support import free_port, serving, small_relay

REDIS_SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed (`make install`)")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    port = free_port()
    assert REDIS_SERVER is not None
    process = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no"], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _limiter(url: str, limit: int, finished: set[str], pending_seconds: float = 60.0) -> RedisJobLimiter:
    return RedisJobLimiter(redis.Redis.from_url(url), limit, finished.__contains__, pending_seconds=pending_seconds)


def test_two_limiters_on_one_redis_share_a_clients_count(redis_url: str) -> None:
    finished: set[str] = set()
    one, two = _limiter(redis_url, 2, finished), _limiter(redis_url, 2, finished)
    one.bind("shared", one.acquire("shared"), "job1")
    token = two.acquire("shared")

    with pytest.raises(ProblemError) as raised:
        one.acquire("shared")
    assert raised.value.status == 429
    assert "2 jobs" in str(raised.value.problem["detail"])

    two.acquire("another")  # other clients are counted apart
    two.release("shared", token)
    one.release("shared", one.acquire("shared"))  # a released token frees its place
    finished.add("job1")
    one.acquire("shared")
    two.acquire("shared")  # a finished job no longer counts


def test_a_token_nobody_releases_stops_counting_after_its_time(redis_url: str) -> None:
    limiter = _limiter(redis_url, 1, set(), pending_seconds=0.2)
    limiter.acquire("forgetful")  # as by an API process that died before releasing it
    with pytest.raises(ProblemError):
        limiter.acquire("forgetful")
    time.sleep(0.3)

    limiter.acquire("forgetful")


def test_a_client_gets_its_limit_once_across_two_api_processes(redis_url: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    settings = {"queue": "celery", "redis_url": redis_url, "max_jobs_per_client": "1"}
    with ExitStack() as stack:
        # No Celery worker: every compile stays queued, so it keeps counting.
        first = stack.enter_context(serving(store, workers=1, **settings))
        second = stack.enter_context(serving(store, workers=1, **settings))
        queued = httpx.post(f"{first.base}/compile", json={"relay": small_relay(70)}, timeout=30)
        refused = httpx.post(f"{second.base}/compile", json={"relay": small_relay(71)}, timeout=30)
        again = httpx.post(f"{first.base}/compile", json={"relay": small_relay(72)}, timeout=30)

    assert queued.status_code == 202, queued.text
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == "1"
    assert again.status_code == 429
