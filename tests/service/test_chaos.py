"""Chaos: processes killed at bad moments, and the service keeps its promises afterwards.

Every job ends in a final state, nothing half-written is served (each artifact matches the
sha256 recorded for it), and the next job succeeds.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.service.support import SMALL_RELAY, from_npz_b64, npz_b64, serving

FINAL = ("succeeded", "failed")


def wait_final(http: httpx.Client, module_id: str, seconds: float = 120) -> dict[str, object]:
    deadline = time.monotonic() + seconds
    while (status := http.get(f"/modules/{module_id}").json())["state"] not in FINAL:
        assert time.monotonic() < deadline, f"{module_id} still {status['state']}"
        time.sleep(0.1)
    return status


def assert_served_intact(http: httpx.Client, module_id: str) -> None:
    response = http.get(f"/modules/{module_id}/artifacts")
    assert response.status_code == 200, response.text
    entries = response.json()["artifacts"]
    assert entries
    for entry in entries:
        body = http.get(f"/modules/{module_id}/artifacts/{entry['name']}").content
        assert hashlib.sha256(body).hexdigest() == entry["sha256"], entry["name"]


def submit(http: httpx.Client, variant: str) -> str:
    response = http.post("/compile", json={"relay": SMALL_RELAY + f"// chaos {variant}\n"})
    assert response.status_code in (200, 202), response.text
    return str(response.json()["id"])


def test_jobs_survive_the_whole_service_being_killed_mid_compile_and_restarted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    rng = random.Random(13)
    ids: list[str] = []
    # Two crashes: a job in flight at both is on its third and last attempt (RELAYCC_MAX_ATTEMPTS).
    for round_ in range(2):
        with serving(store, workers=2) as server, httpx.Client(base_url=server.base, timeout=30) as http:
            ids += [submit(http, f"{round_}-{n}") for n in range(3)]
            time.sleep(rng.uniform(0.2, 2.0))  # somewhere in parsing, building or storing
            server.kill_everything()
    with serving(store, workers=2) as server, httpx.Client(base_url=server.base, timeout=30) as http:
        statuses = [wait_final(http, module_id) for module_id in ids]
        for status in statuses:
            assert status["state"] == "succeeded", status["error"]
            assert_served_intact(http, str(status["id"]))
        assert wait_final(http, submit(http, "after"))["state"] == "succeeded"


def test_a_worker_killed_mid_run_fails_that_run_and_the_next_run_succeeds(tmp_path: Path) -> None:
    with serving(tmp_path / "store", workers=1) as server, httpx.Client(base_url=server.base, timeout=60) as http:
        module_id = submit(http, "run")
        assert wait_final(http, module_id)["state"] == "succeeded"
        x = np.ones((2, 3), "float32")
        worker = _only_worker(server.process.pid)
        killer = _kill_soon(worker)
        try:
            killed = http.post(f"/modules/{module_id}/run", json={"inputs_npz": npz_b64(x=x, y=x), "repeat": 1000})
        finally:
            killer.join()
        after = http.post(f"/modules/{module_id}/run", json={"inputs_npz": npz_b64(x=x, y=x)})

    assert killed.status_code >= 400 and killed.headers["content-type"] == "application/problem+json"
    assert killed.json()["type"].rsplit("/", 1)[1] in ("run-crashed", "worker-died")
    assert after.status_code == 200, after.text
    np.testing.assert_array_equal(from_npz_b64(after.json()["outputs_npz"])["out0"], 2 * x)


def _only_worker(server_pid: int) -> int:
    """The one worker process of the server: a child of multiprocessing's forkserver, which is
    the server's child (workers are forked from it, so they share its command line)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for pid in _descendants(server_pid):
            if _parent(pid) == server_pid and b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                workers = [child for child in _descendants(pid) if _parent(child) == pid]
                if workers:
                    return workers[0]
        time.sleep(0.1)
    raise AssertionError("no worker process found")


def _descendants(pid: int) -> list[int]:
    children = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                children.setdefault(_parent(int(entry.name)), []).append(int(entry.name))
            except OSError:
                continue
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _kill_soon(pid: int):  # noqa: ANN202
    """Kill the worker `pid` once it has started the run's process (the sandbox), in a thread."""
    import threading

    def kill() -> None:
        deadline = time.monotonic() + 30
        while not _descendants(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)

    thread = threading.Thread(target=kill)
    thread.start()
    return thread


# `off`: the build runs in a forked child that writes into the store itself (a CI machine
# without user namespaces takes this path under `auto`).
@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_a_store_that_fills_up_mid_compile_fails_the_job_and_the_next_one_succeeds(tmp_path: Path, sandbox: str) -> None:
    from fastapi.testclient import TestClient

    from tests.service.support import fill, make_app, make_settings, tmpfs

    with tmpfs(tmp_path / "store", "8m") as store:
        settings = make_settings(store, workers=1, job_start_delay_seconds=1.0, sandbox=sandbox)
        with TestClient(make_app(settings)) as client:
            accepted = client.post("/compile", json={"relay": SMALL_RELAY + "// fills up\n"})
            module_id = accepted.json()["id"]
            while client.get(f"/modules/{module_id}").json()["state"] == "queued":
                time.sleep(0.05)
            filler = fill(store / "modules")  # while the job waits to build
            # The job cannot store its artifacts, nor record that: it waits for space.
            _wait_for_the_build_to_be_given_up(store, seconds=6)
            unready = client.get("/readyz")
            filler.unlink()  # an operator frees space
            ready = client.get("/readyz")
            deadline = time.monotonic() + 60
            while (status := client.get(f"/modules/{module_id}").json())["state"] not in FINAL:
                assert time.monotonic() < deadline, status
                time.sleep(0.1)
            again = client.post("/compile?wait=60", json={"relay": SMALL_RELAY + "// fills up\n"})
            final = client.get(f"/modules/{module_id}").json()
            while final["state"] not in FINAL:
                time.sleep(0.1)
                final = client.get(f"/modules/{module_id}").json()
            assert status["state"] == "failed", status
            assert status["error"]["type"].endswith("/store-unavailable"), status["error"]
            assert unready.status_code == 503 and ready.status_code == 200, (unready.text, ready.text)
            assert again.status_code in (200, 202), again.text
            assert final["state"] == "succeeded", final
            assert_served_intact(client, module_id)  # type: ignore[arg-type]


def _wait_for_the_build_to_be_given_up(store: Path, seconds: float) -> None:
    """Until the job's work directory in the store, where its build is stored, has come and gone:
    it is removed once storing the build failed. At most `seconds`, the fixed pause this replaces
    (a job that never got a work directory is waited for that long)."""
    deadline = time.monotonic() + seconds
    seen = False
    while time.monotonic() < deadline:
        present = any(store.glob("modules/**/work-*"))
        if seen and not present:
            return
        seen = seen or present
        time.sleep(0.02)
