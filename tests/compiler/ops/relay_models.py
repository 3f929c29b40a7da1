"""Helpers for op family tests that go through Relay text: a small model compiled and run end to
end against the interpreter, and a parse -> print -> parse round trip of a call's attributes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from compiler.driver import BuildOptions, build
from compiler.parser.printer import astext
from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

HEADER = '#[version = "0.0.5"]\n'


def compiled_matches_interpreter(
    text: str, inputs: Mapping[str, np.ndarray], outdir: Path, rtol: float = 1e-5, atol: float = 1e-6
) -> list[np.ndarray]:
    """Build `text` to C, run it on `inputs` and compare every output with the interpreter's."""
    build(HEADER + text, outdir, BuildOptions())
    got = CompiledModule(outdir).run(dict(inputs)).outputs
    expected = run_main(parse(HEADER + text), inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return expected


def assert_round_trips(text: str) -> None:
    """parse -> print -> parse gives the same module, and printing is stable."""
    first = parse(HEADER + text)
    printed = astext(first)
    second = parse(printed)
    assert structural_equal(first, second), printed
    assert astext(second) == printed
