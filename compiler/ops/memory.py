"""What TVM's VM compilation writes into Relay after ManifestAlloc: explicit memory and calls in
destination-passing style.

* `memory.alloc_storage(size, [shape,] alignment, dtype=..., virtual_device=...)` allocates
  `size` bytes and returns a value of the module's `extern type Storage` (TVM 0.14 added the
  `shape` argument; 0.8 had `device_id`/`device_type` instead of `virtual_device`).
* `memory.alloc_tensor(storage, offset, shape, dtype=..., const_shape=..., assert_shape=...)` is
  a tensor placed at byte `offset` of a storage; its type comes from `const_shape` (a constant
  shape) or else from `assert_shape`.
* `vm.invoke_tvm_op(f, (inputs...), (outputs...), <f's attributes>)` calls the primitive `f`
  and writes its results into the output tensors; it returns `()`.
* `vm.shape_of(x, dtype=...)`, `vm.reshape_tensor(x, shape, newshape=[...])`,
  `vm.shape_func(f, (inputs...), (outputs...), is_input=[...])` (TVM 0.8 only): the shape of a
  tensor, a reshape without a kernel, and the output shapes of `f` written into `outputs`.
* `memory.kill(x)` ends `x`'s lifetime (ManifestLifetimes); it returns `()`.

They type-check and run in the interpreter, where storages are byte buffers and tensors are
numpy views of them, so a module TVM printed after ManifestAlloc computes what it did before.
The AOT executor plans memory itself and compiles none of them: UndoManifestAlloc turns them
back into calls where that is exact, and CheckCompilable refuses what remains. They are
internal ops: not in `relaycc ops`, not drawn by the generic op tests (no domain).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from compiler.diagnostics import InputError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Constant
from compiler.ir.types import ANY, FuncType, TensorType, TupleType, Type, TypeCall
from compiler.ops.device import UNCONSTRAINED
from compiler.ops.registry import REQUIRED, AttrSpec, OpDef, OpPattern, TypeRelationError, lookup, register

STORAGE = TypeCall("Storage")
UNIT = TupleType(())
INT64 = TensorType((), "int64")

# evaluate(args, attrs, apply): `apply(function_value, args)` runs a function value of the
# interpreter (a closure or global) and returns its result.
Apply = Callable[[object, list[object]], object]


class StorageValue:
    """The interpreter's value of `memory.alloc_storage`: a zeroed, writable byte buffer."""

    __slots__ = ("data",)

    def __init__(self, size: int):
        self.data = np.zeros(size, dtype=np.uint8)

    def __repr__(self) -> str:
        return f"Storage({self.data.size} bytes)"


# --- helpers -------------------------------------------------------------------------------------


def _scalar(ty: Type, what: str, dtype: str | None = "int64") -> TensorType:
    if not isinstance(ty, TensorType) or ty.ndim != 0 or (dtype is not None and ty.dtype != dtype):
        wanted = f"a {dtype} scalar" if dtype else "a scalar"
        raise TypeRelationError(f"{what} must be {wanted}, got {ty}")
    return ty


def _shape_tensor(ty: Type, what: str) -> int:
    """The length of a 1-D integer shape tensor (a rank-0 one is the shape of a scalar)."""
    if not isinstance(ty, TensorType) or not ty.dtype.startswith(("int", "uint")) or ty.ndim > 1:
        raise TypeRelationError(f"{what} must be a 1-D integer tensor, got {ty}")
    if ty.ndim == 0:
        return 0
    length = ty.shape[0]
    if length is ANY:
        raise TypeRelationError(f"{what} must have a static length, got {ty}")
    assert isinstance(length, int)
    return length


def _storage(ty: Type, what: str) -> None:
    if ty != STORAGE:
        raise TypeRelationError(f"{what} must be a Storage, got {ty}")


def _flat_types(ty: Type) -> list[TensorType]:
    if isinstance(ty, TensorType):
        return [ty]
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _flat_types(f)]
    raise TypeRelationError(f"expected tensors or tuples of tensors, got {ty}")


def _flat_values(value: object) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [v for item in value for v in _flat_values(item)]
    return [np.asarray(value)]


def _same_tensors(want: Sequence[Type], got: Sequence[Type], what: str) -> None:
    from compiler.passes.infer_type import compatible

    if len(want) != len(got):
        raise TypeRelationError(f"{what}: expected {len(want)} tensors, got {len(got)}")
    for i, (w, g) in enumerate(zip(want, got)):
        if not compatible(w, g):
            raise TypeRelationError(f"{what} {i}: expected {w}, found {g}")


def _callee(ty: Type, name: str) -> FuncType:
    if not isinstance(ty, FuncType):
        raise TypeRelationError(f"{name} calls a function, got {ty}")
    return ty


def _tuple(ty: Type, what: str) -> TupleType:
    if not isinstance(ty, TupleType):
        raise TypeRelationError(f"{what} must be a tuple, got {ty}")
    return ty


def _no_reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    raise NotImplementedError("memory and VM ops run through their `evaluate` hook")


def _register(
    name: str,
    num_inputs: int | None,
    type_rel: Callable[[Sequence[Type], Attrs], Type],
    evaluate: Callable[[list[object], Attrs, Apply], object],
    attrs: tuple[AttrSpec, ...] = (),
    any_attrs: bool = False,
) -> OpDef:
    existing = lookup(name)
    if existing is not None:
        return existing
    extras: dict[str, object] = {"internal": True, "evaluate": evaluate, "memory": True}
    if any_attrs:
        extras["any_attrs"] = True
    return register(OpDef(name, num_inputs, type_rel, OpPattern.OPAQUE, _no_reference, attrs=attrs, extras=extras))


# --- memory.alloc_storage ------------------------------------------------------------------------


def _alloc_storage_type(types: Sequence[Type], attrs: Attrs) -> Type:
    if len(types) not in (2, 3):
        raise TypeRelationError(f"takes (size, alignment) or (size, shape, alignment), got {len(types)} arguments")
    _scalar(types[0], "the size")
    if len(types) == 3:
        _shape_tensor(types[1], "the shape")
    _scalar(types[-1], "the alignment")
    return STORAGE


def _alloc_storage(args: list[object], attrs: Attrs, apply: Apply) -> object:
    size = int(np.asarray(args[0]))
    if size < 0:
        raise InputError(f"memory.alloc_storage of {size} bytes")
    return StorageValue(size)


ALLOC_STORAGE = _register(
    "memory.alloc_storage",
    None,
    _alloc_storage_type,
    _alloc_storage,
    (
        AttrSpec("dtype", "dtype", "float32"),
        AttrSpec("virtual_device", "any", UNCONSTRAINED),
        # TVM 0.8 spelled the device as two integers.
        AttrSpec("device_id", "int", None, optional=True),
        AttrSpec("device_type", "int", None, optional=True),
    ),
)


# --- memory.alloc_tensor -------------------------------------------------------------------------


def _const_shape(value: object) -> tuple[int, ...]:
    data = value.data if isinstance(value, Constant) else np.asarray(value)
    if data.ndim != 1 or data.dtype.kind not in "iu":
        raise TypeRelationError(f"const_shape must be a 1-D integer constant, got {data.dtype}{list(data.shape)}")
    return tuple(int(d) for d in data)


def _alloc_tensor_type(types: Sequence[Type], attrs: Attrs) -> Type:
    _storage(types[0], "the first argument")
    _scalar(types[1], "the offset", dtype=None)
    rank = _shape_tensor(types[2], "the shape")
    dtype = str(attrs["dtype"])
    if attrs.get("const_shape") is not None:
        shape = _const_shape(attrs["const_shape"])
        if len(shape) != rank:
            raise TypeRelationError(f"const_shape has {len(shape)} dims but the shape argument {rank}")
        return TensorType(shape, dtype)
    assert_shape = attrs.get("assert_shape")
    if assert_shape is None:
        raise TypeRelationError("needs const_shape or assert_shape")
    dims = assert_shape if isinstance(assert_shape, tuple) else (assert_shape,)
    if len(dims) != rank:
        raise TypeRelationError(f"assert_shape has {len(dims)} dims but the shape argument {rank}")
    return TensorType(tuple(d if d is ANY else int(d) for d in dims), dtype)  # type: ignore[arg-type]  # ints or ?


def _alloc_tensor(args: list[object], attrs: Attrs, apply: Apply) -> object:
    storage, offset, shape = args
    if not isinstance(storage, StorageValue):
        raise InputError("memory.alloc_tensor needs a storage made by memory.alloc_storage")
    dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    dtype = np.dtype(str(attrs["dtype"]))
    start = int(np.asarray(offset))
    needed = start + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if start < 0 or needed > storage.data.size:
        raise InputError(
            f"memory.alloc_tensor of {dtype}{list(dims)} at offset {start} needs {needed} bytes; "
            f"the storage has {storage.data.size}"
        )
    return np.ndarray(dims, dtype=dtype, buffer=storage.data.data, offset=start)


ALLOC_TENSOR = _register(
    "memory.alloc_tensor",
    3,
    _alloc_tensor_type,
    _alloc_tensor,
    (
        AttrSpec("dtype", "dtype", "float32"),
        # Neither has a default in TVM, so its printer always writes both (`const_shape=None`).
        AttrSpec("const_shape", "any", REQUIRED, optional=True),
        AttrSpec("assert_shape", "any", REQUIRED, optional=True),
    ),
)


# --- memory.kill ---------------------------------------------------------------------------------


def _kill_type(types: Sequence[Type], attrs: Attrs) -> Type:
    return UNIT


KILL = _register("memory.kill", 1, _kill_type, lambda args, attrs, apply: ())


# --- vm.invoke_tvm_op ----------------------------------------------------------------------------


def _invoke_type(types: Sequence[Type], attrs: Attrs) -> Type:
    func = _callee(types[0], "vm.invoke_tvm_op")
    inputs = _tuple(types[1], "the inputs")
    outputs = _tuple(types[2], "the outputs")
    _same_tensors(func.arg_types, inputs.fields, "input")
    _same_tensors(_flat_types(func.ret_type), outputs.fields, "output")
    return UNIT


def _invoke(args: list[object], attrs: Attrs, apply: Apply) -> object:
    func, inputs, outputs = args
    assert isinstance(inputs, tuple) and isinstance(outputs, tuple)
    results = _flat_values(apply(func, list(inputs)))
    for i, (out, result) in enumerate(zip(outputs, results)):
        _write(out, result, f"vm.invoke_tvm_op output {i}")
    return ()


def _write(out: object, result: np.ndarray, what: str) -> None:
    """Copy `result` into the allocated tensor `out`, which must have its shape and dtype."""
    if not isinstance(out, np.ndarray) or out.shape != result.shape or out.dtype != result.dtype:
        given = f"{out.dtype}{list(out.shape)}" if isinstance(out, np.ndarray) else type(out).__name__
        raise InputError(f"{what}: the result is {result.dtype}{list(result.shape)}, the tensor allocated for it {given}")
    np.copyto(out, result)


# The function's attributes (Primitive=1, hash=...) ride along as a free-form dictionary.
INVOKE_TVM_OP = _register("vm.invoke_tvm_op", 3, _invoke_type, _invoke, any_attrs=True)


# --- vm.shape_of, vm.reshape_tensor --------------------------------------------------------------


def _shape_of_type(types: Sequence[Type], attrs: Attrs) -> Type:
    data = types[0]
    if not isinstance(data, TensorType):
        raise TypeRelationError(f"takes a tensor, got {data}")
    return TensorType((data.ndim,), str(attrs["dtype"]))


SHAPE_OF = _register(
    "vm.shape_of",
    1,
    _shape_of_type,
    lambda args, attrs, apply: np.asarray(np.shape(args[0]), dtype=str(attrs["dtype"])),
    (AttrSpec("dtype", "dtype", "int32"),),
)


def _reshape_tensor_type(types: Sequence[Type], attrs: Attrs) -> Type:
    data = types[0]
    if not isinstance(data, TensorType):
        raise TypeRelationError(f"takes a tensor, got {data}")
    _shape_tensor(types[1], "the shape")
    newshape = attrs["newshape"]
    dims = newshape if isinstance(newshape, tuple) else (newshape,)
    return TensorType(tuple(d if d is ANY else int(d) for d in dims), data.dtype)  # type: ignore[arg-type]  # ints or ?


def _reshape_tensor(args: list[object], attrs: Attrs, apply: Apply) -> object:
    data, shape = np.asarray(args[0]), np.asarray(args[1]).reshape(-1)
    dims = tuple(int(d) for d in shape)
    if int(np.prod(dims, dtype=np.int64)) != data.size:
        raise InputError(f"vm.reshape_tensor of {data.size} elements to shape {list(dims)}")
    return data.reshape(dims)


RESHAPE_TENSOR = _register(
    "vm.reshape_tensor", 2, _reshape_tensor_type, _reshape_tensor, (AttrSpec("newshape", "any"),)
)


# --- vm.shape_func (TVM 0.8) ---------------------------------------------------------------------


def _is_input(attrs: Attrs, count: int) -> tuple[bool, ...]:
    given = attrs["is_input"]
    flags = given if isinstance(given, tuple) else (given,)
    if len(flags) != count:
        raise TypeRelationError(f"is_input has {len(flags)} entries for a function of {count} parameters")
    return tuple(bool(f) for f in flags)


def _shape_func_type(types: Sequence[Type], attrs: Attrs) -> Type:
    func = _callee(types[0], "vm.shape_func")
    flags = _is_input(attrs, len(func.arg_types))
    expected: list[Type] = []
    for flag, arg in zip(flags, func.arg_types):
        for tensor in _flat_types(arg):
            expected.append(tensor if flag else TensorType((tensor.ndim,), "int64"))
    _same_tensors(expected, _tuple(types[1], "the inputs").fields, "input")
    shapes = [TensorType((t.ndim,), "int64") for t in _flat_types(func.ret_type)]
    _same_tensors(shapes, _tuple(types[2], "the outputs").fields, "output")
    return UNIT


def _shape_func(args: list[object], attrs: Attrs, apply: Apply) -> object:
    """Runs `f` itself: on inputs given only by their shape, with zeros of that shape (the
    shape function does not look at their data, which is what is_input=0 says)."""
    func, inputs, outputs = args
    assert isinstance(inputs, tuple) and isinstance(outputs, tuple)
    params = getattr(getattr(func, "func", None), "params", None)
    flags = _is_input(attrs, len(inputs))
    values: list[object] = []
    for i, (flag, value) in enumerate(zip(flags, inputs)):
        if flag:
            values.append(value)
            continue
        dtype = "float32"
        if params is not None and params[i].has_type and isinstance(params[i].checked_type, TensorType):
            dtype = params[i].checked_type.dtype
        values.append(np.zeros(tuple(int(d) for d in np.asarray(value).reshape(-1)), dtype=dtype))
    results = _flat_values(apply(func, values))
    for i, (out, result) in enumerate(zip(outputs, results)):
        _write(out, np.asarray(result.shape, dtype=np.int64), f"vm.shape_func output {i}")
    return ()


SHAPE_FUNC = _register(
    "vm.shape_func", 3, _shape_func_type, _shape_func, (AttrSpec("is_input", "any"),)
)

MEMORY_OPS = tuple(
    op.name for op in (ALLOC_STORAGE, ALLOC_TENSOR, KILL, INVOKE_TVM_OP, SHAPE_OF, RESHAPE_TENSOR, SHAPE_FUNC)
)
