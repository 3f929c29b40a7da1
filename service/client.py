"""A Python client of the relaycc service (httpx), sync and async.

    client = Client("http://127.0.0.1:8000", api_key=None)
    module = client.compile("model.relay", target="c", params={"w": w})
    module.wait(timeout=120, on_progress=print)      # server-sent events, else polling
    outputs = module.run({"x": x})                   # numpy in, numpy out
    module.download("out/")                          # the OUTDIR, each file checked

Every error the service answers with (RFC 9457 problem details) raises `ServiceError`, which
carries the problem's `type`, `title`, `status`, `detail` and, for a parse or type error,
`line`, `column` and `source_line`; a job that failed raises it from `wait`. `AsyncClient` and
`AsyncModule` are the same with `async` methods.

This module imports only httpx and numpy (not the compiler or the service), so a program that
talks to a remote service needs nothing else installed.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import httpx
import numpy as np

Status = dict[str, Any]
OnProgress = Callable[[Mapping[str, Any]], None]

_FINAL = ("succeeded", "failed")
# A quiet event stream sends a heartbeat at least this often; a read waits a little longer.
_EVENT_READ_SECONDS = 30.0
_POLL_FIRST, _POLL_MAX = 0.1, 1.0


class ServiceError(Exception):
    """An error answered by the service: its problem details, member by member."""

    def __init__(self, problem: Mapping[str, Any]):
        self.problem = dict(problem)
        self.type: str = str(problem.get("type", "about:blank"))
        self.title: str = str(problem.get("title", ""))
        self.status: int | None = problem.get("status") if isinstance(problem.get("status"), int) else None
        self.detail: str | None = problem.get("detail") if isinstance(problem.get("detail"), str) else None
        self.line: int | None = problem.get("line") if isinstance(problem.get("line"), int) else None
        self.column: int | None = problem.get("column") if isinstance(problem.get("column"), int) else None
        self.source_line: str | None = problem.get("source_line") if isinstance(problem.get("source_line"), str) else None
        super().__init__(str(self))

    @property
    def slug(self) -> str:
        """The last part of `type` (`parse-error`, `not-found`, ...)."""
        return self.type.rstrip("/").rsplit("/", 1)[-1]

    def __str__(self) -> str:
        where = f" (line {self.line}, column {self.column})" if self.line is not None else ""
        text = f"{self.title}: {self.detail}" if self.detail else self.title
        return f"{text}{where}"


# --- what goes over the wire (shared by the sync and async clients) ------------------------------


def relay_text(relay_or_path: str | os.PathLike[str]) -> str:
    """The Relay text given, or read from the file given. A `str` is a path when it names a
    file and does not look like Relay text (which has a newline or an `@`)."""
    if isinstance(relay_or_path, os.PathLike):
        return Path(relay_or_path).read_text(encoding="utf-8")
    if "\n" not in relay_or_path and "@" not in relay_or_path and os.path.isfile(relay_or_path):
        return Path(relay_or_path).read_text(encoding="utf-8")
    return relay_or_path


def npz_b64(arrays: Mapping[str, np.ndarray]) -> str:
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def from_npz_b64(text: str) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def codegen_request(codegen: Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    """A `codegens` entry: given as one already (`{"document", "sources"}`), as a bare codegen
    document, or as the path of a codegen JSON file, whose `library.sources` are read from
    beside it."""
    if isinstance(codegen, Mapping):
        return dict(codegen) if "document" in codegen else {"document": dict(codegen), "sources": {}}
    path = Path(codegen)
    document = json.loads(path.read_text(encoding="utf-8"))
    library = document.get("library") or {}
    sources = {name: (path.parent / name).read_text(encoding="utf-8") for name in library.get("sources", [])}
    return {"document": document, "sources": sources}


def compile_body(
    relay_or_path: str | os.PathLike[str],
    *,
    target: str | Mapping[str, Any] = "c",
    module_name: str = "default",
    params: Mapping[str, np.ndarray] | str | os.PathLike[str] | None = None,
    codegens: Sequence[Mapping[str, Any] | str | os.PathLike[str]] = (),
    config: Mapping[str, Any] | None = None,
    opt_level: int | None = None,
    pass_config: Mapping[str, Any] | None = None,
    cflags: Sequence[str] | None = None,
    workspace_byte_alignment: int | None = None,
) -> dict[str, Any]:
    """The JSON body of `POST /compile`; `params` as arrays or the path of an .npz."""
    options = dict(config or {})
    for key, value in (("opt_level", opt_level), ("pass_config", pass_config), ("cflags", cflags),
                       ("workspace_byte_alignment", workspace_byte_alignment)):
        if value is not None:
            options[key] = list(value) if key == "cflags" else value
    body: dict[str, Any] = {"relay": relay_text(relay_or_path), "target": target, "module_name": module_name,
                            "codegens": [codegen_request(c) for c in codegens], "config": options}
    if params is not None:
        if isinstance(params, (str, os.PathLike)):
            body["params"] = base64.b64encode(Path(params).read_bytes()).decode("ascii")
        elif params:
            body["params"] = npz_b64(params)
    return body


def run_body(inputs: Mapping[str, np.ndarray], threads: int | None, repeat: int) -> dict[str, Any]:
    body: dict[str, Any] = {"inputs_npz": npz_b64(inputs), "repeat": repeat, "output_format": "npz"}
    if threads is not None:
        body["threads"] = threads
    return body


def checked(response: httpx.Response) -> httpx.Response:
    """`response`, or ServiceError with its problem when it is an error."""
    if response.status_code < 400:
        return response
    problem: Mapping[str, Any]
    try:
        value = response.json()
        problem = value if isinstance(value, dict) else {}
    except ValueError:
        problem = {}
    if "title" not in problem:  # not ours (a proxy, or no service at this address)
        problem = {"type": "about:blank", "title": response.reason_phrase or "HTTP error",
                   "status": response.status_code, "detail": response.text[:500] or None}
    raise ServiceError(problem)


def final_or_raise(status: Status) -> Status:
    """A finished job's status, or ServiceError with its problem when it failed."""
    if status["state"] == "failed":
        raise ServiceError(status.get("error") or {"title": "Job failed", "status": 500})
    return status


def artifact_target(directory: Path, name: str) -> Path:
    """Where artifact `name` goes under `directory`; a name that would leave it is refused."""
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ServiceError({"title": "Unsafe artifact name", "detail": f"the service listed {name!r}"})
    return directory.joinpath(*parts)


def write_artifact(directory: Path, entry: Mapping[str, Any], data: bytes) -> None:
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise ServiceError({"title": "Artifact damaged in transit",
                            "detail": f"{entry['name']} does not match the sha256 the service listed"})
    path = artifact_target(directory, str(entry["name"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def run_outputs(answer: Mapping[str, Any]) -> dict[str, np.ndarray]:
    arrays = from_npz_b64(str(answer["outputs_npz"]))
    # out0, out1, ... in result order (out10 after out9).
    return dict(sorted(arrays.items(), key=lambda item: (len(item[0]), item[0])))


class EventParser:
    """Server-sent events from lines: `feed(line)` returns (event, data) when one is complete."""

    def __init__(self) -> None:
        self.event = "message"
        self.data: list[str] = []

    def feed(self, line: str) -> tuple[str, Any] | None:
        if line == "":
            if not self.data:
                self.event = "message"
                return None
            event, data = self.event, json.loads("\n".join(self.data))
            self.event, self.data = "message", []
            return event, data
        if line.startswith(":"):
            return None  # a comment: the heartbeat
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self.event = value
        elif field == "data":
            self.data.append(value)
        return None


class _EventsUnavailable(Exception):
    """The service has no events endpoint (an older one), or the stream broke: poll instead."""


def _events_response_ok(response: httpx.Response) -> None:
    """Returns when `response` is an event stream. A service without the events endpoint says
    404 or 405 (like an unknown module): polling then tells which it was."""
    if response.status_code == 200 and response.headers.get("content-type", "").startswith("text/event-stream"):
        return
    if response.status_code in (404, 405) or response.status_code < 400:
        raise _EventsUnavailable()
    response.read()
    checked(response)
    raise _EventsUnavailable()


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def _timeout_error(module_id: str, timeout: float | None) -> TimeoutError:
    return TimeoutError(f"module {module_id} did not finish within {timeout:g} s")


# --- the synchronous client ------------------------------------------------------------------------


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
        except _EventsUnavailable:
            status = self._poll(deadline, on_progress)
        if status is None:
            raise _timeout_error(self.id, timeout)
        self.last_status = status
        return final_or_raise(status)

    def _follow_events(self, deadline: float | None, on_progress: OnProgress | None) -> Status | None:
        parser = EventParser()
        while True:
            remaining = _remaining(deadline)
            if remaining is not None and remaining <= 0:
                return None
            read = _EVENT_READ_SECONDS if remaining is None else min(remaining, _EVENT_READ_SECONDS)
            try:
                with self.client.http.stream("GET", f"/modules/{self.id}/events",
                                             timeout=httpx.Timeout(10.0, read=read)) as response:
                    _events_response_ok(response)
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
                raise _EventsUnavailable() from None
            # The stream ended without a final state (a proxy cut it): listen again.

    def _poll(self, deadline: float | None, on_progress: OnProgress | None) -> Status | None:
        pause, seen = _POLL_FIRST, None
        while True:
            status = self.status()
            if status["state"] in _FINAL:
                return status
            progress = status.get("progress")
            if progress and progress != seen and on_progress is not None:
                on_progress(progress)
            seen = progress
            remaining = _remaining(deadline)
            if remaining is not None and remaining <= 0:
                return None
            time.sleep(pause if remaining is None else min(pause, remaining))
            pause = min(pause * 2, _POLL_MAX)

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

    def run(self, inputs: Mapping[str, np.ndarray], threads: int | None = None, repeat: int = 1) -> dict[str, np.ndarray]:
        """The outputs (`out0`, ...) of a run with `inputs`; the latency is in `last_latency`."""
        answer = self.client.request("POST", f"/modules/{self.id}/run", json=run_body(inputs, threads, repeat)).json()
        self.last_latency = answer.get("latency")
        return run_outputs(answer)

    def delete(self) -> None:
        self.client.request("DELETE", f"/modules/{self.id}")


# --- the asynchronous client -----------------------------------------------------------------------


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
        except _EventsUnavailable:
            status = await self._poll(deadline, on_progress, anyio.sleep)
        if status is None:
            raise _timeout_error(self.id, timeout)
        self.last_status = status
        return final_or_raise(status)

    async def _follow_events(self, deadline: float | None, on_progress: OnProgress | None) -> Status | None:
        parser = EventParser()
        while True:
            remaining = _remaining(deadline)
            if remaining is not None and remaining <= 0:
                return None
            read = _EVENT_READ_SECONDS if remaining is None else min(remaining, _EVENT_READ_SECONDS)
            try:
                async with self.client.http.stream("GET", f"/modules/{self.id}/events",
                                                   timeout=httpx.Timeout(10.0, read=read)) as response:
                    if response.status_code != 200:
                        await response.aread()
                    _events_response_ok(response)
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
                raise _EventsUnavailable() from None

    async def _poll(self, deadline: float | None, on_progress: OnProgress | None,
                    sleep: Callable[[float], Any]) -> Status | None:
        pause, seen = _POLL_FIRST, None
        while True:
            status = await self.status()
            if status["state"] in _FINAL:
                return status
            progress = status.get("progress")
            if progress and progress != seen and on_progress is not None:
                on_progress(progress)
            seen = progress
            remaining = _remaining(deadline)
            if remaining is not None and remaining <= 0:
                return None
            await sleep(pause if remaining is None else min(pause, remaining))
            pause = min(pause * 2, _POLL_MAX)

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
                  repeat: int = 1) -> dict[str, np.ndarray]:
        body = run_body(inputs, threads, repeat)
        answer = (await self.client.request("POST", f"/modules/{self.id}/run", json=body)).json()
        self.last_latency = answer.get("latency")
        return run_outputs(answer)

    async def delete(self) -> None:
        await self.client.request("DELETE", f"/modules/{self.id}")


__all__ = ["AsyncClient", "AsyncModule", "Client", "Module", "ServiceError"]
