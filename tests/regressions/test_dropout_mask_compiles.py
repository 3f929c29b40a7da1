"""fuzz-diff seed 1 (reduced): a model reading the mask of nn.dropout, `%0.1`.

SimplifyInference replaced only the data projection, so the dropout call stayed for the mask;
it has no loops (TVM gives it none either) and lowering failed on a bare assertion.
In inference the mask keeps every element, which is what the interpreter says too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from compiler.driver import build
from compiler.runtime.module import CompiledModule

MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = nn.dropout(%x, rate=0.1f);
  (%0.0, %0.1)
}
"""


def test_the_dropout_mask_compiles_to_ones(tmp_path: Path) -> None:
    build(MODEL, tmp_path)
    x = np.arange(6, dtype="float32").reshape(2, 3)
    data, mask = CompiledModule(tmp_path).run({"x": x}).outputs
    np.testing.assert_array_equal(data, x)
    np.testing.assert_array_equal(mask, np.ones((2, 3), "float32"))
