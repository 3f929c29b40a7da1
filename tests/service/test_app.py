"""The app as a whole: its OpenAPI document, and a real uvicorn process serving it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from service.app import create_app
from tests.service.support import SMALL_RELAY, from_npz_b64, npz_b64

ROOT = Path(__file__).resolve().parents[2]
MAX_BODY = 1_000_000


def test_every_operation_is_documented_with_summary_description_and_examples() -> None:
    document = create_app().openapi()

    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            where = f"{method.upper()} {path}"
            assert operation.get("summary"), where
            assert operation.get("description"), where
            for status, response in operation["responses"].items():
                for media_type, content in response.get("content", {}).items():
                    if media_type == "application/problem+json":
                        assert "example" in content, f"{where} {status}"
    schemas = document["components"]["schemas"]
    for name in ("CompileRequest", "ModuleStatus", "ArtifactList", "RunRequest", "RunResponse", "TargetsInfo", "Problem"):
        assert schemas[name].get("examples"), name


def test_errors_are_documented_as_problem_json() -> None:
    operation = create_app().openapi()["paths"]["/compile"]["post"]

    for status in ("400", "401", "413", "422", "429"):
        assert list(operation["responses"][status]["content"]) == ["application/problem+json"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "RELAYCC_STORE": str(tmp_path / "store"), "RELAYCC_MAX_BODY_BYTES": str(MAX_BODY),
           "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "compiler", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.1)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_a_real_server_compiles_serves_and_runs_a_model(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as http:
        accepted = http.post("/compile", json={"relay": SMALL_RELAY})
        assert accepted.status_code == 202
        location = accepted.headers["location"]
        deadline = time.monotonic() + 60
        while (status := http.get(location).json())["state"] in ("queued", "running"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert status["state"] == "succeeded", status["error"]

        library = http.get(f"{location}/artifacts/libdefault.so")
        cached = http.get(f"{location}/artifacts/libdefault.so", headers={"If-None-Match": library.headers["etag"]})
        x = np.array([[1, -2, 3], [4, -5, 6]], dtype="float32")
        run = http.post(f"{location}/run", json={"inputs_npz": npz_b64(x=x, y=np.zeros_like(x))})
        too_large = http.post("/compile", content=b"x" * (2 * MAX_BODY), headers={"content-type": "application/json"})
        parse_error = http.post("/compile", json={"relay": "#[version = \"0.0.5\"]\ndef @main() {"})

    assert library.status_code == 200 and library.content.startswith(b"\x7fELF")
    assert cached.status_code == 304
    assert run.status_code == 200
    np.testing.assert_array_equal(from_npz_b64(run.json()["outputs_npz"])["out0"], np.maximum(x, 0))
    assert too_large.status_code == 413
    assert parse_error.status_code == 400 and parse_error.headers["content-type"] == "application/problem+json"
    assert (parse_error.json()["line"], parse_error.json()["column"]) == (2, 14)


def _serve(store: Path, port: int, cwd: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "compiler", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=cwd, env={**os.environ, "RELAYCC_STORE": str(store), "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_a_second_relaycc_serve_on_the_same_store_exits_naming_the_holder_and_leaves_its_job_alone(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    port = _free_port()
    # The first server's job sleeps before building, so it is running while the second starts.
    first = _serve(store, port, tmp_path, RELAYCC_JOB_START_DELAY_SECONDS="4")
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if http.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert first.poll() is None and time.monotonic() < deadline, "the first server did not come up"
                time.sleep(0.1)
            location = http.post("/compile", json={"relay": SMALL_RELAY}).headers["location"]
            while http.get(location).json()["state"] == "queued":
                assert time.monotonic() < deadline
                time.sleep(0.05)
            running = http.get(location).json()

            second = _serve(store, _free_port(), tmp_path)
            _, stderr = second.communicate(timeout=60)

            deadline = time.monotonic() + 60
            while (status := http.get(location).json())["state"] in ("queued", "running"):
                assert time.monotonic() < deadline, status
                time.sleep(0.1)
    finally:
        first.send_signal(signal.SIGTERM)
        try:
            first.wait(timeout=15)
        except subprocess.TimeoutExpired:
            first.kill()
            first.wait()

    assert running["state"] == "running"
    assert second.returncode != 0
    message = stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert str(store.resolve()) in message and f"pid {first.pid}" in message
    # The first server's job was not reset by the second: it finished in its first attempt.
    assert (status["state"], status["attempts"]) == ("succeeded", 1), status["error"]
