"""ONNX ModelProto → IRModule: graph inputs become @main's parameters, initializers constants
(or parameters with keep_params), each node its converter's expression, graph outputs @main's
result (a tuple when there are several). The module is type-checked with InferType, as the
parser's output would be.

Before any node is converted, every node is checked against the converter table, so a model
with unsupported operators fails once, listing all of them.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx.version_converter
from onnx import numpy_helper
from google.protobuf.message import DecodeError

from compiler.diagnostics import CompileError, InputError, UnsupportedError
from compiler.frontend.onnx import (  # noqa: F401  register their converters
    ops_attention, ops_control, ops_elementwise, ops_image, ops_loss, ops_nn, ops_norm, ops_quant, ops_recurrent,
    ops_reduce, ops_shape, ops_spectral,
)
from compiler.frontend.onnx.context import NodeContext
from compiler.frontend.onnx.functions import expand_functions
from compiler.frontend.onnx.dtypes import dtype_of_code
from compiler.frontend.onnx.names import relay_identifier
from compiler.frontend.onnx.registry import CONVERTERS, lookup
from compiler.frontend.onnx.shape_values import ShapeValue, of_shape, propagate
from compiler.ir.expr import Constant, Expr, Function, Tuple, Var
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, TensorType
from compiler.passes.fold_constant import fold_expr
from compiler.passes.infer_type import InferType, infer_expr

MIN_OPSET = 13
MAX_OPSET = onnx.defs.onnx_opset_version()
_DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass
class ImportResult:
    module: IRModule
    # Initializers left as @main parameters (keep_params), by Relay name: for `--params`.
    params: dict[str, np.ndarray] = field(default_factory=dict)
    # Relay parameter name → ONNX name, for every parameter whose name had to change.
    onnx_names: dict[str, str] = field(default_factory=dict)


def load_model(source: bytes | str | Path, what: str = "<bytes>") -> onnx.ModelProto:
    """A ModelProto from a file path or serialized bytes; anything else is an InputError."""
    if isinstance(source, (str, Path)):
        what = str(source)
        try:
            data = Path(source).read_bytes()
        except OSError as err:
            raise InputError(f"{what}: cannot read: {err.strerror}") from err
    else:
        data = source
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise InputError(f"{what}: not an ONNX model (the protobuf does not parse: {err})") from None
    if not model.HasField("graph") or not model.graph.node and not model.graph.output:
        raise InputError(f"{what}: not an ONNX model (no graph)")
    return model


def model_opset(model: onnx.ModelProto) -> int:
    versions = [o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS]
    if not versions:
        domains = ", ".join(sorted(o.domain for o in model.opset_import)) or "none"
        raise UnsupportedError(f"the ONNX model imports no version of the default (ai.onnx) operator set "
                               f"(only: {domains})")
    opset = versions[0]
    if opset < MIN_OPSET:
        raise UnsupportedError(
            f"ONNX opset {opset} is older than {MIN_OPSET}, the oldest relaycc imports; "
            f"convert the model first (onnx.version_converter.convert_version(model, {MIN_OPSET}))"
        )
    if opset > MAX_OPSET:
        raise UnsupportedError(f"ONNX opset {opset} is newer than this onnx package knows ({MAX_OPSET})")
    return opset


def upgraded(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model itself from opset MIN_OPSET on; an older one converted to MIN_OPSET by ONNX's own
    version converter, which knows each operator's changes between versions (an attribute that
    became an input, a changed default), so our converters need only the newer semantics."""
    versions = [o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS]
    if not versions or versions[0] >= MIN_OPSET:
        return model
    if versions[0] < 9 and any(node.op_type == "Scan" for node in model.graph.node):
        # Scan-8 had a batch axis; the converter drops it from the body but not from the
        # graph's inputs, so the converted model no longer takes the original's inputs.
        raise UnsupportedError(f"ONNX opset {versions[0]} Scan (with its batch axis) cannot be converted to "
                               f"opset {MIN_OPSET}; export the model at opset 9 or later")
    try:
        converted = onnx.version_converter.convert_version(model, MIN_OPSET)
    except Exception as err:  # the converter raises bare RuntimeErrors and ValidationErrors
        # Its assertions read "<source path>:<line>: <function>: Assertion `...` failed: <why>".
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        reason = text.split(" failed: ", 1)[-1]
        raise UnsupportedError(
            f"ONNX opset {versions[0]} is older than {MIN_OPSET}, the oldest relaycc imports, and ONNX's "
            f"version converter could not bring the model to opset {MIN_OPSET}: {reason}"
        ) from None
    return converted


def schema_version(op_type: str, domain: str, opset: int) -> int | None:
    """The since-version of the schema `op_type` has at `opset`, None if ONNX has no such op."""
    if domain not in _DEFAULT_DOMAINS:
        return None
    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except onnx.defs.SchemaError:
        return None


def unsupported_nodes(graph: onnx.GraphProto, opset: int) -> list[str]:
    """One line per node the converter table cannot take: op type, node name, opset; the
    nodes of subgraphs (If's branches, Scan's body) included."""
    lines = []
    for index, node in enumerate(graph.node):
        since = schema_version(node.op_type, node.domain, opset)
        if since is not None and lookup(node.op_type, since) is not None:
            for attr in node.attribute:
                for body in (attr.g,) if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                    lines.extend(unsupported_nodes(body, opset))
            continue
        domain = f"{node.domain}." if node.domain not in _DEFAULT_DOMAINS else ""
        where = node.name or f"#{index}"
        if since is None:
            reason = "unknown operator" if node.domain in _DEFAULT_DOMAINS else "operator of another domain"
        elif node.op_type in CONVERTERS:
            known = ", ".join(str(v) for v in sorted(CONVERTERS[node.op_type].since))
            reason = f"schema version {since} not converted (converted: {known})"
        else:
            reason = "not converted"
        lines.append(f"{domain}{node.op_type} (node {where!r}, opset {opset}): {reason}")
    return lines


def from_onnx(
    model: object, *, keep_params: bool = False, constants: Mapping[str, np.ndarray] | None = None
) -> ImportResult:
    """Convert an ONNX ModelProto (opset 13 or later) to an IRModule with one @main.

    `constants` binds graph inputs (by ONNX name) to values, as initializers are bound: for
    inputs that say what ours take as attributes (a Reshape's shape, a ReduceSum's axes)."""
    if not isinstance(model, onnx.ModelProto):
        raise InputError(f"expected an ONNX ModelProto, got {type(model).__name__}")
    model = upgraded(model)
    opset = model_opset(model)
    model = expand_functions(model)
    graph = model.graph
    missing = unsupported_nodes(graph, opset)
    if missing:
        raise UnsupportedError(
            f"the ONNX model uses {len(missing)} unsupported operator node{'s' if len(missing) > 1 else ''}: "
            + "; ".join(missing)
        )
    return _GraphImporter(graph, opset, keep_params, dict(constants or {})).run()


class _GraphImporter:
    def __init__(self, graph: onnx.GraphProto, opset: int, keep_params: bool, constants: dict[str, np.ndarray]):
        self.graph = graph
        self.constants = constants
        self.opset = opset
        self.keep_params = keep_params
        self.exprs: dict[str, Expr] = {}
        self.values: dict[str, np.ndarray] = {}
        self.shape_values: dict[str, ShapeValue] = {}
        self.params: list[Var] = []
        self.param_values: dict[str, np.ndarray] = {}
        self.onnx_names: dict[str, str] = {}
        self.taken: set[str] = set()
        self.initializers: dict[str, np.ndarray] = {}

    def run(self) -> ImportResult:
        for tensor in self.graph.initializer:
            self.initializers[tensor.name] = self._array(tensor)
        for sparse in self.graph.sparse_initializer:
            raise UnsupportedError(f"sparse initializer {sparse.values.name!r} is not supported")
        names = {v.name for v in self.graph.input}
        unknown = sorted(set(self.constants) - names)
        if unknown:
            raise InputError(f"no graph input named {unknown[0]!r} to bind as a constant")
        for value_info in self.graph.input:
            if value_info.name in self.initializers:
                continue  # older exporters list initializers among the inputs too
            if value_info.name in self.constants:
                array = np.asarray(self.constants[value_info.name])
                dtype_of_code(value_info.type.tensor_type.elem_type, f"graph input {value_info.name!r}")
                self.values[value_info.name] = array
                self.exprs[value_info.name] = self._typed(Constant(array))
                continue
            self._add_input(value_info)
        for name, array in self.initializers.items():
            self.values[name] = array
            if not self.keep_params:
                self.exprs[name] = self._typed(Constant(array))
        for index, node in enumerate(self.graph.node):
            self._convert(node, index)
        outputs = [self._use(o.name, "graph output") for o in self.graph.output]
        if not outputs:
            raise InputError("the ONNX graph has no outputs")
        body = outputs[0] if len(outputs) == 1 else Tuple(tuple(outputs))
        module = InferType()(IRModule.from_expr(Function(tuple(self.params), body)))
        return ImportResult(module, self.param_values, self.onnx_names)

    # -- values --

    def _array(self, tensor: onnx.TensorProto) -> np.ndarray:
        dtype = dtype_of_code(tensor.data_type, f"initializer {tensor.name!r}")
        try:
            array = numpy_helper.to_array(tensor)
        except Exception as err:  # noqa: BLE001  (external data missing, malformed tensor)
            raise InputError(f"initializer {tensor.name!r} cannot be read: {err}") from None
        # (np.ascontiguousarray would make a 0-d initializer 1-d.)
        return np.array(array, dtype=dtype, order="C")

    def _add_input(self, value_info: onnx.ValueInfoProto) -> Var:
        name = value_info.name
        ty = value_info.type
        if ty.WhichOneof("value") == "optional_type" and ty.optional_type.elem_type.WhichOneof("value") == "tensor_type":
            # An optional tensor is taken as a tensor the caller always gives: we have no
            # absent values (OptionalHasElement of it is true).
            ty = ty.optional_type.elem_type
        if ty.WhichOneof("value") != "tensor_type":
            raise UnsupportedError(f"graph input {name!r} is a {ty.WhichOneof('value')}; only tensors are supported")
        dtype = dtype_of_code(ty.tensor_type.elem_type, f"graph input {name!r}")
        if not ty.tensor_type.HasField("shape"):
            raise UnsupportedError(f"graph input {name!r} has no shape (not even a rank)")
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else ANY for d in ty.tensor_type.shape.dim
        )
        return self._new_param(name, TensorType(shape, dtype))

    def _new_param(self, onnx_name: str, ty: TensorType) -> Var:
        relay_name = relay_identifier(onnx_name, self.taken)
        if relay_name != onnx_name:
            self.onnx_names[relay_name] = onnx_name
        var = Var(relay_name, ty)
        infer_expr(var)
        self.params.append(var)
        self.exprs[onnx_name] = var
        return var

    def _use(self, name: str, what: str) -> Expr:
        expr = self.exprs.get(name)
        if expr is None and name in self.initializers:
            # keep_params: an initializer becomes a parameter once a node uses it as a tensor
            # (one only read for its value, like Reshape's shape, stays out of @main).
            array = self.initializers[name]
            expr = self._new_param(name, TensorType(tuple(array.shape), str(array.dtype)))
            self.param_values[expr.name_hint] = array  # type: ignore[attr-defined]  # a Var
        if expr is None:
            raise InputError(f"{what} {name!r} is not produced by any node, input or initializer")
        return expr

    @staticmethod
    def _typed(expr: Expr) -> Expr:
        infer_expr(expr)
        return expr

    # -- subgraphs --

    def _inline(self, graph: onnx.GraphProto, inputs: Sequence[Expr]) -> list[Expr]:
        """A subgraph's outputs with its inputs bound to `inputs`, its nodes converted into the
        enclosing function (names of the enclosing graphs stay visible, as ONNX scopes them)."""
        if len(inputs) != len(graph.input):
            raise InputError(f"subgraph {graph.name!r} takes {len(graph.input)} inputs, given {len(inputs)}")
        child = _GraphImporter(graph, self.opset, self.keep_params, {})
        child.exprs = ChainMap({}, self.exprs)  # type: ignore[assignment]  # a writable view
        child.values = ChainMap({}, self.values)  # type: ignore[assignment]
        child.initializers = ChainMap({}, self.initializers)  # type: ignore[assignment]
        child.params, child.param_values = self.params, self.param_values
        child.onnx_names, child.taken = self.onnx_names, self.taken
        for tensor in graph.initializer:
            array = child._array(tensor)
            child.values[tensor.name] = array
            child.exprs[tensor.name] = self._typed(Constant(array))
        for value_info, expr in zip(graph.input, inputs):
            child.exprs[value_info.name] = expr
            if isinstance(expr, Constant):
                child.values[value_info.name] = expr.data
        for index, node in enumerate(graph.node):
            child._convert(node, index)
        return [child._use(o.name, f"output of subgraph {graph.name!r}") for o in graph.output]

    # -- nodes --

    def _convert(self, node: onnx.NodeProto, index: int) -> None:
        name = node.name or f"#{index}"
        since = schema_version(node.op_type, node.domain, self.opset)
        assert since is not None
        entry = lookup(node.op_type, since)
        assert entry is not None
        inputs: list[Expr | None] = []
        values: list[np.ndarray | None] = []
        for input_name in node.input:
            if not input_name:
                inputs.append(None)
                values.append(None)
                continue
            values.append(self.values.get(input_name))
            inputs.append(_LazyInput(self, input_name, f"input of {node.op_type} node {name!r}"))  # type: ignore[arg-type]
        ctx = NodeContext(
            op_type=node.op_type, name=name, opset=self.opset, since=since,
            attrs={a.name: _attribute(a) for a in node.attribute},
            inputs=_Inputs(inputs), values=values, input_names=list(node.input),
            num_outputs=len(node.output), inline_graph=self._inline,
            shape_values=[self.shape_values.get(i) if i else None for i in node.input],
        )
        try:
            result = entry.convert(ctx)
        except CompileError:
            raise
        except (ValueError, IndexError, KeyError, TypeError) as err:
            # A converter's own bug, but named at the node so the model's author can act on it.
            raise CompileError(f"ONNX {node.op_type} node {name!r}: cannot convert: {type(err).__name__}: {err}") from None
        outputs = [result] if isinstance(result, Expr) else list(result)
        all_known = all(v is not None for v, i in zip(values, node.input) if i)
        for output_name, expr in zip(node.output, outputs):
            if not output_name:
                continue
            if all_known and not isinstance(expr, (Constant, Var)):
                # Shape arithmetic (Shape → Gather → Concat → Reshape) folds here, so the
                # converters downstream see it as a value.
                expr = fold_expr(expr)
                infer_expr(expr)
            self.exprs[output_name] = expr
            if isinstance(expr, Constant):
                self.values[output_name] = expr.data
        if len(outputs) == 1 and node.output[0] not in self.values:
            shape_value = self._shape_value(node, ctx)
            ty = outputs[0].checked_type
            value = shape_value.value(ty.dtype) if shape_value and isinstance(ty, TensorType) else None
            if value is not None:
                # Arithmetic on it (channels // groups) then folds as on any constant.
                self.exprs[node.output[0]] = self._typed(Constant(value))
                self.values[node.output[0]] = value
            elif shape_value is not None:
                self.shape_values[node.output[0]] = shape_value

    def _shape_value(self, node: onnx.NodeProto, ctx: NodeContext) -> ShapeValue | None:
        if node.op_type == "Shape":
            shape = ctx.shape(0)
            rank = len(shape)
            start, end = (min(max(v + rank if v < 0 else v, 0), rank)
                          for v in (ctx.int_attr("start", 0), ctx.int_attr("end", rank)))
            return of_shape(node.input[0], shape, start, end)
        known = [ctx.value(k) if ctx.value(k) is not None else ctx.shape_value(k) for k in range(len(node.input))]
        return propagate(node.op_type, ctx.attrs, known)


class _LazyInput:
    """An input resolved on first use, so that keep_params makes a parameter only of the
    initializers a converter uses as tensors."""

    def __init__(self, importer: _GraphImporter, name: str, what: str):
        self.importer, self.name, self.what = importer, name, what

    def resolve(self) -> Expr:
        return self.importer._use(self.name, self.what)


class _Inputs(list):  # type: ignore[type-arg]  # a list of Expr | None | _LazyInput
    def __getitem__(self, index):  # type: ignore[no-untyped-def]  # list's overloads
        item = super().__getitem__(index)
        if isinstance(item, _LazyInput):
            item = item.resolve()
            super().__setitem__(index, item)
        return item


def _attribute(attr: onnx.AttributeProto) -> object:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", errors="replace") for v in value]
    return value
