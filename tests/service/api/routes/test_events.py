"""GET /modules/{id}/events: progress events while a job runs, one state event at the end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.routes import events
from tests.service.support import make_app, make_settings, small_relay

PROBLEMS = "https://relaycc.dev/problems/"


def parse_stream(text: str) -> list[tuple[str, object]]:
    """(event name, data) for each event; comments as ("comment", text)."""
    parsed: list[tuple[str, object]] = []
    for block in text.split("\n\n"):
        if not block:
            continue
        if block.startswith(":"):
            parsed.append(("comment", block[1:].strip()))
            continue
        if block.startswith("retry:"):
            parsed.append(("retry", int(block.split(":", 1)[1])))
            continue
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        parsed.append((fields["event"], json.loads(fields["data"])))
    return parsed


@pytest.fixture(scope="module")
def delayed() -> Iterator[pytest.MonkeyPatch]:
    """Fast polls and heartbeats for the module's streams."""
    patch = pytest.MonkeyPatch()
    patch.setattr(events, "POLL_SECONDS", 0.02)
    patch.setattr(events, "HEARTBEAT_SECONDS", 0.1)
    yield patch
    patch.undo()


@pytest.fixture(scope="module")
def app_client(tmp_path_factory: pytest.TempPathFactory, delayed: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """A service whose jobs wait 0.6 s before they start: each is seen queued or starting."""
    settings = make_settings(tmp_path_factory.mktemp("events") / "store", job_start_delay_seconds=0.6)
    with TestClient(make_app(settings)) as client:
        yield client


def test_a_running_job_streams_its_progress_then_its_final_state(app_client: TestClient) -> None:
    mid = app_client.post("/compile", json={"relay": small_relay(1)}).json()["id"]

    response = app_client.get(f"/modules/{mid}/events")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    stream = parse_stream(response.text)
    names = [name for name, _ in stream]
    # Heartbeats while the job waits out its start delay, progress as it compiles, the state last.
    assert names[0] == "retry" and "comment" in names and "progress" in names
    assert names[-1] == "state" and names.count("state") == 1
    final = stream[-1][1]
    assert isinstance(final, dict) and (final["id"], final["state"]) == (mid, "succeeded")
    progress = [data for name, data in stream if name == "progress"]
    assert all(a != b for a, b in zip(progress, progress[1:]))  # only changes are sent
    stages = [p["stage"] for p in progress]  # type: ignore[index]
    # The job is "starting" until its sandbox reports the first pass; a poll the loaded machine
    # delays may miss that stage (once in a full `make test`), but never sees it after another.
    assert stages and ("starting" not in stages or stages[0] == "starting")

    # Once finished, a stream is that state at once.
    again = parse_stream(app_client.get(f"/modules/{mid}/events").text)
    assert again == [("retry", events.RETRY_MILLISECONDS), ("state", app_client.get(f"/modules/{mid}").json())]


def test_a_stream_ends_after_its_longest_life_without_a_state(
    app_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "MAX_STREAM_SECONDS", 0.2)
    mid = app_client.post("/compile", json={"relay": small_relay(3)}).json()["id"]

    first = parse_stream(app_client.get(f"/modules/{mid}/events").text)

    assert [name for name, _ in first][0] == "retry" and "state" not in [name for name, _ in first]


@pytest.mark.parametrize("module_id", ["0" * 64, "not-an-id"])
def test_events_of_an_unknown_module_are_not_found(app_client: TestClient, module_id: str) -> None:
    response = app_client.get(f"/modules/{module_id}/events")

    assert response.status_code == 404
    assert response.json()["type"] == PROBLEMS + "not-found"


def test_with_api_keys_the_events_need_a_key(tmp_path: Path) -> None:
    with TestClient(make_app(make_settings(tmp_path / "store", api_keys="alpha"))) as client:
        response = client.get(f"/modules/{'0' * 64}/events")

    assert response.status_code == 401 and response.json()["type"] == PROBLEMS + "unauthorized"
