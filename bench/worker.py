"""One measurement in a fresh process: `python -m bench.worker JOB.json RESULT.json`, or one
peer serving timed turns: `python -m bench.worker --serve JOB.json`.

The parent (bench/__main__.py) starts one worker per measurement with the thread count already
in its environment (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS), so no setting leaks from one row into
the next; the peers' own thread APIs are set here as well. A job is one of:

- prepare: the numpy reference output, and the model exported to ONNX from its torch module;
- build: relaycc's cold build (parse -> loaded .so) and a second identical build in the same
  process, with the process's peak RSS (gcc's included);
- serve: one peer's output checked against the reference, then timed calls in the turns the
  parent asks for (bench/suite.py `interleaved`: the peers of a row take turns);
- sgemm: numpy's float32 matmul on 2048x2048, the BLAS peak (its fastest call);
- layers: relaycc's kernels (`CompiledModule.profile`) or onnxruntime's operators (its profiler),
  each one's least time over `runs` whole runs, in execution order (bench/layers.py aligns them).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from bench.models import get
from bench.models.model import Model
from bench.workspace import workspace_figures

# Checked before a time counts: rtol 1e-3 for float32, looser for float16, each with an absolute
# floor of the same fraction of the output's largest magnitude (near-zero outputs have no
# meaningful relative error).
TOLERANCE = {"float32": 1e-3, "float16": 2e-2}
# Untimed calls that open each turn of a served peer (`serve`).
WARM_S = 0.05


def agreement(output: np.ndarray, reference: np.ndarray, dtype: str) -> tuple[bool, float]:
    """(within tolerance, largest error relative to the reference's largest magnitude)."""
    output = np.asarray(output, dtype=np.float32).reshape(reference.shape)
    tol = TOLERANCE[dtype]
    scale = float(np.abs(reference).max()) or 1.0
    ok = bool(np.isfinite(output).all()) and bool(np.allclose(output, reference, rtol=tol, atol=tol * scale))
    return ok, float(np.abs(output - reference).max() / scale)


def timed_runs(call: Callable[[], object], repeat: int, budget_s: float, min_runs: int) -> list[float]:
    """Seconds of each timed call: `repeat` of them, fewer once `budget_s` is spent (but at least
    `min_runs`). The caller has already made the warm-up call."""
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < repeat and (len(times) < min_runs or time.perf_counter() < deadline):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def peak_rss_bytes() -> dict[str, int]:
    # ru_maxrss is in KiB on Linux; RUSAGE_CHILDREN is the largest finished child (gcc).
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"python": own, "children": children, "peak": max(own, children)}


def prepare(job: dict[str, Any], model: Model) -> dict[str, Any]:
    workdir = Path(job["workdir"])
    workdir.mkdir(parents=True, exist_ok=True)
    np.save(workdir / "reference.npy", model.reference())
    result: dict[str, Any] = {"onnx": None}
    if not job.get("export_onnx", True):
        return result
    try:
        import torch
    except ImportError as err:
        result["onnx_error"] = f"torch is not installed ({err})"
        return result
    path = workdir / "model.onnx"
    module = model.make_torch().eval()
    args = tuple(torch.from_numpy(v) for v in model.inputs.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        try:
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=17,
                              input_names=list(model.inputs), output_names=["out"])
        except Exception as err:  # noqa: BLE001  # any exporter failure is reported in the row
            result["onnx_error"] = f"torch.onnx.export failed: {type(err).__name__}: {err}"
            return result
    result["onnx"] = str(path)
    return result


def build(job: dict[str, Any], model: Model) -> dict[str, Any]:
    start = time.perf_counter()
    from compiler.driver import BuildOptions
    from compiler.driver import build as relaycc_build
    from compiler.runtime.module import CompiledModule

    import_s = time.perf_counter() - start
    outdir = Path(job["outdir"])
    options = BuildOptions(target=job["target"])

    def one(directory: Path) -> tuple[float, CompiledModule]:
        start = time.perf_counter()
        relaycc_build(model.relay, directory, options, model.params, source_name=f"{model.name}.relay")
        module = CompiledModule(directory)
        return time.perf_counter() - start, module

    # Cold: an empty compile cache of the job's own; again: the same build in this warm process,
    # its objects now in that cache (what a user's second build of a model costs).
    cache = outdir.parent / f"{outdir.name}-cache"
    shutil.rmtree(cache, ignore_errors=True)
    os.environ["RELAYCC_CACHE_DIR"] = str(cache)
    cold_s, module = one(outdir)
    memory = peak_rss_bytes()
    again = outdir.parent / f"{outdir.name}-again"
    cached_s, _ = one(again)
    # Only `outdir` is served: the second build's files and the cache (about 12 bytes per byte of
    # weights each) would otherwise hold the disk until the whole bench ends.
    shutil.rmtree(again, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    report = module.report["memory"]
    return {"import_s": import_s, "cold_s": cold_s, "cached_s": cached_s, "rss_bytes": memory,
            **workspace_figures(report), "constant_bytes": report["constant_bytes"], "outdir": str(outdir)}


def peer_call(job: dict[str, Any], model: Model) -> tuple[Callable[[], Any], dict[str, Any]]:
    """A zero-argument call of the peer that returns its output, and what setting it up cost."""
    peer, threads = job["peer"], job["threads"]
    if peer == "numpy":
        arrays = {**model.inputs, **model.params}
        return lambda: model.forward(arrays), {}
    if peer == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(job["onnx"], options, providers=["CPUExecutionProvider"])
        feeds = dict(model.inputs)
        return lambda: session.run(None, feeds)[0], {}
    if peer in ("torch", "torch.compile"):
        import torch

        torch.set_num_threads(threads)
        module = model.make_torch().eval()
        args = tuple(torch.from_numpy(v) for v in model.inputs.values())
        extra: dict[str, Any] = {}
        if peer == "torch.compile":
            module = torch.compile(module)
            with torch.inference_mode():
                start = time.perf_counter()
                module(*args)
                extra["compile_s"] = time.perf_counter() - start

        def call() -> np.ndarray:
            with torch.inference_mode():
                return module(*args).float().numpy()

        return call, extra
    raise ValueError(f"unknown peer {peer!r}")


def checked_peer(job: dict[str, Any], model: Model) -> tuple[dict[str, Any], Callable[[int], list[float]] | None]:
    """The peer set up, warmed up and its output checked against the reference: what its row
    reports so far (with `call_s`, one warm call's seconds), and a function timing `n` further
    calls (seconds each); no function when the output is wrong."""
    reference = np.load(Path(job["workdir"]) / "reference.npy")
    if job["peer"] in ("c", "cblas"):
        from compiler.runtime.module import CompiledModule

        module = CompiledModule(Path(job["outdir"]))
        output = module.run(model.inputs).outputs[0]
        extra: dict[str, Any] = {}

        def timer(n: int) -> list[float]:
            # The C entry's own time per call (module.run times each call of it through cffi).
            return [t / 1e6 for t in module.run(model.inputs, repeat=n).times_us]
    else:
        call, extra = peer_call(job, model)
        output = call()

        def timer(n: int) -> list[float]:
            return timed_runs(call, n, float("inf"), n)
    ok, error = agreement(output, reference, model.dtype)
    if not ok:
        return {"ok": False, "rel_error": error, **extra}, None
    return {"ok": True, "rel_error": error, "call_s": timer(1)[0], **extra}, timer


def summary(times: list[float]) -> dict[str, Any]:
    return {"median_ms": float(np.median(times)) * 1e3, "min_ms": min(times) * 1e3, "runs": len(times)}


def serve(job: dict[str, Any], model: Model, commands: TextIO, replies: TextIO) -> None:
    """The peer set up and checked, answered as the first line on `replies`; then turns: each line
    `N` on `commands` makes untimed calls for `WARM_S` (at least one) and then N timed ones,
    answered with their seconds as a JSON list. `0` or the end of `commands` ends it.

    The untimed calls are the warm-up a process running alone had once: the caches hold the
    previous peer's data, and after the idle wait a woken pool thread may sit on its waker's
    core until the scheduler moves it (our two-thread MLP ran 0.6 ms a call instead of 0.04
    for a whole turn opened by a single call)."""
    try:
        info, timer = checked_peer(job, model)
    except Exception as err:  # noqa: BLE001  # the parent reports any failure in the row
        info, timer = {"ok": False, "error": f"{type(err).__name__}: {err}"}, None
    replies.write(json.dumps(info) + "\n")
    replies.flush()
    if timer is None:
        return
    for line in commands:
        n = int(line)
        if n <= 0:
            return
        warm_until = time.perf_counter() + WARM_S
        timer(1)
        while time.perf_counter() < warm_until:
            timer(1)
        replies.write(json.dumps(timer(n)) + "\n")
        replies.flush()


def sgemm(job: dict[str, Any]) -> dict[str, Any]:
    n = job["size"]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    times = timed_runs(lambda: a @ b, job["repeat"], job["budget_s"], job["min_runs"])
    config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]  # type: ignore[index]
    # A peak, like the FMA loop's: the least disturbed call, with the median beside it.
    return {"gflops": 2 * n**3 / min(times) / 1e9, "median_gflops": 2 * n**3 / float(np.median(times)) / 1e9,
            "runs": len(times),
            "blas": f"{config.get('name')} {config.get('version')}"}


def layers(job: dict[str, Any], model: Model) -> dict[str, Any]:
    """Every kernel's (relaycc) or operator's (onnxruntime) least time in microseconds over
    `runs` profiled runs after one warm-up, in order of first call; and the whole runs' times."""
    runs = job["runs"]
    order: list[str] = []
    kinds: dict[str, str] = {}
    least: dict[str, float] = {}
    whole: list[float] = []

    def seen(name: str, kind: str, us: float) -> None:
        if name not in least:
            order.append(name)
            kinds[name] = kind
        least[name] = min(us, least.get(name, us))

    if job["peer"] == "c":
        from compiler.runtime.module import CompiledModule

        module = CompiledModule(Path(job["outdir"]))
        module.run(model.inputs)
        for _ in range(runs):
            profile = module.profile(model.inputs, repeat=1)
            whole.append(profile.result.times_us[0])
            # A kernel called several times (a repeated block) is one row per call.
            counts: dict[str, int] = {}
            for name, us in zip(profile.kernels, profile.kernel_us):
                counts[name] = counts.get(name, 0) + 1
                seen(f"{name}#{counts[name]}", name, us)
    else:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = job["threads"]
        options.inter_op_num_threads = 1
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(job["workdir"]) / f"ort-profile-{job['threads']}")
        session = ort.InferenceSession(job["onnx"], options, providers=["CPUExecutionProvider"])
        feeds = dict(model.inputs)
        session.run(None, feeds)
        for _ in range(runs):
            session.run(None, feeds)
        events = sorted(json.loads(Path(session.end_profiling()).read_text()), key=lambda e: e.get("ts", 0))
        model_runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
        warm_end = model_runs[0]["ts"] + model_runs[0]["dur"]  # the first run is the warm-up
        whole += [float(e["dur"]) for e in model_runs[1:]]
        for event in events:
            if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time") and event["ts"] >= warm_end:
                seen(event["name"].removesuffix("_kernel_time"), event["args"].get("op_name", "?"), float(event["dur"]))
    return {"layers": [{"name": n, "kind": kinds[n], "us": least[n]} for n in order],
            "run_min_ms": min(whole) / 1e3, "run_median_ms": float(np.median(whole)) / 1e3}


def _die_with_parent() -> None:
    """A served peer spends most of its life stopped (SIGSTOP) by the parent: should the parent
    die without ending it, the kernel kills it rather than leave it stopped for good."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def main(argv: list[str]) -> int:
    if argv[0] == "--serve":
        _die_with_parent()
        job = json.loads(Path(argv[1]).read_text())
        # Replies go through a copy of stdout, and fd 1 becomes stderr: whatever a peer's
        # libraries print cannot mix into the replies.
        replies = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        serve(job, get(job["model"], tiny=job.get("tiny", False)), sys.stdin, replies)
        return 0
    job_path, result_path = Path(argv[0]), Path(argv[1])
    job = json.loads(job_path.read_text())
    result: dict[str, Any]
    try:
        if job["kind"] == "sgemm":
            result = sgemm(job)
        else:
            model = get(job["model"], tiny=job.get("tiny", False))
            result = {"prepare": prepare, "build": build, "layers": layers}[job["kind"]](job, model)
    except Exception as err:  # noqa: BLE001  # the parent reports any failure in the row
        result = {"ok": False, "error": f"{type(err).__name__}: {err}"}
    result.setdefault("ok", True)
    result_path.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
