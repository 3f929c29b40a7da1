import json

import numpy as np
import pytest

from bench import worker


def test_agreement_accepts_rounding_and_rejects_a_wrong_element():
    reference = np.linspace(-1, 1, 100, dtype=np.float32)
    assert worker.agreement(reference * (1 + 1e-5), reference, "float32")[0]
    wrong = reference.copy()
    wrong[7] += 0.01
    ok, error = worker.agreement(wrong, reference, "float32")
    assert not ok and error == pytest.approx(0.01, rel=1e-3)


def test_agreement_rejects_nan():
    reference = np.ones(4, np.float32)
    assert not worker.agreement(np.array([1, 1, np.nan, 1]), reference, "float32")[0]


def test_agreement_is_looser_for_float16():
    reference = np.linspace(-1, 1, 100, dtype=np.float32)
    near = reference + 5e-3
    assert worker.agreement(near, reference, "float16")[0]
    assert not worker.agreement(near, reference, "float32")[0]


def test_timed_runs_stops_at_repeat():
    calls = []
    times = worker.timed_runs(lambda: calls.append(1), repeat=5, budget_s=1e9, min_runs=1)
    assert len(times) == len(calls) == 5


def test_timed_runs_keeps_min_runs_when_the_budget_is_spent():
    calls = []
    times = worker.timed_runs(lambda: calls.append(1), repeat=50, budget_s=0.0, min_runs=2)
    assert len(times) == len(calls) == 2


def test_worker_reports_a_failing_job_instead_of_dying(tmp_path):
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"kind": "prepare", "model": "nope", "workdir": str(tmp_path)}))
    assert worker.main([str(job), str(tmp_path / "result.json")]) == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["ok"] is False and "unknown model 'nope'" in result["error"]


def test_onnx_export_runs_in_onnxruntime(tmp_path):
    pytest.importorskip("torch", reason="torch is in the bench extra (make bench installs it)")
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is in the bench extra (make bench installs it)")
    from bench.models import get

    model = get("cnn", tiny=True)
    result = worker.prepare({"workdir": str(tmp_path)}, model)
    session = ort.InferenceSession(result["onnx"], providers=["CPUExecutionProvider"])
    (output,) = session.run(None, dict(model.inputs))
    assert worker.agreement(output, np.load(tmp_path / "reference.npy"), "float32")[0]


def test_build_times_a_second_build_and_keeps_only_the_first_outdir(tmp_path, monkeypatch):
    # The second build and the compile cache take as much disk as the first (GPT-2-sized: GBs).
    from bench.models import get
    from compiler.runtime.module import CompiledModule

    monkeypatch.delenv("RELAYCC_CACHE_DIR", raising=False)
    model = get("mlp_b1", tiny=True)
    result = worker.build({"outdir": str(tmp_path / "out"), "target": "c"}, model)
    assert result["cold_s"] > 0 and result["cached_s"] >= 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    (output,) = CompiledModule(tmp_path / "out").run(model.inputs).outputs
    assert worker.agreement(output, model.forward({**model.inputs, **model.params}), "float32")[0]
