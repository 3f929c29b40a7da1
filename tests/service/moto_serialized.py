"""moto's S3 server with one request handled at a time: the endpoint the tests start
(s3_endpoint.py runs this file as a script).

Why: moto 5.2.5 checks a PUT's If-Match / If-None-Match in its request handler and stores the
object afterwards, with no lock between the two, and its server runs each request in a thread of
its own. Two conditional PUTs carrying the same ETag can therefore both pass the check and both
answer 200, so one read-modify-write silently replaces the other. Real S3 decides a conditional
write atomically; the store (service/store/s3.py) relies on that, and so does
test_store_contract.py::test_concurrent_updates_lose_no_change, which failed now and then under
load for this reason alone. A lock around moto's whole WSGI application makes every request
atomic, as it is on S3; the requests of the tests are small, so nothing waits for long."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def serialized(app: WSGIApp) -> WSGIApp:
    """`app`, handling one request at a time: the response is produced whole under the lock."""
    lock = threading.Lock()

    def locked(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with lock:
            result = app(environ, start_response)
            try:
                return list(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()

    return locked


def moto_app() -> WSGIApp:
    """moto's application, made as `python -m moto.server` makes it, handling one request at a time."""
    app = DomainDispatcherApplication(create_backend_app)
    app.debug = True  # type: ignore[attr-defined]
    return serialized(app)


if __name__ == "__main__":
    host, port = sys.argv[1], int(sys.argv[2])
    run_simple(host, port, moto_app(), threaded=True, request_handler=MotoRequestHandler)
