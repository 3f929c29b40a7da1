"""gcc 12.2 at -O3 -march=native (AVX2) miscompiles `cond ? buffer[i] : c` in small unrolled
loop nests: if-conversion makes masked loads, and the vectorized group gives every load the
first vector's mask, so whole rows came out as the fill value. Found by the op domains
(concatenate), by the fuzzer's op authors (trilu, space_to_batch_nd) and in a sweep of shapes
(nn.pad, where). Kernels that load under a select are now built without if-conversion.
These shapes failed before on the AVX2 machines; on others they pass either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.backend.codegen_c import NO_IF_CONVERSION
from compiler.driver import build
from compiler.runtime.module import CompiledModule

CASES = {
    "pad": (
        "def @main(%x: Tensor[(5, 2), float32]) { nn.pad(%x, -3f, pad_width=[[1, 2], [0, 0]]) }",
        lambda x: np.pad(x["x"], [[1, 2], [0, 0]], constant_values=-3),
        {"x": ((5, 2), "float32")},
    ),
    "concatenate": (
        "def @main(%a: Tensor[(2, 2), int32], %b: Tensor[(3, 2), int32]) { concatenate((%a, %b)) }",
        lambda x: np.concatenate([x["a"], x["b"]]),
        {"a": ((2, 2), "int32"), "b": ((3, 2), "int32")},
    ),
    "where": (
        "def @main(%c: Tensor[(8, 2), bool], %y: Tensor[(8, 2), float32]) { where(%c, 5f, %y) }",
        lambda x: np.where(x["c"], np.float32(5), x["y"]),
        {"c": ((8, 2), "bool"), "y": ((8, 2), "float32")},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_selects_that_load_compile_to_the_right_rows(case: str, tmp_path: Path) -> None:
    body, expected, inputs = CASES[case]
    build(f'#[version = "0.0.5"]\n{body}\n', tmp_path)
    assert NO_IF_CONVERSION in "".join(p.read_text() for p in (tmp_path / "src").glob("*.c"))
    rng = np.random.default_rng(7)
    values = {
        name: (rng.random(shape) < 0.5 if dtype == "bool" else (rng.integers(1, 100, shape)).astype(dtype))
        for name, (shape, dtype) in inputs.items()
    }
    [out] = CompiledModule(tmp_path).run(values).outputs
    np.testing.assert_array_equal(out, expected(values))
