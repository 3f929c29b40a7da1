from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from compiler import __version__
from service.settings import Settings
from tests.service.support import fill, make_app, make_settings, remount, tmpfs


def test_healthz_answers_ok_with_compiler_version(client: TestClient) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"status": "ok", "version": __version__}


def test_healthz_rejects_post(client: TestClient) -> None:
    assert client.post("/healthz").status_code == 405


def test_healthz_is_documented_with_an_example(client: TestClient) -> None:
    document = client.get("/openapi.json").json()

    operation = document["paths"]["/healthz"]["get"]
    schema_ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    schema = document["components"]["schemas"][schema_ref.rsplit("/", 1)[1]]
    assert operation["operationId"] == "healthz"
    assert schema["examples"] == [{"status": "ok", "version": __version__}]


def test_readyz_answers_ready_with_a_writable_store_and_a_running_queue(client: TestClient) -> None:
    response = client.get("/readyz")

    assert response.status_code == 200
    body = response.json()
    assert {k: body[k] for k in ("status", "store", "queue")} == {"status": "ready", "store": True, "queue": True}


def test_readyz_answers_503_when_the_store_is_not_writable(client: TestClient, settings: Settings) -> None:
    modules = settings.store / "modules"
    aside = settings.store / "modules.aside"
    modules.rename(aside)
    modules.write_text("a file where the store's directory should be")
    try:
        response = client.get("/readyz")
    finally:
        modules.unlink()
        aside.rename(modules)

    assert response.status_code == 503
    body = response.json()
    assert {k: body[k] for k in ("status", "store", "queue", "reason")} == {
        "status": "not ready", "store": False, "queue": True, "reason": "the module store cannot be written (ENOTDIR)"}


def test_readyz_says_not_ready_while_the_store_is_read_only_and_ready_again_after(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "store", "1m") as store:
        with TestClient(make_app(make_settings(store))) as client:
            remount(store, "ro")
            try:
                read_only = client.get("/readyz")
            finally:
                remount(store, "rw")
            again = client.get("/readyz")

    assert read_only.status_code == 503
    assert {k: read_only.json()[k] for k in ("status", "store", "queue", "reason")} == {
        "status": "not ready", "store": False, "queue": True, "reason": "the module store is read-only"}
    assert again.status_code == 200


def test_readyz_says_not_ready_while_the_store_is_full(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "store", "1m") as store:
        with TestClient(make_app(make_settings(store))) as client:
            filler = fill(store / "modules")
            full = client.get("/readyz")
            filler.unlink()
            again = client.get("/readyz")

    assert full.status_code == 503
    assert full.json()["reason"] == "the module store is full (no space left on its device)"
    assert str(store) not in full.text
    assert again.status_code == 200


def test_readyz_says_whether_jobs_run_in_the_sandbox_and_why_user_c_is_refused(client: TestClient) -> None:
    from service.jobs.sandbox.bwrap import probe

    body = client.get("/readyz").json()

    assert body["sandbox"] is probe().ok
    assert body["user_c_allowed"] is False
    assert "user C: this service has no API keys" in body["detail"]

