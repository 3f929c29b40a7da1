"""Checks a range of generated models, one JSON line per model on stdout.

Run by run.py in a process of its own: a compiled model that crashes the process (a segfault
in generated C) takes only this worker down, and the parent records the seed it was on.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from compiler.byoc.codegen_config import CodegenSpec
from compiler.testing.generate import GeneratorOptions, generate
from tests.differential.check import check
from tests.differential.codegens import TARGETS, library_accepts, test_codegens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", nargs=2, type=int, required=True, metavar=("FIRST", "STOP"))
    parser.add_argument("--max-ops", type=int, default=60)
    parser.add_argument("--targets", default=";".join(TARGETS))
    parser.add_argument("--codegen", type=Path, action="append", default=[],
                        help="a codegen JSON file (default: the codegens of tests/codegens)")
    parser.add_argument("--out", type=Path, required=True, help="where failing models are written")
    args = parser.parse_args(argv)
    specs = tuple(CodegenSpec.from_json_file(p) for p in args.codegen) if args.codegen else test_codegens()
    options = GeneratorOptions(max_ops=args.max_ops, targets=tuple(args.targets.split(";")),
                               codegens=specs, accepts=library_accepts)
    for seed in range(*args.seeds):
        print(json.dumps({"start": seed}), flush=True)
        try:
            model = generate(seed, options)
        except ValueError as err:
            print(json.dumps({"seed": seed, "kind": "skipped", "message": str(err)}), flush=True)
            continue
        except Exception as err:  # noqa: BLE001  a generator bug is a finding like any other
            print(json.dumps({"seed": seed, "kind": "crashed", "stage": "generate",
                              "message": f"{type(err).__name__}: {err}"}), flush=True)
            continue
        with tempfile.TemporaryDirectory(prefix="fuzz-") as workdir:
            outcome = check(model, Path(workdir))
        if outcome.kind != "matched":
            save_reproducer(args.out, model)
        print(json.dumps({
            "seed": seed, "kind": outcome.kind, "stage": outcome.stage, "message": outcome.message,
            "ops": model.ops, "fusion": outcome.fusion_kinds, "plan": outcome.plan_checked,
            "target": model.target, "opt_level": model.opt_level, "regions": outcome.regions,
            "dynamic": outcome.dynamic,
        }), flush=True)
    return 0


def save_reproducer(out: Path, model: object) -> None:
    import numpy as np

    out.mkdir(parents=True, exist_ok=True)
    seed = model.seed  # type: ignore[attr-defined]
    (out / f"seed{seed}.relay").write_text(model.text)  # type: ignore[attr-defined]
    # How it was built: the codegens a target names change the build entirely.
    (out / f"seed{seed}.build.json").write_text(json.dumps({
        "target": model.target, "opt_level": model.opt_level,  # type: ignore[attr-defined]
        "codegens": [s.origin for s in model.codegens],  # type: ignore[attr-defined]
    }))
    np.savez(out / f"seed{seed}.inputs.npz", **model.inputs)  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
