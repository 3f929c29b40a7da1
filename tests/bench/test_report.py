"""results.json's shape and the printed table, from a real (quick, tiny) run of `python -m bench`."""

import json

import pytest

from bench import report
from bench.__main__ import main


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "results.json"
    assert main(["--quick", "--tiny", "--models", "mlp_b1", "--peers", "numpy,c", "--threads", "1",
                 "--rounds", "2", "--output", str(path)]) == 0
    return json.loads(path.read_text())


def test_quick_run_writes_a_complete_results_file(results):
    assert report.schema_errors(results) == []
    (model,) = results["models"]
    assert [(r["peer"], r["threads"], r["ok"]) for r in model["runs"]] == [("numpy", 1, True), ("c", 1, True)]
    assert set(results["peaks"]["fma"]) == set(results["peaks"]["sgemm"]) == {"1"}


def test_each_row_keeps_its_best_round_and_lists_all(results):
    for row in results["models"][0]["runs"]:
        assert len(row["round_medians_ms"]) == 2
        assert row["median_ms"] == min(row["round_medians_ms"])
    assert results["settings"]["rounds"] == 2
    assert "rounds " in report.render(results)


def test_ratio_is_relaycc_over_the_peer(results):
    numpy_row, ours = results["models"][0]["runs"]
    assert numpy_row["ratio_c"] == pytest.approx(ours["median_ms"] / numpy_row["median_ms"])


def test_table_shows_every_row_and_the_build(results):
    text = report.render(results)
    assert "peak at 1 thread(s): FMA loop" in text
    assert "load average (1 min) at start" in text
    assert "MLP seed 001, batch 1" in text and "relaycc c" in text and "numpy" in text
    assert "in the compile cache the cold build filled" in text


def test_schema_errors_name_what_is_missing(results):
    broken = json.loads(json.dumps(results))
    del broken["peaks"]
    del broken["models"][0]["runs"][1]["median_ms"]
    broken["models"][0]["runs"][0] = {"threads": 1, "peer": "numpy", "ok": False}
    assert report.schema_errors(broken) == [
        "missing 'peaks'",
        "mlp_b1 numpy 1t: failed without saying why",
        "mlp_b1 c 1t: missing 'median_ms'",
    ]


def test_skipped_peer_row_says_why(results):
    row = {"threads": 1, "peer": "torch", "ok": False, "skipped": "torch is not installed"}
    rendered = report.run_table({**results, "models": [{**results["models"][0], "runs": [row]}]})
    assert rendered[-1].endswith("torch is not installed")
