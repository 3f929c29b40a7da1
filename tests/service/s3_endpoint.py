"""A real S3 endpoint for tests: moto's server mode, started as a local process on a free port
(through moto_serialized.py, which makes each request atomic as on S3).

One server per test session (a fixture in tests/service/conftest.py); each test gets a bucket of
its own. The store under test talks to it over HTTP with its ordinary client; nothing is mocked
inside the test process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.service.support import free_port

START_SECONDS = 30.0


@dataclass(frozen=True)
class S3Endpoint:
    url: str

    def env(self) -> dict[str, str]:
        """The variables the store reads, as a service or worker process is given them."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
        }

    def new_bucket(self) -> str:
        """A fresh, empty bucket (created with an unsigned path-style PUT, as moto allows)."""
        name = f"relaycc-{uuid.uuid4().hex[:12]}"
        httpx.put(f"{self.url}/{name}", timeout=10).raise_for_status()
        return name


@contextmanager
def moto_server() -> Iterator[S3Endpoint]:
    port = free_port()
    process = subprocess.Popen(
        # moto's server, one request at a time: see moto_serialized.py for why.
        [sys.executable, str(Path(__file__).with_name("moto_serialized.py")), "127.0.0.1", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ},
    )
    endpoint = S3Endpoint(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                httpx.get(f"{endpoint.url}/moto-api/", timeout=2)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=10)
