"""Helpers shared by the service tests."""

from __future__ import annotations

import base64
import errno
import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

import numpy as np
import pytest
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
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    """A `relaycc serve` process (its own session, so it can be killed with all it started)."""

    base: str
    process: subprocess.Popen[bytes]

    def kill_everything(self) -> None:
        """SIGKILL the server, its workers and their jobs at once, as a crash of the machine's
        service would."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


@contextmanager
def serving(store: Path, *, workers: int = 2, api_keys: str = "", **env: str) -> Iterator[Server]:
    """`relaycc serve` in a subprocess on a free port; RELAYCC_* settings from `env`
    (`job_start_delay_seconds="2"` sets RELAYCC_JOB_START_DELAY_SECONDS)."""
    port = free_port()
    store.parent.mkdir(parents=True, exist_ok=True)
    log = store.parent / f"server-{port}.log"  # a file, not a pipe: nobody reads it while it runs
    environment = {**os.environ, "RELAYCC_STORE": str(store), "PYTHONPATH": str(ROOT), "RELAYCC_API_KEYS": api_keys,
                   **{f"RELAYCC_{name.upper()}": value for name, value in env.items()}}
    process = subprocess.Popen(
        [sys.executable, "-m", "compiler", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--workers", str(workers)],
        cwd=store.parent, env=environment, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
        start_new_session=True,
    )
    server = Server(f"http://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{server.base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None:
                raise RuntimeError(f"the server exited: {log.read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not come up within 60 s")
            # Each start is waited for by a test: a coarse poll adds half its interval to every one.
            time.sleep(0.02)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill_everything()
@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted on `path` (a store that can really be filled up or made
    read-only); the test is skipped where this process may not mount."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def remount(path: Path, mode: str) -> None:
    """Remount the tmpfs at `path` `ro` or `rw`."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True, capture_output=True)


def fill(directory: Path) -> Path:
    """Write a file in `directory` until its file system has no space left; the file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as stream:
        try:
            while True:
                stream.write(b"\0" * 65536)
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
    return filler
