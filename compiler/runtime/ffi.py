"""Calling built libraries from Python with numpy arrays, through cffi's ABI mode.

`load_library(path, cdef)` parses the C declarations (`cdef`, e.g. the generated header's
declarations) and `dlopen`s the library; no compiler is involved at load time. Arrays are passed
as pointers to their own memory, never copied: an array must already have the pointer's element
type and be C-contiguous, otherwise the call is refused with an InputError naming the argument.
cffi drops `const` from declarations, so a read-only array passed for an output pointer is not
detected here; callers that care check `arr.flags.writeable` themselves.

Structs of pointers (`struct tvmgen_<name>_inputs`) are built with `Library.new_struct`, which
keeps the arrays alive as long as the struct is referenced.

Libraries stay mapped until the process ends (see `load_library`), and the dynamic loader keeps
one copy per path: to load a rebuilt library, build it under a new path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import cffi
import numpy as np

from compiler.diagnostics import InputError
from compiler.runtime.threads import prepare_openmp

if TYPE_CHECKING:
    from compiler.tir.stmt import PrimFunc

# The numpy dtypes an array may have to be passed for a pointer to each C element type.
_ARRAY_DTYPES: Mapping[str, tuple[np.dtype, ...]] = {
    "float": (np.dtype("float32"),),
    "double": (np.dtype("float64"),),
    "int8_t": (np.dtype("int8"),),
    "int16_t": (np.dtype("int16"),),
    "int32_t": (np.dtype("int32"),),
    "int64_t": (np.dtype("int64"),),
    "uint8_t": (np.dtype("uint8"), np.dtype("bool")),
    "uint16_t": (np.dtype("uint16"), np.dtype("float16")),  # float16 travels as uint16 (see CDEF_TYPES)
    "uint32_t": (np.dtype("uint32"),),
    "uint64_t": (np.dtype("uint64"),),
    "_Bool": (np.dtype("bool"),),
}
# cffi cannot parse `_Float16`; a pointer to it has the same ABI as a pointer to uint16_t.
CDEF_TYPES = {"float16": "uint16_t"}


class _CField(Protocol):
    type: _CType


class _CType(Protocol):
    """The parts of a cffi type object used here (cffi ships no type information)."""

    kind: str
    cname: str
    item: _CType
    args: Sequence[_CType]
    fields: Sequence[tuple[str, _CField]] | None


def prim_func_cdef(func: PrimFunc) -> str:
    """The C declaration of `func` in a form cffi parses (no `restrict`, float16 as uint16_t)."""
    # Imported here: loading and running a built module needs no code generator.
    from compiler.backend.codegen_c import prim_func_signature

    return prim_func_signature(func, restrict=False, type_map=CDEF_TYPES) + ";"


def aligned_empty(nbytes: int, alignment: int = 64) -> np.ndarray:
    """An uninitialized uint8 array of `nbytes` whose data starts on an `alignment` boundary
    (workspace pools need the alignment the memory plan assumed)."""
    raw = np.empty(nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    # Not a slice: numpy may give an empty slice its base's address, losing the alignment.
    return np.ndarray((nbytes,), np.uint8, buffer=raw, offset=start)


@dataclass
class StructArg:
    """A struct built by `Library.new_struct`: `pointer` is a `struct T *`; `keepalive` holds
    the arrays its fields point into."""

    pointer: object
    keepalive: list[object] = field(default_factory=list)


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        layout = "" if value.flags.c_contiguous else "non-contiguous "
        return f"{layout}{value.dtype} array of shape {value.shape}"
    return type(value).__name__


class Library:
    """A loaded shared library and the cffi declarations used to call it."""

    def __init__(self, path: Path, ffi: cffi.FFI, lib: object):
        self.path = path
        self.ffi = ffi
        self.lib = lib
        self._functions: dict[str, tuple[Callable[..., object], _CType]] = {}

    def typeof(self, value: object) -> _CType:
        return cast(_CType, self.ffi.typeof(value))

    def function(self, name: str) -> tuple[Callable[..., object], _CType]:
        """(the C function, its cffi function type)."""
        hit = self._functions.get(name)
        if hit is None:
            try:
                fn = getattr(self.lib, name)
            except (AttributeError, NotImplementedError) as err:
                raise InputError(f"{self.path.name} has no declared function {name} ({err})") from None
            hit = (fn, self.typeof(fn))
            self._functions[name] = hit
        return hit

    def pointer(self, value: object, ctype: _CType, where: str) -> tuple[object, object]:
        """`value` converted for a parameter or field of pointer type `ctype`, and the object to
        keep alive while the pointer is used."""
        ffi = self.ffi
        if value is None:
            return ffi.NULL, None
        if isinstance(value, StructArg):
            given = self.typeof(value.pointer)
            if given is not ctype:
                raise InputError(f"{where}: expected {ctype.cname}, got {given.cname}")
            return value.pointer, value
        if isinstance(value, ffi.CData):
            return value, value
        if not isinstance(value, np.ndarray):
            raise InputError(f"{where}: expected an array for {ctype.cname}, got {_describe(value)}")
        item = ctype.item.cname
        accepted = _ARRAY_DTYPES.get(item)
        if item != "void" and (accepted is None or value.dtype not in accepted):
            wanted = " or ".join(str(d) for d in accepted) if accepted else item
            raise InputError(f"{where}: expected a C-contiguous {wanted} array, got {_describe(value)}")
        if not value.flags.c_contiguous:
            raise InputError(f"{where}: expected a C-contiguous array, got {_describe(value)} "
                             f"(use numpy.ascontiguousarray)")
        return ffi.cast(ctype.cname, value.ctypes.data), value

    def _scalar(self, value: object, ctype: _CType, where: str) -> object:
        if ctype.kind == "primitive" and ctype.cname in ("float", "double"):
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                return float(value)
        elif ctype.kind == "primitive":
            if isinstance(value, (int, np.integer, bool, np.bool_)):
                return int(value)
        elif isinstance(value, self.ffi.CData):
            return value
        raise InputError(f"{where}: expected a value of type {ctype.cname}, got {_describe(value)}")

    def _convert(self, value: object, ctype: _CType, where: str) -> tuple[object, object]:
        if ctype.kind == "pointer":
            return self.pointer(value, ctype, where)
        return self._scalar(value, ctype, where), None

    def call(self, name: str, *args: object) -> int:
        """Calls `name` with numpy arrays (for pointers), ints or floats; returns its result."""
        fn, ftype = self.function(name)
        params = ftype.args
        if len(args) != len(params):
            raise InputError(f"{name} takes {len(params)} arguments, got {len(args)}")
        converted, keepalive = [], []
        for k, (value, ctype) in enumerate(zip(args, params)):
            c_value, keep = self._convert(value, ctype, f"argument {k} of {name}")
            converted.append(c_value)
            keepalive.append(keep)
        result = fn(*converted)
        del keepalive  # the arrays had to outlive the call, not more
        return int(result) if isinstance(result, int) else 0

    def new_struct(self, type_name: str, **fields: object) -> StructArg:
        """A zero-initialized `type_name` (e.g. "struct tvmgen_default_inputs") with every field
        set from `fields`: arrays for pointer fields, numbers for the others."""
        try:
            stype = self.typeof(type_name)
        except (cffi.FFIError, cffi.CDefError) as err:
            raise InputError(f"unknown struct type {type_name!r} ({err})") from None
        if stype.kind != "struct" or stype.fields is None:
            raise InputError(f"unknown struct type {type_name!r} (not a struct declared in the cdef)")
        declared = dict(stype.fields)
        unknown = sorted(set(fields) - set(declared))
        missing = [n for n in declared if n not in fields]
        if unknown or missing:
            parts = ([f"unknown field(s) {', '.join(unknown)}"] if unknown else []) + (
                [f"missing field(s) {', '.join(missing)}"] if missing else [])
            raise InputError(f"{type_name}: {'; '.join(parts)}")
        pointer = self.ffi.new(f"{type_name} *")
        struct = StructArg(pointer)
        for name, value in fields.items():
            c_value, keep = self._convert(value, declared[name].type, f"field {name} of {type_name}")
            setattr(pointer, name, c_value)
            struct.keepalive.append(keep)
        return struct

    def close(self) -> None:
        """Releases the handle; the code stays mapped (see `load_library`)."""
        self.ffi.dlclose(self.lib)
        self._functions.clear()


def load_library(path: Path, cdef: str) -> Library:
    """Loads the shared library at `path`, declaring its API with the C text `cdef`."""
    try:
        ffi = _declared(cdef)
    except cffi.CDefError as err:
        raise InputError(f"cannot parse the declarations for {Path(path).name}: {err}") from None
    # Never unmapped: a library with OpenMP loops pulls in libgomp, whose idle worker threads
    # would crash the process if dlclose unmapped it (as happens at interpreter exit).
    flags = ffi.RTLD_NOW | getattr(ffi, "RTLD_NODELETE", 0)
    prepare_openmp()
    try:
        lib = ffi.dlopen(str(Path(path).resolve()), flags)
    except OSError as err:
        raise InputError(f"cannot load library {path}: {err}") from None
    return Library(Path(path), ffi, lib)


@functools.lru_cache(maxsize=64)
def _declared(cdef: str) -> cffi.FFI:
    """An FFI that has parsed `cdef`. Parsing is most of loading a cached build (14 ms of
    ResNet-50's); libraries with the same interface (a model built again, the service's runs
    of one module) share it, as one FFI may open any number of libraries."""
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    return ffi
