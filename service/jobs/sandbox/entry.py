"""The program a sandboxed job runs: `python -m service.jobs.sandbox.entry`, in /job.

/job/task.json says what to do (`compile` or `run`) with the files beside it; results go to
/job (the OUTDIR `out/`, or `result.npz`), and messages to the worker go down the pipe named by
RELAYCC_SANDBOX_FD: progress lines, then one line with the outcome. The worker checks what it
finds in /job before anything of it reaches the store or a client.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from service.jobs.sandbox.bwrap import FD_ENV, JOB_DIR

MODULE_DIR = "/module"


def main() -> int:
    channel = int(os.environ[FD_ENV])

    def send(message: Mapping[str, object]) -> None:
        data = (json.dumps(message) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(channel, view):]

    try:
        send({"outcome": "ok", "result": _work(Path(JOB_DIR), send)})
    except MemoryError:
        send({"outcome": "memory"})
    except BaseException as err:  # every failure is reported; nothing may escape unreported
        from service.jobs.work import describe_error

        send({"outcome": "error", "problem": describe_error(err)})
    return 0


def _work(job: Path, send: object) -> object:
    from service.arrays import NO_LIMIT, decode_npz
    from service.jobs.work import compile_request, run_module

    task = json.loads((job / "task.json").read_text(encoding="utf-8"))
    if task["kind"] == "compile":
        params_file = job / "params.npz"
        params = decode_npz(params_file.read_bytes(), "params", NO_LIMIT) if params_file.exists() else {}
        return compile_request(
            task["request"], params, job / "out",
            lambda progress: send({"progress": dict(progress)}),  # type: ignore[operator]
            delay_seconds=float(task.get("delay_seconds", 0.0)),
        )
    if task["kind"] == "run":
        threads = task.get("threads")
        archive = run_module(Path(MODULE_DIR), (job / "inputs.npz").read_bytes(), int(task["repeat"]),
                             int(threads) if threads is not None else None, bool(task.get("profile", False)))
        (job / "result.npz").write_bytes(archive)
        return None
    raise ValueError(f"unknown task kind {task['kind']!r}")


if __name__ == "__main__":
    sys.exit(main())
