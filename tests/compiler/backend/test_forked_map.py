"""ForkedMap: results in index order whichever process computed them, errors raised as a serial
loop raises them, and no child process left behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from compiler.backend.forked_map import ForkedMap


def _gone(pid: int) -> bool:
    """Whether `pid` is no longer a child of this process (reaped, so no zombie either)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_results_are_in_index_order_whatever_the_order_items_are_taken_in() -> None:
    with ForkedMap(lambda i: i * i, 20, workers=1, order=list(reversed(range(20)))) as work:
        assert work.results() == [i * i for i in range(20)]


def test_without_workers_every_item_is_computed_here() -> None:
    with ForkedMap(lambda i: os.getpid(), 5, workers=0) as work:
        assert work.children == []
        assert work.results() == [os.getpid()] * 5


def test_a_child_computes_items_and_its_results_come_back(tmp_path: Path) -> None:
    parent = os.getpid()
    marker = tmp_path / "child-took-one"

    def call(i: int) -> tuple[int, int]:
        if os.getpid() != parent:
            marker.touch()
        else:
            # The parent waits for the child to have taken an item, so the test does not
            # depend on which process gets the CPU first.
            deadline = time.monotonic() + 60
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.005)
        return i + 100, os.getpid()

    with ForkedMap(call, 6, workers=1) as work:
        results = work.results()
    assert [value for value, _ in results] == list(range(100, 106))
    assert any(pid != parent for _, pid in results)


def test_the_first_failing_item_in_index_order_raises_its_own_exception() -> None:
    class Located(Exception):
        def __init__(self, index: int, where: tuple[int, int]):
            super().__init__(f"item {index} failed at line {where[0]}, column {where[1]}")
            self.where = where

    def call(i: int) -> int:
        if i in (3, 7):
            raise Located(i, (i, 2 * i))
        return i

    # Taken in reverse, item 7 fails first in time; a serial loop would have stopped at 3.
    with ForkedMap(call, 10, workers=1, order=list(reversed(range(10)))) as work:
        with pytest.raises(Located, match="item 3 failed at line 3, column 6") as caught:
            work.results()
    assert caught.value.where == (3, 6)


def test_items_of_a_child_that_died_are_computed_by_the_parent() -> None:
    with ForkedMap(lambda i: -i, 8, workers=1) as work:
        (pid,) = work.children
        os.kill(pid, signal.SIGKILL)
        assert work.results() == [-i for i in range(8)]
    assert _gone(pid)


def test_a_child_that_never_answers_is_killed_and_its_item_done_here(tmp_path: Path) -> None:
    parent = os.getpid()
    marker = tmp_path / "child-stuck"

    def call(i: int) -> int:
        if os.getpid() != parent:
            marker.touch()
            time.sleep(3600)  # as a child would that waits for a lock no thread will release
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        return 3 * i

    with ForkedMap(call, 4, workers=1, patience_s=0.2) as work:
        (pid,) = work.children
        assert work.results() == [0, 3, 6, 9]
    assert _gone(pid)


def test_when_no_process_can_be_forked_the_caller_computes_every_item(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refuse)
    with ForkedMap(lambda i: 2 * i, 5, workers=1) as work:
        assert work.children == []
        assert work.results() == [0, 2, 4, 6, 8]


def test_leaving_the_block_early_kills_and_reaps_the_children() -> None:
    def slow(i: int) -> int:
        time.sleep(10)
        return i

    with pytest.raises(RuntimeError, match="caller failed"):
        with ForkedMap(slow, 4, workers=2) as work:
            pids = work.children
            assert len(pids) == 2
            raise RuntimeError("caller failed")
    assert all(_gone(pid) for pid in pids)


def test_children_are_reaped_after_results() -> None:
    with ForkedMap(lambda i: i, 4, workers=1) as work:
        pids = work.children
        work.results()
        assert work.children == []
    assert pids and all(_gone(pid) for pid in pids)


def test_an_order_that_misses_an_item_is_refused() -> None:
    with pytest.raises(ValueError, match="every item exactly once"):
        ForkedMap(lambda i: i, 3, workers=1, order=[0, 2, 2])
