"""The Prometheus text of /metrics: what every process of the service recorded (service/metrics.py),
added up from their files by prometheus_client, plus what only this process can say at the
moment of the scrape.

A scrape reads the metrics directory (a few files per process that ever served) and the names
in the store's quarantine directory; never the modules, so it costs the same with 10 or 100,000
stored. The quarantine counts are the number of directories an operator has not yet emptied
(an artifact check may fail in any process, and each failure sets one directory aside there).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from service import metrics
from service.state import ServiceState
from service.store.module_store import ARTIFACTS_LABEL, ENTRY_LABEL

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _AtScrape:
    def __init__(self, state: ServiceState):
        self._state = state

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("relaycc_queue_depth", "Jobs waiting for a worker.", value=self._state.queue.depth())
        quarantined = self._state.store.quarantined()
        yield CounterMetricFamily(
            "relaycc_artifact_integrity_failures",
            "Modules whose stored artifacts did not match their recorded sha256 (set aside for a rebuild).",
            value=quarantined[ARTIFACTS_LABEL],
        )
        yield CounterMetricFamily(
            "relaycc_store_quarantined_entries", "Corrupt or unreadable module entries moved out of the store.",
            value=quarantined[ENTRY_LABEL],
        )


def render(state: ServiceState) -> str:
    registry = CollectorRegistry(auto_describe=False)
    directory = metrics.directory()
    if directory is not None:
        MultiProcessCollector(registry, path=str(directory))
    registry.register(_AtScrape(state))
    return generate_latest(registry).decode("utf-8")
