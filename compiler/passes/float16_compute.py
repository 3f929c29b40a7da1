"""Float16ComputeInFloat32: float16 operators compute in float32 and round their results.

Before: a typed module, BYOC partitioning done. After (typed): every host call whose result is
a float16 tensor and which computes something (an arithmetic, reduction, convolution, product,
pool or normalization op; not pure data movement) reads float32 and rounds back:

    %y = nn.conv2d(%x, %w)                      (float16 in, float16 out)
  becomes
    %y = cast(nn.conv2d(cast(%x, float32), cast(%w, float32)), float16)

Why: gcc (12 here) has no vector type for `_Float16` without AVX512-FP16, so every float16
kernel ran scalar, one conversion per operand: ResNet-50 in float16 was 20x slower than in
float32. In float32 the kernels vectorize and the products take the register-tiled paths.

Where values round: at every operator's result, as the float16 program materializes each
intermediate in float16 (numpy, the reference interpreter, rounds there too). Inside an operator
(a convolution's sum, softmax's exponentials) the arithmetic is float32, as TVM's
ToMixedPrecision keeps accumulation in float32; only the last bits of long sums differ from a
float16-accumulating kernel, and they differ towards the exact result. A float16 constant
argument (a weight) folds into a float32 constant here, so the kernel reads it directly and
AlterOpLayout can pack it.

Casts back to back (`cast(cast(a, float16), float32)` between two rewritten calls) are the
rounding itself and are kept; fusion puts them in the producer's epilogue, so the tensor
between two kernels is float32 holding float16 values. The C backend prints such a rounding, and
every float16 load and store, as a helper gcc vectorizes (backend/c_helpers.py), and leaves out
a rounding of a value that is a float16 one already and one that a relu or clip and a later
rounding make redundant (tir/half_rounding.py).

Disable with `disabled_pass=["Float16ComputeInFloat32"]` to get float16 arithmetic throughout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from compiler import ops
from compiler.ir.expr import Call, Expr, Op
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.ir.visitor import ExprMutator
from compiler.ops.registry import OpPattern
from compiler.passes.fold_constant import rewrite_and_fold
from compiler.passes.fusion_graph import closed_function
from compiler.passes.pass_infra import Pass, PassContext

HALF, FLOAT = "float16", "float32"

# Injective ops only move values (transpose, pad, concatenate, take, ...): exact in float16,
# so a cast around them would cost a pass over memory for nothing. A few injective ops do
# compute; those are rewritten like the arithmetic ones.
_COMPUTING_INJECTIVE = frozenset({"image.resize1d", "image.resize2d", "image.resize3d", "nn.upsampling",
                                  "nn.upsampling3d", "image.grid_sample", "image.affine_grid"})
# Ops whose float16 meaning is their own: conversions, integer-quantized ops, ops whose result
# type an attribute decides.
_LEFT_ALONE = frozenset({"cast", "cast_like", "reinterpret", "fixed_point_multiply"})
# Ops that only pick one of their float16 inputs: exact in float16 as data movement is. Widened,
# the tensor a max pool reads would be float32 holding float16 values, twice the bytes of its
# float16 form (ResNet-50's stem output: 3.1 MiB, the float16 model's largest intermediate).
_PICKING = frozenset({"nn.max_pool1d", "nn.max_pool2d", "nn.max_pool3d", "nn.global_max_pool2d",
                      "nn.adaptive_max_pool1d", "nn.adaptive_max_pool2d", "nn.adaptive_max_pool3d",
                      "max", "min"})


def _is_half(ty: object) -> bool:
    return isinstance(ty, TensorType) and ty.dtype == HALF


def _widened(pre: Expr, post: Expr) -> Expr | None:
    """`post` read as float32, or None if it is not float16 (types come from `pre`, the typed
    argument `post` was rewritten from)."""
    return _cast(post, FLOAT) if _is_half(pre.checked_type) else None


def _cast(expr: Expr, dtype: str) -> Call:
    return Call(Op.get("cast"), (expr,), ops.get("cast").make_attrs({"dtype": dtype}))


def rewritten(pre: Call, args: tuple[Expr, ...]) -> Call | None:
    """`pre` (typed) computing in float32 between casts, or None when it is left as it is."""
    if not isinstance(pre.op, Op) or not _is_half(pre.checked_type):
        return None
    name = pre.op.name
    if name in _LEFT_ALONE or name in _PICKING or name.startswith(("qnn.", "dyn.", "memory.", "vm.")):
        return None
    opdef = ops.get(name)
    if opdef.pattern in (OpPattern.INJECTIVE, OpPattern.TUPLE) and name not in _COMPUTING_INJECTIVE:
        return None
    if opdef.reshape_only or opdef.extras.get("constant_args") or opdef.extras.get("evaluate"):
        return None
    attrs = dict(pre.attrs) if pre.attrs is not None else {}
    if "dtype" in attrs:  # the attribute makes the result type (full, one_hot, ...)
        return None
    widened = [_widened(a, b) for a, b in zip(pre.args, args)]
    if all(w is None for w in widened):
        return None
    if attrs.get("out_dtype") == HALF:
        attrs["out_dtype"] = FLOAT
    new_args = tuple(w if w is not None else a for w, a in zip(widened, args))
    call = Call(pre.op, new_args, opdef.make_attrs(attrs) if pre.attrs is not None else None, pre.span)
    return _cast(call, HALF)


class _Rewriter(ExprMutator):
    def descend(self, node: Expr) -> bool:
        return not closed_function(node)

    def rewrite_call(self, pre: Call, post: Call) -> Expr:
        new = rewritten(pre, post.args)
        return new if new is not None else post


@dataclass(frozen=True)
class Float16ComputeInFloat32(Pass):
    name: ClassVar[str] = "Float16ComputeInFloat32"
    opt_level: ClassVar[int] = 1

    def run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        # Float16 weights become float32 constants now, before fusion and AlterOpLayout.
        return rewrite_and_fold(mod, ctx, _Rewriter().visit)
