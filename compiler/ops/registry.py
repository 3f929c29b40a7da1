"""The operator registry: everything about an operator, declared in one place.

An `OpDef` holds an op's attributes (with TVM's defaults), its type relation, its fusion pattern
kind, its numpy reference and sample calls used by the generic op tests. Later stages add the
loop lowering ("compute") and the shape function to the same declaration.

Family modules (`compiler/ops/<family>.py`) call `register(OpDef(...))`; importing
`compiler.ops` imports every family.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.expr import REQUIRED_ATTR, Op
from compiler.ir.types import Type

if TYPE_CHECKING:
    from compiler.ops.domain import Domain


class OpPattern(IntEnum):
    """Fusion pattern kinds, ordered as FuseOps compares them."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


class TypeRelationError(Exception):
    """Raised by a type relation; InferType adds the call's location and text."""


class AttrError(Exception):
    """Raised when call attributes are invalid; `key` names the offending attribute (or None)."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


# The IR owns the marker, so that an Op node can describe its fields without importing us.
REQUIRED = REQUIRED_ATTR

# Attribute kinds. Each converts a parsed value (int, float, bool, str, None, tuples) or raises.
ATTR_KINDS = (
    "int",  # integer
    "float",  # real number (ints accepted)
    "bool",  # True/False or 0/1
    "str",  # string
    "dtype",  # a dtype string; "" means "same as input"
    "ints",  # list of ints (a single int is accepted and wrapped)
    "int_or_ints",  # an int or a list of ints, kept as given
    "nested_ints",  # list of lists of ints (nn.pad pad_width)
    "any",  # left as parsed
)


@dataclass(frozen=True)
class AttrSpec:
    """One attribute field. `optional` allows None as a value (TVM prints such fields `None`)."""

    name: str
    kind: str
    default: object = REQUIRED
    optional: bool = False

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def coerce(self, value: object) -> object:
        if value is None:
            if self.optional or self.default is None:
                return None
            raise AttrError(f"attribute {self.name} may not be None", self.name)
        kind = self.kind
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise AttrError(f"attribute {self.name} expects an integer, got {_show(value)}", self.name)
            return int(value)
        if kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise AttrError(f"attribute {self.name} expects a number, got {_show(value)}", self.name)
            return float(value)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            raise AttrError(f"attribute {self.name} expects a bool, got {_show(value)}", self.name)
        if kind in ("str", "dtype"):
            if not isinstance(value, str):
                raise AttrError(f"attribute {self.name} expects a string, got {_show(value)}", self.name)
            return value
        if kind == "ints":
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                return (int(value),)
            return self._int_list(value)
        if kind == "int_or_ints":
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                return int(value)
            return self._int_list(value)
        if kind == "nested_ints":
            if not isinstance(value, (list, tuple)):
                raise AttrError(f"attribute {self.name} expects a list of lists, got {_show(value)}", self.name)
            return tuple(self._int_list(v) for v in value)
        if kind == "any":
            return value
        raise AssertionError(f"unknown attr kind {kind}")

    def _int_list(self, value: object) -> tuple[int, ...]:
        if not isinstance(value, (list, tuple)) or any(
            isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in value
        ):
            raise AttrError(f"attribute {self.name} expects a list of integers, got {_show(value)}", self.name)
        return tuple(int(v) for v in value)


def _show(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)


@dataclass(frozen=True)
class Sample:
    """A call used by the generic op tests: input arrays (or types to fill randomly) and attrs.

    `low`/`high` bound random float inputs (e.g. positive for log); integer inputs are drawn in
    [0, int_high).
    """

    inputs: tuple[object, ...]
    attrs: Mapping[str, object] = field(default_factory=dict)
    low: float = -2.0
    high: float = 2.0
    int_high: int = 4


TypeRel = Callable[[Sequence[Type], Attrs], Type]
Reference = Callable[[Sequence[np.ndarray], Attrs], "np.ndarray | tuple[np.ndarray, ...]"]


@dataclass(frozen=True)
class OpDef:
    """Everything the compiler knows about one operator.

    `num_inputs` is the number of positional arguments (None: any number). `type_rel` maps the
    argument types and the attrs to the result type, raising TypeRelationError. `reference`
    computes the result with numpy. `reshape_only` marks ops that only reinterpret their input
    buffer (TVM's TReshapeOp).

    Loop lowering (see compiler/tir/compute.py): exactly one of `compute` (elementwise,
    broadcast, injective), `reduction` (comm-reduce) or `kernel` (heavy ops). `shape_func`
    computes the output shape from input shapes (or, when `shape_data_dependent`, from input
    data) for dynamic shapes; `shape_data_dependent` is a bool for all inputs or, as TVM
    registers some ops (`dyn.reshape`: data by its shape, newshape by its values), one bool per
    input (`reads_data`).

    `domain` (compiler/ops/domain.py) draws valid calls of the op for the property tests and
    the random model generator; every op declares one.

    `extras["dynamic_extents"]` marks an op whose kernel accepts buffers with `?` dims (dim
    expressions of the kernel's scalar parameters); other kernels are refused them.

    `extras["casts_at_store"]`, `test(ctx, attrs, arg_types, out_type)`, says whether a call's
    kernel computes in the call's own dtype and casts each value it stores to its output
    buffer's; a fused chain of another dtype may then be its epilogue (compiler/backend/
    lower_primitive.py). Other kernels compute in their output buffer's dtype.

    `extras["widened_inputs"]`, `inputs(ctx, attrs, arg_types, out_type)`, lists the float32
    inputs a call's kernel may instead be given as the float16 tensor they were cast from,
    widening each value itself as it reads it: FuseOps then puts such a cast into the call's
    primitive function (compiler/passes/fusion_input_casts.py), and the lowering passes the
    float16 buffer.

    `extras["evaluate"]`, for ops whose meaning needs the interpreter (they call a function
    value or make values that are not arrays, like memory.alloc_storage), is
    `evaluate(values, attrs, apply)`, where `apply(function_value, args)` runs a function value;
    the interpreter calls it instead of `reference`.

    `extras["constant_args"]` marks an op whose result type depends on the values of constant
    arguments (arange's length): InferType then calls `type_rel(types, attrs, values)` with the
    data of each Constant argument (a tuple of them for a tuple of Constants; None for the
    others), and the array inputs of its samples and domain draws are meant as constant
    arguments of the call. It is True, or the indices of the arguments whose values the op's
    loops read (the qnn ops' scales and zero points): FuseOps keeps those constants inside the
    primitive function, where the lowering passes their data in `TensorView.data`.
    """

    name: str
    num_inputs: int | None
    type_rel: TypeRel
    pattern: OpPattern
    reference: Reference
    attrs: tuple[AttrSpec, ...] = ()
    samples: tuple[Sample, ...] = ()
    reshape_only: bool = False
    compute: Callable[..., object] | None = None
    reduction: Callable[..., object] | None = None
    kernel: Callable[..., object] | None = None
    shape_func: Callable[..., object] | None = None
    shape_data_dependent: bool | tuple[bool, ...] = False
    domain: Domain | None = None
    extras: Mapping[str, object] = field(default_factory=dict)

    def reads_data(self, index: int) -> bool:
        """Whether the shape rule takes input `index`'s data (else its dims)."""
        mode = self.shape_data_dependent
        if isinstance(mode, tuple):
            return index < len(mode) and mode[index]
        return mode

    def make_attrs(self, given: Mapping[str, object]) -> Attrs:
        """Validated attrs: unknown keys and missing required fields raise AttrError.

        An op with `extras["any_attrs"]` takes any keys, as TVM's DictAttrs ops do
        (vm.invoke_tvm_op carries its callee's attributes)."""
        if self.extras.get("any_attrs"):
            return Attrs(dict(given))
        specs = {s.name: s for s in self.attrs}
        for key in given:
            if key not in specs:
                known = ", ".join(specs) or "none"
                raise AttrError(f"operator {self.name} has no attribute {key} (known: {known})", key)
        values: dict[str, object] = {}
        for spec in self.attrs:
            if spec.name in given:
                values[spec.name] = spec.coerce(given[spec.name])
            elif spec.required:
                raise AttrError(f"operator {self.name} requires attribute {spec.name}", None)
            else:
                values[spec.name] = spec.default
        return Attrs(values)

    def printed_attrs(self, attrs: Mapping[str, object]) -> list[tuple[str, object]]:
        """The attrs TVM's printer would show: fields without a default, and changed ones."""
        return Op.get(self.name).printed_attrs(attrs)


_REGISTRY: dict[str, OpDef] = {}


_FAMILIES: dict[str, str] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.name in _REGISTRY:
        raise ValueError(f"operator {opdef.name} registered twice")
    _REGISTRY[opdef.name] = opdef
    _FAMILIES[opdef.name] = _registering_family()
    # The IR node carries the fields, so printing and comparing calls need no registry. Ops
    # with free-form attrs declare none: every attr they are given is printed.
    if not opdef.extras.get("any_attrs"):
        Op.get(opdef.name).declare_attr_fields([(s.name, s.default) for s in opdef.attrs])
    return opdef


def _registering_family() -> str:
    """The family module whose import registers an op: the outermost caller inside
    compiler.ops (a factory such as elemwise.unary may be called from another family)."""
    family = "registry"
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("compiler.ops."):
            break
        family = module.rsplit(".", 1)[-1]
        frame = frame.f_back  # type: ignore[assignment]
    return family


def family_of(name: str) -> str:
    """The family (module name under compiler/ops/) that registered operator `name`."""
    return _FAMILIES.get(name, "")


def lookup(name: str) -> OpDef | None:
    return _REGISTRY.get(name)


def get(name: str) -> OpDef:
    opdef = _REGISTRY.get(name)
    if opdef is None:
        raise KeyError(f"unknown operator {name}")
    return opdef


def all_ops() -> list[OpDef]:
    return sorted(_REGISTRY.values(), key=lambda o: o.name)
