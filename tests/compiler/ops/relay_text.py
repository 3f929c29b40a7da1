"""Relay text through the whole compiler, for the family tests' end-to-end checks.

`compile_and_run` parses a module, compiles it with the driver (fusion, lowering, C) and runs
the library; `check_text_model` also runs the interpreter on the same inputs and checks that the
printed module parses back to the same module, so one call covers the op's text form, its
compiled loops and its reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from compiler.driver import export, lower
from compiler.parser.printer import astext
from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule


def compile_and_run(text: str, inputs: Mapping[str, np.ndarray], outdir: Path) -> list[np.ndarray]:
    model = lower(parse(text))
    export(model, outdir, text)
    result = CompiledModule(outdir).run(dict(inputs))
    return [np.asarray(o) for o in result.outputs]


def check_text_model(
    text: str, inputs: Mapping[str, np.ndarray], outdir: Path, rtol: float = 1e-5, atol: float = 1e-6
) -> list[np.ndarray]:
    """Compile and interpret `text` on `inputs`; the outputs must agree. Returns the compiled
    outputs."""
    mod = parse(text)
    assert structural_equal(parse(astext(mod)), mod), "the printed module does not parse back"
    expected = run_main(mod, inputs)
    actual = compile_and_run(text, inputs, outdir)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        if got.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(got, want)
    return actual
