"""The built-in `cblas` codegen: dense, batch_matmul and conv2d offloaded to OpenBLAS's sgemm.

Target `"cblas, c"` partitions every float32 call that one of the patterns below matches and
lowers it, through the extern-call codegen, to a call of a kernel in `relaycc_cblas.c` (shipped
with the package and linked with `-lopenblas`; Debian's `libopenblas-dev` provides both the
header and the library). bias_add and relu after a product are fused into the kernel's
epilogue. The table lists the most specific pattern first, so `dense → bias_add → relu` becomes
one call rather than a dense followed by host code.

The patterns' attribute constraints and checks keep on the host what the kernels do not
handle: other dtypes, dynamic shapes, layouts other than NCHW/OIHW, grouped convolutions,
bias_add along an axis that is not the output channel; and what the host does faster: a dense
of fewer rows than the host's dot kernel takes, a dense whose weight is a constant (packed at
compile time for the host's kernel), a batch_matmul whose B the host reads in place (attention's
products), and a convolution with a constant weight of whole vector blocks of output channels
(the host runs it on channel-blocked activations, see `_host_packs`). conv2d's attributes may be written in
any form (`strides=[2]`, `padding=[1, 1]`): the extern-call codegen passes exactly the 2
strides, 4 paddings and 2 dilations the kernel reads.
conv2d's im2col matrix is a scratch buffer the extern-call codegen plans in the model's
workspace (`conv2d_scratch_bytes`).
"""

from __future__ import annotations

import math
from pathlib import Path

from compiler.byoc.codegen_config import (
    AttrRef,
    CodegenSpec,
    LibrarySource,
    LibrarySpec,
    PatternCheck,
    PatternSpec,
    ScratchBytes,
    register_builtin,
)
from compiler import ops
from compiler.ir.expr import Call, Constant, Expr, Function, Op
from compiler.ir.types import TensorType
from compiler.ir.visitor import post_order
from compiler.ops.kernels.matmul import DOT_MAX_ROWS
from compiler.ops.registry import OpPattern

NAME = "cblas"
LIBRARY_SOURCE = Path(__file__).resolve().with_name("relaycc_cblas.c")
SYMBOL_PREFIX = "relaycc_cblas_"
F32 = "float32"

CONV2D_ATTRS = (AttrRef("nn.conv2d", "strides"), AttrRef("nn.conv2d", "padding"), AttrRef("nn.conv2d", "dilation"))
# Output channels of a constant-weight convolution the host packs into whole blocks on any machine.
HOST_BLOCK_CHANNELS = 16
# Columns of a product whose B the host reads a whole panel at a time: two vectors on AVX-512,
# four on AVX2 (the host's panels are two vectors wide), so the rule holds on either machine.
HOST_PANEL_COLUMNS = 32
BATCH_MATMUL_ATTRS = (AttrRef("nn.batch_matmul", "transpose_a"), AttrRef("nn.batch_matmul", "transpose_b"))


# --- checks: what the kernels support ---------------------------------------------------------


def _static_f32(expr: Expr) -> TensorType | None:
    """The type of `expr` when it is a float32 tensor of known shape."""
    ty = expr.checked_type if expr.has_type else None
    if isinstance(ty, TensorType) and ty.dtype == F32 and not ty.is_dynamic:
        return ty
    return None


def _anchor(root: Expr, op: str) -> tuple[Call, Call | None] | None:
    """The `op` call a match is built around and the bias_add above it (if the pattern has
    one), found by walking down first arguments from the matched root."""
    bias: Call | None = None
    node: Expr | None = root
    while isinstance(node, Call) and node.op_name != op:
        if node.op_name == "nn.bias_add":
            bias = node
        node = node.args[0] if node.args else None
    if not isinstance(node, Call):
        return None
    return node, bias


def _all_f32(call: Call) -> bool:
    return all(_static_f32(e) is not None for e in (*call.args, call))


def _bias_on_axis(bias: Call | None, axis: int) -> bool:
    """Whether the bias_add (if any) is float32 and adds along `axis` of its result."""
    if bias is None:
        return True
    out = _static_f32(bias)
    if out is None or not _all_f32(bias):
        return False
    given = bias.attrs["axis"]
    return isinstance(given, int) and (given + out.ndim if given < 0 else given) == axis


def _dense_supported(root: Expr) -> bool:
    found = _anchor(root, "nn.dense")
    if found is None:
        return False
    dense, bias = found
    out = _static_f32(dense)
    if out is None or not _all_f32(dense) or not _bias_on_axis(bias, out.ndim - 1):
        return False
    # A few rows are a memory-bound matrix-vector product, where the host's dot kernel (it
    # takes them from the same row count on) ran seed 001's batch-1 MLP 2.7x faster than sgemm.
    # A constant weight is packed into the host kernel's tiles at compile time (AlterOpLayout),
    # where sgemm packs it on every call: seed 001's batch-64 MLP ran 0.61 ms on the host against
    # 0.89 ms through sgemm.
    return math.prod(int(d) for d in out.shape[:-1]) >= DOT_MAX_ROWS and not isinstance(dense.args[1], Constant)


def _batch_matmul_supported(root: Expr) -> bool:
    found = _anchor(root, "nn.batch_matmul")
    return found is not None and _all_f32(found[0]) and not _host_reads_b_in_place(found[0])


def _host_reads_b_in_place(call: Call) -> bool:
    """The host's batch_matmul reads whole panels of an untransposed B where they are
    (compiler/ops/kernels/matmul.py), and AlterOpLayout untransposes a B that an injective op
    computes: attention's products, where sgemm measured 15% slower (the transformer block's
    two at one thread: 148 + 132 us against the host's 126 + 117)."""
    out = call.checked_type
    assert isinstance(out, TensorType)  # checked static float32
    rows, columns = int(out.shape[-2]), int(out.shape[-1])
    if rows < DOT_MAX_ROWS or columns % HOST_PANEL_COLUMNS:
        return False
    if not call.attrs["transpose_b"]:
        return True
    producer = call.args[1]
    return (isinstance(producer, Call) and isinstance(producer.op, Op)
            and ops.get(producer.op_name).pattern <= OpPattern.INJECTIVE)


def _conv2d_supported(root: Expr) -> bool:
    """The pattern text already requires NCHW data, OIHW weights and groups=1."""
    found = _anchor(root, "nn.conv2d")
    if found is None:
        return False
    conv, bias = found
    # Any written form of strides, dilation and padding will do: the extern-call codegen
    # passes them as the 2, 2 and 4 integers the kernels read.
    if not (_all_f32(conv) and conv.attrs["out_layout"] in ("", "NCHW") and _bias_on_axis(bias, 1)):
        return False
    return not _host_packs(conv)


def _host_packs(conv: Call) -> bool:
    """A convolution whose constant weight AlterOpLayout packs: the host's register-blocked
    kernel runs it on channel-blocked activations (compiler/passes/blocked_activations.py), and
    each sgemm call in a chain of them would also end the blocked region (a layout transform on
    each side). Once the host's activations were blocked, ResNet-50 ran 1.18x (one thread) and
    1.50x (two) slower when sgemm took its 1x1, strided and 7x7-map layers. 16 output channels
    make whole blocks on an AVX2 and on an AVX-512 machine alike."""
    weight = conv.args[1].checked_type
    assert isinstance(weight, TensorType)  # checked static float32
    return isinstance(conv.args[1], Constant) and int(weight.shape[0]) % HOST_BLOCK_CHANNELS == 0


# --- scratch ----------------------------------------------------------------------------------


def conv2d_scratch_bytes(composite: Function) -> int:
    """Bytes of the im2col matrix of one image: (C*KH*KW) x (OH*OW) floats. The kernel needs it
    whatever the geometry (a 1x1 unit-stride kernel just leaves it unread)."""
    convs = [n for n in post_order(composite.body) if isinstance(n, Call) and n.op_name == "nn.conv2d"]
    if len(convs) != 1:
        raise ValueError(f"a cblas conv2d composite holds {len(convs)} nn.conv2d calls, expected 1")
    conv = convs[0]
    weight, out = conv.args[1].checked_type, conv.checked_type
    assert isinstance(weight, TensorType) and isinstance(out, TensorType)
    channels, kh, kw = weight.shape[1:]
    oh, ow = out.shape[2:]
    dims = (channels, kh, kw, oh, ow)
    if not all(isinstance(d, int) for d in dims):
        raise ValueError("a cblas conv2d composite needs static shapes")
    size = 4
    for d in dims:
        assert isinstance(d, int)
        size *= d
    return size


# --- the pattern table ------------------------------------------------------------------------


def _pattern(
    name: str, text: str, check: PatternCheck, attrs: tuple[AttrRef, ...] = (), scratch: ScratchBytes | None = None
) -> PatternSpec:
    return PatternSpec(name, text, SYMBOL_PREFIX + name, attrs, check=check, scratch=scratch)


# The only convolution the kernels compute.
CONV2D = 'nn.conv2d(*, *){data_layout="NCHW", kernel_layout="OIHW", groups=1}'

PATTERNS = (
    _pattern("dense_bias_relu", "nn.relu(nn.bias_add(nn.dense(*, *), *))", _dense_supported),
    _pattern("dense_bias", "nn.bias_add(nn.dense(*, *), *)", _dense_supported),
    _pattern("dense", "nn.dense(*, *)", _dense_supported),
    _pattern("batch_matmul", "nn.batch_matmul(*, *)", _batch_matmul_supported, BATCH_MATMUL_ATTRS),
    _pattern("conv2d_bias_relu", f"nn.relu(nn.bias_add({CONV2D}, *))", _conv2d_supported, CONV2D_ATTRS,
             conv2d_scratch_bytes),
    _pattern("conv2d_bias", f"nn.bias_add({CONV2D}, *)", _conv2d_supported, CONV2D_ATTRS, conv2d_scratch_bytes),
    _pattern("conv2d", CONV2D, _conv2d_supported, CONV2D_ATTRS, conv2d_scratch_bytes),
)

SPEC = register_builtin(
    CodegenSpec(
        NAME,
        patterns=PATTERNS,
        library=LibrarySpec(
            sources=(LibrarySource(LIBRARY_SOURCE.name, LIBRARY_SOURCE.read_text(), LIBRARY_SOURCE),),
            libraries=("openblas",),
        ),
    )
)
