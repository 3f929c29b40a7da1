from __future__ import annotations

import pytest

from service.jobs.client_limits import ClientJobLimiter
from service.problems import ProblemError


def test_a_client_gets_at_most_its_limit_of_jobs() -> None:
    finished: set[str] = set()
    limiter = ClientJobLimiter(2, finished.__contains__)
    limiter.bind("a", limiter.acquire("a"), "job1")
    limiter.bind("a", limiter.acquire("a"), "job2")

    with pytest.raises(ProblemError) as raised:
        limiter.acquire("a")
    assert raised.value.status == 429

    limiter.acquire("b")  # other clients are counted apart
    finished.add("job1")
    limiter.acquire("a")  # a finished job no longer counts


def test_a_released_token_frees_its_place() -> None:
    limiter = ClientJobLimiter(1, lambda job: False)

    with limiter.holding("a"):
        with pytest.raises(ProblemError):
            limiter.acquire("a")
    limiter.acquire("a")
