from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.service.support import SMALL_RELAY, make_app, make_settings


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(make_app(make_settings(tmp_path / "store", max_body_bytes=512))) as client:
        yield client


def test_a_declared_length_over_the_limit_is_refused_unread(limited: TestClient) -> None:
    response = limited.post("/compile", content=b"x" * 600, headers={"content-type": "application/json"})

    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "https://relaycc.dev/problems/body-too-large"
    assert problem["limit"] == 512


def test_a_streamed_body_without_length_is_stopped_at_the_limit(limited: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b"y" * 100

    response = limited.post("/compile", content=chunks(), headers={"content-type": "application/json"})

    assert response.status_code == 413


def test_a_body_under_the_limit_reaches_the_app(limited: TestClient) -> None:
    response = limited.post("/compile", json={"relay": SMALL_RELAY})

    assert response.status_code == 202


def test_the_limit_applies_to_runs_too(limited: TestClient) -> None:
    response = limited.post(f"/modules/{'0' * 64}/run", json={"inputs": {"x": [0.0] * 400}})

    assert response.status_code == 413
