from __future__ import annotations

import pytest

from bench import kernels


def test_timings_ms_lets_the_other_runtimes_threads_sleep_before_the_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[object] = []
    monkeypatch.setattr(kernels.time, "sleep", lambda seconds: events.append(("sleep", seconds)))

    median, least = kernels.timings_ms(lambda: events.append("call"), repeat=3)

    assert events == [("sleep", kernels.SETTLE_S), "call", "call", "call", "call"]
    assert 0 <= least <= median


def test_timings_ms_reports_the_median_and_the_least_of_the_timed_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels.time, "sleep", lambda seconds: None)
    ticks = iter([0.0, 0.003, 1.0, 1.001, 2.0, 2.002])
    monkeypatch.setattr(kernels.time, "perf_counter", lambda: next(ticks))

    median, least = kernels.timings_ms(lambda: None, repeat=3)

    assert median == pytest.approx(2.0) and least == pytest.approx(1.0)
