"""Helpers shared by the service tests."""

from __future__ import annotations

import base64
import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings, get_settings

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "models"

# A tiny model: compiles in a fraction of a second.
SMALL_RELAY = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  nn.relu(add(%x, %y))
}
"""


def small_relay(variant: int = 0) -> str:
    """SMALL_RELAY, made distinct (a different module id) by a comment."""
    return SMALL_RELAY + f"// variant {variant}\n"


def npz_b64(**arrays: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def from_npz_b64(text: str) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def wait_until_done(client: TestClient, module_id: str, timeout: float = 60.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        status = client.get(f"/modules/{module_id}").json()
        if status["state"] in ("succeeded", "failed") or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def make_settings(store: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {"host": "127.0.0.1", "port": 8000, "workers": 1, "store": store}
    values.update(overrides)
    return Settings.model_validate(values)


def make_app(settings: Settings) -> FastAPI:
    app = create_app()
    app.dependency_overrides[get_settings] = lambda: settings
    return app


def gone_within(pid: int, seconds: float) -> bool:
    """True once process `pid` has exited (a zombie waiting for its reaper counts as exited)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(directory: Path, env: dict[str, str]) -> Iterator[str]:
    """A real server started the way `relaycc serve` starts it (a subprocess on a free port),
    its store under `directory`, RELAYCC_* overrides in `env`; yields its base URL."""
    port = free_port()
    full_env = {**os.environ, "RELAYCC_STORE": str(directory / "store"), "PYTHONPATH": str(ROOT), **env}
    process = subprocess.Popen(
        [sys.executable, "-m", "compiler", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=directory, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None:
                output = process.stdout.read().decode() if process.stdout else ""
                raise AssertionError(f"the server exited: {output}")
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
