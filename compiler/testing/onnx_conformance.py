"""The ONNX backend node tests through relaycc: import, compile (target `c`), run, and compare
with each case's reference outputs at its own rtol/atol.

`python -m compiler.testing.onnx_conformance [OP ...]` (`make conformance`) prints the passed /
failed / unsupported counts and the reasons. The onnx wheel ships the cases' definitions; the
reference data is computed when their modules are imported, offline.

Cheap by batching: the cases of a batch become one module whose @main calls every case's
function and returns all their outputs, so the C compiler runs once per batch. A batch that
does not build (or whose process dies) is split in halves until the failing cases stand alone.
Each batch builds and runs in a forked child, so a crash in generated code costs one batch,
not the run; `jobs` children run at once.
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing
import pkgutil
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compiler.diagnostics import CompileError, UnsupportedError

PASSED, FAILED, UNSUPPORTED = "passed", "failed", "unsupported"


@dataclass
class CaseResult:
    name: str
    status: str
    reason: str = ""


@dataclass
class Prepared:
    """A case imported: its @main, and its data sets' inputs by Relay parameter name."""

    name: str
    function: object  # compiler.ir.expr.Function, typed
    inputs: list[dict[str, np.ndarray]]
    outputs: list[list[np.ndarray]]
    rtol: float
    atol: float
    relay_inputs: list[str] = field(default_factory=list)


def collect(op_types: Sequence[str] | None = None) -> list[object]:
    """The backend node test cases, all of them or those whose op type is in `op_types`.

    Importing a case module computes its reference data, which is most of the cost; for a few
    op types only their modules are imported (the module is named after the op type)."""
    import onnx.backend.test.case.node as node_cases

    if not op_types:
        return list(node_cases.collect_testcases(None))
    wanted = {t.lower() for t in op_types}
    names = [m.name for m in pkgutil.iter_modules(node_cases.__path__)]
    for name in names:
        key = name.rstrip("_").replace("_", "")
        if key in wanted or name.rstrip("_") in wanted:
            importlib.import_module(f"{node_cases.__name__}.{name}")
    cases = getattr(node_cases, "_NodeTestCases", None)
    if cases is None:  # a later onnx keeps them elsewhere: take every case
        cases = node_cases.collect_testcases(None)
    keep = set(op_types)
    # A case "expanded" into other ops belongs to the list when all of its ops do.
    return [c for c in cases if {n.op_type for n in c.model.graph.node} <= keep]


def prepare(case: object) -> Prepared | CaseResult:
    """Import one case; a model we cannot take is `unsupported` with the importer's reason."""
    from compiler.frontend.onnx import from_onnx
    from compiler.frontend.onnx.context import NeedsConstant

    name = case.name  # type: ignore[attr-defined]
    model = case.model  # type: ignore[attr-defined]
    constants: dict[str, np.ndarray] = {}
    given = _first_values(case)
    try:
        while True:
            try:
                imported = from_onnx(model, constants=constants)
                break
            except NeedsConstant as err:
                # The test feeds a shape, axes or scales as a graph input; a model would
                # carry it as an initializer. Bound as one (what `--params` does for Relay),
                # when every data set gives it the same value.
                if err.input_name in given and err.input_name not in constants:
                    constants[err.input_name] = given[err.input_name]
                    continue
                # A value computed from graph inputs (an expanded function's shape arithmetic):
                # the integer inputs it may come from are bound, once, all together.
                integers = {k: v for k, v in given.items()
                            if k not in constants and np.asarray(v).dtype.kind in "iu" and np.asarray(v).size <= 64}
                if err.input_name in given or not integers:
                    raise
                constants.update(integers)
    except UnsupportedError as err:
        return CaseResult(name, UNSUPPORTED, err.message)
    except CompileError as err:
        return CaseResult(name, FAILED, f"import: {err.message}")
    except Exception as err:  # noqa: BLE001  (a bug of the importer: reported, the run goes on)
        return CaseResult(name, FAILED, f"import crashed: {type(err).__name__}: {err}")
    initializers = {t.name for t in model.graph.initializer} | set(constants)
    onnx_inputs = [v.name for v in model.graph.input if v.name not in initializers]
    by_onnx = {onnx_name: relay for relay, onnx_name in imported.onnx_names.items()}
    relay_inputs = [by_onnx.get(n, n) for n in onnx_inputs]
    inputs, outputs = [], []
    for data_inputs, data_outputs in _arrays(case.data_sets):  # type: ignore[attr-defined]
        # A 0-d reference may be a numpy scalar; sequences and optionals are lists or None.
        if not all(isinstance(a, (np.ndarray, np.generic)) for a in (*data_inputs, *data_outputs)):
            return CaseResult(name, UNSUPPORTED, "sequence or optional values")
        given = dict(zip([v.name for v in model.graph.input if v.name not in initializers - set(constants)],
                         data_inputs))
        inputs.append({relay: np.asarray(given[onnx_name]) for relay, onnx_name in zip(relay_inputs, onnx_inputs)})
        outputs.append([np.asarray(a) for a in data_outputs])
    return Prepared(name, imported.module["main"], inputs, outputs,
                    float(case.rtol), float(case.atol), relay_inputs)  # type: ignore[attr-defined]


def _arrays(data_sets: list[tuple[list[object], list[object]]]) -> list[tuple[list[object], list[object]]]:
    """Data sets with TensorProto values (some cases give float16 data so) as numpy arrays."""
    from onnx import TensorProto, numpy_helper

    def value(v: object) -> object:
        return numpy_helper.to_array(v) if isinstance(v, TensorProto) else v

    return [([value(v) for v in ins], [value(v) for v in outs]) for ins, outs in data_sets]


def _first_values(case: object) -> dict[str, np.ndarray]:
    """The case's graph inputs whose value is the same in every data set."""
    model = case.model  # type: ignore[attr-defined]
    initializers = {t.name for t in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in initializers]
    found: dict[str, np.ndarray] = {}
    varying: set[str] = set()
    for data_inputs, _ in _arrays(case.data_sets):  # type: ignore[attr-defined]
        for input_name, value in zip(names, data_inputs):
            if not isinstance(value, (np.ndarray, np.generic)):
                continue
            value = np.asarray(value)
            if input_name in found and not np.array_equal(found[input_name], value):
                varying.add(input_name)
            found.setdefault(input_name, value)
    return {k: v for k, v in found.items() if k not in varying}


# -- one batch: one build --

def _combined(batch: Sequence[Prepared]) -> object:
    """One module: @caseK is case K's @main; @main takes every case's inputs (renamed cK_x)
    and returns every output in case order."""
    from compiler.ir.expr import Call, Function, GlobalVar, Tuple, TupleGetItem, Var
    from compiler.ir.module import IRModule
    from compiler.ir.types import TupleType

    functions: dict[GlobalVar, object] = {}
    params, results = [], []
    for k, case in enumerate(batch):
        gv = GlobalVar(f"case{k}")
        func = case.function
        functions[gv] = func
        args = []
        for p in func.params:  # type: ignore[attr-defined]
            var = Var(f"c{k}_{p.name_hint}", p.type_annotation)
            params.append(var)
            args.append(var)
        call = Call(gv, tuple(args))
        ret = func.body.checked_type  # type: ignore[attr-defined]
        if isinstance(ret, TupleType):
            results.extend(TupleGetItem(call, i) for i in range(len(ret.fields)))
        else:
            results.append(call)
    functions[GlobalVar("main")] = Function(tuple(params), Tuple(tuple(results)))
    return IRModule(functions)


def _compare(case: Prepared, got: list[np.ndarray], want: list[np.ndarray]) -> CaseResult:
    if len(got) != len(want):
        return CaseResult(case.name, FAILED, f"{len(got)} outputs, expected {len(want)}")
    for index, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return CaseResult(case.name, FAILED, f"output {index}: shape {g.shape}, expected {w.shape}")
        if g.dtype != w.dtype:
            return CaseResult(case.name, FAILED, f"output {index}: dtype {g.dtype}, expected {w.dtype}")
        try:
            np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol, equal_nan=True)
        except AssertionError as err:
            lines = [line for line in str(err).splitlines() if line.strip()]
            return CaseResult(case.name, FAILED, f"output {index}: mismatch ({'; '.join(lines[1:3])})")
    return CaseResult(case.name, PASSED)


def run_batch(batch: Sequence[Prepared]) -> list[CaseResult]:
    """Build the batch once and run every data set of its cases (raises if it does not build)."""
    from compiler.driver import BuildOptions, export, lower
    from compiler.runtime.module import CompiledModule

    mod = _combined(batch)
    model = lower(mod, BuildOptions(module_name="conformance"))
    with tempfile.TemporaryDirectory(prefix="relaycc-onnx-") as work:
        # Objects go to the compile cache the environment names: a second run of the same
        # batches rebuilds nothing.
        export(model, Path(work), "")
        module = CompiledModule(Path(work))
        counts = [len(c.outputs[0]) for c in batch]
        rounds = max(len(c.inputs) for c in batch)
        results: dict[int, CaseResult] = {}
        for r in range(rounds):
            inputs = {}
            for k, case in enumerate(batch):
                data = case.inputs[min(r, len(case.inputs) - 1)]
                inputs.update({f"c{k}_{name}": value for name, value in data.items()})
            outputs = module.run(inputs).outputs
            start = 0
            for k, case in enumerate(batch):
                got = outputs[start:start + counts[k]]
                start += counts[k]
                if r >= len(case.inputs) or (k in results and results[k].status != PASSED):
                    continue
                results[k] = _compare(case, got, case.outputs[r])
    return [results[k] for k in range(len(batch))]


# Set before the children fork: they read their batch from here.
_PREPARED: list[Prepared] = []


def _child(indices: list[int], conn: object) -> None:
    try:
        outcome: object = ("ok", run_batch([_PREPARED[i] for i in indices]))
    except UnsupportedError as err:
        outcome = ("error", UNSUPPORTED, err.message)
    except CompileError as err:
        outcome = ("error", FAILED, f"compile: {err.message}")
    except Exception as err:  # noqa: BLE001  (a bug: reported for the case, the run goes on)
        last = traceback.extract_tb(err.__traceback__)[-1]
        outcome = ("error", FAILED, f"crashed: {type(err).__name__}: {err} ({Path(last.filename).name}:{last.lineno})")
    conn.send(outcome)  # type: ignore[attr-defined]
    conn.close()  # type: ignore[attr-defined]


def _in_child(indices: list[int], timeout: float) -> object:
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(indices, child))
    process.start()
    child.close()
    outcome = None
    if parent.poll(timeout):
        try:
            outcome = parent.recv()
        except EOFError:
            outcome = None
    process.join(5)
    if process.is_alive():
        process.kill()
        process.join()
        return ("error", FAILED, f"timed out after {timeout:.0f} s")
    if outcome is None:
        return ("error", FAILED, f"the build or run died (exit status {process.exitcode})")
    return outcome


def _run_indices(indices: list[int], timeout: float) -> list[CaseResult]:
    outcome = _in_child(indices, timeout)
    if outcome[0] == "ok":  # type: ignore[index]
        return outcome[1]  # type: ignore[index,return-value]
    if len(indices) == 1:
        _, status, reason = outcome  # type: ignore[misc]
        return [CaseResult(_PREPARED[indices[0]].name, status, reason)]
    half = len(indices) // 2
    return _run_indices(indices[:half], timeout) + _run_indices(indices[half:], timeout)


def run(cases: Iterable[object], *, batch_size: int = 48, jobs: int = 2, timeout: float = 600.0) -> list[CaseResult]:
    """Every case's result, in the order given."""
    results: dict[str, CaseResult] = {}
    order = []
    _PREPARED.clear()
    for case in cases:
        order.append(case.name)  # type: ignore[attr-defined]
        prepared = prepare(case)
        if isinstance(prepared, CaseResult):
            results[prepared.name] = prepared
        else:
            _PREPARED.append(prepared)
    batches = [list(range(i, min(i + batch_size, len(_PREPARED)))) for i in range(0, len(_PREPARED), batch_size)]
    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        for batch_results in pool.map(lambda b: _run_indices(b, timeout), batches):
            results.update((r.name, r) for r in batch_results)
    return [results[name] for name in order]


def summary(results: Sequence[CaseResult]) -> str:
    counts = Counter(r.status for r in results)
    total = len(results)
    lines = [f"{name}: {counts[name]}" for name in (PASSED, FAILED, UNSUPPORTED)]
    lines.append(f"total: {total} ({100.0 * counts[PASSED] / max(total, 1):.1f}% passed)")
    for status in (FAILED, UNSUPPORTED):
        reasons = Counter(_reason_key(r.reason) for r in results if r.status == status)
        if reasons:
            lines.append(f"\n{status} by reason:")
            lines.extend(f"  {n:4d}  {reason}" for reason, n in reasons.most_common())
    return "\n".join(lines)


def _reason_key(reason: str) -> str:
    """Reasons grouped: an unsupported op's message without the node name."""
    if "unsupported operator node" in reason:
        parts = reason.split(": ", 1)[1].split("; ")
        return "unsupported ops: " + ", ".join(sorted({p.split(" (")[0] for p in parts}))
    return reason.split(" node '")[0][:160] if " node '" in reason else reason[:160]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compiler.testing.onnx_conformance",
                                     description="Run the ONNX backend node tests through relaycc.")
    parser.add_argument("ops", nargs="*", help="only the cases of these op types (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="batches built at once (default 2)")
    parser.add_argument("--batch-size", type=int, default=48)
    parser.add_argument("--list", action="store_true", help="print every case's result")
    args = parser.parse_args(argv)
    results = run(collect(args.ops), batch_size=args.batch_size, jobs=args.jobs)
    if args.list:
        for r in results:
            print(f"{r.status:<12} {r.name}  {r.reason}")
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
