"""The Prometheus text exposition of /metrics, written out by hand (format 0.0.4).

Job states and compile times are read from the store, so they are right whichever process ran
the jobs and survive restarts; so are the integrity failures and quarantined entries, counted
in the store's quarantine directory (an artifact check may fail in a worker process, and each
failure sets one directory aside there; the counts go down only when an operator empties it).
Queue depth comes from the queue, request counters from this process.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from service.state import ServiceState
from service.store.module_store import ARTIFACTS_LABEL, ENTRY_LABEL, STATES, Status

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
COMPILE_SECONDS_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def render(state: ServiceState) -> str:
    statuses = list(state.store.statuses())
    lines: list[str] = []
    states = Counter(str(s.get("state")) for s in statuses)
    _metric(lines, "relaycc_jobs", "gauge", "Compile jobs in the store by state.",
            [(f'{{state="{name}"}}', states.get(name, 0)) for name in STATES])
    _histogram(lines, "relaycc_compile_seconds", "Time to compile a module (succeeded jobs).",
               _compile_seconds(statuses))
    _metric(lines, "relaycc_queue_depth", "gauge", "Jobs waiting for a worker.", [("", state.queue.depth())])
    counters = state.counters
    _metric(lines, "relaycc_cache_hits_total", "counter",
            "Compile requests answered with a module that already existed.", [("", counters.cache_hits)])
    _metric(lines, "relaycc_compile_requests_total", "counter", "Compile requests admitted or refused.",
            [("", counters.compile_requests)])
    _metric(lines, "relaycc_runs_total", "counter", "Model runs requested.", [("", counters.runs)])
    quarantined = state.store.quarantined()
    _metric(lines, "relaycc_artifact_integrity_failures_total", "counter",
            "Modules whose stored artifacts did not match their recorded sha256 (set aside for a rebuild).",
            [("", quarantined[ARTIFACTS_LABEL])])
    _metric(lines, "relaycc_store_quarantined_entries_total", "counter",
            "Corrupt or unreadable module entries moved out of the store.", [("", quarantined[ENTRY_LABEL])])
    return "\n".join(lines) + "\n"


def _compile_seconds(statuses: Iterable[Status]) -> list[float]:
    values = []
    for status in statuses:
        timings = status.get("timings")
        if status.get("state") == "succeeded" and isinstance(timings, dict):
            seconds = timings.get("total_seconds")
            if isinstance(seconds, (int, float)):
                values.append(float(seconds))
    return values


def _metric(lines: list[str], name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    lines.extend(f"{name}{labels} {_number(value)}" for labels, value in samples)


def _histogram(lines: list[str], name: str, help_text: str, values: list[float]) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} histogram")
    for bound in COMPILE_SECONDS_BUCKETS:
        count = sum(1 for v in values if v <= bound)
        lines.append(f'{name}_bucket{{le="{bound:g}"}} {count}')
    lines.append(f'{name}_bucket{{le="+Inf"}} {len(values)}')
    lines.append(f"{name}_sum {_number(sum(values))}")
    lines.append(f"{name}_count {len(values)}")


def _number(value: float) -> str:
    return repr(value) if isinstance(value, float) else str(value)
