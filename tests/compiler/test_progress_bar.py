from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 8), float32]) -> Tensor[(4, 8), float32] {
  nn.relu(add(%x, %x))
}
"""


def _compile(tmp_path: Path, stderr: int) -> subprocess.Popen:
    model = tmp_path / "m.relay"
    model.write_text(MODEL)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TERM="xterm", RELAYCC_CACHE_DIR="off",
               COLUMNS="100", LINES="30")
    return subprocess.Popen([sys.executable, "-m", "compiler", "compile", str(model), "-o", str(tmp_path / "out")],
                            stdout=subprocess.DEVNULL, stderr=stderr, env=env)


def test_compile_on_a_terminal_draws_a_bar_over_passes_and_c_files(tmp_path: Path) -> None:
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    process = _compile(tmp_path, terminal)
    os.close(terminal)
    drawn = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the command has exited
            break
        if not chunk:
            break
        drawn += chunk
    os.close(controller)

    assert process.wait(timeout=120) == 0
    text = drawn.decode("utf-8", "replace")
    assert "passes" in text
    assert "C files" in text
    assert "━" in text  # the bar itself
    assert (tmp_path / "out" / "metadata.json").is_file()


def test_compile_into_a_pipe_writes_nothing_on_stderr(tmp_path: Path) -> None:
    process = _compile(tmp_path, subprocess.PIPE)
    _, stderr = process.communicate(timeout=120)

    assert process.returncode == 0
    assert stderr == b""
