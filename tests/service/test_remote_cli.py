"""`relaycc remote ...` against a real `relaycc serve` process (tests/service/conftest.py
`remote_server`, shared with the client's tests), on seed 001's MLP; and the progress display a
terminal gets."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from service.remote_cli import ProgressDisplay
from tests.service.support import MODELS, ROOT, Server, free_port, small_relay

MLP = MODELS / "seed001_mlp.relay"


def relaycc(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compiler", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=env, check=False, timeout=300)


@pytest.fixture(scope="module")
def server(remote_server: Server) -> Server:
    return remote_server


@pytest.fixture(scope="module")
def mlp_id(server: Server, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("remote-out") / "mlp"
    done = relaycc("remote", "compile", MLP, "--url", server.base, "--api-key", "alpha", "--module-name", "mlp",
                   "-o", out)
    assert done.returncode == 0, done.stderr
    mid = done.stdout.strip()
    assert (out / "libmlp.so").is_file() and (out / "metadata.json").is_file()
    return mid


def test_compile_prints_the_module_id_and_status_shows_it_succeeded(server: Server, mlp_id: str) -> None:
    done = relaycc("remote", "status", mlp_id, "--url", server.base, "--api-key", "alpha")

    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert (status["id"], status["state"], status["module_name"]) == (mlp_id, "succeeded", "mlp")


def test_run_saves_outputs_that_match_numpy(server: Server, mlp_id: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x, w1, b1 = rng.standard_normal((8, 64)), rng.standard_normal((32, 64)) * 0.2, rng.standard_normal(32)
    w2, b2 = rng.standard_normal((10, 32)) * 0.2, rng.standard_normal(10)
    arrays = {k: v.astype("float32") for k, v in dict(x=x, w1=w1, b1=b1, w2=w2, b2=b2).items()}
    np.savez(tmp_path / "in.npz", **arrays)

    done = relaycc("remote", "run", mlp_id, "--url", server.base, "--api-key", "alpha",
                   "--inputs", tmp_path / "in.npz", "-o", tmp_path / "out.npz", "--repeat", "2")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["runs"] == 2
    expected = np.maximum(arrays["x"] @ arrays["w1"].T + arrays["b1"], 0) @ arrays["w2"].T + arrays["b2"]
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["out0"], expected, rtol=1e-4, atol=1e-4)


def test_list_names_the_module_with_its_state(server: Server, mlp_id: str) -> None:
    done = relaycc("remote", "list", "--url", server.base, "--api-key", "alpha", "--state", "succeeded",
                   env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})

    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert [mlp_id, "succeeded", "mlp", "c"] in [row[:4] for row in rows]


def test_url_and_key_come_from_the_environment(server: Server, mlp_id: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "RELAYCC_URL": server.base, "RELAYCC_API_KEY": "alpha"}

    done = relaycc("remote", "status", mlp_id, env=env)

    assert done.returncode == 0, done.stderr


def test_a_parse_error_is_one_located_line_and_exit_status_1(server: Server, tmp_path: Path) -> None:
    model = tmp_path / "broken.relay"
    model.write_text('#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) {\n  nn.relu(%x,\n}\n')

    done = relaycc("remote", "compile", model, "--url", server.base, "--api-key", "alpha")

    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"{model}:4:1: ")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["status", "0" * 64], "no module"),
    (["status", "0" * 64, "--api-key", "wrong"], "API key"),
    (["delete", "0" * 64], "no module"),
])
def test_service_errors_are_one_line_and_exit_status_1(server: Server, args: list[str], message: str) -> None:
    with_key = args if "--api-key" in args else [*args, "--api-key", "alpha"]

    done = relaycc("remote", *with_key, "--url", server.base)

    assert done.returncode == 1
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_delete_and_diff_through_the_command_line(server: Server, mlp_id: str, tmp_path: Path) -> None:
    common = ["--url", server.base, "--api-key", "alpha"]
    model = tmp_path / "small.relay"
    model.write_text(small_relay(15))
    built = relaycc("remote", "compile", model, *common)
    assert built.returncode == 0, built.stderr
    other = built.stdout.strip()
    # stderr is not a terminal here: plain progress lines, no carriage returns.
    stages = [line.split(" ")[0] for line in built.stderr.splitlines()]
    assert "\r" not in built.stderr and stages and set(stages) <= {"starting", "compiling", "building", "storing"}

    diff = relaycc("remote", "diff", mlp_id, other, *common)
    deleted = relaycc("remote", "delete", other, *common)
    after = relaycc("remote", "status", other, *common)

    assert diff.returncode == 0
    assert "--- a/lowered.relay" in diff.stdout and "--- a/src/mlp_lib0.c" in diff.stdout
    assert deleted.returncode == 0 and after.returncode == 1 and "no module" in after.stderr


def test_without_a_url_the_command_says_how_to_give_one() -> None:
    done = relaycc("remote", "list", env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})

    assert done.returncode == 2 and "--url" in done.stderr


def test_an_unreachable_service_is_one_line() -> None:
    done = relaycc("remote", "list", "--url", f"http://127.0.0.1:{free_port()}")

    assert done.returncode == 1 and "cannot reach" in done.stderr and "Traceback" not in done.stderr


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_bar_redrawn_in_place_and_a_log_gets_lines() -> None:
    updates = [{"stage": "compiling", "done": 3, "total": 15, "last_pass": "FoldConstant"},
               {"stage": "building C", "done": 1, "total": 2}]
    terminal, log = Terminal(), io.StringIO()
    for stream in (terminal, log):
        display = ProgressDisplay(stream)
        for update in updates:
            display.update(update)
        display.close()

    assert terminal.getvalue().count("\r") == 2 and terminal.getvalue().endswith("\n")
    assert "[######------------------------] compiling 3/15 (FoldConstant)" in terminal.getvalue()
    assert "[###############---------------] building C 1/2" in terminal.getvalue()
    assert log.getvalue() == "compiling 3/15 (FoldConstant)\nbuilding C 1/2\n"



def test_relaycc_help_lists_remote_and_remote_help_lists_its_commands() -> None:
    top, remote = relaycc("--help"), relaycc("remote", "--help")

    assert top.returncode == 0 and "remote" in top.stdout
    assert remote.returncode == 0
    assert all(name in remote.stdout for name in ("compile", "run", "status", "list", "delete", "diff"))
