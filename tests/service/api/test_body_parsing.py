from __future__ import annotations

import codecs
import json
import threading

import pytest
from fastapi.testclient import TestClient

import service.api.body_parsing
from tests.service.support import SMALL_RELAY

JSON = {"content-type": "application/json"}


def test_healthz_answers_while_a_json_body_is_validated(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()
    validate = service.api.body_parsing._validate

    def blocked(*args: object) -> object:
        entered.set()
        release.wait(timeout=20)  # bounded: validation on the event loop ends, then fails below
        returned.set()
        return validate(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(service.api.body_parsing, "_validate", blocked)
    answers: list[int] = []
    sender = threading.Thread(target=lambda: answers.append(
        client.post("/compile", json={"relay": SMALL_RELAY}).status_code))
    sender.start()
    try:
        assert entered.wait(timeout=60)
        health = client.get("/healthz")
        still_validating = not returned.is_set()
    finally:
        release.set()
        sender.join(timeout=60)

    assert health.status_code == 200 and still_validating
    assert answers == [202]


def test_a_body_that_does_not_validate_names_its_field_under_body(client: TestClient) -> None:
    response = client.post("/compile", json={"module_name": 5})

    problem = response.json()
    assert response.status_code == 422
    assert problem["type"] == "https://relaycc.dev/problems/validation-error"
    assert {tuple(error["loc"]) for error in problem["errors"]} >= {("body", "relay"), ("body", "module_name")}


@pytest.mark.parametrize("body", [b"{", b'{"relay": "\xff"}', b"\x00\x00", b""], ids=["truncated", "not-utf8", "nul", "empty"])
def test_a_body_that_is_not_json_is_a_validation_problem(client: TestClient, body: bytes) -> None:
    response = client.post("/compile", content=body, headers=JSON)

    assert response.status_code == 422
    assert response.json()["type"] == "https://relaycc.dev/problems/validation-error"


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-32"])
def test_json_in_utf16_utf32_or_with_a_bom_is_accepted_as_before(client: TestClient, encoding: str) -> None:
    text = json.dumps({"relay": SMALL_RELAY})
    body = text.encode(encoding)
    if encoding == "utf-16-le":
        body = codecs.BOM_UTF16_LE + body

    response = client.post("/compile", content=body, headers=JSON)

    assert response.status_code in (200, 202), response.text


@pytest.mark.parametrize("headers", [{"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}, {}])
def test_a_body_that_is_not_sent_as_json_is_415_naming_application_json(
    client: TestClient, headers: dict[str, str]
) -> None:
    response = client.post("/compile", content=b'{"relay": "x"}', headers=headers)

    assert response.status_code == 415
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["accept"] == "application/json"
    problem = response.json()
    assert problem["type"] == "https://relaycc.dev/problems/unsupported-media-type"
    assert "application/json" in problem["detail"]


def test_a_json_subtype_is_json(client: TestClient) -> None:
    response = client.post("/compile", content=json.dumps({"relay": SMALL_RELAY}).encode(),
                           headers={"content-type": "application/vnd.relaycc+json; charset=utf-8"})

    assert response.status_code in (200, 202), response.text