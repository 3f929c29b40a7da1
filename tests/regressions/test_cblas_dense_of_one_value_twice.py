"""fuzz-diff seed 13 (reduced): `nn.dense(%y, %y)` offloaded to cblas.

MergeComposite gives an expression that feeds two leaves of a pattern one param, so the
composite was `fn (%p) { nn.dense(%p, %p) }` and the extern call passed one input tensor to
a kernel that takes two: the build failed with "called with (DLTensor*, DLTensor*, DLTensor*)
and with (DLTensor*, DLTensor*)", and with a single dense the kernel would have read garbage.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from compiler.driver import BuildOptions, export, lower
from compiler.parser import parse
from compiler.runtime.module import CompiledModule

MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(16, 3), float32], %w: Tensor[(3, 3), float32]) {
  %0 = nn.dense(%x, %w, units=None);
  %1 = nn.dense(%0, %0, units=None);
  (%0, %1)
}
"""


def test_dense_reading_one_value_as_data_and_weight_runs_on_cblas(tmp_path: Path) -> None:
    model = lower(parse(MODEL), BuildOptions(target="cblas, c"))
    assert {c["kind"] for c in model.report["calls"]} == {"extern"}
    export(model, tmp_path, MODEL)
    rng = np.random.default_rng(13)
    x, w = rng.standard_normal((16, 3)).astype("float32"), rng.standard_normal((3, 3)).astype("float32")
    first, second = CompiledModule(tmp_path).run({"x": x, "w": w}).outputs
    y = x @ w.T
    np.testing.assert_allclose(first, y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(second, y @ y.T, rtol=1e-5, atol=1e-5)
