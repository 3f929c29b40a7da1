from __future__ import annotations

import faulthandler
import os
import signal
import socket
import time

import numpy as np
import pytest

from service.jobs.isolation import run_isolated
from tests.service.support import gone_within


def describe(err: BaseException) -> bytes:
    return f"{type(err).__name__}: {err}".encode()


def test_a_task_result_comes_back_from_the_child() -> None:
    started: list[int] = []

    result = run_isolated(lambda: str(os.getpid()).encode(), seconds=10, memory_bytes=None,
                          describe_error=describe, on_start=started.append)

    assert result.outcome == "ok"
    assert int(result.payload) == started[0] != os.getpid()


def test_an_exception_in_the_task_is_described() -> None:
    def fail() -> bytes:
        raise ValueError("bad model")

    result = run_isolated(fail, seconds=10, memory_bytes=None, describe_error=describe)

    assert (result.outcome, result.payload) == ("error", b"ValueError: bad model")


def test_a_task_over_its_time_limit_is_killed() -> None:
    def slow() -> bytes:
        time.sleep(30)
        return b""

    start = time.monotonic()
    result = run_isolated(slow, seconds=0.5, memory_bytes=None, describe_error=describe)

    assert result.outcome == "timeout"
    assert time.monotonic() - start < 10


def test_a_timeout_also_kills_the_processes_the_task_started() -> None:
    pids: list[int] = []

    def spawn_and_hang() -> bytes:
        import subprocess

        child = subprocess.Popen(["sleep", "60"])
        os.write(write_fd, str(child.pid).encode())
        child.wait()
        return b""

    # On a loaded machine the task may be stopped before it has started its child: then again,
    # with more time.
    for seconds in (1.0, 10.0):
        read_fd, write_fd = os.pipe()
        result = run_isolated(spawn_and_hang, seconds=seconds, memory_bytes=None, describe_error=describe)
        os.close(write_fd)
        started = os.read(read_fd, 64)
        os.close(read_fd)
        if started:
            pids.append(int(started))
            break

    assert result.outcome == "timeout"
    assert gone_within(pids[0], seconds=5)


def test_a_task_over_its_memory_limit_reports_memory() -> None:
    def allocate() -> bytes:
        return bytes(np.ones(1 << 31, dtype="uint8")[:1])  # 2 GiB

    result = run_isolated(allocate, seconds=30, memory_bytes=1 << 30, describe_error=describe)

    assert result.outcome == "memory"


def test_a_crashing_task_is_reported_with_its_signal() -> None:
    def crash() -> bytes:
        faulthandler.disable()  # pytest's crash report would only clutter the test output
        os.kill(os.getpid(), signal.SIGSEGV)
        return b""

    result = run_isolated(crash, seconds=10, memory_bytes=None, describe_error=describe)

    assert result.outcome == "crashed"
    assert "SIGSEGV" in result.exit


def _network_namespaces_work() -> bool:
    result = run_isolated(lambda: b"", seconds=10, memory_bytes=None, describe_error=describe, deny_network=True)
    if result.outcome != "ok":
        return False
    probe = run_isolated(lambda: str(len(socket.if_nameindex())).encode(), seconds=10, memory_bytes=None,
                         describe_error=describe, deny_network=True)
    return probe.outcome == "ok" and int(probe.payload) <= 1


def test_a_task_without_network_cannot_reach_a_local_server() -> None:
    if not _network_namespaces_work():
        pytest.skip("network namespaces are not available here")
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def connect() -> bytes:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except OSError:
            return b"refused"
        return b"connected"

    try:
        inside = run_isolated(connect, seconds=10, memory_bytes=None, describe_error=describe, deny_network=True)
        outside = run_isolated(connect, seconds=10, memory_bytes=None, describe_error=describe)
    finally:
        server.close()

    assert (inside.payload, outside.payload) == (b"refused", b"connected")
