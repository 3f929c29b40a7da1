"""bench/layers.py: matching relaycc's kernels with onnxruntime's operators, and a real (tiny)
run of `python -m bench --suite layers`."""

import json

from bench.__main__ import main
from bench.layers import align, least_of, render


def ours(kind: str, us: float) -> dict:
    return {"name": f"tvmgen_default_{kind}#1", "kind": f"tvmgen_default_{kind}", "us": us}


def theirs(op: str, us: float, name: str = "") -> dict:
    return {"name": name or f"/{op}_node", "kind": op, "us": us}


def test_layers_of_a_kind_are_matched_in_execution_order():
    result = align(
        [ours("fused_nn_conv2d_add_nn_relu", 10.0), ours("fused_nn_max_pool2d", 2.0),
         ours("fused_nn_contrib_conv2d_NCHWc_add", 30.0), ours("fused_nn_dense_add", 4.0)],
        [theirs("Conv", 12.0, "/conv1"), theirs("MaxPool", 1.0), theirs("FusedConv", 20.0, "/conv2"),
         theirs("Gemm", 5.0, "/fc")],
    )
    pairs = result["kinds"]["convolution"]["pairs"]
    assert [(p["onnxruntime"], p["relaycc_us"], p["onnxruntime_us"]) for p in pairs] == [
        ("/conv1", 10.0, 12.0), ("/conv2", 30.0, 20.0)]
    assert result["kinds"]["product"]["pairs"][0]["onnxruntime"] == "/fc"
    assert result["other"] == {"relaycc_us": 2.0, "onnxruntime_us": 1.0}
    assert (result["relaycc_us"], result["onnxruntime_us"]) == (46.0, 38.0)


def test_a_kind_fused_differently_keeps_only_its_totals():
    result = align([ours("fused_nn_dense", 3.0), ours("fused_nn_dense_1", 4.0)], [theirs("MatMul", 5.0)])
    product = result["kinds"]["product"]
    assert product["pairs"] is None and product["count"] == [2, 1]
    assert (product["relaycc_us"], product["onnxruntime_us"]) == (7.0, 5.0)
    assert "fused differently, not matched" in render(
        {"runs": 3, "models": [{"name": "m", "threads": [{
            "threads": 1, **result, "relaycc_run_min_ms": 1.0, "relaycc_run_median_ms": 1.0,
            "onnxruntime_run_min_ms": 1.0, "onnxruntime_run_median_ms": 1.0}]}]})


def test_the_layers_suite_matches_the_tiny_cnns_convolutions(tmp_path, capsys):
    output = tmp_path / "layers.json"
    assert main(["--suite", "layers", "--quick", "--tiny", "--models", "cnn", "--threads", "1", "--repeat", "2",
                 "--output", str(output)]) == 0
    (model,) = json.loads(output.read_text())["models"]
    (row,) = model["threads"]
    convolutions = row["kinds"]["convolution"]
    assert convolutions["count"] == [3, 3]  # the CNN's three convolutions on both sides
    assert all(p["relaycc_us"] > 0 and p["onnxruntime_us"] > 0 for p in convolutions["pairs"])
    assert row["relaycc_run_min_ms"] <= row["relaycc_run_median_ms"]
    assert "cnn, 1 thread(s): every layer" in capsys.readouterr().out


def test_rounds_combine_into_each_layers_least_time():
    first = {"ok": True, "layers": [ours("a", 5.0), ours("b", 7.0)], "run_min_ms": 2.0, "run_median_ms": 3.0}
    second = {"ok": True, "layers": [ours("a", 6.0), ours("b", 4.0)], "run_min_ms": 1.5, "run_median_ms": 3.5}
    both = least_of([first, second])
    assert [layer["us"] for layer in both["layers"]] == [5.0, 4.0]
    assert (both["run_min_ms"], both["run_median_ms"], both["rounds"]) == (1.5, 3.0, 2)
    assert least_of([first, {"ok": False, "error": "worker died"}]) == {"ok": False, "error": "worker died"}
