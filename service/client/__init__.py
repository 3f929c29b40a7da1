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

The package imports only httpx and numpy (not the compiler or the service), so a program that
talks to a remote service needs nothing else installed: wire.py holds what both clients share
(bodies, answers, the problem exception, the event parser), sync_client.py and async_client.py
the I/O.
"""

from service.client.async_client import AsyncClient, AsyncModule
from service.client.sync_client import Client, Module
from service.client.wire import ServiceError, relay_text

__all__ = ["AsyncClient", "AsyncModule", "Client", "Module", "ServiceError", "relay_text"]
