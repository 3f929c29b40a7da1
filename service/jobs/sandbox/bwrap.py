"""Running a job's program inside bubblewrap (`bwrap`), the sandbox of every build and run.

What a job gets (and `probe` checks that this machine can give it):
* its own user, PID, network, IPC, UTS and cgroup namespaces: no network but a loopback of its
  own, no view of other processes, and every process it starts dies with it (the namespace's
  first process is bubblewrap's reaper, which dies with the worker that started it);
* an unprivileged uid: a worker running as root drops to `uid` (one per worker, `job_uid`) before starting
  bubblewrap, so that RLIMIT_NPROC counts the job's processes and the job cannot signal the
  worker; no capabilities, `no_new_privs`, nested user namespaces disabled, and the seccomp
  filter of `seccomp.py`;
* a root file system of its own: read-only binds of what gcc, Python and the shared libraries
  need (/usr, the linker's files of /etc, the Python installation, the project's packages), a
  new /proc and a minimal /dev, and one writable directory, the job's scratch directory, at
  /job. Everything else — /etc/shadow, /root, /tmp, the module store — does not exist there;
* hard rlimits: CPU, address space, file size, processes, open files, and no core files.

A root worker cannot hand bubblewrap paths that the unprivileged uid cannot reach (a Python
installed under /root, a store under a private home): before dropping root, the launching
child moves into a private mount namespace and binds each source onto a small tmpfs under /tmp
that the uid can traverse. Those mounts exist only in that child's namespace.

The program talks back over one pipe, inherited as a file descriptor whose number is in
`RELAYCC_SANDBOX_FD`: JSON lines, progress first and one final line with an `outcome`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from service.jobs.sandbox.seccomp import filter_program, host_arch

FD_ENV = "RELAYCC_SANDBOX_FD"
JOB_DIR = "/job"
DEFAULT_UID = 65534
# Jobs run as JOB_UID_BASE + the worker's pid: RLIMIT_NPROC counts the processes of a uid across
# the whole machine, so sandboxes sharing one uid (two workers, a build's gcc processes beside a
# run) ate each other's allowance and a fork failed with EAGAIN. A worker runs one job at a
# time and live pids are distinct, so each live sandbox has a uid of its own; no file outside
# the job's scratch directory belongs to any of them.
JOB_UID_BASE = 1_000_000_000


def job_uid() -> int:
    """The uid a job started by this process runs as (when the service runs as root)."""
    return JOB_UID_BASE + os.getpid()
# A job's messages are small (progress, a problem, timings); a longer line is not ours.
MAX_MESSAGE_BYTES = 1 << 20
MAX_MESSAGES_BYTES = 16 << 20
EXIT_GRACE_SECONDS = 5.0
_SYSTEM_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# The linker's cache and configuration, and Debian's alternatives (cc, libopenblas): nothing
# else of /etc is visible, so neither passwd nor shadow exists in a job.
_ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives")

_CLONE_NEWNS = 0x00020000
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_PR_SET_NO_NEW_PRIVS = 38


@dataclass(frozen=True)
class Limits:
    """What one job may use. `seconds` is wall-clock time, enforced by the caller; the rest are
    hard rlimits of every process of the job."""

    seconds: float
    memory_bytes: int
    cpu_seconds: int
    file_bytes: int
    processes: int
    open_files: int = 1024


@dataclass(frozen=True)
class Mount:
    """`source` on this machine appears at `dest` inside the sandbox."""

    source: Path
    dest: str
    writable: bool = False


@dataclass
class Finished:
    """How a sandboxed program ended: `ok`/`error`/`memory` (its own final message says so,
    the message is in `final`), `timeout`, or `crashed` (no final message; `exit` says how)."""

    outcome: str
    final: dict[str, object] = field(default_factory=dict)
    exit: str = ""


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str


class SandboxError(Exception):
    """The sandbox could not be set up (bubblewrap missing, namespaces refused)."""


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def python_mounts() -> list[Mount]:
    """The Python installation and the project's packages, read-only at their own paths."""
    import compiler
    import service

    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    for package in (compiler, service):
        paths.add(Path(package.__file__).resolve().parent)
    # A venv's interpreter is a link into the base installation; both are listed above.
    return [Mount(p, str(p)) for p in sorted(paths) if p.exists() and not _is_system(p)]


def python_path() -> str:
    """PYTHONPATH that finds the project's packages where python_mounts put them."""
    import compiler
    import service

    roots = {str(Path(p.__file__).resolve().parent.parent) for p in (compiler, service)}
    return os.pathsep.join(sorted(roots))


def _is_system(path: Path) -> bool:
    return path == Path("/usr") or Path("/usr") in path.parents


def run(
    argv: Sequence[str],
    *,
    scratch: Path,
    mounts: Sequence[Mount],
    limits: Limits,
    env: Mapping[str, str],
    on_message: Callable[[dict[str, object]], None] = lambda message: None,
    uid: int = DEFAULT_UID,
    on_start: Callable[[int], None] | None = None,
) -> Finished:
    """Run `argv` in a new sandbox whose only writable path is `scratch`, mounted at /job."""
    executable = bwrap_path()
    if executable is None:
        raise SandboxError("bubblewrap (bwrap) is not installed")
    arch = host_arch()
    if arch is None:
        raise SandboxError("no seccomp table for this machine's architecture")
    as_root = os.geteuid() == 0
    if as_root:
        os.chown(scratch, uid, uid)
    stage = Path(tempfile.mkdtemp(prefix="relaycc-stage-")) if as_root else None
    message_read, message_write = os.pipe()
    filter_read, filter_write = os.pipe()
    try:
        os.write(filter_write, filter_program(arch))  # a few hundred bytes: fits the pipe
        os.close(filter_write)
        filter_write = -1
        all_mounts = [*_system_mounts(), *mounts, Mount(scratch, JOB_DIR, writable=True)]
        sources = [m.source for m in all_mounts]
        if stage is not None:
            sources = [stage / str(index) for index in range(len(all_mounts))]
        command = [executable, *_bwrap_options(all_mounts, sources, filter_read), "--", *argv]
        job_env = {**env, FD_ENV: str(message_write)}
        setup = _Setup(stage, [m.source for m in all_mounts], uid if as_root else None, limits)
        process = subprocess.Popen(
            command, env=job_env, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, pass_fds=(message_write, filter_read), start_new_session=True,
            preexec_fn=setup, close_fds=True,
        )
        os.close(message_write)
        message_write = -1
        os.close(filter_read)
        filter_read = -1
        if on_start is not None:
            try:
                on_start(process.pid)
            except BaseException:
                _kill(process)
                process.wait()
                raise
        return _follow(process, message_read, limits.seconds, on_message)
    finally:
        for fd in (message_read, message_write, filter_read, filter_write):
            if fd >= 0:
                os.close(fd)
        if stage is not None:
            _remove_stage(stage)


def _system_mounts() -> list[Mount]:
    mounts = [Mount(Path("/usr"), "/usr")]
    for name in _ETC_ENTRIES:
        path = Path("/etc") / name
        if path.exists():
            mounts.append(Mount(path, str(path)))
    for name in _SYSTEM_TOP_LEVEL:
        path = Path("/") / name
        if path.is_dir() and not path.is_symlink():
            mounts.append(Mount(path, str(path)))
    return mounts


def _bwrap_options(mounts: Sequence[Mount], sources: Sequence[Path], seccomp_fd: int) -> list[str]:
    options = [
        "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
        "--new-session", "--cap-drop", "ALL", "--hostname", "relaycc-job",
        "--seccomp", str(seccomp_fd), "--proc", "/proc", "--dev", "/dev",
    ]
    for name in _SYSTEM_TOP_LEVEL:
        path = Path("/") / name
        if path.is_symlink():
            options += ["--symlink", os.readlink(path), str(path)]
    for mount, source in zip(mounts, sources):
        options += ["--bind" if mount.writable else "--ro-bind", str(source), mount.dest]
    # The root bubblewrap builds is a tmpfs, and so is its /dev: left writable, files written
    # there would take the host's memory without counting against any limit of the job.
    options += ["--remount-ro", "/", "--remount-ro", "/dev", "--chdir", JOB_DIR]
    return options


class _Setup:
    """The launching child's set-up between fork and exec (subprocess's preexec_fn): stage the
    mounts, drop root, set the hard limits. Nothing here may take a lock another thread held."""

    def __init__(self, stage: Path | None, sources: Sequence[Path], uid: int | None, limits: Limits):
        self.stage = stage
        self.sources = [bytes(s) for s in sources]
        self.uid = uid
        self.limits = limits
        self.libc = _libc()
        # Counted now: without root, RLIMIT_NPROC counts every process of the user.
        self.own_processes = 0 if uid is not None else _processes_of(os.getuid())

    def __call__(self) -> None:
        libc = self.libc
        if self.stage is not None:
            _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
            stage = bytes(self.stage)
            _check(libc.mount(b"tmpfs", stage, b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0755,size=64k"),
                   "mount the staging tmpfs")
            for index, source in enumerate(self.sources):
                target = stage + b"/" + str(index).encode()
                if os.path.isdir(source):
                    os.mkdir(target)
                else:
                    os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
                _check(libc.mount(source, target, None, _MS_BIND | _MS_REC, None), "bind a source")
        if self.uid is not None:
            os.setgroups([])
            os.setresgid(self.uid, self.uid, self.uid)
            os.setresuid(self.uid, self.uid, self.uid)
        limits = self.limits
        for which, value in (
            (resource.RLIMIT_AS, limits.memory_bytes),
            (resource.RLIMIT_CPU, limits.cpu_seconds),
            (resource.RLIMIT_FSIZE, limits.file_bytes),
            (resource.RLIMIT_NPROC, limits.processes + self.own_processes),
            (resource.RLIMIT_NOFILE, limits.open_files),
            (resource.RLIMIT_CORE, 0),
        ):
            resource.setrlimit(which, (value, value))
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")


def _check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"sandbox set-up: {what} failed")


def _follow(
    process: subprocess.Popen[bytes],
    fd: int,
    seconds: float,
    on_message: Callable[[dict[str, object]], None],
) -> Finished:
    """Read the job's messages until it closes the pipe or its time is up, then reap it."""
    deadline = time.monotonic() + seconds
    buffer = b""
    received = 0
    final: dict[str, object] | None = None
    timed_out = False
    flooded = False
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = final is None
                break
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            received += len(chunk)
            buffer += chunk
            if received > MAX_MESSAGES_BYTES or (b"\n" not in buffer and len(buffer) > MAX_MESSAGE_BYTES):
                flooded = True  # not a job of ours talking
                break
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                message = _decode(line)
                if message is None:
                    continue
                if "outcome" in message and final is None:
                    final = message
                    # Said its last word: it has a little while to exit, not the whole limit.
                    deadline = min(deadline, time.monotonic() + EXIT_GRACE_SECONDS)
                elif final is None:
                    on_message(message)
        # The pipe closes when the job's last process is gone; bubblewrap itself follows.
        try:
            process.wait(timeout=max(0.0, min(EXIT_GRACE_SECONDS, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            timed_out = timed_out or (final is None and not flooded)
    finally:
        _kill(process)
    stderr = process.stderr.read(4096).decode("utf-8", "replace") if process.stderr else ""
    code = process.wait()
    if process.stderr:
        process.stderr.close()
    if flooded:
        return Finished("crashed", exit=f"it wrote more than its channel takes ({MAX_MESSAGE_BYTES} bytes a "
                        f"line, {MAX_MESSAGES_BYTES} in all)")
    if timed_out:
        return Finished("timeout", exit=f"killed after {seconds:g} s")
    if final is not None and final.get("outcome") in ("ok", "error", "memory"):
        return Finished(str(final["outcome"]), final)
    return Finished("crashed", exit=_describe(code, stderr))


def _decode(line: bytes) -> dict[str, object] | None:
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return message if isinstance(message, dict) else None


def _kill(process: subprocess.Popen[bytes]) -> None:
    """End bubblewrap; its reaper (PID 1 of the job's namespace) dies with it, and with the
    reaper every process of the job."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def _describe(code: int, stderr: str) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    first = next((line for line in stderr.splitlines() if line.startswith("bwrap:")), "")
    return f"exited with status {code}" + (f" ({first})" if first else "")


def _remove_stage(stage: Path) -> None:
    try:
        stage.rmdir()
    except OSError:
        shutil.rmtree(stage, ignore_errors=True)


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@lru_cache(maxsize=4)
def probe(uid: int = DEFAULT_UID) -> Availability:
    """Whether this machine can run jobs in the sandbox: starts one (running /bin/true, or
    `true` from /usr/bin) with the whole set-up, so a refusal shows here and not in a job."""
    if not sys.platform.startswith("linux"):
        return Availability(False, "the sandbox needs Linux namespaces")
    if bwrap_path() is None:
        return Availability(False, "bubblewrap (bwrap) is not installed; `make install` installs it")
    if host_arch() is None:
        return Availability(False, "no seccomp table for this machine's architecture")
    true = shutil.which("true", path="/usr/bin:/bin") or "/usr/bin/true"
    scratch = Path(tempfile.mkdtemp(prefix="relaycc-probe-"))
    try:
        finished = run([true], scratch=scratch, mounts=[], limits=Limits(
            seconds=30, memory_bytes=256 << 20, cpu_seconds=10, file_bytes=1 << 20, processes=16,
        ), env={"PATH": "/usr/bin:/bin"}, uid=uid)
    except (OSError, SandboxError, subprocess.SubprocessError) as err:
        return Availability(False, f"the sandbox cannot start here: {err}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if finished.outcome != "crashed" or finished.exit != "exited with status 0":
        return Availability(False, f"the sandbox cannot start here: bubblewrap {finished.exit}")
    return Availability(True, "bubblewrap: user, PID and network namespaces, seccomp, rlimits")
