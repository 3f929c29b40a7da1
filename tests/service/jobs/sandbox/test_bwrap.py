"""Programs run in the sandbox: what they can see, write and start, and how they end."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from service.jobs.sandbox import bwrap
from service.jobs.sandbox.bwrap import FD_ENV, Limits, Mount, probe, python_mounts, python_path

pytestmark = pytest.mark.skipif(not probe().ok, reason=f"no sandbox on this machine: {probe().reason}")

LIMITS = Limits(seconds=60, memory_bytes=2 << 30, cpu_seconds=60, file_bytes=64 << 20, processes=64)
SAY = f"""
import json, os
def say(**message):
    os.write(int(os.environ["{FD_ENV}"]), (json.dumps(message) + "\\n").encode())
"""


def in_sandbox(tmp_path: Path, code: str, *, limits: Limits = LIMITS, mounts: list[Mount] | None = None,
               messages: list[dict[str, object]] | None = None) -> bwrap.Finished:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/job", "PYTHONPATH": python_path()}
    return bwrap.run(
        [sys.executable, "-c", SAY + textwrap.dedent(code)], scratch=scratch,
        mounts=[*python_mounts(), *(mounts or [])], limits=limits, env=env,
        on_message=(messages.append if messages is not None else lambda m: None),
    )


def test_the_final_message_is_the_outcome_and_earlier_ones_are_progress(tmp_path: Path) -> None:
    messages: list[dict[str, object]] = []

    finished = in_sandbox(tmp_path, """
        say(progress={"step": 1})
        say(progress={"step": 2})
        say(outcome="ok", result=42)
    """, messages=messages)

    assert finished.outcome == "ok" and finished.final["result"] == 42
    assert messages == [{"progress": {"step": 1}}, {"progress": {"step": 2}}]


def test_only_the_scratch_directory_is_writable(tmp_path: Path) -> None:
    finished = in_sandbox(tmp_path, """
        results = {}
        for path in ("/job/made.txt", "/usr/made.txt", "/made.txt", "/etc/made.txt", "/tmp/made.txt",
                     "/dev/made.txt", "/dev/shm/made.txt", "/dev/null"):
            try:
                with open(path, "w") as f:
                    f.write("x")
                results[path] = "written"
            except OSError as err:
                results[path] = err.strerror
        say(outcome="ok", result=results)
    """)

    written = finished.final["result"]
    assert written["/job/made.txt"] == "written"
    assert [p for p, r in written.items() if r == "written"] == ["/job/made.txt", "/dev/null"]
    assert (tmp_path / "scratch" / "made.txt").read_text() == "x"


def test_the_job_sees_none_of_etc_but_the_linkers_files(tmp_path: Path) -> None:
    finished = in_sandbox(tmp_path, """
        say(outcome="ok", result=sorted(os.listdir("/etc")))
    """)

    assert set(finished.final["result"]) <= {"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives"}


def test_a_read_only_mount_cannot_be_written(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    (shared / "data").write_text("original")
    (shared / "data").chmod(0o666)  # writable by anyone: only the mount stops the job

    finished = in_sandbox(tmp_path, """
        try:
            open("/module/data", "a").write("more")
            said = "written"
        except OSError as err:
            said = err.strerror
        say(outcome="ok", result=[said, open("/module/data").read()])
    """, mounts=[Mount(shared, "/module")])

    assert finished.final["result"] == ["Read-only file system", "original"]
    assert (shared / "data").read_text() == "original"


def test_the_job_runs_without_capabilities_and_with_no_new_privs(tmp_path: Path) -> None:
    finished = in_sandbox(tmp_path, """
        status = dict(line.split(":", 1) for line in open("/proc/self/status"))
        say(outcome="ok", result={k: status[k].strip() for k in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp")})
    """)

    assert finished.final["result"] == {"CapEff": "0" * 16, "CapBnd": "0" * 16, "NoNewPrivs": "1", "Seccomp": "2"}


def test_a_job_over_its_time_is_killed_with_every_process_it_started(tmp_path: Path) -> None:
    started = time.monotonic()

    finished = in_sandbox(tmp_path, """
        import subprocess
        subprocess.Popen(["/usr/bin/sleep", "876543"])
        say(progress={"started": True})
        import time
        time.sleep(600)
    """, limits=Limits(seconds=2, memory_bytes=2 << 30, cpu_seconds=60, file_bytes=1 << 20, processes=64))

    assert finished.outcome == "timeout"
    assert time.monotonic() - started < 60
    assert not _processes_running(b"sleep\x00876543\x00")


def test_a_job_that_ends_without_an_outcome_is_a_crash_saying_how(tmp_path: Path) -> None:
    finished = in_sandbox(tmp_path, "import os; os.kill(os.getpid(), 9)")

    assert finished.outcome == "crashed"
    assert "exited with status" in finished.exit or "killed" in finished.exit


def test_a_flood_on_the_channel_is_not_taken_for_messages(tmp_path: Path) -> None:
    finished = in_sandbox(tmp_path, """
        fd = int(os.environ["RELAYCC_SANDBOX_FD"])
        for _ in range(40):
            os.write(fd, b"x" * (1 << 16))
        say(outcome="ok")
    """)

    assert finished.outcome == "crashed"


def test_an_outcome_that_keeps_running_is_ended_after_a_grace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap, "EXIT_GRACE_SECONDS", 0.5)

    finished = in_sandbox(tmp_path, """
        say(outcome="ok", result="done")
        import time
        time.sleep(600)
    """)

    assert finished.outcome == "ok" and finished.final["result"] == "done"


def test_the_probe_says_why_when_bubblewrap_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap, "bwrap_path", lambda: None)
    bwrap.probe.cache_clear()
    try:
        available = bwrap.probe()
    finally:
        bwrap.probe.cache_clear()

    assert not available.ok and "bubblewrap (bwrap) is not installed" in available.reason


def test_running_without_bubblewrap_raises_instead_of_running_unsandboxed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap, "bwrap_path", lambda: None)

    with pytest.raises(bwrap.SandboxError):
        in_sandbox(tmp_path, "say(outcome='ok')")


def _processes_running(cmdline: bytes) -> bool:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if Path(entry.path, "cmdline").read_bytes() == cmdline:
                    return True
            except OSError:
                continue
    return False


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs change uid only when the service runs as root")
def test_concurrent_sandboxes_of_different_workers_each_get_their_whole_process_allowance(tmp_path: Path) -> None:
    import threading

    limits = Limits(seconds=60, memory_bytes=2 << 30, cpu_seconds=60, file_bytes=64 << 20, processes=12)
    # Six sleeping children each, nine processes with bubblewrap's and Python's own: the two
    # sandboxes (eighteen) fit in allowances of twelve only when RLIMIT_NPROC counts each
    # sandbox's uid apart.
    code = """
        import subprocess
        children = [subprocess.Popen(["sleep", "2"]) for _ in range(6)]
        for child in children:
            child.wait()
        say(outcome="ok", result=len(children))
    """
    results: dict[int, bwrap.Finished] = {}

    def job(worker: int) -> None:
        scratch = tmp_path / f"scratch{worker}"
        scratch.mkdir()
        env = {"PATH": "/usr/bin:/bin", "HOME": "/job", "PYTHONPATH": python_path()}
        results[worker] = bwrap.run([sys.executable, "-c", SAY + textwrap.dedent(code)], scratch=scratch,
                                    mounts=python_mounts(), limits=limits, env=env,
                                    uid=bwrap.JOB_UID_BASE + worker)

    threads = [threading.Thread(target=job, args=(worker,)) for worker in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [(r.outcome, r.final.get("result")) for r in results.values()] == [("ok", 6), ("ok", 6)], results


def test_each_worker_process_runs_its_jobs_as_a_uid_of_its_own() -> None:
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a second worker
        os.write(write, str(bwrap.job_uid()).encode())
        os._exit(0)
    os.waitpid(child, 0)
    other = int(os.read(read, 64))
    assert bwrap.job_uid() != other and min(bwrap.job_uid(), other) > 65535
