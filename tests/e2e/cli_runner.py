"""`relaycc` for the end-to-end tests, run in the test's own process.

The same `compiler.cli.main` the installed command runs, with its output captured: a fresh
interpreter per call re-imported the compiler (about a second of CPU each, over a hundred calls
in these tests). The command as a separate process, exit codes and one-line errors included, is
tested in tests/compiler/test_cli.py and by the seed tests.
"""

from __future__ import annotations

import io
import subprocess
from contextlib import redirect_stderr, redirect_stdout

from compiler.cli import main


def relaycc(*args: object) -> subprocess.CompletedProcess[str]:
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse refusing the command line
            code = exit_.code if isinstance(exit_.code, int) else 1
    return subprocess.CompletedProcess(["relaycc", *argv], code, out.getvalue(), err.getvalue())
