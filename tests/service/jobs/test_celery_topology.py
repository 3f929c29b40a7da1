"""The scaled-out service as docker/docker-compose.yml runs it, without docker: a Redis server,
one API process (uvicorn, RELAYCC_QUEUE=celery) and two Celery workers, all on 127.0.0.1 and
sharing one store: a directory, and once more an S3 bucket on a local S3 server (moto), as
docker-compose runs it with MinIO.

Everything runs in one test: under pytest-xdist, tests of one module may land on different
test processes, and each would start a topology of its own on a two-core machine. The steps
are separate functions, named for what they check.

Compile jobs start with a short pause (RELAYCC_JOB_START_DELAY_SECONDS) so that the test can
kill the worker process that runs a job while it is surely still running.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest

from service.jobs.celery_app import RelayccCelery
from service.settings import Settings
from service.store.module_store import ModuleStoreBase, Status, open_store
from tests.service.s3_endpoint import S3Endpoint

REDIS_SERVER = shutil.which("redis-server")
from tests.service.support import ROOT

REPO_ROOT = ROOT

# Generous bounds for a loaded two-core machine; a healthy run takes a few seconds per step.
START_SECONDS = 60.0
JOB_SECONDS = 60.0
POLL_SECONDS = 0.02
MAX_ATTEMPTS = 2

pytestmark = pytest.mark.skipif(
    REDIS_SERVER is None and not os.environ.get("CI"),
    reason="redis-server is not installed (`make install` installs it)",
)

MODEL = """\
#[version = "0.0.5"]
// One dense layer with a bias and a ReLU.
def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(3, 4), float32], %b: Tensor[(3), float32]) {
  %0 = nn.dense(%x, %w, units=3);
  %1 = nn.bias_add(%0, %b);
  nn.relu(%1)
}
"""


@dataclass
class Topology:
    api: httpx.Client
    store: ModuleStoreBase
    logs: Path
    worker_pids: list[int]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def log_tails(self) -> str:
        parts = []
        for log in sorted(self.logs.glob("*.log")):
            lines = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
            parts.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for(what: str, check: Callable[[], bool], seconds: float, topology: Topology | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, httpx.HTTPError):
            pass  # not up yet
        time.sleep(POLL_SECONDS)
    details = topology.log_tails() if topology is not None else ""
    pytest.fail(f"timed out after {seconds:g} s waiting for {what}\n{details}")


def _start(topology: Topology, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = open(topology.logs / f"{name}.log", "wb")
    # A session of its own: teardown signals the whole group, pool children included.
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    topology.processes.append(process)
    return process


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        _signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        # Whatever is left of the group (a pool child, a compile), and a leader that hung.
        _signal_group(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _celery_nodes(app: RelayccCelery, nodes: list[str]) -> set[str]:
    """Which of `nodes` answer a ping."""
    # Without a limit, a ping waits out its whole timeout even when every node has answered.
    replies = app.control.ping(destination=nodes, timeout=1.0, limit=len(nodes)) or []
    return {name for reply in replies for name in reply}


@pytest.fixture(scope="module", params=["directory", "s3"])
def topology(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    if REDIS_SERVER is None:
        pytest.fail("redis-server is not installed; `make install` installs it")
    root = tmp_path_factory.mktemp("celery-topology")
    redis_port, api_port = _free_port(), _free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    location = str(root / "store")
    s3_env: dict[str, str] = {}
    if request.param == "s3":
        endpoint: S3Endpoint = request.getfixturevalue("s3_endpoint")
        location, s3_env = f"s3://{endpoint.new_bucket()}/relaycc", endpoint.env()
    # The processes get only the test's RELAYCC_* settings, none from the outer environment.
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("RELAYCC_")},
        **s3_env,
        "RELAYCC_QUEUE": "celery",
        "RELAYCC_REDIS_URL": redis_url,
        "RELAYCC_STORE": location,
        "RELAYCC_WORKERS": "1",
        "RELAYCC_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
        "RELAYCC_COMPILE_SECONDS": "60",
        "RELAYCC_JOB_START_DELAY_SECONDS": "1.5",
    }
    api = httpx.Client(base_url=f"http://127.0.0.1:{api_port}", timeout=30.0)
    top = Topology(api=api, store=open_store(location, cache=root / "cache"), logs=root, worker_pids=[])
    control = RelayccCelery(lambda: Settings(redis_url=redis_url))
    try:
        _start(top, "redis", [
            REDIS_SERVER, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(root),
        ], env)
        nodes = [f"w{index}@127.0.0.1" for index in (1, 2)]
        for node in nodes:
            worker = _start(top, node.split("@")[0], [
                sys.executable, "-m", "celery", "-A", "service.jobs.celery_app", "worker", "--loglevel=INFO",
                "--concurrency=1", "-n", node, "--without-gossip", "--without-mingle",
            ], env)
            top.worker_pids.append(worker.pid)
        _start(top, "api", [
            sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app",
            "--host", "127.0.0.1", "--port", str(api_port), "--log-level", "warning",
        ], env)
        _wait_for("the API to be ready", lambda: api.get("/readyz").status_code == 200, START_SECONDS, top)
        _wait_for("both workers to answer", lambda: _celery_nodes(control, nodes) >= set(nodes), START_SECONDS, top)
        yield top
    finally:
        control.close()
        api.close()
        _stop(top.processes)


def _compile(topology: Topology, module_name: str) -> str:
    response = topology.api.post("/compile", json={"relay": MODEL, "module_name": module_name})
    assert response.status_code in (200, 202), response.text
    module_id: str = response.json()["id"]
    return module_id


def _status(topology: Topology, module_id: str) -> Status:
    status = topology.store.status(module_id)
    assert status is not None
    return status


def _wait_until_finished(topology: Topology, module_id: str) -> dict[str, object]:
    """The module's status as the API shows it, once the job is over."""
    _wait_for(
        f"module {module_id} to finish",
        lambda: _status(topology, module_id)["state"] in ("succeeded", "failed"),
        JOB_SECONDS,
        topology,
    )
    response = topology.api.get(f"/modules/{module_id}")
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def _kill_worker_running(topology: Topology, module_id: str, spared: set[int]) -> int:
    """SIGKILL the Celery pool process running the job once it runs in a process not in
    `spared`; its pid."""
    found: list[int] = []

    def running_elsewhere() -> bool:
        status = _status(topology, module_id)
        worker = status.get("worker")
        if status["state"] != "running" or not isinstance(worker, dict):
            return False
        pid = worker.get("pid")
        if isinstance(pid, int) and pid not in spared:
            found.append(pid)
            return True
        return False

    _wait_for(f"module {module_id} to run in a new worker process", running_elsewhere, JOB_SECONDS, topology)
    pid = found[-1]
    # Only ever a pool process of our own workers.
    assert _parent_pid(pid) in topology.worker_pids, f"{pid} is not a pool process of the test's workers"
    os.kill(pid, signal.SIGKILL)
    return pid


def _parent_pid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) is parenthesized and may hold spaces; the ppid follows it.
    return int(stat.rsplit(")", 1)[1].split()[1])


def _compiles_a_model_and_runs_it(topology: Topology) -> None:
    module_id = _compile(topology, "first")
    status = _wait_until_finished(topology, module_id)
    assert status["state"] == "succeeded", status
    assert status["attempts"] == 1

    report = topology.api.get(f"/modules/{module_id}/metadata")
    assert report.status_code == 200, report.text
    assert report.json()["module_name"] == "first"
    assert [call["kind"] for call in report.json()["calls"]] == ["prim_func"]
    artifacts = topology.api.get(f"/modules/{module_id}/artifacts").json()["artifacts"]
    assert "libfirst.so" in {entry["name"] for entry in artifacts}

    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4)).astype("float32")
    w = rng.standard_normal((3, 4)).astype("float32")
    b = rng.standard_normal(3).astype("float32")
    run = topology.api.post(
        f"/modules/{module_id}/run", json={"inputs": {"x": x.tolist(), "w": w.tolist(), "b": b.tolist()}}
    )
    assert run.status_code == 200, run.text
    out = np.asarray(run.json()["outputs"]["out0"]["data"], dtype="float32")
    np.testing.assert_allclose(out, np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-5)


def _job_whose_worker_is_killed_is_delivered_again(topology: Topology) -> None:
    module_id = _compile(topology, "killed_once")
    killed = _kill_worker_running(topology, module_id, spared=set())

    status = _wait_until_finished(topology, module_id)
    assert status["state"] == "succeeded", status
    assert status["attempts"] == 2
    worker = _status(topology, module_id)["worker"]
    assert isinstance(worker, dict) and worker["pid"] != killed


def _job_that_kills_every_worker_fails_after_its_attempts(topology: Topology) -> None:
    module_id = _compile(topology, "killed_always")
    killed: set[int] = set()
    for _ in range(MAX_ATTEMPTS):
        killed.add(_kill_worker_running(topology, module_id, spared=killed))

    status = _wait_until_finished(topology, module_id)
    assert status["state"] == "failed", status
    assert status["attempts"] == MAX_ATTEMPTS
    error = status["error"]
    assert isinstance(error, dict) and error["type"].endswith("/worker-died"), error


def _next_job_succeeds(topology: Topology) -> None:
    module_id = _compile(topology, "after_kills")
    status = _wait_until_finished(topology, module_id)
    assert status["state"] == "succeeded", status
    assert status["attempts"] == 1


def test_celery_topology_compiles_through_the_api_and_survives_killed_workers(topology: Topology) -> None:
    _compiles_a_model_and_runs_it(topology)
    _job_whose_worker_is_killed_is_delivered_again(topology)
    _job_that_kills_every_worker_fails_after_its_attempts(topology)
    _next_job_succeeds(topology)
