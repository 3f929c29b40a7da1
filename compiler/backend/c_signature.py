"""C names and signatures of generated functions: the calling convention in one place.

`prim_func_signature` is what the code generator defines, what the AOT executor calls and
(without `restrict`) what cffi is told. Identifiers from the IR are sanitized, kept away from C
keywords, the math.h/stdint.h names the generated code uses and the `relaycc_` helper
prefix, and made unique within a function.
"""

from __future__ import annotations

import re

from compiler.backend.c_helpers import HELPER_PREFIX
from compiler.tir.analysis import walk_stmts
from compiler.tir.dtypes import c_type
from compiler.tir.inplace import shared_params
from compiler.tir.stmt import Allocate, PrimFunc

C_RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline
int long register restrict return short signed sizeof static struct switch typedef union unsigned
void volatile while asm typeof _Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic
_Noreturn _Static_assert _Thread_local _Float16
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t ptrdiff_t NULL
INT8_MIN INT16_MIN INT32_MIN INT64_MIN INT32_C INT64_C UINT32_C UINT64_C NAN INFINITY
exp expf log logf sqrt sqrtf tanh tanhf erf erff fabs fabsf floor floorf ceil ceilf nearbyint
nearbyintf pow powf fmod fmodf trunc truncf copysign copysignf isnan isinf memcpy memset
sin sinf cos cosf tan tanf sinh sinhf cosh coshf asin asinf acos acosf atan atanf asinh asinhf
acosh acoshf atanh atanhf log2 log2f log10 log10f
""".split())
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class CNames:
    """C identifiers of one function: sanitized, never reserved, unique."""

    def __init__(self, reserved: frozenset[str] | set[str] = frozenset()):
        self._taken: set[str] = set(reserved)

    def take(self, wanted: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", wanted) or "v"
        if base[0].isdigit() or base.startswith("_") or base.startswith(HELPER_PREFIX):
            base = "v_" + base
        name, n = base, 0
        while name in self._taken or name in C_RESERVED:
            n += 1
            name = f"{base}_{n}"
        self._taken.add(name)
        return name


def check_func_name(name: str) -> None:
    if not IDENT.match(name) or name in C_RESERVED or name.startswith(HELPER_PREFIX):
        raise ValueError(f"PrimFunc name {name!r} is not a usable C identifier")


def has_workspace(func: PrimFunc) -> bool:
    return any(isinstance(s, Allocate) and s.buffer.scope == "global" for s in walk_stmts(func.body))


def pointer_type(dtype: str, const: bool, type_map: dict[str, str] | None) -> str:
    base = (type_map or {}).get(dtype) or c_type(dtype)
    return f"const {base}*" if const else f"{base}*"


def signature_params(func: PrimFunc, names: CNames, restrict: bool,
                     type_map: dict[str, str] | None) -> list[tuple[str, str]]:
    """(C type, C name) of each parameter, in calling-convention order. An input and an output
    the executor may pass as one buffer (compiler/tir/inplace.py) are never `restrict`."""
    qualifier = " restrict" if restrict else ""
    shared = shared_params(func) if restrict else set()
    params = []
    for k, buf in enumerate(func.params):
        params.append((pointer_type(buf.dtype, k < func.num_inputs, type_map) + ("" if k in shared else qualifier),
                       names.take(buf.name)))
    for var in func.scalar_params:
        params.append(("int64_t", names.take(var.name)))
    if has_workspace(func):
        params.append(("uint8_t*" + qualifier, "workspace"))
    return params


def signature(name: str, params: list[tuple[str, str]]) -> str:
    return f"int32_t {name}({', '.join(f'{t} {n}' for t, n in params) or 'void'})"


def prim_func_signature(func: PrimFunc, *, restrict: bool = True, type_map: dict[str, str] | None = None) -> str:
    """`int32_t name(params)` without a trailing `;`. `type_map` overrides the C type of some
    dtypes (cffi, for one, has no `_Float16`); `restrict=False` leaves the qualifier out."""
    check_func_name(func.name)
    names = CNames({"workspace"} if has_workspace(func) else set())
    return signature(func.name, signature_params(func, names, restrict, type_map))
