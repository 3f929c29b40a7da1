"""Runs the model benchmark: every model for every peer and thread count, each measurement in its
own worker process (bench/worker.py) with the thread count set in its environment; the peers of a
row run side by side in their processes and take turns (`interleaved`)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import machine
from bench.models import get

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"c": "c", "cblas": "cblas, c"}
# Peer name -> the package it needs (None: always there).
PEERS: dict[str, str | None] = {"numpy": None, "onnxruntime": "onnxruntime", "torch": "torch",
                                "torch.compile": "torch", "c": None, "cblas": None}
SGEMM_SIZE = 2048


@dataclass(frozen=True)
class Settings:
    models: Sequence[str]
    threads: Sequence[int]
    peers: Sequence[str]
    repeat: int
    budget_s: float  # timed calls stop after this long once min_runs are done
    min_runs: int
    fma_seconds: float
    sgemm_size: int
    tiny: bool = False
    rounds: int = 1  # fresh processes per row, interleaved across peers; the row keeps the best

    @staticmethod
    def make(models: Sequence[str], threads: Sequence[int], peers: Sequence[str], repeat: int, quick: bool,
             tiny: bool = False, rounds: int | None = None) -> Settings:
        if quick:
            return Settings(models, threads, peers, min(repeat, 3), 0.2, 1, 0.02, 256, tiny, rounds or 1)
        return Settings(models, threads, peers, repeat, 3.0, 3, 0.2, SGEMM_SIZE, tiny, rounds or 2)


def worker_env(threads: int, *, own_blas: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if own_blas:
        # numpy's OpenBLAS is current: the settings that keep older builds correct only slow it.
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
    return env


def run_worker(job: dict[str, Any], directory: Path, threads: int = 1, env_extra: dict[str, str] | None = None,
               own_blas: bool = False) -> dict[str, Any]:
    directory.mkdir(parents=True, exist_ok=True)
    job_path, result_path = directory / "job.json", directory / "result.json"
    job_path.write_text(json.dumps(job))
    result_path.unlink(missing_ok=True)
    env = {**worker_env(threads, own_blas=own_blas), **(env_extra or {})}
    done = subprocess.run([sys.executable, "-m", "bench.worker", str(job_path), str(result_path)], env=env,
                          cwd=ROOT, capture_output=True, text=True, check=False)
    if not result_path.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return {"ok": False, "error": f"worker died: {tail[0]}"}
    return json.loads(result_path.read_text())


# A turn is about this long (at least one call). Between its turns a peer's process is stopped
# (SIGSTOP): the pool threads of a runtime spin for a while after its last parallel region
# (torch's spun into the next peer's turn and ran our two-thread MLP ten times slower), and a
# stopped process cannot. The machine rests briefly between turns.
TURN_S = 0.25
REST_S = 0.02
MIN_TURNS = 5  # a fast model's calls are spread over at least this many turns


@dataclass
class _Contender:
    process: subprocess.Popen[str]
    info: dict[str, Any]
    times: list[float]
    log: Path
    turns: int = 0


def interleaved(jobs: Mapping[str, tuple[dict[str, Any], dict[str, str]]], directory: Path, threads: int,
                settings: Settings) -> dict[str, dict[str, Any]]:
    """Each peer's row from one round: every peer in a process of its own (bench/worker.py
    `serve`), set up one after another (so a cold compile's time is its own), then taking turns
    of about `TURN_S` of timed calls each (at most 1/`MIN_TURNS` of `settings.repeat`) until it
    has `settings.repeat` calls or, with at least `min_runs`, `budget_s` of them."""
    directory.mkdir(parents=True, exist_ok=True)
    contenders: dict[str, _Contender] = {}
    results: dict[str, dict[str, Any]] = {}
    try:
        for peer, (job, extra) in jobs.items():
            job_path, log = directory / f"{peer}.json", directory / f"{peer}.log"
            job_path.write_text(json.dumps(job))
            env = {**worker_env(threads, own_blas=peer == "numpy"), **extra}
            with log.open("w") as err:
                process = subprocess.Popen([sys.executable, "-m", "bench.worker", "--serve", str(job_path)], env=env,
                                           cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                           text=True, bufsize=1)
            contender = _Contender(process, {}, [], log)
            info = _reply(contender)
            if not isinstance(info, dict) or not info.get("ok"):
                results[peer] = info if isinstance(info, dict) else _died(contender)
                _stop(contender)
                continue
            contender.info = info
            contenders[peer] = contender
            _pause(contender)
        order = list(contenders)
        turn = 0
        while order:
            peer = order[turn % len(order)]
            contender = contenders[peer]
            wanted = min(settings.repeat - len(contender.times), -(-settings.repeat // MIN_TURNS),
                         max(1, round(TURN_S / max(contender.info["call_s"], 1e-6))))
            _resume(contender)
            contender.process.stdin.write(f"{wanted}\n")  # type: ignore[union-attr]
            times = _reply(contender)
            if not isinstance(times, list):
                results[peer] = _died(contender)
                order.remove(peer)
                continue
            _pause(contender)
            contender.times += times
            contender.turns += 1
            spent = sum(contender.times)
            if len(contender.times) >= settings.repeat or (
                    len(contender.times) >= settings.min_runs and spent >= settings.budget_s):
                info = {k: v for k, v in contender.info.items() if k != "call_s"}
                results[peer] = {**info, "median_ms": float(np.median(contender.times)) * 1e3,
                                 "min_ms": min(contender.times) * 1e3, "runs": len(contender.times),
                                 "turns": contender.turns}
                order.remove(peer)
            else:
                turn += 1
            time.sleep(REST_S)
    finally:
        for contender in contenders.values():
            _stop(contender)
    return {peer: results[peer] for peer in jobs}


def _reply(contender: _Contender) -> Any:
    line = contender.process.stdout.readline()  # type: ignore[union-attr]
    return json.loads(line) if line.strip() else None


def _died(contender: _Contender) -> dict[str, Any]:
    try:
        contender.process.wait(timeout=30)
    except subprocess.TimeoutExpired:  # its replies ended but it lives on: no use waiting
        contender.process.kill()
        contender.process.wait()
    lines = contender.log.read_text(errors="replace").strip().splitlines()
    return {"ok": False, "error": f"worker died: {lines[-1] if lines else f'exit status {contender.process.returncode}'}"}


def _pause(contender: _Contender) -> None:
    if contender.process.poll() is None:
        os.kill(contender.process.pid, signal.SIGSTOP)


def _resume(contender: _Contender) -> None:
    if contender.process.poll() is None:
        os.kill(contender.process.pid, signal.SIGCONT)


def _stop(contender: _Contender) -> None:
    _resume(contender)
    try:
        contender.process.stdin.write("0\n")  # type: ignore[union-attr]
        contender.process.stdin.close()  # type: ignore[union-attr]
    except (BrokenPipeError, OSError):
        pass
    try:
        contender.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        contender.process.kill()
        contender.process.wait()


def available(peer: str) -> str | None:
    """Why the peer cannot run here, or None."""
    package = PEERS[peer]
    if package is not None and importlib.util.find_spec(package) is None:
        return f"{package} is not installed (make bench installs the bench extra)"
    return None


def peaks(settings: Settings, work: Path, log: Callable[[str], None]) -> dict[str, Any]:
    binary = machine.build_fma_peak(work)
    result: dict[str, Any] = {"fma": {}, "sgemm": {}}
    for threads in settings.threads:
        result["fma"][str(threads)] = machine.fma_peak(binary, threads, settings.fma_seconds)
        job = {"kind": "sgemm", "size": settings.sgemm_size, "repeat": max(settings.repeat // 5, 3),
               "budget_s": settings.budget_s, "min_runs": settings.min_runs}
        result["sgemm"][str(threads)] = run_worker(job, work / f"sgemm-{threads}", threads, own_blas=True)
        log(f"peaks at {threads} thread(s): FMA {result['fma'][str(threads)]['gflops']:.1f} GFLOP/s, "
            f"sgemm {result['sgemm'][str(threads)].get('gflops', float('nan')):.1f} GFLOP/s")
    result["sgemm_size"] = settings.sgemm_size
    return result


# A build's OUTDIR takes about 12 bytes of disk per byte of weights (the constant pool's C text in
# src/ and again in the MLF archive, lowered.relay's base64 metadata, the library: ResNet-50's
# 102 MB of weights, 1.2 GB), and a build job holds two such directories and its compile cache
# until it has timed the second build.
DISK_BYTES_PER_WEIGHT_BYTE = 26


def disk_shortfall(work: Path, weight_bytes: int) -> str | None:
    """Why a build of a model with `weight_bytes` of weights would run out of disk in `work`, or
    None: a full disk fails a build late, with a bare ENOSPC."""
    need = weight_bytes * DISK_BYTES_PER_WEIGHT_BYTE
    free = shutil.disk_usage(work).free
    if free >= need:
        return None
    return (f"needs about {need / 1e9:.1f} GB free for its build in {work}, {free / 1e9:.1f} GB free "
            "(TMPDIR sets where the bench builds)")


def bench_model(name: str, settings: Settings, work: Path, log: Callable[[str], None]) -> dict[str, Any]:
    model = get(name, tiny=settings.tiny)
    workdir = work / name
    entry: dict[str, Any] = {"name": name, "title": model.title, "dtype": model.dtype, "flops": model.flops,
                             "builds": {}, "runs": []}
    prepare = {"kind": "prepare", "model": name, "tiny": settings.tiny, "workdir": str(workdir),
               "export_onnx": "onnxruntime" in settings.peers and available("onnxruntime") is None}
    entry["prepare"] = run_worker(prepare, workdir / "prepare")
    log(f"{name}: reference ready; onnx {entry['prepare'].get('onnx') and 'exported' or 'not exported'}")
    base = {"model": name, "tiny": settings.tiny, "workdir": str(workdir)}
    weight_bytes = sum(array.nbytes for array in model.params.values())
    for peer, target in TARGETS.items():
        if peer in settings.peers:
            short = disk_shortfall(work, weight_bytes)
            if short is not None:
                entry["builds"][peer] = {"ok": False, "error": short}
                log(f"{name}: not built for {target!r}: {short}")
                continue
            job = {**base, "kind": "build", "target": target, "outdir": str(workdir / f"build-{peer}" / "out")}
            entry["builds"][peer] = run_worker(job, workdir / f"build-{peer}")
            b = entry["builds"][peer]
            log(f"{name}: built for {target!r}: " + (f"{b['cold_s']:.2f} s cold, {b['cached_s']:.2f} s again"
                                                      if b.get("ok") else b.get("error", "failed")))
    for threads in settings.threads:
        # Each round is a fresh process per peer (its own page placement and neighbours), and in
        # a round the peers take turns (`interleaved`): this shared machine's speed changes from
        # one second to the next (a bare FMA loop's call times vary 1.8x on a bad minute), and a
        # peer measured all at once could fall into a slow stretch the others escaped.
        tried: dict[str, list[dict[str, Any]]] = {peer: [] for peer in settings.peers}
        for round_index in range(settings.rounds):
            jobs: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}
            for peer in settings.peers:
                reason = model.unsupported.get(peer) or available(peer)
                if peer == "onnxruntime" and reason is None and not entry["prepare"].get("onnx"):
                    reason = entry["prepare"].get("onnx_error") or entry["prepare"].get("error", "no ONNX model")
                if peer in TARGETS and reason is None and not entry["builds"].get(peer, {}).get("ok"):
                    reason = f"build failed: {entry['builds'].get(peer, {}).get('error')}"
                if reason is not None:
                    if round_index == 0:
                        tried[peer].append({"ok": False, "skipped": reason})
                    continue
                job = {**base, "kind": "serve", "peer": peer, "threads": threads,
                       "onnx": entry["prepare"].get("onnx"),
                       "outdir": entry["builds"].get(peer, {}).get("outdir")}
                extra = {}
                if peer == "torch.compile":
                    # A cache of its own: the first call is a cold compile, as relaycc's cold build is.
                    extra["TORCHINDUCTOR_CACHE_DIR"] = str(workdir / f"inductor-{threads}-{round_index}")
                jobs[peer] = (job, extra)
            results = interleaved(jobs, workdir / f"runs-{threads}-{round_index}", threads, settings)
            for peer, result in results.items():
                tried[peer].append(result)
        for peer in settings.peers:
            row: dict[str, Any] = {"threads": threads, "peer": peer, **best_round(tried[peer])}
            if row.get("ok"):
                row["gflops"] = model.flops / (row["median_ms"] / 1e3) / 1e9
            entry["runs"].append(row)
            log(f"{name} {threads}t {peer}: " + (f"{row['median_ms']:.3f} ms" + _spread(row) if row.get("ok") else
                                                  row.get("skipped") or row.get("error") or
                                                  f"MISMATCH (error {row.get('rel_error', float('nan')):.2e})"))
    add_ratios(entry)
    return entry


def best_round(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One row from a peer's rounds: the round with the lowest median, with every round's median
    beside it. A failed round (a mismatch, a dead worker) fails the row: speed never hides a wrong
    answer. torch.compile's compile time is the first round's, the only cold one."""
    failed = [r for r in rounds if not r.get("ok")]
    if failed or not rounds:
        return dict(failed[0]) if failed else {"ok": False, "error": "no round ran"}
    best = dict(min(rounds, key=lambda r: r["median_ms"]))
    best["round_medians_ms"] = [r["median_ms"] for r in rounds]
    if "compile_s" in rounds[0]:
        best["compile_s"] = rounds[0]["compile_s"]
    return best


def _spread(row: dict[str, Any]) -> str:
    medians = row.get("round_medians_ms", [])
    return f" (rounds {', '.join(f'{m:.3f}' for m in medians)})" if len(medians) > 1 else ""


def add_ratios(entry: dict[str, Any]) -> None:
    """relaycc's median over each peer's, per target, at the same thread count."""
    ours = {(r["threads"], r["peer"]): r["median_ms"] for r in entry["runs"] if r["peer"] in TARGETS and r.get("ok")}
    for row in entry["runs"]:
        if not row.get("ok"):
            continue
        for target in TARGETS:
            mine = ours.get((row["threads"], target))
            if mine is not None and row["peer"] not in TARGETS:
                row[f"ratio_{target}"] = mine / row["median_ms"]


def run(settings: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="relaycc-bench-") as tmp:
        work = Path(tmp)
        info = machine.describe()
        log(f"machine: {machine.summary(info)}")
        results = {
            "machine": info,
            "settings": {"models": list(settings.models), "threads": list(settings.threads),
                         "peers": list(settings.peers), "repeat": settings.repeat, "budget_s": settings.budget_s,
                         "min_runs": settings.min_runs, "tiny": settings.tiny,
                         "rounds": settings.rounds},
            "peaks": peaks(settings, work, log),
            "models": [bench_model(name, settings, work, log) for name in settings.models],
        }
        info["load_average_end"] = list(os.getloadavg())
        return results
