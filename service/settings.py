"""The service's options, read from RELAYCC_* environment variables.

Settings are built on first use, never at import time, and reached through `get_settings`, so a
test can hand the app its own with `app.dependency_overrides[get_settings]`.

Every limit has a default that is safe to expose: a request over a limit is refused with a
problem naming the limit, and a job over its time or memory limit fails without harming the
service.
"""

from __future__ import annotations

import ipaddress
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from fastapi import Depends
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service.metrics import default_directory

MiB = 1024 * 1024
GiB = 1024 * MiB


def _cpu_count() -> int:
    return os.cpu_count() or 1


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RELAYCC_")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    # Processes that compile models; the HTTP server itself is one process.
    workers: int = Field(default_factory=_cpu_count, ge=1)
    # Where built modules and their artifacts are kept, keyed by module id: a directory, or an
    # S3 bucket as `s3://bucket/prefix` (endpoint and credentials from the AWS_* variables).
    store: Path | str = Path(".relaycc-store")
    # Where a process keeps checked copies of an S3 store's artifacts (serving, runs); unset: a
    # directory under the system's temporary directory.
    store_cache: Path | None = None
    # `embedded`: a pool of worker processes owned by the API process. `celery`: jobs go to
    # Celery workers through Redis (service/jobs/celery_app.py), sharing the store with the API.
    queue: Literal["embedded", "celery"] = "embedded"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Where every process serving the store writes its Prometheus metrics (service/metrics.py);
    # unset: a directory in the system's temporary directory named after the store.
    metrics_dir: Path | None = None
    # `json`: one JSON object a line (service/log_format.py); `text`: lines for people.
    log_format: Literal["text", "json"] = "text"

    # Request limits, checked in the API process before anything is queued.
    max_body_bytes: int = Field(default=64 * MiB, ge=1)
    max_relay_bytes: int = Field(default=4 * MiB, ge=1)
    max_nodes: int = Field(default=250_000, ge=1)
    max_tensor_elements: int = Field(default=1 << 26, ge=1)
    # Bytes of array data (elements times item size) in the params of a compile or the inputs
    # of a run, checked from the .npz headers before anything is decoded.
    max_tensor_bytes: int = Field(default=256 * MiB, ge=1)
    # Jobs (compiles and runs) one client may have queued or running at once; a client is its
    # API key when keys are configured, else its IP address (service/api/security.py).
    max_jobs_per_client: int = Field(default=8, ge=1)
    # Comma-separated IP addresses or CIDR networks of reverse proxies whose X-Forwarded-For is
    # believed; from any other peer the header is ignored. Empty: the peer address decides.
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = ()
    # `POST /compile?wait=` never holds a connection longer than this.
    max_wait_seconds: float = Field(default=60.0, ge=0)
    # How long an idle keep-alive connection stays open. Longer than the idle timeouts of the
    # proxies and load balancers in front of services (60 s is common), so that the proxy, not
    # this server, closes first; with uvicorn's 5 s a client that sent its next request as the
    # server closed the connection got a reset, not knowing whether its compile was taken (seen
    # under load: tests/service/test_load.py).
    keep_alive_seconds: int = Field(default=75, ge=1)

    # Job limits, enforced in the process that does the work.
    compile_seconds: float = Field(default=300.0, gt=0)
    run_seconds: float = Field(default=60.0, gt=0)
    memory_bytes: int = Field(default=4 * GiB, ge=64 * MiB)
    max_run_repeat: int = Field(default=1000, ge=1)
    # A run may ask for this many threads (`threads` of the run request); by default the cores
    # of the worker's machine, since more only make the run's threads take turns. Threads count
    # against a run's process limit (64).
    max_run_threads: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1, le=32)
    # A job whose worker dies this many times is failed instead of being tried again.
    max_attempts: int = Field(default=3, ge=1)

    # Comma-separated bearer keys; empty means the API is open.
    api_keys: Annotated[tuple[str, ...], NoDecode] = ()
    # Whether codegen documents may bring C sources that are compiled into the model and run.
    # Unset: only when API keys are configured (an open service runs no stranger's C). Either
    # way user C needs the sandbox; without one it is refused and /readyz says why.
    allow_user_c: bool | None = None

    # How builds and runs are isolated. `auto`: in a bubblewrap sandbox where this machine can
    # start one, else in a forked child (user C refused); `required`: the sandbox or nothing,
    # the service does not start without it; `off`: forked children only (user C refused).
    sandbox: Literal["auto", "required", "off"] = "auto"
    # A build's own hard limits in the sandbox, besides its time and memory: processes (gcc
    # runs several) and the largest file it may write (a library with its weights linked in).
    build_processes: int = Field(default=256, ge=8)
    build_file_bytes: int = Field(default=4 * GiB, ge=MiB)

    # For tests and demonstrations only: every compile job sleeps this long before it starts
    # building, so that its worker can be observed (or killed) while the job is running.
    job_start_delay_seconds: float = Field(default=0.0, ge=0)

    def metrics_directory(self) -> Path:
        return self.metrics_dir if self.metrics_dir is not None else default_directory(self.store)

    def user_c_allowed(self) -> bool:
        """Whether this service's policy lets clients send C (the sandbox is checked apart)."""
        return self.allow_user_c if self.allow_user_c is not None else bool(self.api_keys)

    @field_validator("store", mode="before")
    @classmethod
    def _store_location(cls, value: object) -> object:
        # An S3 URL stays text (a Path would fold its `//`); anything else is a directory.
        if isinstance(value, str) and value.startswith("s3://"):
            from service.store.s3 import parse_url

            parse_url(value)  # a malformed URL stops the service at start-up, naming it
            return value
        return Path(value) if isinstance(value, str) else value

    def store_location(self) -> str | Path:
        """The store as `open_store` takes it: an S3 URL, or the directory made absolute."""
        return self.store.resolve() if isinstance(self.store, Path) else self.store

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(key.strip() for key in value.split(",") if key.strip())
        return value


    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _split_networks(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, (list, tuple)):
            # A bare address is a network of one; an invalid entry is a ValueError, so the
            # service refuses to start rather than trusting something it cannot read.
            return tuple(str(ipaddress.ip_network(str(part), strict=False)) for part in value)
        return value


@lru_cache
def get_settings() -> Settings:
    return Settings()


SettingsDep = Annotated[Settings, Depends(get_settings)]
