"""Calling one pure function on many items with the machine's other cores: forked processes.

C emission is pure Python, one function at a time, and the GIL keeps threads from sharing it;
a forked child starts in milliseconds with every lowered function already in its memory, where
a spawned one would import the compiler (most of a second) and unpickle the IR. Only the
results travel back, pickled.

`ForkedMap(call, count, workers)` forks its children at once and they start taking items; the
caller may do other work before `results()`, which joins in until no item is left and then
collects. Items are taken from a queue of tokens in a pipe (a 4-byte read from a pipe whose
writes are all 4 bytes is atomic), in the order given, so the costliest can go first.
`results()` is the list of `call(i)` for i in range(count), whichever process computed each.

The result never depends on timing: where any item failed, the parent calls the first failing
item itself, in order, so the same exception is raised with its own type, message and location
as in a serial loop. A child that died without answering (killed, out of memory) leaves its
items to the parent, as a fork that fails leaves them all. Leaving the `with` block, whatever the reason, kills and reaps every child
still running.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import struct
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")

_TOKEN = struct.Struct("<i")
# Tokens are written before any child starts reading: the pipe must hold them all (Linux's
# default pipe buffer is 64 KiB, at least one page everywhere).
_MAX_QUEUED = 4096 // _TOKEN.size
_OK, _FAILED = 0, 1


class ForkedMap(Generic[T]):
    """`call(i)` for every i in range(count), in this process and `workers` forked children;
    `order` is the order items are taken in (default: by index). Once this process has no item
    left, it waits for a child's answer at most `patience_s` or four times as long as its own
    share took, whichever is longer: a child forked while another thread held a lock it then
    needs (an import's, say) would never answer, so it is killed and its items done here."""

    def __init__(self, call: Callable[[int], T], count: int, workers: int, order: Sequence[int] | None = None,
                 patience_s: float = 60.0):
        self.call = call
        self.count = count
        self.patience_s = patience_s
        self._started = time.monotonic()
        self.order = list(range(count) if order is None else order)
        if sorted(self.order) != list(range(count)):
            raise ValueError("order must list every item exactly once")
        self._results: dict[int, T] = {}
        self._failed: set[int] = set()
        self._children: dict[int, int] = {}  # pid -> read end of its result pipe
        self._queue: int | None = None
        workers = max(0, min(workers, count - 1)) if count <= _MAX_QUEUED and hasattr(os, "fork") else 0
        if workers:
            try:
                self._fork(workers)
            except BaseException:
                self.close()
                raise

    def __enter__(self) -> ForkedMap[T]:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        self.close()

    @property
    def children(self) -> list[int]:
        """The process ids of the children not yet reaped."""
        return list(self._children)

    def results(self) -> list[T]:
        """Every item's result, in index order; raises the first failing item's exception."""
        self._work()
        deadline = time.monotonic() + max(self.patience_s, 4 * (time.monotonic() - self._started))
        for pid, read_end in list(self._children.items()):
            answers = self._answers(pid, read_end, deadline)
            self._reap(pid)
            for index, status, value in answers:
                if status == _OK:
                    self._results[index] = value
                else:
                    self._failed.add(index)
        # Items a child took and never answered for (it died): computed here, in order.
        for index in range(self.count):
            if index not in self._results and index not in self._failed:
                self._run(index)
        for index in sorted(self._failed):
            self._results[index] = self.call(index)  # raises as the serial loop would
        return [self._results[i] for i in range(self.count)]

    def close(self) -> None:
        """Kills and reaps the children still running; closes the queue."""
        for pid in list(self._children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap(pid)
        if self._queue is not None:
            os.close(self._queue)
            self._queue = None

    # -- the parent's side --------------------------------------------------------------------

    def _fork(self, workers: int) -> None:
        queue_read, queue_write = os.pipe()
        try:
            os.write(queue_write, b"".join(_TOKEN.pack(i) for i in self.order))
        finally:
            os.close(queue_write)  # an empty queue then reads as end of file
        self._queue = queue_read
        for _ in range(workers):
            try:
                read_end, write_end = os.pipe()
            except OSError:
                break  # out of file descriptors: this process does the rest
            try:
                pid = os.fork()
            except OSError:
                # No process to spare (a sandbox's RLIMIT_NPROC): this one does the rest.
                os.close(read_end)
                os.close(write_end)
                break
            if pid == 0:  # pragma: no cover  # the child's exit status is all that is seen
                self._child(write_end, read_end)
            os.close(write_end)
            self._children[pid] = read_end

    def _work(self) -> None:
        """Takes items until none is left (all of them when there is no child)."""
        if self._queue is None:
            for index in self.order:
                self._run(index)
            return
        while (index := self._next()) is not None:
            self._run(index)

    def _next(self) -> int | None:
        assert self._queue is not None
        token = os.read(self._queue, _TOKEN.size)
        return _TOKEN.unpack(token)[0] if token else None

    def _run(self, index: int) -> None:
        try:
            self._results[index] = self.call(index)
        except Exception:  # noqa: BLE001  # raised again, in order, by results()
            self._failed.add(index)

    def _answers(self, pid: int, read_end: int, deadline: float) -> list[tuple[int, int, T]]:
        chunks = []
        poll = select.poll()
        poll.register(read_end, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not poll.poll(left * 1000):
                os.kill(pid, signal.SIGKILL)  # stuck: its items are done here
                return []
            chunk = os.read(read_end, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        try:
            return pickle.loads(b"".join(chunks)) if chunks else []
        except Exception:  # noqa: BLE001  # a child cut short: its items are done here
            return []

    def _reap(self, pid: int) -> None:
        read_end = self._children.pop(pid)
        try:
            os.close(read_end)
        except OSError:
            pass  # closed by _answers
        os.waitpid(pid, 0)

    # -- the child's side ---------------------------------------------------------------------

    def _child(self, write_end: int, read_end: int) -> None:
        """Never returns: takes items, sends (index, status, value) for each, exits."""
        status = 1
        try:
            os.close(read_end)
            for other in self._children.values():
                os.close(other)
            # The collector would touch every object the parent has, copying its pages.
            gc.disable()
            answers: list[tuple[int, int, object]] = []
            while (index := self._next()) is not None:
                try:
                    answers.append((index, _OK, self.call(index)))
                except Exception:  # noqa: BLE001  # the parent raises it again
                    answers.append((index, _FAILED, None))
            data = pickle.dumps(answers, protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view):]
            status = 0
        finally:
            os._exit(status)
