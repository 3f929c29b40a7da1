from __future__ import annotations

import re

from fastapi.testclient import TestClient

from tests.service.support import small_relay


def sample(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing from:\n{text}"
    return float(match.group(1))


def test_metrics_count_jobs_compile_times_and_cache_hits(client: TestClient) -> None:
    client.post("/compile?wait=60", json={"relay": small_relay(30)})
    client.post("/compile", json={"relay": small_relay(30)})

    response = client.get("/metrics")

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = response.text
    assert sample(text, 'relaycc_jobs{state="succeeded"}') == 1
    assert sample(text, 'relaycc_jobs{state="failed"}') == 0
    assert sample(text, "relaycc_compile_seconds_count") == 1
    assert sample(text, 'relaycc_compile_seconds_bucket{le="+Inf"}') == 1
    assert sample(text, "relaycc_compile_seconds_sum") > 0
    assert sample(text, "relaycc_cache_hits_total") == 1
    assert sample(text, "relaycc_compile_requests_total") == 2
    assert sample(text, "relaycc_queue_depth") == 0


def test_metrics_follow_the_text_format(client: TestClient) -> None:
    text = client.get("/metrics").text

    assert text.endswith("\n")
    for line in text.splitlines():
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or re.match(r"^[a-z_]+(\{[^}]*\})? \S+$", line)
    buckets = [float(v) for v in re.findall(r'^relaycc_compile_seconds_bucket\{le="[^"]+"\} (\S+)$', text, re.M)]
    assert buckets == sorted(buckets)


def test_metrics_count_integrity_failures_and_quarantined_entries_from_the_store(client: TestClient) -> None:
    before = client.get("/metrics").text
    built = client.post("/compile?wait=60", json={"relay": small_relay(31)}).json()
    store = client.app.state.relaycc.store
    with open(store.modules / built["id"] / "artifacts" / "metadata.json", "ab") as stream:
        stream.write(b" ")
    assert client.get(f"/modules/{built['id']}/metadata").status_code == 500
    (store.modules / built["id"] / "status.json").write_text("{}")
    client.get(f"/modules/{built['id']}")

    after = client.get("/metrics").text

    assert sample(before, "relaycc_artifact_integrity_failures_total") == 0
    assert sample(before, "relaycc_store_quarantined_entries_total") == 0
    assert sample(after, "relaycc_artifact_integrity_failures_total") == 1
    assert sample(after, "relaycc_store_quarantined_entries_total") == 1
