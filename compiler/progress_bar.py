"""The progress bar `relaycc compile` draws on a terminal: passes first, then the C files of the
library, as the service reports them ({stage, done, total}, service/jobs/work.py).

Drawn on stderr only when stderr is a terminal; in a pipe, a log or CI the command stays quiet,
as it always was.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class CompileProgress:
    """A pass instrument (`after_pass`) and a C-file callback (`c_files`) driving one bar."""

    def __init__(self, plan: list[str], stream: TextIO):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._plan = plan
        self._done = 0
        self._bar = Progress(
            TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=Console(file=stream), transient=True,
        )
        self._task = self._bar.add_task("passes", total=len(plan))

    def after_pass(self, name: str, seconds: float) -> None:
        # A pass counts when it is the next of the plan; passes run inside another are not in it.
        if self._done < len(self._plan) and self._plan[self._done] == name:
            self._done += 1
            self._bar.update(self._task, completed=self._done)

    def c_files(self, done: int, total: int) -> None:
        self._bar.update(self._task, description="C files", completed=done, total=total)

    def __enter__(self) -> CompileProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()


@contextmanager
def compile_progress(plan: list[str], stream: TextIO | None = None) -> Iterator[CompileProgress | None]:
    """A bar over `plan` when `stream` (stderr by default) is a terminal, else None."""
    stream = sys.stderr if stream is None else stream
    if not stream.isatty():
        yield None
        return
    with CompileProgress(plan, stream) as bar:
        yield bar
