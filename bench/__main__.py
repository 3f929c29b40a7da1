"""`python -m bench` (`make bench`): relaycc side by side with numpy, ONNX Runtime, torch eager
and torch.compile on the models of bench/models, at 1 and 2 threads, with the machine's measured
peaks; a table on stdout and every figure in bench/results.json.

Each measurement runs in a fresh worker process with its thread count set there (bench/suite.py).
Each peer's output is checked against the numpy reference before its time counts. A row's time is
the median of up to --repeat calls after one warm-up call (fewer once 3 s are spent, never fewer
than 3). The peers of a row run side by side, each in its own process, and take turns of about a
quarter of a second (at least five turns each), so every peer meets the shared machine's good and
bad seconds alike; each row runs in --rounds such sets of fresh processes and keeps its best round. `--suite kernels` prints the kernel-level table instead (bench/kernels.py),
`--suite interpreter` the reference interpreter against numpy, and `--suite layers` relaycc's
kernels beside onnxruntime's operators layer by layer, each layer's least time over --repeat runs
(bench/layers.py; the CNN and ResNet-50 unless --models says otherwise; bench/layers.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.models import MODELS
from bench.suite import PEERS, Settings

RESULTS = Path(__file__).resolve().parent / "results.json"
LAYERS = Path(__file__).resolve().parent / "layers.json"


def names(text: str, known: Sequence[str], what: str) -> list[str]:
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown[0] if unknown else text!r}; known: {', '.join(known)}")
    return chosen


def thread_counts(text: str) -> list[int]:
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--threads takes numbers separated by commas, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"thread counts must be at least 1, got {text!r}")
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=("models", "kernels", "interpreter", "layers"), default="models")
    parser.add_argument("--models", type=lambda t: names(t, list(MODELS), "model"), default=None,
                        help=f"comma-separated (default all: {','.join(MODELS)}; --suite layers: "
                             f"{','.join(layers_defaults())})")
    parser.add_argument("--peers", type=lambda t: names(t, list(PEERS), "peer"), default=list(PEERS),
                        help=f"comma-separated (default all: {','.join(PEERS)}; c and cblas are relaycc's targets)")
    parser.add_argument("--threads", type=thread_counts, default=[1, 2], help="comma-separated (default 1,2)")
    parser.add_argument("--repeat", type=int, default=50, help="timed calls per row at most (default 50)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="sets of fresh processes per row, the peers taking turns; the row keeps the round with "
                             "the lowest median and lists them all (default 2; --quick runs 1)")
    parser.add_argument("--quick", action="store_true", help="a few calls per row and short peaks (for tests)")
    parser.add_argument("--tiny", action="store_true", help="the models on tiny shapes (for tests)")
    parser.add_argument("--output", type=Path, default=None,
                        help=f"results file (default {RESULTS}; --suite layers: {LAYERS})")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.suite == "kernels":
        from bench import kernels

        kernels.run(args.repeat)
        return 0
    if args.suite == "interpreter":
        from bench import interpreter

        interpreter.run(args.repeat)
        return 0

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.suite == "layers":
        from bench import layers

        models = args.models or list(layers.DEFAULT_MODELS)
        settings = Settings.make(models, args.threads, ["c", "onnxruntime"], args.repeat, args.quick, args.tiny,
                                 args.rounds)
        results = layers.run(settings, log)
        text, output = layers.render(results), args.output or LAYERS
    else:
        from bench import report, suite

        settings = Settings.make(args.models or list(MODELS), args.threads, args.peers, args.repeat, args.quick,
                                 args.tiny, args.rounds)
        results = suite.run(settings, log)
        text, output = report.render(results), args.output or RESULTS
    output.write_text(json.dumps(results, indent=1) + "\n")
    print(text)
    print(f"\nwritten to {output}")
    return 0


def layers_defaults() -> tuple[str, ...]:
    from bench.layers import DEFAULT_MODELS

    return DEFAULT_MODELS


if __name__ == "__main__":
    sys.exit(main())
