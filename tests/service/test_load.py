"""A bounded load test (10 s, 100 clients) against a real server; `make soak` runs it for 60 s."""

from __future__ import annotations

from pathlib import Path

from tests.service.load import LIGHT_ACTIONS, api_keys, run_load
from tests.service.support import serving

CLIENTS = 100


def test_a_hundred_concurrent_clients_get_no_server_error_and_lose_no_job(tmp_path: Path) -> None:
    with serving(tmp_path / "store", api_keys=api_keys(CLIENTS)) as server:
        figures = run_load(server.base, seconds=10, clients=CLIENTS, actions=LIGHT_ACTIONS)

    print(figures.report(10, CLIENTS))
    assert figures.server_errors == []
    assert figures.unexpected == []
    assert figures.wrong_outputs == 0
    assert figures.lost_jobs == [] and figures.failed_jobs == []
    assert figures.requests >= CLIENTS
    assert {"cached_compile", "run", "status", "new_compile"} <= set(figures.latencies)
