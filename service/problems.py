"""Problem details (RFC 9457): the one shape every error of the service has.

A problem is a plain dict with `type`, `title`, `status`, `detail` and, for errors located in
the Relay text, the extension members `line`, `column` and `source_line` at the top level. The
same dict is the answer to a request refused before queueing and the `error` of a failed job,
so it is built here without FastAPI: worker processes import this module too.

`type` URIs are stable identifiers; clients dispatch on them, never on `title` or `detail`.
"""

from __future__ import annotations

import logging
import uuid

from compiler.config_registry import ConfigError
from compiler.diagnostics import CompileError

PROBLEM_BASE = "https://relaycc.dev/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"

Problem = dict[str, object]

# slug → (HTTP status, title) for problems the service raises itself.
_KNOWN: dict[str, tuple[int, str]] = {
    "validation-error": (422, "Request body or parameters are invalid"),
    "body-too-large": (413, "Request body is too large"),
    "model-too-large": (413, "Model exceeds a service limit"),
    "not-found": (404, "Not found"),
    "method-not-allowed": (405, "Method not allowed"),
    "unauthorized": (401, "Missing or invalid API key"),
    "too-many-jobs": (429, "Too many jobs in flight for this client"),
    "unsupported-media-type": (415, "Request body is not JSON"),
    "module-not-ready": (409, "Module is not built"),
    "module-busy": (409, "Module has a job queued or running"),
    "forbidden": (403, "Not allowed for this client"),
    "bad-cursor": (400, "Page cursor is not valid"),
    "user-c-not-allowed": (400, "User C sources are not allowed"),
    "sandbox-unavailable": (503, "No sandbox to build or run in"),
    "cflag-not-allowed": (400, "C flag is not allowed"),
    "time-limit": (422, "Job exceeded its time limit"),
    "memory-limit": (422, "Job exceeded its memory limit"),
    "worker-died": (500, "Worker process died"),
    "run-crashed": (500, "Model run crashed"),
    "run-time-limit": (504, "Model run exceeded its time limit"),
    "internal-error": (500, "Internal error"),
    # A server fault that asking again does not cure (the module must be built again, which
    # the next identical POST /compile does), hence 500 rather than 503.
    "artifact-corrupt": (500, "Stored artifact failed its integrity check"),
    # A condition an operator fixes while the service runs (remount, free space): 503, retry.
    "store-unavailable": (503, "Module store cannot be written"),
}

# Compiler errors by their `kind`: the status a synchronous answer would have had.
_COMPILE_STATUS = {"build_error": 422, "unsupported": 422}


def problem_type(slug: str) -> str:
    return PROBLEM_BASE + slug


def make_problem(slug: str, detail: str, **extensions: object) -> Problem:
    status, title = _KNOWN[slug]
    problem: Problem = {"type": problem_type(slug), "title": title, "status": status, "detail": detail}
    problem.update({k: v for k, v in extensions.items() if v is not None})
    return problem


def internal_problem(err: BaseException, where: str) -> Problem:
    """The problem for an unexpected exception: its type and a reference into the log, where
    the exception is written in full. Never its text, which may name files on the server (an
    OSError always does)."""
    reference = uuid.uuid4().hex[:12]
    logging.getLogger("relaycc.service").error("internal error %s in %s", reference, where, exc_info=err)
    return make_problem(
        "internal-error", f"{type(err).__name__}; the server log has the details under reference {reference}"
    )


def compile_error_problem(err: CompileError) -> Problem:
    """The problem for a compiler error, with its location when it has one."""
    problem: Problem = {
        "type": problem_type(err.kind.replace("_", "-")),
        "title": err.title,
        "status": _COMPILE_STATUS.get(err.kind, 400),
        "detail": err.message,
    }
    if err.line is not None:
        problem["line"] = err.line
        problem["column"] = err.column
        problem["source_line"] = err.source_line or ""
    if isinstance(err, ConfigError):
        # The configuration key at fault (`pass_config.<name>` for a pass config entry).
        problem["key"] = err.key
    return problem


class ProblemError(Exception):
    """Raised anywhere in the request path to answer with `problem`; the app turns it into a
    problem+json response (service/api/error_handlers.py)."""

    def __init__(self, problem: Problem, headers: dict[str, str] | None = None):
        super().__init__(problem.get("detail"))
        self.problem = problem
        self.headers = headers or {}

    @property
    def status(self) -> int:
        status = self.problem.get("status")
        return status if isinstance(status, int) else 500

    @staticmethod
    def of(slug: str, detail: str, headers: dict[str, str] | None = None, **extensions: object) -> ProblemError:
        return ProblemError(make_problem(slug, detail, **extensions), headers)
