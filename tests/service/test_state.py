"""The service's start-up and shutdown (service/state.py): the store lock, quarantine, recovery."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.state import ServiceState
from service.store.module_store import JobLimits, ModuleStore, StoreLocked
from tests.service.support import make_app, make_settings

LIMITS = JobLimits(compile_seconds=10.0, memory_bytes=1 << 30, max_attempts=3)
NORMAL = {"relay": "model", "target": "c", "module_name": "default", "compiler_version": "0.1.0"}


def _running_job(store: ModuleStore) -> tuple[str, Path]:
    """A job another live process runs right now, with its work directory."""
    mid, _ = store.create(NORMAL, {}, LIMITS, "ip:x")
    store.begin_attempt(mid, {"host": "elsewhere", "pid": 4242, "job_pid": None})
    return mid, store.new_work_dir(mid)


def test_a_second_service_on_the_same_store_fails_to_start_and_touches_no_job(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store")
    store = ModuleStore(settings.store)
    with TestClient(make_app(settings)):
        mid, work = _running_job(store)
        before = (store.modules / mid / "status.json").read_bytes()

        with pytest.raises(StoreLocked) as refused:
            with TestClient(make_app(make_settings(tmp_path / "store"))):
                pass

        assert (store.modules / mid / "status.json").read_bytes() == before
        assert work.is_dir()
    message = str(refused.value)
    assert str(settings.store.resolve()) in message and f"pid {os.getpid()}" in message


def test_the_next_service_recovers_the_jobs_once_the_first_has_stopped(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store", job_start_delay_seconds=60)
    store = ModuleStore(settings.store)
    with TestClient(make_app(settings)):
        mid, work = _running_job(store)

    with TestClient(make_app(settings)):
        status = store.status(mid)
        assert not work.exists()
    assert status is not None and status["state"] in ("queued", "running")
    assert status["worker"] is None or status["worker"]["host"] != "elsewhere"


def test_api_processes_of_the_celery_queue_are_refused_a_store_an_embedded_service_holds(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store")
    with TestClient(make_app(settings)):
        with pytest.raises(StoreLocked) as refused:
            ServiceState.start(make_settings(tmp_path / "store", queue="celery"))

    assert "embedded queue" in str(refused.value)


def test_start_up_quarantines_corrupt_entries_and_serves_the_rest(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store")
    store = ModuleStore(settings.store)
    good, _ = store.create(NORMAL, {}, LIMITS, "ip:x")
    store.fail(good, {"type": "t", "title": "t", "status": 422, "detail": "d"})
    broken = {}
    for name, content in {"garbage": b"}{", "utf8": b"\xff\xfe", "empty": b"{}", "nokey": None}.items():
        mid, _ = store.create({**NORMAL, "relay": name}, {}, LIMITS, "ip:x")
        path = store.modules / mid / "status.json"
        if content is None:
            status = json.loads(path.read_text())
            del status["id"]
            content = json.dumps(status).encode()
        path.write_bytes(content)
        broken[name] = mid
    (store.modules / ("d" * 64)).mkdir()

    with TestClient(make_app(settings)) as client:
        answers = {name: client.get(f"/modules/{mid}") for name, mid in broken.items()}
        kept = client.get(f"/modules/{good}")
        metrics = client.get("/metrics").text
        ready = client.get("/readyz")

    assert {name: a.status_code for name, a in answers.items()} == dict.fromkeys(broken, 404)
    assert all(a.json()["type"].endswith("/not-found") for a in answers.values())
    assert kept.status_code == 200 and kept.json()["state"] == "failed"
    assert "relaycc_store_quarantined_entries_total 5" in metrics
    assert ready.status_code == 200
    assert sorted(p.name[:64] for p in (settings.store / "quarantine").iterdir()) == sorted(
        [*broken.values(), "d" * 64]
    )


def test_closing_the_service_releases_the_store(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store")
    state = ServiceState.start(settings)
    state.close()

    again = ServiceState.start(settings)
    again.close()
