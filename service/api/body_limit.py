"""Refuses request bodies over RELAYCC_MAX_BODY_BYTES with 413, before the app parses them.

A declared Content-Length over the limit is refused without reading anything; otherwise the
body is read up to the limit (so a client that lies about, or omits, its length is stopped at
the limit too) and handed to the app from memory.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.error_handlers import problem_response
from service.problems import make_problem


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: Callable[[Scope], int]):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes(scope)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(scope, receive, send, limit)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away before sending its body; nothing to answer.
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _too_large(scope, receive, send, limit)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    problem = make_problem(
        "body-too-large", f"the request body is larger than {limit} bytes (RELAYCC_MAX_BODY_BYTES)",
        limit=limit,
    )
    # The connection is closed after the answer: the rest of the body is never read.
    response = problem_response(problem, {"Connection": "close"})
    await response(scope, receive, send)
