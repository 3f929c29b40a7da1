from bench.suite import best_round


def _round(median_ms, **extra):
    return {"ok": True, "median_ms": median_ms, "min_ms": median_ms * 0.9, "runs": 5, "rel_error": 0.0, **extra}


def test_best_round_keeps_the_lowest_median_and_lists_every_round():
    row = best_round([_round(3.0), _round(2.5), _round(2.8)])
    assert row["median_ms"] == 2.5
    assert row["round_medians_ms"] == [3.0, 2.5, 2.8]


def test_best_round_fails_the_row_when_any_round_fails():
    mismatch = {"ok": False, "rel_error": 0.3}
    assert best_round([_round(1.0), mismatch]) == mismatch


def test_best_round_keeps_the_first_rounds_cold_compile_time():
    row = best_round([_round(4.0, compile_s=12.0), _round(3.0, compile_s=0.4)])
    assert row["median_ms"] == 3.0 and row["compile_s"] == 12.0


def test_best_round_of_a_skipped_peer_says_why():
    assert best_round([{"ok": False, "skipped": "torch is not installed"}]) == {
        "ok": False, "skipped": "torch is not installed"}
