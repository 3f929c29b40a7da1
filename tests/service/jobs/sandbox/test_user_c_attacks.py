"""User C from a codegen document attacks the machine it runs on; each attack must fail.

Every attack once worked against `relaycc serve` (issue 13, "What is wrong today"): C sent by a
client read /etc/shadow, ran as root, wrote under /tmp, appended to another module's library in
the store, joined its worker's network namespace, left a process running after the job, raised
its own memory limit, signalled its worker, and `.incbin`-ed /etc/shadow into the library it
built. Here the same C runs through the HTTP API, and the run reports what each attempt got.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.jobs.sandbox.bwrap import probe
from tests.service.support import SMALL_RELAY, from_npz_b64, make_app, make_settings, npz_b64, wait_until_done

pytestmark = pytest.mark.skipif(not probe().ok, reason=f"no sandbox on this machine: {probe().reason}")

PROBLEMS = "https://relaycc.dev/problems/"
MARKER_SECONDS = "987654"
RELAY = """#[version = "0.0.5"]
def @main(%x: Tensor[(20), float32]) -> Tensor[(20), float32] {
  nn.relu(%x)
}
"""
DOCUMENT = {
    "name": "probe_cg",
    "mode": "relay_to_tir",
    "patterns": [{"name": "relu", "pattern": "nn.relu(*)", "symbol": "probe"}],
    "calling_convention": "dltensor",
    "library": {"sources": ["probe.c"]},
}
PROBE_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include "relaycc_dlpack.h"

static float attempt(long result) { return result < 0 ? -(float)errno : (float)result; }

static float hard_limit_is_finite(int which) {
  struct rlimit r;
  getrlimit(which, &r);
  return r.rlim_max != RLIM_INFINITY && r.rlim_cur == r.rlim_max;
}

int32_t probe(DLTensor* in0, DLTensor* out0) {
  float* out = (float*)out0->data;
  memset(out, 0, 20 * sizeof(float));
  out[0] = attempt(open("/etc/shadow", O_RDONLY));
  out[1] = (float)getuid();
  out[2] = attempt(kill(WORKER_PID, 0));
  out[3] = attempt(open("/proc/WORKER_PID/ns/net", O_RDONLY));
  int own = open("/proc/self/ns/net", O_RDONLY);
  out[4] = attempt(setns(own, CLONE_NEWNET));
  out[5] = attempt(unshare(CLONE_NEWUSER | CLONE_NEWNET));
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in api = {0};
  api.sin_family = AF_INET;
  api.sin_port = htons(LISTEN_PORT);
  api.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  out[6] = attempt(connect(sock, (struct sockaddr*)&api, sizeof api));
  struct rlimit unlimited = {RLIM_INFINITY, RLIM_INFINITY};
  out[7] = attempt(setrlimit(RLIMIT_AS, &unlimited));
  char* big = malloc((size_t)6 << 30);
  if (big != NULL) memset(big, 1, (size_t)6 << 30);
  out[8] = big != NULL;
  out[9] = hard_limit_is_finite(RLIMIT_NPROC);
  out[10] = hard_limit_is_finite(RLIMIT_CPU);
  out[11] = hard_limit_is_finite(RLIMIT_FSIZE);
  out[12] = hard_limit_is_finite(RLIMIT_NOFILE);
  struct rlimit core;
  getrlimit(RLIMIT_CORE, &core);
  out[13] = (float)core.rlim_max;
  pid_t child = fork();
  if (child == 0) {
    execl("/usr/bin/sleep", "sleep", "MARKER_SECONDS", (char*)NULL);
    _exit(0);
  }
  out[14] = child > 0;
  out[15] = attempt(open("/tmp/relaycc-attack-TOKEN", O_CREAT | O_WRONLY, 0644));
  out[16] = attempt(open("OTHER_LIBRARY", O_WRONLY | O_APPEND));
  out[17] = attempt(system("id -u > /job/id.txt"));
  out[18] = attempt(ptrace_me());
  return 0;
}
"""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(tmp_path_factory.mktemp("attacks") / "store", workers=1, allow_user_c=True,
                             memory_bytes=1 << 30)
    with TestClient(make_app(settings)) as client:
        yield client


@pytest.fixture(scope="module")
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    yield server
    server.close()


def compile_module(client: TestClient, relay: str, source: str) -> dict[str, object]:
    body = {"relay": relay, "target": "probe_cg, c",
            "codegens": [{"document": DOCUMENT, "sources": {"probe.c": source}}]}
    response = client.post("/compile?wait=60", json=body)
    assert response.status_code in (200, 202), response.text
    return wait_until_done(client, response.json()["id"], timeout=120)


@pytest.fixture(scope="module")
def attack(client: TestClient, listener: socket.socket, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Build another module, then run the probe against it all; what each attempt returned."""
    other = client.post("/compile?wait=60", json={"relay": SMALL_RELAY})
    other_status = wait_until_done(client, other.json()["id"])
    assert other_status["state"] == "succeeded"
    store: Path = client.app.state.relaycc.store.root  # type: ignore[attr-defined]
    other_library = store / "modules" / str(other_status["id"]) / "artifacts" / "libdefault.so"
    worker = client.app.state.relaycc.queue.worker_pids()[0]  # type: ignore[attr-defined]
    token = tmp_path_factory.mktemp("token").name
    source = (PROBE_C.replace("WORKER_PID", str(worker)).replace("LISTEN_PORT", str(listener.getsockname()[1]))
              .replace("MARKER_SECONDS", MARKER_SECONDS).replace("TOKEN", token)
              .replace("OTHER_LIBRARY", str(other_library))
              .replace("attempt(ptrace_me())", "attempt(ptrace_traceme())")
              .replace("static float attempt", "#include <sys/ptrace.h>\n"
                       "static long ptrace_traceme(void) { return ptrace(PTRACE_TRACEME, 0, 0, 0); }\n"
                       "static float attempt"))
    library_before = hashlib.sha256(other_library.read_bytes()).hexdigest()
    status = compile_module(client, RELAY, source)
    assert status["state"] == "succeeded", status["error"]
    response = client.post(f"/modules/{status['id']}/run", json={"inputs_npz": npz_b64(x=np.ones(20, "float32"))})
    assert response.status_code == 200, response.text
    out = from_npz_b64(response.json()["outputs_npz"])["out0"]
    return {"out": out, "library": other_library, "library_before": library_before, "token": token,
            "other_id": other_status["id"]}


def test_user_c_cannot_read_etc_shadow(attack: dict[str, object]) -> None:
    assert attack["out"][0] == -2  # ENOENT: nothing of /etc but the linker's files is there


def test_user_c_does_not_run_as_root(attack: dict[str, object]) -> None:
    assert attack["out"][1] != 0


def test_user_c_cannot_signal_or_see_its_worker(attack: dict[str, object]) -> None:
    out = attack["out"]
    assert out[2] < 0  # kill(worker, 0): no such process in the job's PID namespace
    assert out[3] < 0  # /proc/<worker>/ns/net does not exist there either


def test_user_c_cannot_join_or_create_namespaces(attack: dict[str, object]) -> None:
    out = attack["out"]
    assert out[4] == -1  # setns: EPERM from the seccomp filter
    assert out[5] == -1  # unshare: EPERM


def test_user_c_cannot_reach_a_server_on_the_hosts_loopback(attack: dict[str, object], listener: socket.socket) -> None:
    assert attack["out"][6] < 0
    with pytest.raises(TimeoutError):
        listener.accept()


def test_user_c_cannot_raise_its_memory_limit_or_allocate_past_it(attack: dict[str, object]) -> None:
    out = attack["out"]
    assert out[7] == -1  # setrlimit above the hard limit: EPERM
    assert out[8] == 0  # 6 GiB under a 1 GiB limit: malloc gives NULL


def test_user_c_runs_under_hard_process_cpu_file_and_descriptor_limits_without_core_files(attack: dict[str, object]) -> None:
    out = attack["out"]
    assert list(out[9:13]) == [1, 1, 1, 1]
    assert out[13] == 0


def test_a_process_forked_by_user_c_dies_with_the_job(attack: dict[str, object]) -> None:
    assert attack["out"][14] == 1  # the fork itself is allowed
    deadline = time.monotonic() + 10
    while _marker_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _marker_processes() == []


def test_user_c_cannot_write_under_the_hosts_tmp(attack: dict[str, object]) -> None:
    assert attack["out"][15] < 0
    assert not (Path("/tmp") / f"relaycc-attack-{attack['token']}").exists()


def test_user_c_cannot_touch_another_modules_artifacts(attack: dict[str, object], client: TestClient) -> None:
    assert attack["out"][16] < 0
    library: Path = attack["library"]  # type: ignore[assignment]
    assert hashlib.sha256(library.read_bytes()).hexdigest() == attack["library_before"]
    served = client.get(f"/modules/{attack['other_id']}/artifacts/libdefault.so")
    assert hashlib.sha256(served.content).hexdigest() == attack["library_before"]


def test_user_c_cannot_trace_itself_or_others(attack: dict[str, object]) -> None:
    assert attack["out"][18] == -1  # ptrace: EPERM


def test_incbin_of_a_host_file_does_not_build(client: TestClient) -> None:
    source = '#include "relaycc_dlpack.h"\n__asm__(".incbin \\"/etc/shadow\\"");\n' \
             "int probe(DLTensor* a, DLTensor* b) { return 0; }\n"

    status = compile_module(client, RELAY + "// incbin\n", source)

    assert status["state"] == "failed"
    error = status["error"]
    assert error["type"] == PROBLEMS + "build_error" or "C compiler" in error["title"]  # type: ignore[index]
    assert "root:" not in str(error)


def test_including_a_host_file_does_not_build(client: TestClient) -> None:
    source = '#include "/etc/passwd"\n#include "relaycc_dlpack.h"\nint probe(DLTensor* a, DLTensor* b) { return 0; }\n'

    status = compile_module(client, RELAY + "// include\n", source)

    assert status["state"] == "failed"
    assert "root:" not in str(status["error"])


def _marker_processes() -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline == f"sleep\0{MARKER_SECONDS}\0".encode():
            found.append(int(entry.name))
    return found
