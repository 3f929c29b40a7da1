"""The benchmark's results as text tables, and results.json's required shape."""

from __future__ import annotations

from typing import Any

from bench import machine
from bench.suite import TARGETS

PEER_NAMES = {"numpy": "numpy", "onnxruntime": "onnxruntime", "torch": "torch eager",
              "torch.compile": "torch.compile", "c": "relaycc c", "cblas": "relaycc cblas, c"}
# What results.json must hold (tests/bench checks it).
TOP_KEYS = {"machine", "settings", "peaks", "models"}
MODEL_KEYS = {"name", "title", "dtype", "flops", "builds", "runs"}
RUN_KEYS = {"threads", "peer", "ok"}
TIMED_RUN_KEYS = {"median_ms", "min_ms", "runs", "gflops", "rel_error"}
BUILD_KEYS = {"cold_s", "cached_s", "rss_bytes", "workspace_bytes", "two_largest_live_bytes"}


def schema_errors(results: dict[str, Any]) -> list[str]:
    """What results.json lacks, as readable lines (empty when it is complete)."""
    errors = [f"missing {k!r}" for k in sorted(TOP_KEYS - set(results))]
    for model in results.get("models", []):
        name = model.get("name", "?")
        errors += [f"{name}: missing {k!r}" for k in sorted(MODEL_KEYS - set(model))]
        for target, build in model.get("builds", {}).items():
            if build.get("ok"):
                errors += [f"{name} build {target}: missing {k!r}" for k in sorted(BUILD_KEYS - set(build))]
        for run in model.get("runs", []):
            where = f"{name} {run.get('peer')} {run.get('threads')}t"
            errors += [f"{where}: missing {k!r}" for k in sorted(RUN_KEYS - set(run))]
            if run.get("ok"):
                errors += [f"{where}: missing {k!r}" for k in sorted(TIMED_RUN_KEYS - set(run))]
            elif not ({"skipped", "error", "rel_error"} & set(run)):
                errors.append(f"{where}: failed without saying why")
    return errors


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _kib(value: int | None) -> str:
    return "-" if value is None else f"{value / 1024:.1f}"


def peaks_lines(results: dict[str, Any]) -> list[str]:
    peaks = results["peaks"]
    info = results["machine"]
    lines = [f"machine: {machine.summary(info)}; {info['date']}"]
    if "load_average" in info:
        # The 1-minute load average before and after: above the core count, other work shared the cores.
        end = info.get("load_average_end", [float("nan")])[0]
        lines.append(f"load average (1 min) at start {info['load_average'][0]:.1f}, at end {end:.1f}")
    for threads, fma in peaks["fma"].items():
        sgemm = peaks["sgemm"][threads]
        lines.append(f"peak at {threads} thread(s): FMA loop {fma['gflops']:.1f} GFLOP/s ({fma['vector_bits']}-bit "
                     f"vectors), {sgemm.get('blas', 'BLAS')} sgemm {peaks['sgemm_size']}^2 "
                     f"{_num(sgemm.get('gflops'), '.1f')} GFLOP/s")
    return lines


def run_table(results: dict[str, Any]) -> list[str]:
    fma = {int(t): p["gflops"] for t, p in results["peaks"]["fma"].items()}
    header = (f"{'model':<42} {'thr':>3}  {'peer':<17} {'median ms':>10} {'GFLOP/s':>8} {'%FMA':>5} "
              f"{'c/peer':>7} {'cblas/peer':>10}  note")
    lines = [header, "-" * len(header)]
    for model in results["models"]:
        title = f"{model['title']} ({model['flops'] / 1e9:.3g} GFLOP)"
        for row in model["runs"]:
            peer = PEER_NAMES.get(row["peer"], row["peer"])
            if row.get("ok"):
                share = row["gflops"] / fma[row["threads"]] * 100 if row["threads"] in fma else None
                notes = []
                if len(row.get("round_medians_ms", [])) > 1:
                    notes.append("rounds " + " / ".join(f"{m:.3g}" for m in row["round_medians_ms"]))
                if "compile_s" in row:
                    notes.append(f"first call (compile) {row['compile_s']:.1f} s")
                note = "; ".join(notes)
                lines.append(f"{title:<42} {row['threads']:>3}  {peer:<17} {row['median_ms']:>10.3f} "
                             f"{row['gflops']:>8.1f} {_num(share, '.0f'):>5} {_num(row.get('ratio_c'), '.2f'):>7} "
                             f"{_num(row.get('ratio_cblas'), '.2f'):>10}  {note}")
            else:
                why = row.get("skipped") or row.get("error")
                if why is None:
                    why = f"MISMATCH with the numpy reference (largest error {row.get('rel_error', 0):.1e} of max)"
                lines.append(f"{title:<42} {row['threads']:>3}  {peer:<17} {'-':>10} {'-':>8} {'-':>5} {'-':>7} "
                             f"{'-':>10}  {why}")
            title = ""
    return lines


def build_table(results: dict[str, Any]) -> list[str]:
    header = (f"{'model':<42} {'target':<9} {'cold s':>7} {'again s':>8} {'build MB':>9} {'gcc MB':>7} "
              f"{'workspace KiB':>14} {'2 live KiB':>11} {'scratch KiB':>12}")
    lines = [header, "-" * len(header)]
    for model in results["models"]:
        for peer, build in model["builds"].items():
            target = TARGETS[peer]
            if not build.get("ok"):
                lines.append(f"{model['title']:<42} {target:<9} failed: {build.get('error')}")
                continue
            rss = build["rss_bytes"]
            lines.append(f"{model['title']:<42} {target:<9} {build['cold_s']:>7.2f} {build['cached_s']:>8.2f} "
                         f"{rss['peak'] / 2**20:>9.0f} {rss['children'] / 2**20:>7.0f} "
                         f"{build['workspace_bytes'] / 1024:>14.1f} {_kib(build.get('two_largest_live_bytes')):>11} "
                         f"{_kib(build.get('largest_scratch_bytes')):>12}")
    lines.append("cold: parse -> loaded .so in a fresh process with the compiler imported; again: the same build "
                 "once more in that process, its objects in the compile cache the cold build filled; "
                 "build MB: the build process's peak RSS, weights included; gcc MB: the largest gcc; 2 live: the "
                 "largest sum of two intermediates live at once (issue 11's bound on the workspace); scratch: the "
                 "largest kernel scratch buffer in the plan.")
    return lines


def render(results: dict[str, Any]) -> str:
    return "\n".join([*peaks_lines(results), "", *run_table(results), "", *build_table(results)])
