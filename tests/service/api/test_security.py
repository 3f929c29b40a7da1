from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from service.api.security import ClientDep, client_address
from service.settings import Settings
from tests.service.support import SMALL_RELAY, make_app, make_settings, serving, small_relay


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


# --- client identity -------------------------------------------------------------------------

PROXIES = ("10.0.0.0/8", "127.0.0.1/32")


def test_without_trusted_proxies_the_peer_is_the_client() -> None:
    assert client_address("127.0.0.1", ["203.0.113.7"], ()) == "127.0.0.1"


def test_x_forwarded_for_from_a_peer_that_is_not_a_trusted_proxy_is_ignored() -> None:
    assert client_address("198.51.100.2", ["203.0.113.7"], PROXIES) == "198.51.100.2"


def test_behind_trusted_proxies_the_right_most_untrusted_hop_is_the_client() -> None:
    # The client wrote "1.1.1.1" itself; 203.0.113.7 is what the first proxy (10.0.0.5) saw.
    forwarded = ["1.1.1.1, 203.0.113.7", "10.0.0.5"]

    assert client_address("127.0.0.1", forwarded, PROXIES) == "203.0.113.7"


def test_a_trusted_proxy_without_x_forwarded_for_is_its_own_client() -> None:
    assert client_address("10.2.3.4", [], PROXIES) == "10.2.3.4"
    assert client_address("10.2.3.4", ["10.0.0.9"], PROXIES) == "10.2.3.4"


def test_a_hop_that_is_not_an_address_does_not_name_a_client() -> None:
    assert client_address("127.0.0.1", ["1.1.1.1, not-an-ip"], PROXIES) == "127.0.0.1"


def test_ipv6_hops_are_normalised() -> None:
    assert client_address("127.0.0.1", ["2001:DB8:0::1"], PROXIES) == "2001:db8::1"


def test_with_api_keys_the_key_is_the_identity_whatever_the_headers(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store", api_keys="alpha", trusted_proxies="0.0.0.0/0")
    identities: list[str] = []
    app = make_app(settings)

    @app.get("/whoami")
    def whoami(client: ClientDep) -> str:
        identities.append(client)
        return client

    with TestClient(app) as client:
        for forwarded in ("203.0.113.1", "203.0.113.2"):
            client.get("/whoami", headers={"Authorization": "Bearer alpha", "X-Forwarded-For": forwarded})

    assert len(identities) == 2 and identities[0] == identities[1] and identities[0].startswith("key:")


def _compile(base: str, variant: int, forwarded_for: str) -> httpx.Response:
    return httpx.post(f"{base}/compile", json={"relay": small_relay(variant)},
                      headers={"X-Forwarded-For": forwarded_for}, timeout=30)


# Jobs sleep before they start, so the first two stay in flight while the third arrives.
IN_FLIGHT = {"max_jobs_per_client": "2", "job_start_delay_seconds": "30"}


def test_rotating_x_forwarded_for_does_not_escape_the_per_client_job_limit(tmp_path: Path) -> None:
    with serving(tmp_path / "store", workers=1, **IN_FLIGHT) as server:
        answers = [_compile(server.base, variant, f"203.0.113.{variant}") for variant in range(3)]

    assert [answer.status_code for answer in answers] == [202, 202, 429]
    assert answers[2].json()["type"] == "https://relaycc.dev/problems/too-many-jobs"
    assert "RELAYCC_MAX_JOBS_PER_CLIENT" in answers[2].json()["detail"]


def test_behind_a_trusted_proxy_x_forwarded_for_names_the_client(tmp_path: Path) -> None:
    with serving(tmp_path / "store", workers=1, trusted_proxies="127.0.0.1", **IN_FLIGHT) as server:
        # Three clients behind the proxy: each has jobs of its own.
        others = [_compile(server.base, variant, f"203.0.113.{variant}") for variant in range(3)]
        # One client sending a third job is still held to the limit.
        same = [_compile(server.base, variant, "198.51.100.9") for variant in range(3, 6)]

    assert [answer.status_code for answer in others] == [202, 202, 202]
    assert [answer.status_code for answer in same] == [202, 202, 429]
