"""Running one job's work in a child process with a wall-clock limit and a memory limit: the
isolation of jobs without user C where the machine has no sandbox (service/jobs/sandbox/), or where
the operator turned it off (RELAYCC_SANDBOX=off).

The worker (a process of the embedded pool, or a Celery worker) forks a child per job. The
child lowers its address-space limit (RLIMIT_AS), optionally leaves the network (a new network
namespace, where the kernel lets us), does the work and writes its result to a pipe. The worker
waits for the result until the deadline, then kills the child's whole process group (the C
compiler included). So a job that runs too long, allocates too much or crashes takes only its
own child with it; the worker stays healthy and keeps its limits. The child is killed too when
its worker dies (Linux `PR_SET_PDEATHSIG`), so a killed worker never leaves a job running.

The pipe carries one tagged message: `R` + the task's result, `E` + the error description the
caller's `describe_error` made of an exception, or `M` for a MemoryError.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["ok", "error", "memory", "timeout", "crashed"]

_PR_SET_PDEATHSIG = 1
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_CHILD_FAILED = 70


@dataclass(frozen=True)
class Isolated:
    """What became of an isolated task: its result bytes (`ok`), the error description
    (`error`), or how it ended otherwise, with the child's exit described in `exit`."""

    outcome: Outcome
    payload: bytes = b""
    exit: str = ""


def run_isolated(
    task: Callable[[], bytes],
    *,
    seconds: float,
    memory_bytes: int | None,
    describe_error: Callable[[BaseException], bytes],
    on_start: Callable[[int], None] | None = None,
    deny_network: bool = False,
) -> Isolated:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(task, write_fd, memory_bytes, describe_error, deny_network)
    os.close(write_fd)
    try:
        if on_start is not None:
            on_start(pid)
        payload, finished = _read_until(read_fd, time.monotonic() + seconds)
    except BaseException:
        _kill_group(pid)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(read_fd)
    if not finished:
        _kill_group(pid)
    _, wait_status = os.waitpid(pid, 0)
    if not finished:
        return Isolated("timeout", exit=f"killed after {seconds:g} s")
    code = os.waitstatus_to_exitcode(wait_status)
    if code != 0 or not payload:
        return Isolated("crashed", exit=describe_exit(code))
    tag, body = payload[:1], payload[1:]
    if tag == b"R":
        return Isolated("ok", body)
    if tag == b"M":
        return Isolated("memory")
    return Isolated("error", body)


def _child(
    task: Callable[[], bytes],
    write_fd: int,
    memory_bytes: int | None,
    describe_error: Callable[[BaseException], bytes],
    deny_network: bool,
) -> None:
    """The forked child: never returns, never runs the parent's cleanup code."""
    code = _CHILD_FAILED
    try:
        parent = os.getppid()
        # Its own process group, so that a timeout kills the C compiler it started as well.
        os.setpgid(0, 0)
        _die_with_parent(parent)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if memory_bytes is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            soft = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        if deny_network:
            _leave_network()
        try:
            message = b"R" + task()
        except MemoryError:
            message = b"M"
        except BaseException as err:  # the child reports every failure; nothing may escape it
            message = b"E" + describe_error(err)
        _write_all(write_fd, message)
        code = 0
    except MemoryError:
        _write_all(write_fd, b"M")
        code = 0
    finally:
        os._exit(code)


def _read_until(fd: int, deadline: float) -> tuple[bytes, bool]:
    """Everything written to `fd` until end of file (True) or until the deadline (False)."""
    chunks = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b"", False
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


def describe_exit(code: int) -> str:
    """An exit code as multiprocessing gives it (negative: the signal that ended the process)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exited with status {code}"


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def _die_with_parent(parent: int) -> None:
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died before prctl took effect.
    if os.getppid() != parent:
        os._exit(_CHILD_FAILED)


def _leave_network() -> None:
    """Move into a new, empty network namespace: as root, or through a user namespace where
    unprivileged ones are allowed. Where neither works the child keeps the host's network."""
    libc = _libc()
    if libc is None:
        return
    if libc.unshare(_CLONE_NEWNET) != 0:
        libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
