"""`relaycc inspect`: what a model is, before anyone compiles it.

Parses and type-checks, then describes `@main`'s inputs and outputs, the operators used (with
counts, over every function of the module), the global functions and their attributes, and
whether the model compiles to AOT C or runs in the interpreter only: the pipeline is run up to
the executor codegen (no C is built), and its first error is the reason.
"""

from __future__ import annotations

from collections import Counter

from compiler.backend.interface_c import result_names
from compiler.diagnostics import CompileError
from compiler.driver import BuildOptions, lower
from compiler.ir.expr import Call, Function, Op
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType, TupleType, Type
from compiler.ir.visitor import post_order


def _tensor(name: str, ty: Type) -> dict[str, object]:
    if isinstance(ty, TensorType):
        shape = ["?" if not isinstance(d, int) else d for d in ty.shape]
        return {"name": name, "shape": shape, "dtype": ty.dtype}
    return {"name": name, "type": str(ty)}


def _flatten(ty: Type) -> list[Type]:
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _flatten(f)]
    return [ty]


def inspect_module(mod: IRModule, options: BuildOptions = BuildOptions()) -> dict[str, object]:
    """The description of a parsed, typed module, as plain JSON-able data."""
    main = mod.main
    inputs = [_tensor(p.name_hint, p.checked_type) for p in main.params]
    result = main.body.checked_type
    leaves = _flatten(result)
    outputs = [_tensor(name, ty) for name, ty in zip(result_names(len(leaves)), leaves)]
    used: Counter[str] = Counter()
    functions = []
    for gv, func in mod.items():
        if not isinstance(func, Function):
            functions.append({"name": gv.name_hint, "kind": type(func).__name__})
            continue
        for node in post_order(func):
            if isinstance(node, Call) and isinstance(node.op, Op):
                used[node.op.name] += 1
        functions.append({
            "name": gv.name_hint,
            "params": len(func.params),
            "attrs": {k: str(v) for k, v in func.attrs.items()},
        })
    try:
        lower(mod, options)
        compiles, reason = True, None
    except CompileError as err:
        compiles, reason = False, err.one_line()
    return {
        "inputs": inputs,
        "outputs": outputs,
        "operators": dict(sorted(used.items())),
        "functions": functions,
        "compiles_to_c": compiles,
        "interpreter_only_because": reason,
    }


def render(info: dict[str, object]) -> str:
    """The description as text for a terminal."""
    lines = ["inputs:"]
    for t in info["inputs"]:  # type: ignore[attr-defined]
        lines.append(f"  %{t['name']}: {_type_text(t)}")
    lines.append("outputs:")
    for t in info["outputs"]:  # type: ignore[attr-defined]
        lines.append(f"  {t['name']}: {_type_text(t)}")
    operators: dict[str, int] = info["operators"]  # type: ignore[assignment]
    lines.append(f"operators ({sum(operators.values())} calls of {len(operators)}):")
    lines += [f"  {name} x{count}" for name, count in operators.items()]
    lines.append("functions:")
    for f in info["functions"]:  # type: ignore[attr-defined]
        attrs = ", ".join(f"{k}={v}" for k, v in f.get("attrs", {}).items())
        lines.append(f"  @{f['name']}" + (f" ({attrs})" if attrs else ""))
    if info["compiles_to_c"]:
        lines.append("compiles to AOT C: yes")
    else:
        lines.append(f"compiles to AOT C: no, interpreter only: {info['interpreter_only_because']}")
    return "\n".join(lines)


def _type_text(t: dict[str, object]) -> str:
    if "shape" in t:
        return f"Tensor[({', '.join(str(d) for d in t['shape'])}), {t['dtype']}]"  # type: ignore[attr-defined]
    return str(t["type"])
