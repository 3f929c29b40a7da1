"""The S3 endpoint of the tests decides a conditional PUT atomically, as S3 does; the store's
read-modify-write (service/store/s3.py `update`) is only as sound as that. moto checks If-Match
before it stores the object, in a thread per request; moto_serialized.py puts its whole
application under one lock. Here the interleaving that loses an update is forced: the first PUT
is held between moto's If-Match check and its write while a second PUT with the same ETag comes
in."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import httpx
import pytest
from moto.moto_server.werkzeug_app import MotoRequestHandler
from moto.s3.models import S3Backend
from werkzeug.serving import BaseWSGIServer, make_server

from tests.service.moto_serialized import moto_app

# How long the first PUT, past its check, waits for a second one to pass the same check.
HOLD_SECONDS = 1.0


@pytest.fixture
def server() -> Iterator[BaseWSGIServer]:
    """The application the tests' endpoint serves, run in this process so its write can be held."""
    served = make_server("127.0.0.1", 0, moto_app(), threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.shutdown()
        served.server_close()
        thread.join(timeout=10)


def test_two_puts_if_matching_one_etag_do_not_both_succeed(
    server: BaseWSGIServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"http://127.0.0.1:{server.port}/relaycc-{uuid.uuid4().hex[:12]}"
    httpx.put(url, timeout=10).raise_for_status()
    # Readable without a signature, as these requests have none (moto checks If-Match as a read).
    public = {"x-amz-acl": "public-read"}
    created = httpx.put(f"{url}/status.json", content=b'{"n": 0}', headers=public, timeout=10)
    created.raise_for_status()
    etag = created.headers["etag"]

    first_checked = threading.Event()
    second_checked = threading.Event()
    write = S3Backend.put_object

    def held_write(self: S3Backend, *args: object, **kwargs: object) -> object:
        if not first_checked.is_set():
            first_checked.set()
            second_checked.wait(HOLD_SECONDS)  # without the lock, the second PUT gets here too
        else:
            second_checked.set()
        return write(self, *args, **kwargs)

    monkeypatch.setattr(S3Backend, "put_object", held_write)
    answers: dict[str, int] = {}

    def put(body: bytes) -> None:
        answers[body.decode()] = httpx.put(
            f"{url}/status.json", content=body, headers={**public, "If-Match": etag}, timeout=30,
        ).status_code

    first = threading.Thread(target=put, args=(b'{"n": 1, "by": "first"}',))
    first.start()
    assert first_checked.wait(10)
    put(b'{"n": 1, "by": "second"}')
    first.join()

    assert answers == {'{"n": 1, "by": "first"}': 200, '{"n": 1, "by": "second"}': 412}
