"""`python -m bench --suite layers`: relaycc's kernels beside onnxruntime's operators, layer by
layer, on the same model, weights and machine.

Both sides time every layer of every run (relaycc's counters in the static executor, what
`relaycc run --profile` prints; onnxruntime's profiler) and each layer keeps its least time over
the runs: what its code does when the machine leaves it alone. The medians of whole runs carry
the machine's noise as well, which on a shared VM moves a peer by tens of percent from one minute
to the next. Even least times move in this VM's slow spells (our banded convolutions by 20-30%,
onnxruntime's far less), so the sides alternate over --rounds fresh processes (default 2) and
each layer keeps its least time over all of them.

Layers are matched in execution order within a kind: the n-th convolution of each side
(relaycc's kernels with `conv2d` in their name, onnxruntime's Conv and FusedConv nodes), the n-th
product (dense, matmul and batch_matmul kernels; MatMul, Gemm and FusedMatMul nodes). Where the
two fused a kind differently and its counts differ, only the kind's totals are shown. The rest
(pools, layout reorders, softmax, elementwise kernels) is one total per side. Each round of a
side is a process of its own (bench/worker.py's `layers` job), so neither's threads spin beside
the other's.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.suite import Settings, available, run_worker

# kind -> (words in a relaycc kernel's name, onnxruntime op types)
KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "convolution": (("conv2d",), ("Conv", "FusedConv")),
    "product": (("dense", "matmul"), ("MatMul", "Gemm", "FusedMatMul")),
}
DEFAULT_MODELS = ("cnn", "resnet50")


def kind_of(layer: dict[str, Any], side: str) -> str | None:
    for kind, (words, ops) in KINDS.items():
        if side == "relaycc" and any(word in layer["kind"] for word in words):
            return kind
        if side == "onnxruntime" and layer["kind"] in ops:
            return kind
    return None


def align(ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per kind, the matched layers (None where the counts differ) and both sides' totals in µs;
    the unmatched rest as totals."""
    out: dict[str, Any] = {"kinds": {}}
    for kind in KINDS:
        mine = [layer for layer in ours if kind_of(layer, "relaycc") == kind]
        other = [layer for layer in theirs if kind_of(layer, "onnxruntime") == kind]
        if not mine and not other:
            continue
        pairs = None
        if len(mine) == len(other):
            pairs = [{"relaycc": a["kind"], "onnxruntime": b["name"], "relaycc_us": a["us"], "onnxruntime_us": b["us"]}
                     for a, b in zip(mine, other)]
        out["kinds"][kind] = {"pairs": pairs, "count": [len(mine), len(other)],
                              "relaycc_us": sum(a["us"] for a in mine), "onnxruntime_us": sum(b["us"] for b in other)}
    out["other"] = {"relaycc_us": sum(a["us"] for a in ours if kind_of(a, "relaycc") is None),
                    "onnxruntime_us": sum(b["us"] for b in theirs if kind_of(b, "onnxruntime") is None)}
    out["relaycc_us"] = sum(a["us"] for a in ours)
    out["onnxruntime_us"] = sum(b["us"] for b in theirs)
    return out


def least_of(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One side's rounds as one: each layer's least time over all of them, the least whole run
    and the lowest round median. A failed round fails the side."""
    failed = [r for r in rounds if not r.get("ok")]
    if failed or not rounds:
        return dict(failed[0]) if failed else {"ok": False, "error": "no round ran"}
    layers = [dict(layer) for layer in rounds[0]["layers"]]
    for other in rounds[1:]:
        if [layer["name"] for layer in other["layers"]] != [layer["name"] for layer in layers]:
            return {"ok": False, "error": "the rounds ran different layers"}
        for layer, again in zip(layers, other["layers"]):
            layer["us"] = min(layer["us"], again["us"])
    return {"ok": True, "layers": layers, "run_min_ms": min(r["run_min_ms"] for r in rounds),
            "run_median_ms": min(r["run_median_ms"] for r in rounds), "rounds": len(rounds)}


def bench_model(name: str, settings: Settings, work: Path, log: Callable[[str], None]) -> dict[str, Any]:
    workdir = work / name
    entry: dict[str, Any] = {"name": name, "threads": []}
    prepare = run_worker({"kind": "prepare", "model": name, "tiny": settings.tiny, "workdir": str(workdir)},
                         workdir / "prepare")
    if not prepare.get("onnx"):
        entry["error"] = prepare.get("onnx_error") or prepare.get("error") or "no ONNX model"
        return entry
    base = {"model": name, "tiny": settings.tiny, "workdir": str(workdir)}
    built = run_worker({**base, "kind": "build", "target": "c", "outdir": str(workdir / "build" / "out")},
                       workdir / "build")
    if not built.get("ok"):
        entry["error"] = f"build failed: {built.get('error')}"
        return entry
    for threads in settings.threads:
        # Rounds alternate the two sides, each a fresh process: this VM has spells of a minute or
        # so in which our banded convolutions run 20-30% slower, and a side measured only in one
        # of them would lose by it.
        tried: dict[str, list[dict[str, Any]]] = {"c": [], "onnxruntime": []}
        for round_index in range(settings.rounds):
            for peer in tried:
                job = {**base, "kind": "layers", "peer": peer, "threads": threads, "runs": settings.repeat,
                       "onnx": prepare["onnx"], "outdir": built["outdir"]}
                tried[peer].append(run_worker(job, workdir / f"layers-{peer}-{threads}-{round_index}", threads))
        sides = {peer: least_of(rounds) for peer, rounds in tried.items()}
        failed = [f"{peer}: {r.get('error')}" for peer, r in sides.items() if not r.get("ok")]
        row: dict[str, Any] = {"threads": threads}
        if failed:
            row["error"] = "; ".join(failed)
        else:
            row.update(align(sides["c"]["layers"], sides["onnxruntime"]["layers"]))
            for peer, key in (("c", "relaycc"), ("onnxruntime", "onnxruntime")):
                row[f"{key}_run_min_ms"] = sides[peer]["run_min_ms"]
                row[f"{key}_run_median_ms"] = sides[peer]["run_median_ms"]
            log(f"{name} {threads}t: layers relaycc {row['relaycc_us'] / 1e3:.2f} ms, "
                f"onnxruntime {row['onnxruntime_us'] / 1e3:.2f} ms")
        entry["threads"].append(row)
    return entry


def run(settings: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    reason = available("onnxruntime")
    if reason is not None:
        raise SystemExit(f"the layers suite compares with onnxruntime: {reason}")
    with tempfile.TemporaryDirectory(prefix="relaycc-layers-") as tmp:
        return {"runs": settings.repeat, "rounds": settings.rounds,
                "models": [bench_model(name, settings, Path(tmp), log) for name in settings.models]}


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}" if theirs > 0 else "-"


def render(results: dict[str, Any]) -> str:
    lines = [f"least time of each layer over {results.get('rounds', 1)} round(s) of {results['runs']} runs, µs "
             "(whole runs: the lowest round median); ratio relaycc / onnxruntime"]
    for model in results["models"]:
        if "error" in model:
            lines.append(f"\n{model['name']}: {model['error']}")
            continue
        for row in model["threads"]:
            head = f"\n{model['name']}, {row['threads']} thread(s)"
            if "error" in row:
                lines.append(f"{head}: {row['error']}")
                continue
            lines.append(f"{head}: every layer {row['relaycc_us']:.0f} against {row['onnxruntime_us']:.0f} "
                         f"({_ratio(row['relaycc_us'], row['onnxruntime_us'])}); whole runs, least / median ms: "
                         f"relaycc {row['relaycc_run_min_ms']:.2f} / {row['relaycc_run_median_ms']:.2f}, "
                         f"onnxruntime {row['onnxruntime_run_min_ms']:.2f} / {row['onnxruntime_run_median_ms']:.2f}")
            for kind, part in row["kinds"].items():
                mine, theirs = part["count"]
                lines.append(f"  {kind}s: {part['relaycc_us']:.0f} against {part['onnxruntime_us']:.0f} "
                             f"({_ratio(part['relaycc_us'], part['onnxruntime_us'])}), {mine} kernels / {theirs} nodes"
                             + ("" if part["pairs"] is not None else ": fused differently, not matched"))
                for pair in part["pairs"] or ():
                    lines.append(f"    {pair['onnxruntime'][:48]:48s} {pair['relaycc_us']:9.0f} "
                                 f"{pair['onnxruntime_us']:9.0f} {_ratio(pair['relaycc_us'], pair['onnxruntime_us']):>6s}"
                                 f"  {pair['relaycc']}")
            other = row["other"]
            lines.append(f"  the rest: {other['relaycc_us']:.0f} against {other['onnxruntime_us']:.0f}")
    return "\n".join(lines)
