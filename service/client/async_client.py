"""The asynchronous client: `AsyncClient` and the `AsyncModule`s it hands out (httpx.AsyncClient;
asyncio or trio)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
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


class AsyncClient:
    """`Client` with async methods (httpx.AsyncClient)."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 60.0,
                 transport: httpx.AsyncBaseTransport | None = None):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout,
                                      transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return checked(await self.http.request(method, path, **kwargs))

    async def compile(self, relay_or_path: str | os.PathLike[str], *, wait: float = 0, **options: Any) -> AsyncModule:
        body = compile_body(relay_or_path, **options)
        status = (await self.request("POST", "/compile", json=body, params={"wait": wait} if wait else None)).json()
        return AsyncModule(self, status["id"], status)

    async def module(self, module_id: str) -> AsyncModule:
        return AsyncModule(self, module_id, (await self.request("GET", f"/modules/{module_id}")).json())

    async def modules(self, state: str | None = None, page_size: int = 50) -> AsyncIterator[AsyncModule]:
        params: dict[str, Any] = {"limit": page_size, **({"state": state} if state else {})}
        while True:
            page = (await self.request("GET", "/modules", params=params)).json()
            for status in page["modules"]:
                yield AsyncModule(self, status["id"], status)
            if page["next_cursor"] is None:
                return
            params["cursor"] = page["next_cursor"]

    async def diff(self, a: AsyncModule | str, b: AsyncModule | str) -> dict[str, Any]:
        ida, idb = (m.id if isinstance(m, AsyncModule) else m for m in (a, b))
        return dict((await self.request("GET", f"/modules/{ida}/diff/{idb}")).json()["diffs"])

    async def targets(self) -> dict[str, Any]:
        return dict((await self.request("GET", "/targets")).json())

    async def health(self) -> dict[str, Any]:
        return dict((await self.request("GET", "/healthz")).json())


class AsyncModule:
    """`Module` with async methods."""

    def __init__(self, client: AsyncClient, module_id: str, status: Status | None = None):
        self.client = client
        self.id = module_id
        self.last_status: Status = status or {}
        self.last_latency: dict[str, Any] | None = None
        self.last_profile: list[dict[str, Any]] | None = None

    def __repr__(self) -> str:
        return f"AsyncModule({self.id[:12]}…, {self.last_status.get('state', '?')})"

    async def status(self) -> Status:
        self.last_status = (await self.client.request("GET", f"/modules/{self.id}")).json()
        return self.last_status

    async def wait(self, timeout: float | None = None, on_progress: OnProgress | None = None) -> Status:
        import anyio

        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            status = await self._follow_events(deadline, on_progress)
        except EventsUnavailable:
            status = await self._poll(deadline, on_progress, anyio.sleep)
        if status is None:
            raise timeout_error(self.id, timeout)
        self.last_status = status
        return final_or_raise(status)

    async def _follow_events(self, deadline: float | None, on_progress: OnProgress | None) -> Status | None:
        parser = EventParser()
        while True:
            remaining = seconds_left(deadline)
            if remaining is not None and remaining <= 0:
                return None
            read = EVENT_READ_SECONDS if remaining is None else min(remaining, EVENT_READ_SECONDS)
            try:
                async with self.client.http.stream("GET", f"/modules/{self.id}/events",
                                                   timeout=httpx.Timeout(10.0, read=read)) as response:
                    if response.status_code != 200:
                        await response.aread()
                    events_response_ok(response)
                    async for line in response.aiter_lines():
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
                continue
            except (httpx.RemoteProtocolError, httpx.ReadError, json.JSONDecodeError):
                raise EventsUnavailable() from None

    async def _poll(self, deadline: float | None, on_progress: OnProgress | None,
                    sleep: Callable[[float], Any]) -> Status | None:
        pause, seen = POLL_FIRST, None
        while True:
            status = await self.status()
            if status["state"] in FINAL:
                return status
            progress = status.get("progress")
            if progress and progress != seen and on_progress is not None:
                on_progress(progress)
            seen = progress
            remaining = seconds_left(deadline)
            if remaining is not None and remaining <= 0:
                return None
            await sleep(pause if remaining is None else min(pause, remaining))
            pause = min(pause * 2, POLL_MAX)

    async def metadata(self) -> dict[str, Any]:
        return dict((await self.client.request("GET", f"/modules/{self.id}/metadata")).json())

    async def inspect(self) -> dict[str, Any]:
        return dict((await self.client.request("GET", f"/modules/{self.id}/inspect")).json())

    async def artifacts(self) -> list[dict[str, Any]]:
        return list((await self.client.request("GET", f"/modules/{self.id}/artifacts")).json()["artifacts"])

    async def artifact(self, name: str) -> bytes:
        return (await self.client.request("GET", f"/modules/{self.id}/artifacts/{name}")).content

    async def download(self, directory: str | os.PathLike[str]) -> Path:
        root = Path(directory)
        for entry in await self.artifacts():
            write_artifact(root, entry, await self.artifact(str(entry["name"])))
        return root

    async def run(self, inputs: Mapping[str, np.ndarray], threads: int | None = None,
                  repeat: int = 1, profile: bool = False) -> dict[str, np.ndarray]:
        body = run_body(inputs, threads, repeat, profile)
        answer = (await self.client.request("POST", f"/modules/{self.id}/run", json=body)).json()
        self.last_latency = answer.get("latency")
        self.last_profile = answer.get("profile")
        return run_outputs(answer)

    async def delete(self) -> None:
        await self.client.request("DELETE", f"/modules/{self.id}")
