"""Reduce a failing model to a small one that still fails: a delta debugger over the graph.

Greedy, until no step helps:

* keep one output of a tuple result, or drop one;
* make an inner value the result, dropping everything above it;
* cut: replace a call (or projection) by a new parameter whose input is the value the
  interpreter computed for it, so everything above the cut disappears while the data that
  made the failure flows on unchanged;
* bypass: replace a call by one of its arguments of the same type.

A candidate is kept when `still_fails` says it still fails (the caller decides what failing
means: the same mismatch, the same crash). The result is printed as Relay text and kept as a
regression test.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from compiler.ir.expr import Call, Expr, Function, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.types import TensorType
from compiler.ir.visitor import free_vars, post_order, rebuild
from compiler.passes.infer_type import InferType
from compiler.runtime.interpreter import evaluate
from compiler.testing.generate import GeneratedModel

StillFails = Callable[[GeneratedModel], bool]


def shrink(model: GeneratedModel, still_fails: StillFails, max_tries: int = 400) -> GeneratedModel:
    """The smallest model found from `model` for which `still_fails` holds."""
    tries = 0
    progress = True
    while progress and tries < max_tries:
        progress = False
        for candidate in _candidates(model):
            tries += 1
            if candidate is not None and still_fails(candidate):
                model = candidate
                progress = True
                break
            if tries >= max_tries:
                break
    return model


def size(model: GeneratedModel) -> int:
    """Calls in the model: what shrinking decreases."""
    return sum(1 for n in post_order(_main(model).body) if isinstance(n, Call))


def _main(model: GeneratedModel) -> Function:
    func = model.module[model.module.get_global_var("main")]
    assert isinstance(func, Function)
    return func


def _candidates(model: GeneratedModel):  # type: ignore[no-untyped-def]  # a generator of candidates
    body = _main(model).body
    if isinstance(body, Tuple):
        for field in body.fields:
            yield _with_body(model, field, {})
        for k in range(len(body.fields)):
            rest = body.fields[:k] + body.fields[k + 1:]
            yield _with_body(model, Tuple(rest) if len(rest) > 1 else rest[0], {})
    nodes = [n for n in post_order(body) if isinstance(n, (Call, TupleGetItem))
             and isinstance(n.checked_type, TensorType)]
    # Any inner value as the whole result: drops everything above it at once.
    for node in nodes:
        if node is not body:
            yield _with_body(model, node, {})
    # Root-side nodes first: cutting there removes the most.
    values = None
    for node in reversed(nodes):
        if values is None:
            values = intermediate_values(model)
        if node in values:
            var = Var(_fresh_name(model), node.checked_type)
            yield _with_body(model, _replace(body, node, var), {var.name_hint: values[node]})
    for node in reversed(nodes):
        if isinstance(node, Call):
            for arg in node.args:
                if arg.has_type and arg.checked_type == node.checked_type:
                    yield _with_body(model, _replace(body, node, arg), {})
                    break


def _replace(body: Expr, old: Expr, new: Expr) -> Expr:
    done: dict[Expr, Expr] = {}
    for node in post_order(body):
        done[node] = new if node is old else rebuild(node, lambda child: done.get(child, child))
    return done[body]


def _with_body(model: GeneratedModel, body: Expr, cut_inputs: dict[str, np.ndarray]) -> GeneratedModel | None:
    free = free_vars(body)
    kept = tuple(p for p in _main(model).params if p in set(free))
    kept += tuple(v for v in free if v.name_hint in cut_inputs)
    inputs = {p.name_hint: model.inputs.get(p.name_hint, cut_inputs.get(p.name_hint)) for p in kept}
    try:
        module = InferType()(IRModule.from_expr(Function(kept, body)))
    except Exception:  # noqa: BLE001  a candidate that does not type-check is simply not taken
        return None
    ops = [n.op.name for n in post_order(body) if isinstance(n, Call) and isinstance(n.op, Op)]
    return replace(model, module=module, inputs=inputs, ops=ops)  # type: ignore[arg-type]


def _fresh_name(model: GeneratedModel) -> str:
    k = 0
    while f"cut{k}" in model.inputs:
        k += 1
    return f"cut{k}"


def intermediate_values(model: GeneratedModel) -> dict[Expr, np.ndarray]:
    """The interpreter's value of every tensor-typed call of the model, for cuts."""
    func = _main(model)
    nodes = [n for n in post_order(func.body) if isinstance(n, (Call, TupleGetItem))
             and isinstance(n.checked_type, TensorType)]
    if not nodes:
        return {}
    probe = Function(func.params, Tuple(tuple(nodes)))
    args = [model.inputs[p.name_hint] for p in func.params]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        result = evaluate(InferType()(IRModule.from_expr(probe)), list(args))
    return {node: np.asarray(value) for node, value in zip(nodes, result)}  # type: ignore[arg-type]
