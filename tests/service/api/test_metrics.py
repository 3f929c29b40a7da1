from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service import metrics
from tests.service.support import make_app, make_settings, npz_b64, small_relay


def scrape(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics by (name, sorted labels), read with prometheus_client's parser."""
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"{name}{labels} missing from {sorted(k for k in samples if k[0] == name)}"
    return samples[key]


def test_metrics_count_jobs_compile_times_and_cache_hits(client: TestClient) -> None:
    client.post("/compile?wait=60", json={"relay": small_relay(30)})
    client.post("/compile", json={"relay": small_relay(30)})

    response = client.get("/metrics")
    samples = scrape(client)

    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert value(samples, "relaycc_jobs", state="succeeded") == 1
    assert value(samples, "relaycc_jobs", state="failed") == 0
    assert value(samples, "relaycc_jobs", state="queued") == 0
    assert value(samples, "relaycc_compile_seconds_count") == 1
    assert value(samples, "relaycc_compile_seconds_bucket", le="+Inf") == 1
    assert value(samples, "relaycc_compile_seconds_sum") > 0
    assert value(samples, "relaycc_queue_seconds_count") == 1
    assert value(samples, "relaycc_cache_hits_total") == 1
    assert value(samples, "relaycc_compile_requests_total") == 2
    assert value(samples, "relaycc_queue_depth") == 0


def test_compiles_and_runs_in_several_worker_processes_add_up_in_one_scrape(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store", workers=2, job_start_delay_seconds=0.5,
                             metrics_dir=tmp_path / "metrics")
    x = np.ones((2, 3), np.float32)
    with TestClient(make_app(settings)) as client:
        # Two at once, each delayed in its worker: both workers compile one.
        threads = [threading.Thread(target=client.post, args=("/compile?wait=60",), kwargs={"json": {"relay": small_relay(v)}})
                   for v in (40, 41)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ids = [client.post("/compile", json={"relay": small_relay(v)}).json()["id"] for v in (40, 41)]
        for mid in ids:
            for _ in range(2):
                ran = client.post(f"/modules/{mid}/run", json={"inputs_npz": npz_b64(x=x, y=x)})
                assert ran.status_code == 200, ran.text
        client.get(f"/modules/{ids[0]}")
        client.head(f"/modules/{ids[0]}")
        client.get("/modules/" + "0" * 64)
        client.get("/no/such/route")
        samples = scrape(client)
        pool = client.app.state.relaycc.queue.worker_pids()
        histogram_pids = {int(p.stem.split("_")[-1]) for p in (tmp_path / "metrics").glob("histogram_*.db")}

    assert not (tmp_path / "metrics").exists()  # the last process to leave removed it
    assert len(set(pool) & histogram_pids) == 2  # both workers recorded their compiles or runs
    assert value(samples, "relaycc_jobs", state="succeeded") == 2
    assert value(samples, "relaycc_jobs", state="running") == 0
    assert value(samples, "relaycc_jobs", state="queued") == 0
    assert value(samples, "relaycc_compile_seconds_count") == 2
    assert value(samples, "relaycc_queue_seconds_count") == 2
    assert value(samples, "relaycc_run_seconds_count") == 4
    assert value(samples, "relaycc_runs_total") == 4
    assert value(samples, "relaycc_cache_hits_total") == 2
    assert value(samples, "relaycc_compile_requests_total") == 4
    http = "relaycc_http_requests_total"
    assert value(samples, http, route="/compile", method="POST", status="200") == 4
    assert value(samples, http, route="/modules/{module_id}/run", method="POST", status="200") == 4
    assert value(samples, http, route="/modules/{module_id}", method="GET", status="200") == 1
    assert value(samples, http, route="/modules/{module_id}", method="HEAD", status="200") == 1
    assert value(samples, http, route="/modules/{module_id}", method="GET", status="404") == 1
    assert value(samples, http, route="unmatched", method="GET", status="404") == 1
    assert value(samples, "relaycc_http_request_seconds_count", route="/modules/{module_id}/run") == 4
    assert not any(name.startswith("relaycc_http") and "0" * 64 in str(labels) for name, labels in samples)


def test_job_counts_start_from_the_store_and_survive_a_restart(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "store", metrics_dir=tmp_path / "metrics")
    with TestClient(make_app(settings)) as client:
        client.post("/compile?wait=60", json={"relay": small_relay(50)})
    with TestClient(make_app(settings)) as client:
        samples = scrape(client)

    assert value(samples, "relaycc_jobs", state="succeeded") == 1
    assert value(samples, "relaycc_compile_seconds_count") == 0  # the directory was emptied


def test_a_process_joining_live_ones_keeps_their_numbers_and_does_not_count_the_store_again(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    first = metrics.attach(directory)
    metrics.set_job_counts({"succeeded": 3})
    try:
        second = metrics.attach(directory)
        try:
            assert first.first and not second.first
            assert sorted(p.name for p in directory.glob("*.db"))  # the first one's files are still there
        finally:
            second.release()
        assert directory.is_dir()  # the first one still uses it
    finally:
        first.release()


_counting = {"on": False, "events": 0}


def _audit(event: str, args: tuple) -> None:
    if _counting["on"] and event in ("open", "os.listdir", "os.scandir"):
        _counting["events"] += 1


sys.addaudithook(_audit)


@pytest.fixture
def counted() -> Iterator[dict[str, object]]:
    yield _counting
    _counting["on"] = False


def _files_touched_by_a_scrape(client: TestClient) -> int:
    client.get("/metrics")  # the first scrape may import what it needs
    _counting["events"] = 0
    _counting["on"] = True
    client.get("/metrics")
    _counting["on"] = False
    return int(_counting["events"])


def test_a_scrape_with_10000_stored_modules_opens_no_more_files_than_with_10(tmp_path: Path, counted) -> None:
    settings = make_settings(tmp_path / "store", metrics_dir=tmp_path / "metrics")
    with TestClient(make_app(settings)) as client:
        built = client.post("/compile?wait=60", json={"relay": small_relay(60)}).json()
        store = client.app.state.relaycc.store
        status = json.loads((store.modules / built["id"] / "status.json").read_text())

        def add_modules(count: int) -> None:
            for n in range(9 if count > 9 else 0, count):
                mid = f"{n:064x}"
                (store.modules / mid).mkdir()
                (store.modules / mid / "status.json").write_text(json.dumps({**status, "id": mid}))

        add_modules(9)
        with_10 = _files_touched_by_a_scrape(client)
        add_modules(9_999)  # the first 9 exist: mkdir would fail on them
        assert len(list(store.ids())) == 10_000
        with_10000 = _files_touched_by_a_scrape(client)

    assert with_10 > 0  # the hook sees the scrape read the metrics files
    assert with_10000 == with_10


def test_metrics_count_integrity_failures_and_quarantined_entries_from_the_store(client: TestClient) -> None:
    before = scrape(client)
    built = client.post("/compile?wait=60", json={"relay": small_relay(31)}).json()
    store = client.app.state.relaycc.store
    with open(store.modules / built["id"] / "artifacts" / "metadata.json", "ab") as stream:
        stream.write(b" ")
    assert client.get(f"/modules/{built['id']}/metadata").status_code == 500
    (store.modules / built["id"] / "status.json").write_text("{}")
    client.get(f"/modules/{built['id']}")

    after = scrape(client)

    assert value(before, "relaycc_artifact_integrity_failures_total") == 0
    assert value(before, "relaycc_store_quarantined_entries_total") == 0
    assert value(after, "relaycc_artifact_integrity_failures_total") == 1
    assert value(after, "relaycc_store_quarantined_entries_total") == 1
