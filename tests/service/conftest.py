from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.s3_endpoint import S3Endpoint, moto_server
from tests.service.support import Server, make_app, make_settings, serving


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "store")


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    return make_app(settings)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as client:
        yield client


@pytest.fixture(scope="session")
def remote_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One real `relaycc serve` for the client's and the remote command's tests (an xdist
    worker running both shares it, and a model one of them built): API keys alpha and beta,
    and every job waits 0.5 s before it starts, so a job is reliably seen waiting."""
    with serving(tmp_path_factory.mktemp("remote") / "store", workers=2, api_keys="alpha,beta",
                 job_start_delay_seconds="0.5") as server:
        yield server


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    """One local S3 server (moto) for the session, with the AWS_* variables the store reads set
    in this process while it runs."""
    with moto_server() as endpoint, pytest.MonkeyPatch.context() as patch:
        for name, value in endpoint.env().items():
            patch.setenv(name, value)
        yield endpoint
