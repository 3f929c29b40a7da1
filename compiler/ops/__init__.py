"""Operators. Importing this package registers every operator family."""

from compiler.ops.registry import (  # noqa: F401  (re-exported API)
    REQUIRED,
    AttrError,
    AttrSpec,
    OpDef,
    OpPattern,
    Sample,
    TypeRelationError,
    all_ops,
    get,
    lookup,
    register,
)

# Each family registers its ops on import.
from compiler.ops import elemwise, broadcast, nn, reduce, transform  # noqa: E402,F401  isort:skip
from compiler.ops import conv, pool, norm, slicing, creation  # noqa: E402,F401  isort:skip
from compiler.ops import call  # noqa: E402,F401  isort:skip
from compiler.ops import annotation, device, memory  # noqa: E402,F401  isort:skip
from compiler.ops import repeat, gather, shape_ops  # noqa: E402,F401  isort:skip
from compiler.ops import sorting, index_ops, einsum  # noqa: E402,F401  isort:skip
from compiler.ops import conv_nd, conv_transpose, conv_nchwc  # noqa: E402,F401  isort:skip
from compiler.ops import math, bitwise, activation, statistics, scan  # noqa: E402,F401  isort:skip
from compiler.ops import pool_nd, norm_ext, space, loss  # noqa: E402,F401  isort:skip
from compiler.ops import image  # noqa: E402,F401  isort:skip
from compiler.ops import vision  # noqa: E402,F401  isort:skip
from compiler.ops import qnn, qnn_linear  # noqa: E402,F401  isort:skip
from compiler.ops import dense_pack  # noqa: E402,F401  isort:skip
from compiler.ops import dyn  # noqa: E402,F401  isort:skip  (after the static ops it is declared by)
