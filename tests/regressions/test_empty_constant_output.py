"""fuzz-diff seed 37 (reduced): a model whose output is an empty constant.

The constant pool held only that 0-byte constant, so it was never defined, while the executor
still pointed into it: gcc failed with "tvmgen_default_constant_pool undeclared".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from compiler.driver import export, lower
from compiler.ir.expr import Constant, Function, Tuple, Var
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.passes.infer_type import InferType


def test_an_empty_constant_output_builds_and_runs(tmp_path: Path) -> None:
    from compiler.runtime.module import CompiledModule

    x = Var("x", TensorType((2,), "float32"))
    empty = np.zeros((0, 3), dtype="float32")
    mod = InferType()(IRModule.from_expr(Function((x,), Tuple((x, Constant(empty))))))
    model = lower(mod)
    export(model, tmp_path, mod.astext())
    first, second = CompiledModule(tmp_path).run({"x": np.array([1.0, 2.0], "float32")}).outputs
    np.testing.assert_array_equal(first, [1.0, 2.0])
    assert second.shape == (0, 3)
