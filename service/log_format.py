"""How the service's processes write their log: plain text, or with RELAYCC_LOG_FORMAT=json one
JSON object a line (time, level, logger, message, and `job_id` on the lines of a job).

The formatter is our own, twenty lines, rather than python-json-logger: it writes exactly these
members and never the `extra` attributes a library may attach to a record, so nothing reaches the
log that a call site did not put in its message. Messages name modules, stages, outcomes and
times; never a request's body, Relay text, parameters, inputs or outputs.

The job id lives in a context variable set while a worker executes a job (`job`), so every line
logged meanwhile, by whichever module, carries it.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

FORMATS = ("text", "json")
_job_id: ContextVar[str | None] = ContextVar("relaycc_job_id", default=None)
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        job_id = getattr(record, "job_id", None) or _job_id.get()
        if job_id:
            entry["job_id"] = job_id
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _TextWithJob(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        job_id = _job_id.get()
        return f"{text} [job {job_id}]" if job_id else text


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else _TextWithJob(_TEXT)


@contextmanager
def job(job_id: str) -> Iterator[None]:
    """Lines logged inside carry `job_id`."""
    token = _job_id.set(job_id)
    try:
        yield
    finally:
        _job_id.reset(token)


def configure_process(log_format: str) -> None:
    """A worker process's log: INFO and above on stderr, in `log_format`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def uvicorn_log_config(log_format: str) -> dict[str, object]:
    """uvicorn's `log_config` for the API process: its own loggers and relaycc's, in one format.
    The access log keeps uvicorn's message (client, method, path, status): never a body."""
    factory = {"()": f"{__name__}.formatter", "log_format": log_format}
    handler = {"class": "logging.StreamHandler", "formatter": "relaycc", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"relaycc": factory},
        "handlers": {"stderr": handler},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "relaycc": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        },
    }
