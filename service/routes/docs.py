"""OpenAPI entries shared by the routers: the problem+json answers each route may give."""

from __future__ import annotations

from http import HTTPStatus

from service.problems import PROBLEM_MEDIA_TYPE, Problem, make_problem, problem_type
from service.schemas import MODULE_ID_EXAMPLE

_EXAMPLES: dict[int, Problem] = {
    400: {
        "type": problem_type("parse-error"), "title": "Relay text does not parse", "status": 400,
        "detail": "expected ')' but found '{'", "line": 2, "column": 56,
        "source_line": "def @main(%x: Tensor[(1, 4), float32] -> Tensor[(1, 4), float32] {",
    },
    401: make_problem("unauthorized", "this service needs an API key: send `Authorization: Bearer <key>`"),
    404: make_problem("not-found", f"no module {MODULE_ID_EXAMPLE}"),
    409: make_problem("module-not-ready", f"module {MODULE_ID_EXAMPLE} is running; it can run once it has succeeded"),
    413: make_problem("body-too-large", "the request body is larger than 67108864 bytes (RELAYCC_MAX_BODY_BYTES)"),
    422: make_problem("validation-error", "body.relay: Field required",
                     errors=[{"loc": ["body", "relay"], "msg": "Field required", "type": "missing"}]),
    429: make_problem("too-many-jobs", "this client already has 8 jobs queued or running; the limit is 8 "
                      "(RELAYCC_MAX_JOBS_PER_CLIENT)"),
    500: make_problem("run-crashed", "the process running the model died (killed by SIGSEGV)"),
    504: make_problem("run-time-limit", "the run took longer than 60 s, the service's limit (RELAYCC_RUN_SECONDS)"),
}


def problem_responses(*codes: int) -> dict[int | str, dict[str, object]]:
    """`responses=` entries documenting problem+json answers with the given status codes."""
    responses: dict[int | str, dict[str, object]] = {}
    for code in codes:
        content: dict[str, object] = {"schema": {"$ref": "#/components/schemas/Problem"}}
        if code in _EXAMPLES:
            content["example"] = _EXAMPLES[code]
        responses[code] = {"description": HTTPStatus(code).phrase, "content": {PROBLEM_MEDIA_TYPE: content}}
    return responses


# Answers any route behind the API key check may give.
AUTHENTICATED = (401,)
