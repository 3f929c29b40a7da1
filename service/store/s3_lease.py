"""One embedded-queue service per bucket: the object-store stand-in for the directory's `flock`.

A bucket has no locks, and a holder that dies cannot release anything, so the lock is a lease:
`<prefix>/service.lock` lists its holders, each with an expiry that a thread of the holder
pushes forward every `TTL_SECONDS / 3`. A holder whose expiry has passed is gone. Like the
directory lock, an embedded-queue service holds it exclusively (its start-up recovery requeues
jobs that nobody else may be running) and Celery API processes hold it shared. Every change to
the record is a conditional put (If-None-Match for the first holder, If-Match on the ETag read
after that), so two services starting at once cannot both win.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from obstore.exceptions import AlreadyExistsError, PreconditionError

from service.problems import make_problem
from service.store.base import StoreLocked, StoreUnavailable
from service.store.s3 import S3ModuleStore

LEASE_KEY = "service.lock"
TTL_SECONDS = 60.0
_TRIES = 32

Holders = dict[str, dict[str, object]]


class S3Lease:
    def __init__(self, store: S3ModuleStore, token: str, exclusive: bool):
        self.store = store
        self.token = token
        self.exclusive = exclusive
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew, name="relaycc-store-lease", daemon=True)

    @staticmethod
    def acquire(store: S3ModuleStore, *, exclusive: bool, queue: str) -> S3Lease:
        """The lease, or StoreLocked naming the store and a live holder."""
        token = uuid.uuid4().hex
        me = {"pid": os.getpid(), "host": socket.gethostname(), "queue": queue, "exclusive": exclusive}

        def join(holders: Holders) -> None:
            others = [h for t, h in holders.items() if t != token]
            if others and (exclusive or any(h.get("exclusive") for h in others)):
                holder = others[0]
                wanted = "the embedded queue" if exclusive else "the Celery queue"
                raise StoreLocked(
                    f"the module store {store.url} is in use by another relaycc service (pid "
                    f"{holder.get('pid')} on {holder.get('host')}, {holder.get('queue')} queue); a "
                    f"service with {wanted} cannot share it. Stop that service or give this one "
                    "another store (RELAYCC_STORE)."
                )
            holders[token] = {**me, "expires": time.time() + TTL_SECONDS}

        lease = S3Lease(store, token, exclusive)
        lease._change(join)
        lease._renewer.start()
        return lease

    def release(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()

        def leave(holders: Holders) -> None:
            holders.pop(self.token, None)

        try:
            self._change(leave)
        except (StoreUnavailable, StoreLocked):
            pass  # the lease runs out by itself

    def _renew(self) -> None:
        def extend(holders: Holders) -> None:
            if self.token in holders:
                holders[self.token]["expires"] = time.time() + TTL_SECONDS

        while not self._stop.wait(TTL_SECONDS / 3):
            try:
                self._change(extend)
            except StoreUnavailable:
                continue  # tried again at the next beat, well before the lease runs out

    def _change(self, change: Callable[[Holders], None]) -> None:
        """Apply `change` to the live holders and put the record back conditionally."""
        for _ in range(_TRIES):
            try:
                data, etag = self.store._get(LEASE_KEY)
                holders = _live(data)
            except FileNotFoundError:
                etag, holders = None, {}
            change(holders)
            body = json.dumps({"holders": holders}, sort_keys=True).encode()
            try:
                self.store._put(LEASE_KEY, body, mode={"e_tag": etag} if etag else "create")
                return
            except (PreconditionError, AlreadyExistsError):
                time.sleep(0.05)
        raise StoreUnavailable(make_problem("store-unavailable", "the module store's lease kept changing; try again"))


def _live(data: bytes) -> Holders:
    try:
        holders = json.loads(data.decode("utf-8")).get("holders", {})
    except (ValueError, AttributeError):
        return {}  # an unreadable record holds nobody
    now = time.time()
    return {
        token: holder for token, holder in holders.items()
        if isinstance(holder, dict) and isinstance(holder.get("expires"), (int, float)) and holder["expires"] > now
    }
