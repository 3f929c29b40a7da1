"""ONNX operators defined by a function body, expanded into their body's nodes before import.

Many newer operators (LinearAttention, CausalConvWithState, Attention's later versions,
AffineGrid, ...) are specified in ONNX itself as a function of older operators, and some bodies
depend on the node (its attributes, its inputs' types). A node we have no converter for, whose
schema has such a body at the model's opset, is replaced by that body through ONNX's own
inliner, which substitutes the node's attributes and renames the body's values apart. A node
with a converter keeps it: a converter is the faster form.
"""

from __future__ import annotations

import onnx
import onnx.defs
import onnx.inliner
import onnx.shape_inference

from compiler.frontend.onnx.registry import lookup

# The domain the bodies are filed under while the inliner works: it must differ from ai.onnx,
# whose operators the inliner never expands.
_DOMAIN = "relaycc.expanded"


# Domains besides ai.onnx whose operators ONNX also specifies with function bodies.
_OTHER_DOMAINS = ("ai.onnx.preview",)


def _schema(node: onnx.NodeProto, versions: dict[str, int]) -> onnx.defs.OpSchema | None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain not in ("", *_OTHER_DOMAINS) or domain not in versions:
        return None
    try:
        return onnx.defs.get_schema(node.op_type, versions[domain], domain)
    except onnx.defs.SchemaError:
        return None


def expandable(node: onnx.NodeProto, versions: dict[str, int]) -> bool:
    """Whether the node has no converter but a function body at the model's opsets."""
    schema = _schema(node, versions)
    if schema is None or (schema.domain == "" and lookup(node.op_type, schema.since_version) is not None):
        return False
    return schema.has_function or schema.has_context_dependent_function


def _body(node: onnx.NodeProto, versions: dict[str, int], types: dict[str, onnx.TypeProto]) -> onnx.FunctionProto | None:
    schema = _schema(node, versions)
    assert schema is not None
    opset = versions[schema.domain]
    body = onnx.FunctionProto()
    if schema.has_function:
        if schema.function_opset_versions:
            body.ParseFromString(schema.get_function_with_opset_version(opset))
        else:
            body.CopyFrom(schema.function_body)
        return body
    if not all(name in types for name in node.input if name):
        return None  # the body depends on input types that shape inference could not give
    input_types = [types[name].SerializeToString() if name else onnx.TypeProto().SerializeToString()
                   for name in node.input]
    try:
        data = schema.get_context_dependent_function_with_opset_version(
            opset, node.SerializeToString(), input_types)
    except Exception:  # noqa: BLE001  (ONNX refuses a body for this node: it stays unsupported)
        return None
    body.ParseFromString(data)
    return body if body.node else None


def expand_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every expandable node of its main graph replaced by its body (the model
    itself when there is none)."""
    versions = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    if not any(expandable(node, versions) for node in model.graph.node):
        return model
    expanded = onnx.ModelProto()
    expanded.CopyFrom(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        known = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    except Exception:  # noqa: BLE001  (inference is only a help for context-dependent bodies)
        known = [*model.graph.input, *model.graph.value_info]
    types = {v.name: v.type for v in known}
    for tensor in model.graph.initializer:
        types.setdefault(tensor.name, onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
    chosen = []
    for index, node in enumerate(expanded.graph.node):
        if not expandable(node, versions):
            continue
        body = _body(node, versions, types)
        if body is None:
            continue
        name = f"{node.op_type}_{index}"
        body.name, body.domain = name, _DOMAIN
        node.op_type, node.domain = name, _DOMAIN
        expanded.functions.append(body)
        chosen.append((_DOMAIN, name))
    if not chosen:
        return model
    expanded.opset_import.append(onnx.helper.make_opsetid(_DOMAIN, 1))
    inlined = onnx.inliner.inline_selected_functions(expanded, chosen, False)
    del inlined.opset_import[:]
    inlined.opset_import.extend(o for o in expanded.opset_import if o.domain != _DOMAIN)
    return inlined
