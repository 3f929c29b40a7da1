"""fuzz-diff seed 897: qnn.requantize with compute_dtype="float64" and rounding TONEAREST gave
2 where TVM (and our reference) give 3 for x = 182: (182 - 2) * (0.125 / 3) - 5 is 2.5 when the
product is rounded before the sum, as TVM's LLVM code does, but gcc at -march=native fused it
into one multiply-add whose single rounding gives 2.4999999999999996. Functions that round a
float product to an integer are now built without FP contraction."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from compiler.backend.codegen_c import NO_FP_CONTRACTION
from compiler.driver import build
from compiler.runtime.module import CompiledModule

MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(6), int16]) {
  qnn.requantize(%x, 0.125f, 2, 3f, -5, rounding="TONEAREST", compute_dtype="float64", out_dtype="uint8")
}
"""


def test_requantize_in_float_rounds_the_product_before_the_sum(tmp_path: Path) -> None:
    build(MODEL, tmp_path)
    assert NO_FP_CONTRACTION in "".join(p.read_text() for p in (tmp_path / "src").glob("*.c"))
    x = np.array([182, 206, 254, 62, 110, 2], np.int16)
    real = float(np.float32(0.125)) / float(np.float32(3.0))
    value = (x.astype(np.float64) - 2) * real  # rounded here, then the sum rounded again
    value = value + -5.0
    rounded = np.copysign(np.floor(np.abs(value) + 0.5), value)  # halves away from zero
    expected = np.clip(rounded, 0, 255).astype(np.uint8)
    assert expected.tolist() == [3, 4, 6, 0, 0, 0]
    (out,) = CompiledModule(tmp_path).run({"x": x}).outputs
    np.testing.assert_array_equal(out, expected)
