"""GET /modules (pages, newest first, by state), DELETE /modules/{id}, GET /modules/{a}/diff/{b}."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.problems import make_problem
from service.store.module_store import JobLimits
from tests.service.support import make_app, make_settings, small_relay, wait_until_done

PROBLEMS = "https://relaycc.dev/problems/"


def build(client: TestClient, relay: str, **body: object) -> dict[str, object]:
    response = client.post("/compile", json={"relay": relay, **body})
    assert response.status_code in (200, 202), response.text
    return wait_until_done(client, response.json()["id"])


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with TestClient(make_app(make_settings(tmp_path_factory.mktemp("list") / "store"))) as client:
        yield client


@pytest.fixture(scope="module")
def built(client: TestClient) -> list[str]:
    """Two modules built one after the other (oldest first)."""
    ids = []
    for variant in range(2):
        status = build(client, small_relay(variant))
        assert status["state"] == "succeeded", status["error"]
        ids.append(str(status["id"]))
        time.sleep(0.01)  # distinct creation times
    return ids


def test_listing_pages_newest_first_and_follows_cursors_to_the_end(client: TestClient, built: list[str]) -> None:
    seen: list[str] = []
    page = client.get("/modules", params={"limit": 1}).json()
    pages = 1
    while True:
        seen += [m["id"] for m in page["modules"]]
        if page["next_cursor"] is None:
            assert page["next"] is None
            break
        page = client.get(page["next"]).json()
        pages += 1

    mine = [mid for mid in seen if mid in built]
    assert mine == built[::-1]
    assert len(seen) == len(set(seen)) == pages


def test_listing_filters_by_state(client: TestClient, built: list[str]) -> None:
    store = client.app.state.relaycc.store  # type: ignore[attr-defined]
    failed_id, _ = store.create({"relay": small_relay(98), "module_name": "default", "target": "c"}, {},
                                JobLimits(compile_seconds=1, memory_bytes=1 << 30, max_attempts=1), "ip:test")
    store.fail(failed_id, make_problem("internal-error", "made to fail by the test"))
    waiting, _ = store.create({"relay": small_relay(96), "module_name": "default", "target": "c"}, {},
                              JobLimits(compile_seconds=1, memory_bytes=1 << 30, max_attempts=1), "ip:test")

    by_state = {state: [m["id"] for m in client.get("/modules", params={"state": state, "limit": 100}).json()["modules"]]
                for state in ("succeeded", "failed", "queued")}

    assert set(built) <= set(by_state["succeeded"]) and failed_id not in by_state["succeeded"]
    assert by_state["failed"] == [failed_id]
    assert waiting in by_state["queued"] and not {*built, failed_id} & set(by_state["queued"])


@pytest.mark.parametrize("cursor", ["not base64 !", "bm90IGpzb24", "WzEsIDJd", "WyJ4IiwgInkiXQ"])
def test_a_cursor_the_service_did_not_give_is_a_bad_cursor_problem(client: TestClient, cursor: str) -> None:
    response = client.get("/modules", params={"cursor": cursor})

    assert response.status_code == 400
    assert response.json()["type"] == PROBLEMS + "bad-cursor"


@pytest.mark.parametrize("query", [{"limit": 0}, {"limit": 101}, {"state": "gone"}])
def test_listing_refuses_bad_limits_and_unknown_states(client: TestClient, query: dict[str, object]) -> None:
    response = client.get("/modules", params=query)

    assert response.status_code == 422
    assert response.json()["type"] == PROBLEMS + "validation-error"


def test_diff_of_two_modules_shows_what_changed_in_each_kind(client: TestClient, built: list[str]) -> None:
    a = client.get(f"/modules/{built[0]}").json()
    b = build(client, small_relay(0).replace("nn.relu(add(%x, %y))", "nn.relu(subtract(%x, %y))"))

    diff = client.get(f"/modules/{a['id']}/diff/{b['id']}").json()

    assert (diff["a"], diff["b"]) == (a["id"], b["id"])
    assert set(diff["diffs"]) == {"lowered", "c", "report"}
    assert all(d["changed"] for d in diff["diffs"].values())
    lowered = diff["diffs"]["lowered"]["diff"]
    assert lowered.startswith("--- a/lowered.relay\n+++ b/lowered.relay\n")
    assert any(line.startswith("+") and "subtract" in line for line in lowered.splitlines())
    c = diff["diffs"]["c"]["diff"]
    assert "--- a/src/default_lib1.c" in c and any(line.startswith("+") and "-" in line[1:] for line in c.splitlines())


def test_diff_of_a_module_with_itself_is_empty(client: TestClient, built: list[str]) -> None:
    diff = client.get(f"/modules/{built[0]}/diff/{built[0]}").json()

    assert diff["diffs"] == {kind: {"changed": False, "diff": "", "truncated": False} for kind in ("lowered", "c", "report")}


def test_diff_with_an_unknown_or_unbuilt_module_is_a_problem(client: TestClient, built: list[str]) -> None:
    store = client.app.state.relaycc.store  # type: ignore[attr-defined]
    # Stored but never handed to a worker: it stays queued.
    queued, _ = store.create({"relay": small_relay(97), "module_name": "default", "target": "c"}, {},
                             JobLimits(compile_seconds=1, memory_bytes=1 << 30, max_attempts=1), "ip:test")

    unknown = client.get(f"/modules/{built[0]}/diff/{'0' * 64}")
    malformed = client.get(f"/modules/nonsense/diff/{built[0]}")
    unbuilt = client.get(f"/modules/{queued}/diff/{built[0]}")

    assert unknown.status_code == 404 and unknown.json()["type"] == PROBLEMS + "not-found"
    assert malformed.status_code == 404
    assert unbuilt.status_code == 409 and unbuilt.json()["type"] == PROBLEMS + "module-not-ready"


def test_delete_removes_the_module_and_a_second_delete_is_not_found(client: TestClient) -> None:
    mid = build(client, small_relay(40))["id"]

    first = client.delete(f"/modules/{mid}")
    again = client.delete(f"/modules/{mid}")

    assert first.status_code == 204 and first.content == b""
    assert client.get(f"/modules/{mid}").status_code == 404
    assert again.status_code == 404 and again.json()["type"] == PROBLEMS + "not-found"
    assert mid not in {m["id"] for m in client.get("/modules", params={"limit": 100}).json()["modules"]}
    # An identical request queues it anew under the same id.
    again_built = client.post("/compile", json={"relay": small_relay(40)})
    assert again_built.status_code == 202 and again_built.json()["id"] == mid


def test_a_module_with_a_job_in_flight_is_not_deleted(client: TestClient) -> None:
    store = client.app.state.relaycc.store  # type: ignore[attr-defined]
    # Stored but never handed to a worker: it stays queued.
    queued, _ = store.create({"relay": small_relay(41), "module_name": "default", "target": "c"}, {},
                             JobLimits(compile_seconds=1, memory_bytes=1 << 30, max_attempts=1), "ip:test")

    response = client.delete(f"/modules/{queued}")

    assert response.status_code == 409
    assert response.json()["type"] == PROBLEMS + "module-busy"
    assert client.get(f"/modules/{queued}").json()["state"] == "queued"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(tmp_path_factory.mktemp("keyed") / "store", api_keys="alpha, beta")
    with TestClient(make_app(settings)) as client:
        yield client


def test_with_api_keys_a_client_lists_and_deletes_only_its_own_modules(keyed: TestClient) -> None:
    alpha, beta = ({"Authorization": f"Bearer {key}"} for key in ("alpha", "beta"))
    response = keyed.post("/compile", json={"relay": small_relay(42)}, headers=alpha)
    mid = wait_until_done_as(keyed, response.json()["id"], alpha)

    listed = {key: [m["id"] for m in keyed.get("/modules", headers=h).json()["modules"]]
              for key, h in (("alpha", alpha), ("beta", beta))}
    refused = keyed.delete(f"/modules/{mid}", headers=beta)
    anonymous = keyed.delete(f"/modules/{mid}")
    allowed = keyed.delete(f"/modules/{mid}", headers=alpha)

    assert listed == {"alpha": [mid], "beta": []}
    assert refused.status_code == 403 and refused.json()["type"] == PROBLEMS + "forbidden"
    assert anonymous.status_code == 401
    assert allowed.status_code == 204


def wait_until_done_as(client: TestClient, mid: str, headers: dict[str, str]) -> str:
    deadline = time.monotonic() + 60
    while client.get(f"/modules/{mid}", headers=headers).json()["state"] in ("queued", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return mid


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/modules"), ("DELETE", "/modules/" + "0" * 64), ("GET", f"/modules/{'0' * 64}/diff/{'1' * 64}"),
])
def test_with_api_keys_every_new_route_needs_a_key(keyed: TestClient, method: str, path: str) -> None:
    response = keyed.request(method, path)

    assert response.status_code == 401 and response.json()["type"] == PROBLEMS + "unauthorized"
