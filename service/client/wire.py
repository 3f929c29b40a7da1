"""What the sync and async clients share: the problem exception, request bodies, answers,
artifacts on disk and the server-sent events parser. No I/O happens here."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import httpx
import numpy as np

Status = dict[str, Any]
OnProgress = Callable[[Mapping[str, Any]], None]

FINAL = ("succeeded", "failed")
# A quiet event stream sends a heartbeat at least this often; a read waits a little longer.
EVENT_READ_SECONDS = 30.0
POLL_FIRST, POLL_MAX = 0.1, 1.0


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
    record_passes: bool = False,
) -> dict[str, Any]:
    """The JSON body of `POST /compile`; `params` as arrays or the path of an .npz;
    `record_passes` stores the module after each pass as the artifact `passes.json`."""
    options = dict(config or {})
    for key, value in (("opt_level", opt_level), ("pass_config", pass_config), ("cflags", cflags),
                       ("workspace_byte_alignment", workspace_byte_alignment)):
        if value is not None:
            options[key] = list(value) if key == "cflags" else value
    body: dict[str, Any] = {"relay": relay_text(relay_or_path), "target": target, "module_name": module_name,
                            "codegens": [codegen_request(c) for c in codegens], "config": options}
    if record_passes:
        body["record_passes"] = True
    if params is not None:
        if isinstance(params, (str, os.PathLike)):
            body["params"] = base64.b64encode(Path(params).read_bytes()).decode("ascii")
        elif params:
            body["params"] = npz_b64(params)
    return body


def run_body(inputs: Mapping[str, np.ndarray], threads: int | None, repeat: int, profile: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"inputs_npz": npz_b64(inputs), "repeat": repeat, "output_format": "npz"}
    if threads is not None:
        body["threads"] = threads
    if profile:
        body["profile"] = True
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


class EventsUnavailable(Exception):
    """The service has no events endpoint (an older one), or the stream broke: poll instead."""


def events_response_ok(response: httpx.Response) -> None:
    """Returns when `response` is an event stream. A service without the events endpoint says
    404 or 405 (like an unknown module): polling then tells which it was."""
    if response.status_code == 200 and response.headers.get("content-type", "").startswith("text/event-stream"):
        return
    if response.status_code in (404, 405) or response.status_code < 400:
        raise EventsUnavailable()
    response.read()
    checked(response)
    raise EventsUnavailable()


def seconds_left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def timeout_error(module_id: str, timeout: float | None) -> TimeoutError:
    return TimeoutError(f"module {module_id} did not finish within {timeout:g} s")
