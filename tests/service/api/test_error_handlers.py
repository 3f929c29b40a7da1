from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.support import make_app


def test_an_unknown_path_is_a_404_problem(client: TestClient) -> None:
    response = client.get("/no/such/path")

    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "https://relaycc.dev/problems/not-found"


def test_a_wrong_method_is_a_405_problem(client: TestClient) -> None:
    response = client.delete("/compile")

    assert response.status_code == 405
    assert response.json()["type"] == "https://relaycc.dev/problems/method-not-allowed"
    assert "POST" in response.headers["allow"]


def test_validation_errors_list_every_field(client: TestClient) -> None:
    response = client.post("/compile", json={"module_name": 5, "repeat": 1})

    problem = response.json()
    assert problem["status"] == 422
    locations = {tuple(error["loc"]) for error in problem["errors"]}
    assert ("body", "relay") in locations and ("body", "module_name") in locations


def test_a_bad_query_parameter_is_a_422_problem(client: TestClient) -> None:
    response = client.post("/compile?wait=-1", json={"relay": "x"})

    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["query", "wait"]


def test_an_unexpected_error_answers_500_without_its_text_or_any_server_path(settings: Settings) -> None:
    app = make_app(settings)

    @app.get("/boom")
    def boom() -> None:
        open(settings.store / "secret-dir" / "missing-file")  # noqa: SIM115 - raises FileNotFoundError

    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/boom")

    assert response.status_code == 500
    problem = response.json()
    assert problem["type"] == "https://relaycc.dev/problems/internal-error"
    assert problem["detail"].startswith("FileNotFoundError; the server log has the details under reference ")
    assert str(settings.store) not in response.text and "secret-dir" not in response.text


def test_a_body_that_cannot_be_decoded_is_a_validation_problem_like_invalid_json(client: TestClient) -> None:
    # FastAPI answers a body that is not UTF-8 with a bare 400 of its own, JSON that does not
    # parse with a 422: both are the same mistake and get the same problem.
    undecodable = client.post("/compile", content=b'{"relay": "\xff"}', headers={"content-type": "application/json"})
    unparsable = client.post("/compile", content=b'{"relay": ', headers={"content-type": "application/json"})

    for response in (undecodable, unparsable):
        assert response.status_code == 422
        assert response.json()["type"] == "https://relaycc.dev/problems/validation-error"
