"""The parser fuzz driver (`make fuzz`): counts every input's outcome and keeps the failing ones."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from compiler.testing.fuzz_driver import Tally, main

HAS_ATHERIS = importlib.util.find_spec("atheris") is not None


def test_a_failing_input_is_written_with_what_happened(tmp_path: Path) -> None:
    tally = Tally(tmp_path / "out")
    tally.add("hypothesis", "def @main() { %x }", "located error", "fine")
    tally.add("hypothesis", "def @main() { ( }", "crash", "IndexError: boom (parser.py:1)")
    saved = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(saved) == 2 and saved[0].startswith("crash-") and saved[0].endswith(".relay")
    assert (tmp_path / "out" / saved[1]).read_text() == "hypothesis: crash: IndexError: boom (parser.py:1)\n"
    assert tally.summary()[-1] == (
        "parser-fuzz: 2 inputs, 0 modules, 1 located errors, 1 crashes, 0 hangs, 0 memory overruns"
    )


def test_well_typed_inputs_seed_the_atheris_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    tally = Tally(tmp_path / "out", corpus)
    tally.add("hypothesis", "def @main(%x: float32) { %x }", "module")
    tally.add("hypothesis", "def @main() { %x }", "located error")
    assert [p.read_text() for p in corpus.iterdir()] == ["def @main(%x: float32) { %x }"]


def test_a_short_hypothesis_run_counts_every_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["30", "--no-hostile", "--atheris-share", "0", "--out", str(tmp_path)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("parser-fuzz: 30 inputs, ") and last.endswith(" 0 crashes, 0 hangs, 0 memory overruns")


@pytest.mark.skipif(not HAS_ATHERIS, reason="atheris is in the fuzz extra")
def test_a_short_run_with_atheris_counts_its_inputs_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Without coverage instrumentation, which costs ten seconds of start-up.
    assert main(["60", "--no-hostile", "--atheris-share", "0.5", "--no-instrument", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "  atheris: 30 inputs (" in out
    assert out.strip().splitlines()[-1].startswith("parser-fuzz: 60 inputs, ")
