"""The call_lowered metadata report (`metadata.json`, format `relaycc.metadata/1`).

Everything in it is read off the lowered module and the executor's plan: the `call_lowered`
calls of @main in execution order with their metadata (exactly TVM's CallLoweredAttrs keys),
per-function sizes collected while lowering, the static memory plan and the pass timings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Expr, Function, GlobalVar, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.visitor import post_order

FORMAT = "relaycc.metadata/1"


def to_json(value: object) -> object:
    """Attrs, GlobalVars, tuples and numpy scalars as plain JSON values."""
    if isinstance(value, Attrs) or isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, GlobalVar):
        return value.name_hint
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def is_call_lowered(node: Expr) -> bool:
    return isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == "call_lowered"


def _callee(call: Call) -> GlobalVar:
    callee = call.args[0]
    assert isinstance(callee, GlobalVar)
    return callee


def _call_args(call: Call) -> Sequence[Expr]:
    args = call.args[1]
    return args.fields if isinstance(args, Tuple) else (args,)


def lowered_calls(main: Function) -> list[Call]:
    """The call_lowered calls of `main` in execution order (arguments before their users)."""
    return [n for n in post_order(main.body, descend=lambda n: not isinstance(n, Function)) if is_call_lowered(n)]


class ValueNames:
    """Readable names of @main's values: `%x` for params, `%3` for the result of the 4th call
    (`%3.1` for a field of a tuple result), `const0` for constants, in execution order."""

    def __init__(self, main: Function):
        self.names: dict[Expr, str] = {p: f"%{p.name_hint}" for p in main.params}
        self._calls = 0
        self._constants = 0
        for node in post_order(main.body, descend=lambda n: not isinstance(n, Function)):
            self._name(node)

    def _name(self, node: Expr) -> None:
        if node in self.names:
            return
        if is_call_lowered(node) or isinstance(node, Call):
            self.names[node] = f"%{self._calls}"
            self._calls += 1
        elif isinstance(node, Constant):
            self.names[node] = f"const{self._constants}"
            self._constants += 1
        elif isinstance(node, TupleGetItem) and node.tuple_value in self.names:
            self.names[node] = f"{self.names[node.tuple_value]}.{node.index}"
        elif isinstance(node, Let):
            if node.value in self.names:
                self.names[node.var] = self.names[node.value]
            if node.body in self.names:
                self.names[node] = self.names[node.body]
        elif isinstance(node, Var) and node not in self.names:
            self.names[node] = f"%{node.name_hint}"

    def __getitem__(self, node: Expr) -> str:
        name = self.names.get(node)
        if name is None:
            if isinstance(node, Tuple):
                return "(" + ", ".join(self[f] for f in node.fields) + ")"
            return f"<{type(node).__name__.lower()}>"
        return name


def call_kind(mod: IRModule, callee: GlobalVar) -> str:
    from compiler.tir.stmt import PrimFunc

    definition = mod[callee] if callee in mod else None
    if isinstance(definition, PrimFunc):
        return "shape_func" if definition.attrs.get("shape_func") else "prim_func"
    return "extern"


def call_target(mod: IRModule, call: Call, host: str) -> str:
    metadata = call.attrs.get("metadata") or Attrs()
    assert isinstance(metadata, Attrs)
    relay_attrs = metadata.get("relay_attrs") or Attrs()
    assert isinstance(relay_attrs, Attrs)
    compiler = relay_attrs.get("Compiler")
    if isinstance(compiler, str):
        return compiler
    definition = mod[_callee(call)] if _callee(call) in mod else None
    target = getattr(definition, "attrs", Attrs()).get("target")
    return target if isinstance(target, str) else host


def call_entries(mod: IRModule, host: str = "c") -> list[dict[str, object]]:
    main = mod.main
    names = ValueNames(main)
    entries = []
    for call in lowered_calls(main):
        callee = _callee(call)
        metadata = call.attrs.get("metadata") or Attrs()
        entries.append(
            {
                "callee": callee.name_hint,
                "kind": call_kind(mod, callee),
                "target": call_target(mod, call, host),
                "args": [names[a] for a in _call_args(call)],
                "metadata": to_json(metadata),
            }
        )
    return entries


def build_report(
    *,
    module_name: str,
    host: str,
    external: Sequence[str],
    lowered: IRModule,
    functions: Mapping[str, Mapping[str, object]],
    memory: Mapping[str, object],
    passes: Sequence[tuple[str, float]],
    external_modules: Sequence[Mapping[str, object]] = (),
) -> dict[str, object]:
    report: dict[str, object] = {
        "format": FORMAT,
        "module_name": module_name,
        "target": {"host": host, "external": list(external)},
        "calls": call_entries(lowered, host),
        "functions": {name: dict(info) for name, info in sorted(functions.items())},
        "memory": dict(memory),
        "passes": [{"name": name, "ms": round(ms, 3)} for name, ms in passes],
    }
    if external_modules:
        report["external_modules"] = [dict(m) for m in external_modules]
    return report
