"""OpenAPI entries shared by the routers: the problem+json answers each route may give."""

from __future__ import annotations

from http import HTTPStatus

from service.problems import PROBLEM_MEDIA_TYPE, Problem, make_problem, problem_type
from service.api.schemas import MODULE_ID_EXAMPLE

_EXAMPLES: dict[int, Problem] = {
    400: {
        "type": problem_type("parse-error"), "title": "Relay text does not parse", "status": 400,
        "detail": "expected ')' but found '{'", "line": 2, "column": 56,
        "source_line": "def @main(%x: Tensor[(1, 4), float32] -> Tensor[(1, 4), float32] {",
    },
    401: make_problem("unauthorized", "this service needs an API key: send `Authorization: Bearer <key>`"),
    403: make_problem("forbidden", f"module {MODULE_ID_EXAMPLE} was submitted by another client; only it may "
                      "delete the module"),
    404: make_problem("not-found", f"no module {MODULE_ID_EXAMPLE}"),
    409: make_problem("module-not-ready", f"module {MODULE_ID_EXAMPLE} is running; it can run once it has succeeded"),
    413: make_problem("body-too-large", "the request body is larger than 67108864 bytes (RELAYCC_MAX_BODY_BYTES)"),
    422: make_problem("validation-error", "body.relay: Field required",
                     errors=[{"loc": ["body", "relay"], "msg": "Field required", "type": "missing"}]),
    429: make_problem("too-many-jobs", "this client already has 8 jobs queued or running; the limit is 8 "
                      "(RELAYCC_MAX_JOBS_PER_CLIENT)"),
    500: make_problem("run-crashed", "the process running the model died (killed by SIGSEGV)"),
    503: make_problem("store-unavailable", "the module store is full (no space left on its device), so "
                      "storing a new module is not possible now; try again once an operator has made it writable"),
    504: make_problem("run-time-limit", "the run took longer than 60 s, the service's limit (RELAYCC_RUN_SECONDS)"),
}


# The problems of a bad page cursor and of deleting a module whose job is in flight.
BAD_CURSOR_EXAMPLE = make_problem("bad-cursor", "cursor: not a cursor this service gave; pass a page's "
                                  "`next_cursor` as it is")
MODULE_BUSY_EXAMPLE = make_problem("module-busy", f"module {MODULE_ID_EXAMPLE} is running; it can be deleted "
                                   "once its job has finished")

# The problem a stored artifact that fails its integrity check is answered with.
ARTIFACT_CORRUPT_EXAMPLE = make_problem(
    "artifact-corrupt",
    f"module {MODULE_ID_EXAMPLE}: its artifact 'libdefault.so' does not match the sha256 recorded when it was "
    "built. Its artifacts were set aside; send the same POST /compile again to build the module anew",
    module_id=MODULE_ID_EXAMPLE,
)


def problem_responses(*codes: int, examples: dict[int, Problem] | None = None) -> dict[int | str, dict[str, object]]:
    """`responses=` entries documenting problem+json answers with the given status codes;
    `examples` replaces the usual example of a code."""
    responses: dict[int | str, dict[str, object]] = {}
    chosen = {**_EXAMPLES, **(examples or {})}
    for code in codes:
        content: dict[str, object] = {"schema": {"$ref": "#/components/schemas/Problem"}}
        if code in chosen:
            content["example"] = chosen[code]
        responses[code] = {"description": HTTPStatus(code).phrase, "content": {PROBLEM_MEDIA_TYPE: content}}
    return responses


# Answers any route behind the API key check may give.
AUTHENTICATED = (401,)
