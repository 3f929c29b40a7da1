"""`make fuzz-diff N=...`: generate N models, compile each, compare with the interpreter.

    python -m tests.differential.run 1000 [--first-seed 0] [--jobs 2] [--max-ops 60]

Models are checked by worker processes (worker.py), each over a range of seeds; a worker that
dies (a crash inside compiled code) is restarted after the seed it died on, which counts as
crashed. Failing models are written to --out (fuzz-out/ by default) as Relay text with their
inputs, to be reduced and kept as regression tests. The last lines are the summary:

    fuzz-diff: <g> generated, <c> compiled, <m> matched, <x> mismatched, <k> crashed
    coverage: ... ; models with BYOC regions: <codegen> <models> (<functions> functions), ...

By default the models are compiled for every target of tests/differential/codegens.py: host
code alone, cblas, and the test codegens of tests/codegens (given with --codegen otherwise).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from compiler.testing.generate import generatable_ops
from tests.differential.codegens import TARGETS


@dataclass
class Tally:
    total: int
    results: dict[int, dict[str, object]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def add(self, result: dict[str, object]) -> None:
        self.results[int(result["seed"])] = result  # type: ignore[arg-type]
        self.progress()

    def count(self, kind: str) -> int:
        return sum(1 for r in self.results.values() if r["kind"] == kind)

    def progress(self) -> None:
        done = len(self.results)
        width = 30
        filled = width * done // max(self.total, 1)
        rate = done / max(time.monotonic() - self.started, 1e-9)
        bad = self.count("mismatched") + self.count("crashed")
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                         f"{rate:.1f}/s, {bad} failing ")
        sys.stderr.flush()

    def summary(self) -> list[str]:
        generated = sum(1 for r in self.results.values() if r["kind"] != "skipped")
        compiled = sum(1 for r in self.results.values() if r["kind"] == "matched"
                       or (r["kind"] == "mismatched" and r.get("stage") in ("compare", "memory plan")))
        lines = [
            f"fuzz-diff: {generated} generated, {compiled} compiled, {self.count('matched')} matched, "
            f"{self.count('mismatched')} mismatched, {self.count('crashed')} crashed"
        ]
        used = Counter(op for r in self.results.values() for op in r.get("ops", []))  # type: ignore[union-attr]
        fusion = Counter(k for r in self.results.values() for k in r.get("fusion", []))  # type: ignore[union-attr]
        available = [op.name for op in generatable_ops()]
        unused = sorted(set(available) - set(used))
        plans = sum(1 for r in self.results.values() if r.get("plan"))
        targets = Counter(f"{r.get('target')} O{r.get('opt_level')}" for r in self.results.values() if "target" in r)
        # Per external codegen: models with a region of it (its functions in all of them).
        with_region = Counter(c for r in self.results.values() for c in r.get("regions") or {})  # type: ignore[union-attr]
        functions = Counter()  # type: Counter[str]
        for r in self.results.values():
            functions.update(r.get("regions") or {})  # type: ignore[arg-type]
        region_text = ", ".join(f"{c} {with_region[c]} ({functions[c]} functions)" for c in sorted(with_region))
        lines.append(f"coverage: {len(set(used) & set(available))} of {len(available)} ops used "
                     f"({sum(used.values())} calls); {len(fusion)} fusion kinds "
                     f"({sum(fusion.values())} fused functions); {plans} memory plans checked; "
                     f"models with BYOC regions: {region_text or 'none'}")
        dynamic = Counter(str(r.get("dynamic")).split(":")[0] for r in self.results.values() if r.get("dynamic"))
        lines.append(f"dynamic variants (first input's first dim `?`): {dynamic['matched']} matched, "
                     f"{dynamic['refused']} refused by the dynamic path")
        lines.append("targets: " + ", ".join(f"{k}: {v}" for k, v in sorted(targets.items())))
        lines.append("fusion kinds: " + ", ".join(f"{k} {v}" for k, v in fusion.most_common()))
        if unused:
            lines.append("ops never drawn: " + " ".join(unused))
        return lines


def run_range(first: int, stop: int, args: argparse.Namespace, tally: Tally) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "tests.differential.worker", "--seeds", str(first), str(stop),
        "--max-ops", str(args.max_ops), "--targets", args.targets, "--out", str(args.out),
        *(f"--codegen={p}" for p in args.codegen),
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, bufsize=1)


def drive(args: argparse.Namespace) -> Tally:
    tally = Tally(args.n)
    stop = args.first_seed + args.n
    per_job = -(-args.n // args.jobs)
    pending = [(s, min(s + per_job, stop)) for s in range(args.first_seed, stop, per_job)]
    import selectors

    selector = selectors.DefaultSelector()
    running: dict[int, tuple[subprocess.Popen[str], list[int]]] = {}

    def launch(first: int, last: int) -> None:
        if first >= last:
            return
        proc = run_range(first, last, args, tally)
        assert proc.stdout is not None
        state = [first, last, -1]  # next seed, stop, seed being checked
        running[proc.pid] = (proc, state)
        selector.register(proc.stdout, selectors.EVENT_READ, proc.pid)

    for first, last in pending:
        launch(first, last)
    while running:
        for key, _ in selector.select():
            proc, state = running[key.data]
            line = key.fileobj.readline()  # type: ignore[union-attr]
            if line:
                message = json.loads(line)
                if "start" in message:
                    state[2] = int(message["start"])
                else:
                    tally.add(message)
                    state[0] = int(message["seed"]) + 1
                    state[2] = -1
                continue
            selector.unregister(key.fileobj)
            code = proc.wait()
            del running[key.data]
            if state[2] >= 0:
                tally.add({"seed": state[2], "kind": "crashed", "stage": "process",
                           "message": f"the checking process died (exit status {code})"})
                launch(state[2] + 1, state[1])
            elif code != 0 and state[0] < state[1]:
                launch(state[0], state[1])
    sys.stderr.write("\n")
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fuzz-diff", description=__doc__.split("\n\n")[0])
    parser.add_argument("n", type=int, nargs="?", default=1000, help="how many models (default 1000)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-ops", type=int, default=60)
    parser.add_argument("--targets", default=";".join(TARGETS), help="target strings, separated by ';'")
    parser.add_argument("--codegen", type=Path, action="append", default=[],
                        help="a codegen JSON file the targets may name (default: those of tests/codegens)")
    parser.add_argument("--out", type=Path, default=Path("fuzz-out"))
    args = parser.parse_args(argv)
    tally = drive(args)
    for seed, result in sorted(tally.results.items()):
        if result["kind"] in ("mismatched", "crashed"):
            print(f"seed {seed}: {result['kind']} at {result.get('stage')}: {result.get('message')}")
    for line in tally.summary():
        print(line)
    bad = tally.count("mismatched") + tally.count("crashed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
