"""How an operator describes its loops: the contract between op declarations and the lowering.

An op declares one of three forms in its OpDef (compiler/ops):

* `compute(idx, inputs, attrs, out_type) -> PrimExpr` for elementwise, broadcast and injective
  ops: the value of the output element at `idx`, reading inputs through their views
  (`inputs[0][i, j]`). Because a view may itself be a fused producer's compute, fusing
  elementwise chains needs no per-op code: the consumer simply calls the producer's loader.
  Tuple-valued injective ops (split) take `out_index` as a keyword argument.
* `reduction(inputs, attrs, out_type) -> Reduction` for comm-reduce ops.
* `kernel(ctx, inputs, out, attrs, out_type, epilogue) -> Stmt` for heavy ops (dense, conv2d,
  batch_matmul, pools, softmax): a complete, tiled loop nest writing `out`. Inputs are
  materialized buffers. `epilogue(value, idx)` is applied to every value before it is stored:
  it is how fused elementwise consumers (bias_add, relu, ...) end up inside the kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from compiler.tir.expr import Buffer, PrimExpr, Var, as_expr

Index = Sequence[PrimExpr]


@dataclass(frozen=True, eq=False)
class TensorView:
    """An op input as a compute sees it: its shape, dtype and a loader by index.

    `buffer` is set when the tensor is materialized in memory (always true for kernel inputs).
    `data` holds the values of a Constant argument, for ops whose loops are specialized on
    them at lowering time (the qnn ops' scales and zero points).
    """

    shape: tuple[PrimExpr | int, ...]
    dtype: str
    load: Callable[[Index], PrimExpr]
    buffer: Buffer | None = None
    data: np.ndarray | None = None

    def __getitem__(self, idx: object) -> PrimExpr:
        items = idx if isinstance(idx, (tuple, list)) else (idx,)
        return self.load(tuple(as_expr(i) for i in items))  # type: ignore[arg-type]  # ints or PrimExprs

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @staticmethod
    def of_buffer(buffer: Buffer) -> TensorView:
        return TensorView(buffer.shape, buffer.dtype, lambda idx: buffer[tuple(idx)], buffer)


@dataclass(frozen=True)
class Reduction:
    """A commutative reduction over `extents` (the reduced axes) for every output element.

    `body(out_idx, red_idx)` is the value combined; `combiner` is one of "sum", "prod", "max",
    "min", "argmax", "argmin" (the arg forms track the index of the winning element along the
    single flattened reduce index, with `select_last` picking the last on ties);
    `finalize(acc, out_idx)` post-processes the result (mean divides by the count).
    """

    combiner: str
    extents: tuple[PrimExpr | int, ...]
    body: Callable[[Index, Index], PrimExpr]
    dtype: str
    finalize: Callable[[PrimExpr, Index], PrimExpr] | None = None
    select_last: bool = False


# What a kernel applies to each value it stores, at the output index it stores it to (bias,
# relu, a residual add fused into an anchor). A kernel stores each output element once, with the
# epilogue applied in that store: the executor may give the output the buffer of an input the
# epilogue reads at the same index (compiler/tir/inplace.py), and a second store of an element
# would then read the first one's result as that input.
Epilogue = Callable[[PrimExpr, Index], PrimExpr]


@dataclass
class KernelContext:
    """Target facts and helpers a kernel may use while building its loop nest."""

    parallel: bool = True  # OpenMP parallel loops allowed
    vector_lanes: int = 8  # float32 lanes of the widest vector unit (AVX2: 8)
    names: dict[str, int] = field(default_factory=dict)
    # A tuning record's choices for this kernel (compiler/ops/kernels/schedule.py), each
    # replacing a rule's; and the choices the kernel made, rule or record, for `relaycc tune`
    # to vary.
    schedule: Mapping[str, object] = field(default_factory=dict)
    decisions: dict[str, object] = field(default_factory=dict)

    def fresh(self, base: str) -> str:
        """A C identifier unique within the PrimFunc being built."""
        n = self.names.get(base, 0)
        self.names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def var(self, base: str) -> Var:
        return Var(self.fresh(base), "int32")

    def identity_epilogue(self) -> Epilogue:
        return lambda value, idx: value
