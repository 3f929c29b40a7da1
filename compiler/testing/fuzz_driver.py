"""`make fuzz N=...`: fuzz the parser and the type checker with N inputs.

    python -m compiler.testing.fuzz_driver 1000000 [--out fuzz-out/parser] [--seed 0]
        [--atheris-share 0.95] [--deadline 20] [--memory-mb 2048] [--no-hostile] [--no-instrument]

The property (compiler/testing/relay_text.py): every input ends in an IRModule that type-checks
or in a CompileError with a file:line:col, within the deadline and the memory limit. The inputs:

1. hypothesis draws of `relay_texts()`: well-typed programs (the differential generator's
   models printed, and programs drawn from the grammar) and their mutants, each parsed in a
   worker process under RLIMIT_AS with a deadline (IsolatedParser);
2. atheris (libFuzzer, coverage-guided) on raw bytes, in a child process seeded with the
   well-typed programs of part 1; a libFuzzer timeout or out-of-memory ends the child, which is
   counted and restarted for the inputs left;
3. the hostile corpus at full size (10^6 let bindings, a 4 MiB line of bindings, ...), each
   with a generous deadline and memory limit.

Every input that breaks the property is written to --out as `<kind>-<hash>.relay` with a
`.txt` saying what happened (libFuzzer writes its own `atheris-timeout-*` / `atheris-oom-*`).
The last line is the summary:

    parser-fuzz: <n> inputs, <m> modules, <e> located errors, <c> crashes, <h> hangs, <o> memory overruns
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

# Hypothesis draws in chunks, each with its own seed: one long run keeps growing its state.
CHUNK = 5_000
CORPUS_SIZE = 300
ATHERIS_MAX_LEN = 16_384
# The hostile corpus at full size needs more room than a fuzz input: 10^6 let bindings take
# about 100 s and 2.7 GB to parse and type-check.
HOSTILE_DEADLINE = 900.0
HOSTILE_MEMORY = 8 << 30
KINDS = ("module", "located error", "error without a location", "crash", "hang", "memory overrun")


class Tally:
    def __init__(self, out: Path, corpus: Path | None = None):
        self.out = out
        self.corpus = corpus
        self.counts: Counter[str] = Counter()
        self.by_source: dict[str, Counter[str]] = {}
        self.saved = 0
        self.corpus_count = 0
        self.started = time.monotonic()

    @property
    def inputs(self) -> int:
        return sum(self.counts.values())

    def add(self, source: str, data: str | bytes, kind: str, detail: str = "") -> None:
        self.counts[kind] += 1
        self.by_source.setdefault(source, Counter())[kind] += 1
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
        if kind not in ("module", "located error"):
            self.save(kind, raw, f"{source}: {kind}: {detail}\n")
        elif kind == "module" and self.corpus is not None and self.corpus_count < CORPUS_SIZE:
            self.corpus_count += 1
            (self.corpus / f"{hashlib.sha1(raw).hexdigest()[:16]}.relay").write_bytes(raw)
        if self.inputs % 1000 == 0:
            self.progress()

    def save(self, kind: str, raw: bytes, note: str) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        name = f"{kind.replace(' ', '-')}-{hashlib.sha1(raw).hexdigest()[:16]}"
        (self.out / f"{name}.relay").write_bytes(raw)
        (self.out / f"{name}.txt").write_text(note)
        self.saved += 1

    def merge(self, source: str, counts: dict[str, int]) -> None:
        for kind, n in counts.items():
            self.counts[kind] += n
            self.by_source.setdefault(source, Counter())[kind] += n

    def progress(self) -> None:
        rate = self.inputs / max(time.monotonic() - self.started, 1e-9)
        bad = self.inputs - self.counts["module"] - self.counts["located error"]
        sys.stderr.write(f"\rparser-fuzz: {self.inputs} inputs, {rate:.0f}/s, {bad} failing ")
        sys.stderr.flush()

    def summary(self) -> list[str]:
        c = self.counts
        lines = []
        for source, counts in self.by_source.items():
            parts = ", ".join(f"{counts[k]} {k}" for k in KINDS if counts[k])
            lines.append(f"  {source}: {sum(counts.values())} inputs ({parts})")
        minutes = (time.monotonic() - self.started) / 60
        lines.append(f"  {minutes:.1f} min; failing inputs written to {self.out}" if self.saved else f"  {minutes:.1f} min")
        lines.append(
            f"parser-fuzz: {self.inputs} inputs, {c['module']} modules, {c['located error']} located errors, "
            f"{c['crash'] + c['error without a location']} crashes, {c['hang']} hangs, {c['memory overrun']} memory overruns"
        )
        return lines


def run_hypothesis(count: int, seed: int, tally: Tally, deadline: float, memory: int) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    from compiler.testing.relay_text import IsolatedParser, relay_texts

    with IsolatedParser(memory, deadline) as parser:
        done = 0
        chunk_seed = seed
        while done < count:
            size = min(CHUNK, count - done)

            @hypothesis_seed(chunk_seed)
            @settings(
                max_examples=size, database=None, deadline=None, phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(relay_texts())
            def one(text: str) -> None:
                outcome = parser.outcome(text)
                tally.add("hypothesis", text, outcome.kind, outcome.detail)

            before = tally.inputs
            one()
            # Hypothesis may stop a chunk early once it has seen every draw it can make.
            done += max(1, tally.inputs - before)
            chunk_seed += 1


def run_atheris(
    count: int, tally: Tally, corpus: Path, deadline: float, memory_mb: int, instrument: bool = True
) -> None:
    """libFuzzer in child processes until `count` inputs ran; each death is counted and the
    child restarted with the inputs left."""
    tally.out.mkdir(parents=True, exist_ok=True)
    left, runs = count, 0
    counts: Counter[str] = Counter()
    while left > 0 and runs < 1000:
        runs += 1
        before = {p.name for p in tally.out.glob("atheris-*")}
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as stats:
            stats_path = Path(stats.name)
        command = [
            sys.executable, "-m", "compiler.testing.fuzz_driver", "--atheris-child", str(left),
            "--stats", str(stats_path), "--out", str(tally.out), "--deadline", str(deadline),
            "--memory-mb", str(memory_mb), "--corpus", str(corpus),
        ] + ([] if instrument else ["--no-instrument"])
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        child: dict[str, int] = json.loads(stats_path.read_text() or "{}") if stats_path.stat().st_size else {}
        stats_path.unlink()
        counts.update(child)
        ran = sum(child.values())
        new = {p.name for p in tally.out.glob("atheris-*")} - before
        for name in new:
            kind = "hang" if name.startswith("atheris-timeout") else "memory overrun" if "oom" in name else "crash"
            counts[kind] += 1
            ran += 1
        if ran == 0:
            break  # the child cannot start (atheris missing?): say so below
        left -= ran
    if left == count:
        print("atheris did not run: install the fuzz extra (pip install -e '.[fuzz]')", file=sys.stderr)
    tally.merge("atheris", dict(counts))
    tally.saved += sum(counts[k] for k in KINDS[2:])


def atheris_child(args: argparse.Namespace) -> None:
    """Runs inside the child: libFuzzer calls `one` on each input until `count` ran."""
    import resource

    import atheris

    if args.instrument:
        # Coverage of the parser, the type checker and the ops' type relations (the include
        # takes in all of `compiler` these import: about 10 s of CPU once per child).
        with atheris.instrument_imports(include=["compiler.parser", "compiler.passes.infer_type"]):
            import compiler.parser  # noqa: F401
            import compiler.passes.infer_type  # noqa: F401
    from compiler.testing.relay_text import mapped_bytes, outcome_of

    limit = mapped_bytes() + (args.memory_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out, stats, count = Path(args.out), Path(args.stats), args.atheris_child
    counts: Counter[str] = Counter()

    def write_stats() -> None:
        stats.write_text(json.dumps(dict(counts)))

    def one(data: bytes) -> None:
        outcome = outcome_of(data, "<atheris>")
        counts[outcome.kind] += 1
        if not outcome.clean:
            name = f"{outcome.kind.replace(' ', '-')}-{hashlib.sha1(data).hexdigest()[:16]}"
            (out / f"{name}.relay").write_bytes(data)
            (out / f"{name}.txt").write_text(f"atheris: {outcome.kind}: {outcome.detail}\n")
        total = sum(counts.values())
        if total % 200 == 0:
            write_stats()
        if total >= count:
            write_stats()
            os._exit(0)

    atheris.Setup(
        [sys.argv[0], f"-timeout={int(args.deadline)}", f"-rss_limit_mb={args.memory_mb + 512}",
         f"-max_len={ATHERIS_MAX_LEN}", f"-artifact_prefix={out}/atheris-", args.corpus],
        one,
    )
    atheris.Fuzz()


def run_hostile(tally: Tally) -> None:
    from compiler.testing.relay_text import IsolatedParser, hostile_corpus

    for name, data in hostile_corpus(full=True).items():
        with IsolatedParser(HOSTILE_MEMORY, HOSTILE_DEADLINE) as parser:
            started = time.monotonic()
            outcome = parser.outcome(data)
            seconds = time.monotonic() - started
        print(f"  hostile: {name}: {outcome.kind} in {seconds:.1f} s {outcome.detail[:100]}", file=sys.stderr)
        tally.add("hostile corpus", data, outcome.kind, f"{name}: {outcome.detail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("count", type=int, nargs="?", default=1_000_000, help="inputs to try")
    parser.add_argument("--out", default="fuzz-out/parser", help="where failing inputs are written")
    parser.add_argument("--seed", type=int, default=0)
    # Hypothesis draws whole well-typed programs (about 45 a second here), atheris mutates bytes
    # about ten times faster: 5% of 10^6 is still 50,000 grammar-aware programs and mutants.
    parser.add_argument("--atheris-share", type=float, default=0.95, help="part of the inputs for atheris")
    parser.add_argument("--deadline", type=float, default=20.0, help="seconds an input may take")
    parser.add_argument("--memory-mb", type=int, default=2048, help="address space an input may add to its worker's")
    parser.add_argument("--no-hostile", action="store_true", help="skip the full-size hostile corpus")
    parser.add_argument(
        "--no-instrument", dest="instrument", action="store_false",
        help="atheris without coverage instrumentation (starts in a second instead of ten; for tests)",
    )
    parser.add_argument("--atheris-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stats", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.atheris_child is not None:
        atheris_child(args)
        return 0
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="relay-corpus-") as corpus_dir:
        corpus = Path(corpus_dir)
        tally = Tally(out, corpus)
        by_atheris = int(args.count * args.atheris_share)
        run_hypothesis(args.count - by_atheris, args.seed, tally, args.deadline, args.memory_mb << 20)
        tally.corpus = None
        if by_atheris:
            run_atheris(by_atheris, tally, corpus, args.deadline, args.memory_mb, args.instrument)
    if not args.no_hostile:
        run_hostile(tally)
    sys.stderr.write("\n")
    print("\n".join(tally.summary()))
    c = tally.counts
    return 1 if c["crash"] + c["error without a location"] + c["hang"] + c["memory overrun"] else 0


if __name__ == "__main__":
    sys.exit(main())
