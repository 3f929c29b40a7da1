from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings, get_settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(host="127.0.0.1", port=8000, workers=1, store=tmp_path / "store")


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    app = create_app()
    app.dependency_overrides[get_settings] = lambda: settings
    return app


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as client:
        yield client
