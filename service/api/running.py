"""POST /modules/{id}/run: inputs in, outputs and latency out, the model run by a worker.

The API process only converts arrays, in a thread so that the event loop keeps answering
(inputs are checked against the element and byte limits before they are decoded): JSON inputs
take the dtypes of the model's interface (metadata.json), and the run itself (loading the library, checking names and shapes, calling
it) happens in a worker's child process, never here.
"""

from __future__ import annotations

import asyncio
import base64
import math

import numpy as np
from fastapi.concurrency import run_in_threadpool

from compiler.backend.interface_c import result_names
from compiler.diagnostics import InputError
from service.arrays import (
    OverLimit,
    TooManyBytes,
    TooManyElements,
    decode_b64_npz,
    decode_npz,
    encode_npz,
    from_json,
    over_limit_problem,
    to_json,
)
from compiler.runtime.module import Profile, RunResult
from service import metrics
from service.jobs.worker import PROFILE_KEY, TIMES_KEY, RunFailed, profile_of
from service.problems import ProblemError, compile_error_problem
from service.api.schemas import KernelTime, Latency, OutputTensor, RunRequest, RunResponse
from service.state import ServiceState


async def run_module(module_id: str, body: RunRequest, client: str, state: ServiceState) -> RunResponse:
    settings = state.settings
    status = state.store.status(module_id)
    if status is None:
        raise ProblemError.of("not-found", f"no module {module_id}")
    if status["state"] != "succeeded":
        raise ProblemError.of("module-not-ready", f"module {module_id} is {status['state']}; it can run once it has succeeded")
    if body.repeat > settings.max_run_repeat:
        raise ProblemError.of(
            "validation-error", f"repeat: at most {settings.max_run_repeat} (RELAYCC_MAX_RUN_REPEAT)"
        )
    if body.threads is not None and body.threads > settings.max_run_threads:
        raise ProblemError.of(
            "validation-error", f"threads: at most {settings.max_run_threads} (RELAYCC_MAX_RUN_THREADS)"
        )
    # Decoding and checking the inputs, and encoding the outputs, take time in proportion to
    # the body: they run in a thread, so the event loop keeps answering other requests.
    inputs_npz = await run_in_threadpool(_encoded_inputs, body, state, module_id)
    metrics.run_requested()
    with state.limiter.holding(client):
        future = state.queue.submit_run(
            module_id, inputs_npz, repeat=body.repeat, threads=body.threads, profile=body.profile,
            seconds=settings.run_seconds, memory_bytes=settings.memory_bytes, sandbox=settings.sandbox,
        )
        try:
            archive = await asyncio.wrap_future(future)
        except RunFailed as err:
            raise ProblemError(err.problem) from None
    # The report's per-function shapes and operation counts make the profile's rows readable.
    functions = await run_in_threadpool(_functions, state, module_id) if body.profile else None
    return await run_in_threadpool(_response, archive, body, settings.memory_bytes, functions)


def _encoded_inputs(body: RunRequest, state: ServiceState, module_id: str) -> bytes:
    """The run's inputs as the .npz a worker reads; a problem when they are refused."""
    try:
        return encode_npz(_inputs(body, state, module_id))
    except OverLimit as err:
        raise over_limit_problem(err) from None
    except InputError as err:
        raise ProblemError(compile_error_problem(err)) from None


def _functions(state: ServiceState, module_id: str) -> object:
    return (state.store.metadata(module_id) or {}).get("functions")


def _response(archive: bytes, body: RunRequest, max_bytes: int, functions: object = None) -> RunResponse:
    # Checked by the worker already (service/jobs/worker.py); bounded here too, as the API's own guard.
    arrays = decode_npz(archive, "run result", max_bytes=max_bytes)
    times = arrays.pop(TIMES_KEY)
    timed = profile_of(arrays)
    arrays.pop(PROFILE_KEY, None)
    profile = None
    if timed is not None:
        rows = Profile(RunResult([], [float(t) for t in times]), *timed).rows(functions if isinstance(functions, dict) else None)
        profile = [KernelTime.model_validate(row) for row in rows]
    # out0, out1, ..., as the worker checked (service/jobs/worker.py); answered in that order.
    outputs = {name: arrays[name] for name in result_names(len(arrays))}
    latency = Latency(median_us=float(np.median(times)), min_us=float(np.min(times)), runs=int(times.size))
    as_json = (body.output_format or ("npz" if body.inputs_npz is not None else "json")) == "json"
    if as_json:
        return RunResponse(
            outputs={
                name: OutputTensor(dtype=str(out.dtype), shape=list(out.shape), data=to_json(out))
                for name, out in outputs.items()
            },
            latency=latency,
            profile=profile,
        )
    packed = encode_npz(outputs)
    return RunResponse(outputs_npz=base64.b64encode(packed).decode("ascii"), latency=latency, profile=profile)


def _inputs(body: RunRequest, state: ServiceState, module_id: str) -> dict[str, np.ndarray]:
    limit = state.settings.max_tensor_elements
    max_bytes = state.settings.max_tensor_bytes
    if body.inputs_npz is not None:
        return decode_b64_npz(body.inputs_npz, "inputs_npz", limit, max_bytes)
    if not body.inputs:
        return {}
    dtypes = _input_dtypes(state, module_id)
    arrays = {}
    total = 0
    total_bytes = 0
    for name, value in body.inputs.items():
        if name not in dtypes:
            known = ", ".join(dtypes) or "no inputs"
            raise InputError(f"unknown input {name!r}; the model takes {known}")
        array = from_json(value, dtypes[name], f"input {name}")
        total += math.prod(array.shape)
        if total > limit:
            raise TooManyElements(f"inputs: more than {limit} elements in all")
        total_bytes += array.nbytes
        if total_bytes > max_bytes:
            raise TooManyBytes(f"inputs: more than {max_bytes} bytes in all")
        arrays[name] = array
    return arrays


def _input_dtypes(state: ServiceState, module_id: str) -> dict[str, str]:
    report = state.store.metadata(module_id) or {}
    interface = report.get("interface") or {}
    dtypes = {}
    for t in interface.get("inputs", []):
        dtypes[str(t["name"])] = str(t["dtype"])
        # A model imported from ONNX takes its inputs by their ONNX names too.
        if "onnx_name" in t:
            dtypes[str(t["onnx_name"])] = str(t["dtype"])
    return dtypes

