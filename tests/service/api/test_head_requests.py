"""HEAD on every GET route: the GET's status and headers, no body."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.service.support import make_app, make_settings, small_relay, wait_until_done


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    with TestClient(make_app(make_settings(tmp_path_factory.mktemp("head") / "store"))) as client:
        response = client.post("/compile", json={"relay": small_relay(11)})
        status = wait_until_done(client, response.json()["id"])
        assert status["state"] == "succeeded", status["error"]
        yield client, str(status["id"])


@pytest.mark.parametrize("path", ["", "/metadata", "/artifacts", "/artifacts/libdefault.so",
                                  "/artifacts/src/default_lib0.c"])
def test_head_answers_the_headers_of_get_without_a_body(built: tuple[TestClient, str], path: str) -> None:
    client, module_id = built
    got = client.get(f"/modules/{module_id}{path}")
    head = client.head(f"/modules/{module_id}{path}")

    assert got.status_code == head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == got.headers["content-length"] == str(len(got.content))
    assert head.headers.get("etag") == got.headers.get("etag")
    assert head.headers["content-type"] == got.headers["content-type"]


def test_artifacts_metadata_and_status_have_etags_and_304(built: tuple[TestClient, str]) -> None:
    client, module_id = built
    for path in ("", "/metadata", "/artifacts/libdefault.so"):
        etag = client.head(f"/modules/{module_id}{path}").headers["etag"]
        assert etag.startswith('"')
        assert client.get(f"/modules/{module_id}{path}", headers={"If-None-Match": etag}).status_code == 304


def test_head_on_a_missing_module_is_the_404_without_a_body(built: tuple[TestClient, str]) -> None:
    client, _ = built
    response = client.head("/modules/" + "0" * 64)

    assert response.status_code == 404 and response.content == b""
    assert response.headers["content-type"] == "application/problem+json"


def test_head_on_a_post_only_route_is_405_as_get_is(built: tuple[TestClient, str]) -> None:
    client, _ = built
    assert client.head("/compile").status_code == client.get("/compile").status_code == 405


def test_head_on_the_service_routes(built: tuple[TestClient, str]) -> None:
    client, _ = built
    for path in ("/healthz", "/targets"):
        head = client.head(path)
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["content-length"]) == len(client.get(path).content)
