"""JSON request bodies are parsed and validated in a thread, never on the event loop.

FastAPI parses a JSON body with `json.loads` and validates it against the route's model on the
event loop. For a body near RELAYCC_MAX_BODY_BYTES that takes seconds (60 MiB of run inputs as
nested lists: ~30 s), and `json.loads` holds the GIL throughout, so nothing else is answered,
/healthz included. `parse_bodies_off_loop` wraps the handler of every route that has a JSON body: the body is
validated from its bytes by pydantic's own JSON parser (which lets other threads run while it
works) in a worker thread, and FastAPI is handed the validated model, which it accepts as is.
The answers are FastAPI's: a body that does not validate is a RequestValidationError with
`body` locations, a body that is not JSON a `json_invalid` one. A body sent without a JSON
content type is `415` naming `application/json`, as HTTP has it, rather than FastAPI's 422
"Input should be a valid dictionary".
"""

from __future__ import annotations

import codecs
import email.message
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError

from service.problems import ProblemError

Handler = Callable[[Request], Awaitable[Response]]
_WRAPPED = "_relaycc_body_off_loop"


def parse_bodies_off_loop(router: APIRouter) -> None:
    """Make every route of `router` that takes a JSON body validate it in a thread; call before
    the router is included in the app (FastAPI builds each included route's handler then).

    The routers are module-level objects shared by every app built in a process, so a route is
    wrapped once, by its own instance's `get_route_handler`, whichever module declares it.
    """
    for route in router.routes:
        if isinstance(route, APIRoute) and route.body_field is not None and not hasattr(route, _WRAPPED):
            adapter: TypeAdapter[Any] = TypeAdapter(route.body_field.field_info.annotation)
            build = route.get_route_handler

            def get_route_handler(build: Callable[[], Handler] = build, adapter: TypeAdapter[Any] = adapter) -> Handler:
                return _off_loop(build(), adapter)

            setattr(route, "get_route_handler", get_route_handler)
            setattr(route, _WRAPPED, True)


def _off_loop(handler: Handler, adapter: TypeAdapter[Any]) -> Handler:
    async def app(request: Request) -> Response:
        body = await request.body()
        content_type = request.headers.get("content-type")
        if body and not _is_json(content_type):
            given = f"content-type {content_type!r}" if content_type else "no content-type"
            raise ProblemError.of(
                "unsupported-media-type", f"the body must be application/json; the request has {given}",
                headers={"Accept": "application/json"},
            )
        if body:
            validated = await run_in_threadpool(_validate, adapter, body)
            # FastAPI reads the body through `request.json()`, which returns this cached value,
            # and accepts a model instance without validating it again.
            request._json = validated
        return await handler(request)

    return app


def _is_json(content_type: str | None) -> bool:
    # The same test as FastAPI's: without a content type the body is not taken for JSON.
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def _validate(adapter: TypeAdapter[Any], body: bytes) -> Any:
    try:
        return adapter.validate_json(_as_utf8(body))
    except ValidationError as err:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in err.errors(include_url=False)]
        raise RequestValidationError(errors) from None
    except UnicodeDecodeError as err:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body",), "msg": f"JSON decode error: {err.reason}", "input": {}}]
        ) from None


def _as_utf8(body: bytes) -> bytes:
    """`body` as UTF-8 without a byte order mark: JSON in UTF-16 or UTF-32, or with a BOM, is
    accepted as `json.loads` accepts it."""
    if body.startswith(codecs.BOM_UTF8):
        return body[len(codecs.BOM_UTF8):]
    if b"\x00" in body[:4] or body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = json.detect_encoding(body)
        return body.decode(encoding).lstrip("\ufeff").encode("utf-8")
    return body
