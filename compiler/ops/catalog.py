"""The operator catalog: what `relaycc ops` prints and `GET /targets` lists.

One entry per registered operator (internal ones excepted): its name, family, arity, fusion
pattern, attributes with their kinds and TVM defaults, and how it is compiled (`loops`: its
own loop nest; `decomposed`: rewritten into other ops before fusion).
"""

from __future__ import annotations

from compiler.ops.registry import OpDef, all_ops, family_of

# Ops SimplifyInference rewrites into other ops; they have no loops of their own.
DECOMPOSED = frozenset({"nn.batch_norm", "nn.dropout", "nn.layer_norm", "nn.group_norm", "nn.instance_norm"})


def _attr_default(value: object) -> object:
    if isinstance(value, tuple):
        return [_attr_default(v) for v in value]
    return value


def compiled_as(op: OpDef) -> str:
    if op.compute is not None or op.reduction is not None or op.kernel is not None:
        return "loops"
    # The dyn ops become their static ops (DynamicToStatic) when their shapes are constants.
    if op.name in DECOMPOSED or op.extras.get("static_form"):
        return "decomposed"
    return "interpreter"


def op_entry(op: OpDef) -> dict[str, object]:
    attrs = []
    for spec in op.attrs:
        entry: dict[str, object] = {"name": spec.name, "kind": spec.kind, "required": spec.required}
        if not spec.required:
            entry["default"] = _attr_default(spec.default)
        attrs.append(entry)
    return {
        "name": op.name,
        "family": family_of(op.name),
        "inputs": op.num_inputs,
        "pattern": op.pattern.name,
        "compiled": compiled_as(op),
        "attrs": attrs,
    }


def catalog() -> list[dict[str, object]]:
    """Every public operator, sorted by name."""
    return [op_entry(op) for op in all_ops() if not op.extras.get("internal")]
