"""`relaycc tune`: a short measured search over the schedule knobs of a model's product kernels.

The rules that tile the products (compiler/ops/kernels/schedule.py lists the knobs) were
measured on one machine, for the shapes at hand then; a tuning run measures, on the build
machine, the model's own kernels with a few alternatives to each rule's choice. Kernels are
timed inside the model, where they meet the caches as the model leaves them (a layer's weights
come from memory there, not from a warm cache as in a loop over the kernel alone).

One build per round: round 0 keeps every rule, round r gives every kernel its r-th alternative
(`variants`), so all kernels are measured at once and a model with 50 kernels costs as many
builds as its most varied kernel has alternatives (about seven). The rounds' libraries are then
run in turn, `repeat` times each, each run profiled kernel by kernel (the executor's own
counters), and a kernel keeps the least time of each round. An alternative is kept only when
it beat the rules by `MIN_GAIN`: timing on a shared machine moves by a few percent, and a
record that wins by noise only makes builds differ. Every round's outputs are checked against
round 0's: the knobs change the order of work, not of any sum, so they must agree bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compiler.backend.te_compiler import DECISIONS_ATTR, SCHEDULE_KEY_ATTR
from compiler.diagnostics import CompileError
from compiler.driver import BuildOptions, build, build_vector_lanes, lower
from compiler.ops.kernels.schedule import variants
from compiler.runtime.fill import fill_inputs
from compiler.runtime.module import CompiledModule
from compiler.tuning_records import FORMAT

MIN_GAIN = 0.02
# Fewer controls than this say little about a round's noise (one control has none to show): such a
# round's alternatives must win by `FEW_CONTROLS_NOISE`, a shared host's usual spread of least times.
MIN_CONTROLS = 3
FEW_CONTROLS_NOISE = 0.05
ROUNDS_MAX = 8


@dataclass(frozen=True)
class Kernel:
    key: str
    name: str
    decisions: Mapping[str, object]
    alternatives: tuple[Mapping[str, object], ...]


def tunable_kernels(relay_text: str, options: BuildOptions, params: Mapping[str, np.ndarray] | None,
                    source_name: str) -> list[Kernel]:
    """The model's kernels that have schedule knobs, with the alternatives to measure."""
    from compiler.parser import parse

    model = lower(parse(relay_text, source_name), options, params)
    kernels = []
    for func in model.prim_funcs:
        key, decisions = func.attrs.get(SCHEDULE_KEY_ATTR), func.attrs.get(DECISIONS_ATTR)
        if isinstance(key, str) and isinstance(decisions, str):
            chosen = json.loads(decisions)
            name = str(func.attrs.get("global_symbol") or func.name)
            kernels.append(Kernel(key, name, chosen, tuple(variants(chosen, ROUNDS_MAX - 1))))
    return kernels


def _machine(options: BuildOptions) -> dict[str, object]:
    """The CPU, and the vector lanes the tuned build's flags give (its kernels' tiles)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "vector_lanes": build_vector_lanes(options)}


def plan_rounds(kernels: list[Kernel]) -> list[dict[str, Mapping[str, object]]]:
    """The schedules of each build after the rules' own (round 0): kernels take turns, half of
    them varied in a round and the other half kept on their rules as its controls, each varied
    kernel on its next alternative."""
    by_round: dict[int, dict[str, Mapping[str, object]]] = {}
    for i, kernel in enumerate(kernels):
        for j, alternative in enumerate(kernel.alternatives):
            by_round.setdefault(2 * j + i % 2, {})[kernel.key] = alternative
    return [by_round[r] for r in sorted(by_round)]


def tune(
    relay_text: str,
    options: BuildOptions,
    params: Mapping[str, np.ndarray] | None = None,
    *,
    source_name: str = "<string>",
    repeat: int = 10,
    threads: int | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, object]:
    """The records document (compiler/tuning_records.py) of a search on this machine."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    started = time.monotonic()
    kernels = tunable_kernels(relay_text, options, params, source_name)
    plan = plan_rounds(kernels)
    log(f"{len(kernels)} kernels with schedule knobs, {1 + len(plan)} builds")
    with tempfile.TemporaryDirectory(prefix="relaycc-tune-") as work:
        modules = []
        for r, varied in enumerate([{}, *plan]):
            schedules = dict(options.schedules)
            for key, alternative in varied.items():
                schedules[key] = {**schedules.get(key, {}), **alternative}
            outdir = Path(work) / f"round{r}"
            build(relay_text, outdir, dataclasses.replace(options, schedules=schedules), params,
                  source_name=source_name)
            modules.append(CompiledModule(outdir))
            log(f"built round {r + 1} of {1 + len(plan)}")
        inputs = fill_inputs(modules[0].inputs, "random")
        least = _least_times(modules, inputs, repeat, threads, log)
    best: dict[str, tuple[float, int]] = {}
    for r, varied in enumerate(plan, start=1):
        for key, ratio in _round_winners(kernels, varied, least[0], least[r], r, log).items():
            if ratio < best.get(key, (1.0, 0))[0]:
                best[key] = (ratio, r)
    records = []
    for k in kernels:
        rule_us = least[0].get(k.name)
        if rule_us is None:
            continue
        ratio, r = best.get(k.key, (1.0, 0))
        records.append({"key": k.key, "kernel": k.name, "schedule": dict(plan[r - 1][k.key]) if r else {},
                        "us": round(least[r][k.name], 1), "rule_us": round(rule_us, 1), "ratio": round(ratio, 3),
                        "rule": {n: v for n, v in k.decisions.items() if ":" not in n}})
    log(f"tuned in {time.monotonic() - started:.1f} s")
    return {"format": FORMAT, "machine": _machine(options), "threads": threads, "repeat": repeat, "records": records}


def _round_winners(kernels: list[Kernel], varied: Mapping[str, object], rules: Mapping[str, float],
                   timed: Mapping[str, float], r: int, log: Callable[[str], None]) -> dict[str, float]:
    """The varied kernels of round `r` that beat their rules, with their time over the rules'
    corrected for the round's library as a whole. The controls (kernels on their rules in this
    round too) give the correction (their median ratio: two builds of identical kernels differ
    by a few percent as a whole on a shared host) and the noise (how far the luckiest control
    fell below it; `FEW_CONTROLS_NOISE` at least where there are fewer than `MIN_CONTROLS`); an
    alternative must beat the rules by more than that noise, and by `MIN_GAIN`."""
    def ratio(name: str) -> float | None:
        return timed[name] / rules[name] if name in timed and rules.get(name) else None

    controls = sorted(q for k in kernels if k.key not in varied and (q := ratio(k.name)) is not None)
    bias = float(np.median(controls)) if controls else 1.0
    noise = 1.0 - controls[0] / bias if controls else 0.0
    if len(controls) < MIN_CONTROLS:
        noise = max(noise, FEW_CONTROLS_NOISE)
    bar = 1.0 - max(MIN_GAIN, noise)
    log(f"round {r}: {len(varied)} kernels varied, {len(controls)} controls, noise {100 * noise:.1f}%")
    winners = {}
    for k in kernels:
        q = ratio(k.name) if k.key in varied else None
        if q is not None and q / bias < bar:
            winners[k.key] = q / bias
    return winners


def _least_times(modules: list[CompiledModule], inputs: Mapping[str, np.ndarray], repeat: int, threads: int | None,
                 log: Callable[[str], None]) -> list[dict[str, float]]:
    """Each module's least time per kernel (its calls in one run summed) over `repeat` runs, the
    modules taking turns run by run, in a rotating order."""
    reference = modules[0].run(inputs, threads=threads).outputs
    for r, module in enumerate(modules[1:], start=1):
        for got, want in zip(module.run(inputs, threads=threads).outputs, reference):
            if got.shape != want.shape or not np.array_equal(got, want, equal_nan=True):
                raise CompileError(f"tuning round {r} computed other outputs than the rules' build (a schedule "
                                   "changed results: a relaycc bug)")
    least: list[dict[str, float]] = [{} for _ in modules]
    for rep in range(repeat):
        for i in [(rep + j) % len(modules) for j in range(len(modules))]:
            profile = modules[i].profile(inputs, repeat=1, threads=threads)
            per_run: dict[str, float] = {}
            for name, us in zip(profile.kernels, profile.kernel_us):
                per_run[name] = per_run.get(name, 0.0) + us
            for name, us in per_run.items():
                least[i][name] = min(us, least[i].get(name, us))
        log(f"measured {rep + 1} of {repeat}")
    return least
