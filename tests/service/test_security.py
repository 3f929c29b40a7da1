from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.support import SMALL_RELAY, make_app, make_settings


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(make_app(make_settings(tmp_path / "store", api_keys="alpha, beta"))) as client:
        yield client


@pytest.mark.parametrize(("method", "path"), [("get", "/targets"), ("get", "/metrics"), ("post", "/compile"),
                                              ("get", f"/modules/{'0' * 64}")])
def test_requests_without_a_key_answer_401(guarded: TestClient, method: str, path: str) -> None:
    response = guarded.request(method, path, json={"relay": SMALL_RELAY} if method == "post" else None)

    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["type"] == "https://relaycc.dev/problems/unauthorized"


def test_a_wrong_key_or_scheme_answers_401(guarded: TestClient) -> None:
    assert guarded.get("/targets", headers={"Authorization": "Bearer gamma"}).status_code == 401
    assert guarded.get("/targets", headers={"Authorization": "Basic YWxwaGE6"}).status_code == 401


def test_a_valid_key_is_let_through(guarded: TestClient) -> None:
    assert guarded.get("/targets", headers={"Authorization": "Bearer beta"}).status_code == 200


def test_health_checks_need_no_key(guarded: TestClient) -> None:
    assert guarded.get("/healthz").status_code == 200
    assert guarded.get("/readyz").status_code == 200


def test_api_keys_are_read_comma_separated_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYCC_API_KEYS", " k1 ,k2,, ")

    assert Settings().api_keys == ("k1", "k2")
