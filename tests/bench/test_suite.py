from bench import worker
from bench.models import get
from bench.suite import DISK_BYTES_PER_WEIGHT_BYTE, MIN_TURNS, Settings, best_round, disk_shortfall, interleaved


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


def _served(tmp_path, peers):
    model = get("mlp_b1", tiny=True)
    worker.prepare({"workdir": str(tmp_path), "export_onnx": False}, model)
    base = {"kind": "serve", "model": "mlp_b1", "tiny": True, "workdir": str(tmp_path), "threads": 1}
    settings = Settings(["mlp_b1"], [1], list(peers), repeat=10, budget_s=60.0, min_runs=10, fma_seconds=0.02,
                        sgemm_size=256, tiny=True)
    return interleaved({peer: ({**base, "peer": peer}, {}) for peer in peers}, tmp_path / "runs", 1, settings)


def test_interleaved_peers_spread_their_calls_over_several_turns(tmp_path):
    rows = _served(tmp_path, ["numpy"])
    assert rows["numpy"]["ok"] and rows["numpy"]["runs"] == 10
    assert rows["numpy"]["turns"] >= MIN_TURNS
    assert rows["numpy"]["min_ms"] <= rows["numpy"]["median_ms"]


def test_interleaved_reports_a_peer_that_cannot_start_and_measures_the_rest(tmp_path):
    rows = _served(tmp_path, ["numpy", "tvm"])
    assert rows["tvm"] == {"ok": False, "error": "ValueError: unknown peer 'tvm'"}
    assert rows["numpy"]["ok"] and rows["numpy"]["runs"] == 10


def test_a_build_the_disk_cannot_hold_is_refused_up_front(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(100 * 10**9, 0, 5 * 10**9))
    assert disk_shortfall(tmp_path, 100 * 10**6) is None  # ResNet-50's weights: 2.6 GB
    short = disk_shortfall(tmp_path, 500 * 10**6)  # GPT-2-sized: 13 GB
    assert short == (f"needs about {500e6 * DISK_BYTES_PER_WEIGHT_BYTE / 1e9:.1f} GB free for its build in {tmp_path}, "
                     "5.0 GB free (TMPDIR sets where the bench builds)")
