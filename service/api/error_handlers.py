"""Every error the app answers with is `application/problem+json` (service/problems.py)."""

from __future__ import annotations

from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.problems import PROBLEM_MEDIA_TYPE, Problem, ProblemError, internal_problem, make_problem
from service.store.module_store import StoreError

# FastAPI answers a body it cannot decode (not UTF-8, say) with a bare 400; JSON that does not
# parse is already a validation error (422), so an undecodable body is one too.
_SLUG_BY_STATUS = {400: "validation-error", 404: "not-found", 405: "method-not-allowed"}


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> JSONResponse:
    status = problem.get("status")
    return JSONResponse(
        problem,
        status_code=status if isinstance(status, int) else 500,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=headers,
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(ProblemError, _problem_error)
    app.add_exception_handler(StoreError, _store_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)


async def _problem_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return problem_response(exc.problem, exc.headers)


async def _store_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StoreError)
    # A store that cannot be written may be fixed by an operator at any time.
    headers = {"Retry-After": "30"} if exc.problem.get("status") == 503 else None
    return problem_response(exc.problem, headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": [str(part) for part in error.get("loc", ())], "msg": str(error.get("msg", "")),
         "type": str(error.get("type", ""))}
        for error in exc.errors()
    ]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    detail = f"{'.'.join(first['loc']) or 'request'}: {first['msg']}"
    return problem_response(make_problem("validation-error", detail, errors=errors))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    slug = _SLUG_BY_STATUS.get(exc.status_code)
    if slug is not None:
        problem = make_problem(slug, str(exc.detail))
    else:
        problem = {"type": "about:blank", "title": _phrase(exc.status_code), "status": exc.status_code,
                   "detail": str(exc.detail)}
    return problem_response(problem, dict(exc.headers or {}))


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    # The exception's text may name files on the server (an OSError always does): it goes to
    # the log, under a reference the client can quote.
    return problem_response(internal_problem(exc, f"{request.method} {request.url.path}"))
