from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.settings import Settings, SettingsDep, get_settings


@pytest.fixture
def fresh_settings_cache() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOST", "PORT", "WORKERS", "STORE"):
        monkeypatch.delenv(f"RELAYCC_{name}", raising=False)

    settings = Settings()

    assert settings.host == "127.0.0.1"
    assert settings.port == 8000
    assert settings.workers == (os.cpu_count() or 1)
    assert settings.store == Path(".relaycc-store")


def test_settings_read_relaycc_environment_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RELAYCC_HOST", "0.0.0.0")
    monkeypatch.setenv("RELAYCC_PORT", "9001")
    monkeypatch.setenv("RELAYCC_WORKERS", "3")
    monkeypatch.setenv("RELAYCC_STORE", str(tmp_path))

    settings = Settings()

    assert (settings.host, settings.port, settings.workers) == ("0.0.0.0", 9001, 3)
    assert settings.store == tmp_path


def test_an_s3_store_url_stays_a_url_and_a_directory_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYCC_STORE", "s3://bucket/some/prefix")
    assert Settings().store == "s3://bucket/some/prefix"
    assert Settings().store_location() == "s3://bucket/some/prefix"

    monkeypatch.setenv("RELAYCC_STORE", "relative/store")
    assert Settings().store_location() == Path("relative/store").resolve()


def test_settings_reject_an_s3_url_without_a_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYCC_STORE", "s3:///prefix")

    with pytest.raises(ValueError, match="s3://bucket/prefix"):
        Settings()


def test_settings_reject_zero_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYCC_WORKERS", "0")

    with pytest.raises(ValueError, match="workers"):
        Settings()


def test_get_settings_is_built_once(fresh_settings_cache: None) -> None:
    assert get_settings() is get_settings()


def test_settings_dependency_can_be_overridden(settings: Settings) -> None:
    app = FastAPI()

    @app.get("/store")
    def store(current: SettingsDep) -> str:
        return str(current.store)

    app.dependency_overrides[get_settings] = lambda: settings
    with TestClient(app) as client:
        assert client.get("/store").json() == str(settings.store)


def test_the_tensor_byte_limit_defaults_to_256_mib_and_reads_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RELAYCC_MAX_TENSOR_BYTES", raising=False)
    assert Settings().max_tensor_bytes == 256 * 1024 * 1024

    monkeypatch.setenv("RELAYCC_MAX_TENSOR_BYTES", "4096")
    assert Settings().max_tensor_bytes == 4096


def test_trusted_proxies_are_addresses_or_networks_separated_by_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RELAYCC_TRUSTED_PROXIES", raising=False)
    assert Settings().trusted_proxies == ()

    monkeypatch.setenv("RELAYCC_TRUSTED_PROXIES", " 127.0.0.1, 10.1.0.0/16 ,fd00::/8,")
    assert Settings().trusted_proxies == ("127.0.0.1/32", "10.1.0.0/16", "fd00::/8")


def test_a_trusted_proxy_that_is_not_an_address_stops_the_service_from_starting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RELAYCC_TRUSTED_PROXIES", "proxy.example")

    with pytest.raises(ValueError, match="trusted_proxies"):
        Settings()
