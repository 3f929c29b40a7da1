"""The synchronous client: `Client` and the `Module`s it hands out."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.client.wire import (
    EVENT_READ_SECONDS,
    FINAL,
    POLL_FIRST,
    POLL_MAX,
    EventParser,
    EventsUnavailable,
    OnProgress,
    ServiceError,
    Status,
    checked,
    compile_body,
    events_response_ok,
    final_or_raise,
    run_body,
    run_outputs,
    seconds_left,
    timeout_error,
    write_artifact,
)


class Client:
    """A relaycc service at `base_url`; `api_key` when the service has API keys."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return checked(self.http.request(method, path, **kwargs))

    def compile(self, relay_or_path: str | os.PathLike[str], *, wait: float = 0, **options: Any) -> Module:
        """Submit a build (see `compile_body` for the options); the Module, at once (or after up
        to `wait` seconds, when the service waits for the job)."""
        body = compile_body(relay_or_path, **options)
        status = self.request("POST", "/compile", json=body, params={"wait": wait} if wait else None).json()
        return Module(self, status["id"], status)

    def module(self, module_id: str) -> Module:
        return Module(self, module_id, self.request("GET", f"/modules/{module_id}").json())

    def modules(self, state: str | None = None, page_size: int = 50) -> Iterator[Module]:
        """Every stored module (that this client may list), newest first, page by page."""
        params: dict[str, Any] = {"limit": page_size, **({"state": state} if state else {})}
        while True:
            page = self.request("GET", "/modules", params=params).json()
            for status in page["modules"]:
                yield Module(self, status["id"], status)
            if page["next_cursor"] is None:
                return
            params["cursor"] = page["next_cursor"]

    def diff(self, a: Module | str, b: Module | str) -> dict[str, Any]:
        """Unified diffs of two built modules: `{"lowered", "c", "report"}`, each `{changed, diff, truncated}`."""
        ida, idb = (m.id if isinstance(m, Module) else m for m in (a, b))
        return dict(self.request("GET", f"/modules/{ida}/diff/{idb}").json()["diffs"])

    def targets(self) -> dict[str, Any]:
        return dict(self.request("GET", "/targets").json())

    def health(self) -> dict[str, Any]:
        return dict(self.request("GET", "/healthz").json())


class Module:
    """A module of the service, by id; `last_status` is the status seen last."""

    def __init__(self, client: Client, module_id: str, status: Status | None = None):
        self.client = client
        self.id = module_id
        self.last_status: Status = status or {}
        self.last_latency: dict[str, Any] | None = None
        self.last_profile: list[dict[str, Any]] | None = None

    def __repr__(self) -> str:
        return f"Module({self.id[:12]}…, {self.last_status.get('state', '?')})"

    def status(self) -> Status:
        self.last_status = self.client.request("GET", f"/modules/{self.id}").json()
        return self.last_status

    def wait(self, timeout: float | None = None, on_progress: OnProgress | None = None) -> Status:
        """The final status once the job has finished; ServiceError with the job's problem if it
        failed, TimeoutError after `timeout` seconds. `on_progress(progress)` hears each change."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            status = self._follow_events(deadline, on_progress)
        except EventsUnavailable:
            status = self._poll(deadline, on_progress)
        if status is None:
            raise timeout_error(self.id, timeout)
        self.last_status = status
        return final_or_raise(status)

    def _follow_events(self, deadline: float | None, on_progress: OnProgress | None) -> Status | None:
        parser = EventParser()
        while True:
            remaining = seconds_left(deadline)
            if remaining is not None and remaining <= 0:
                return None
            read = EVENT_READ_SECONDS if remaining is None else min(remaining, EVENT_READ_SECONDS)
            try:
                with self.client.http.stream("GET", f"/modules/{self.id}/events",
                                             timeout=httpx.Timeout(10.0, read=read)) as response:
                    events_response_ok(response)
                    for line in response.iter_lines():
                        event = parser.feed(line)
                        if event is None:
                            if deadline is not None and time.monotonic() > deadline:
                                return None
                            continue
                        name, data = event
                        if name == "progress" and on_progress is not None:
                            on_progress(data)
                        elif name == "state":
                            return dict(data)
                        elif name == "error":
                            raise ServiceError(data)
            except httpx.ReadTimeout:
                continue  # nothing within the read timeout: check the deadline, then listen again
            except (httpx.RemoteProtocolError, httpx.ReadError, json.JSONDecodeError):
                raise EventsUnavailable() from None
            # The stream ended without a final state (a proxy cut it): listen again.

    def _poll(self, deadline: float | None, on_progress: OnProgress | None) -> Status | None:
        pause, seen = POLL_FIRST, None
        while True:
            status = self.status()
            if status["state"] in FINAL:
                return status
            progress = status.get("progress")
            if progress and progress != seen and on_progress is not None:
                on_progress(progress)
            seen = progress
            remaining = seconds_left(deadline)
            if remaining is not None and remaining <= 0:
                return None
            time.sleep(pause if remaining is None else min(pause, remaining))
            pause = min(pause * 2, POLL_MAX)

    def metadata(self) -> dict[str, Any]:
        return dict(self.client.request("GET", f"/modules/{self.id}/metadata").json())

    def inspect(self) -> dict[str, Any]:
        return dict(self.client.request("GET", f"/modules/{self.id}/inspect").json())

    def artifacts(self) -> list[dict[str, Any]]:
        return list(self.client.request("GET", f"/modules/{self.id}/artifacts").json()["artifacts"])

    def artifact(self, name: str) -> bytes:
        return self.client.request("GET", f"/modules/{self.id}/artifacts/{name}").content

    def download(self, directory: str | os.PathLike[str]) -> Path:
        """Every artifact into `directory` (the OUTDIR `relaycc run` takes), each checked
        against its sha256; the directory."""
        root = Path(directory)
        for entry in self.artifacts():
            write_artifact(root, entry, self.artifact(str(entry["name"])))
        return root

    def run(self, inputs: Mapping[str, np.ndarray], threads: int | None = None, repeat: int = 1,
            profile: bool = False) -> dict[str, np.ndarray]:
        """The outputs (`out0`, ...) of a run with `inputs`; the latency is in `last_latency`,
        and with `profile` the per-kernel times in `last_profile`."""
        body = run_body(inputs, threads, repeat, profile)
        answer = self.client.request("POST", f"/modules/{self.id}/run", json=body).json()
        self.last_latency = answer.get("latency")
        self.last_profile = answer.get("profile")
        return run_outputs(answer)

    def delete(self) -> None:
        self.client.request("DELETE", f"/modules/{self.id}")
