from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fastapi.testclient import TestClient

from tests.service.support import make_app, make_settings, small_relay, wait_until_done


def test_identical_concurrent_requests_compile_once(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store", workers=2)
    barrier = threading.Barrier(6)
    with TestClient(make_app(settings)) as client:

        def send(_: int) -> dict[str, object]:
            barrier.wait()
            return client.post("/compile", json={"relay": small_relay(20), "module_name": "twin"}).json()

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(send, range(6)))
        status = wait_until_done(client, str(answers[0]["id"]))
        metrics = client.get("/metrics").text

    assert len({a["id"] for a in answers}) == 1
    assert status["state"] == "succeeded" and status["attempts"] == 1
    assert [p.name for p in (settings.store / "modules").iterdir()] == [status["id"]]
    assert "relaycc_cache_hits_total 5" in metrics


def test_a_different_request_is_a_different_module(client: TestClient) -> None:
    first = client.post("/compile", json={"relay": small_relay(21)}).json()
    other_name = client.post("/compile", json={"relay": small_relay(21), "module_name": "other"}).json()
    other_level = client.post("/compile", json={"relay": small_relay(21), "config": {"opt_level": 2}}).json()

    assert len({first["id"], other_name["id"], other_level["id"]}) == 3
