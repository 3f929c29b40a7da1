from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from compiler.backend.te_compiler import DECISIONS_ATTR, SCHEDULE_KEY_ATTR
from compiler.diagnostics import CompileError
from compiler.driver import BuildOptions, build, build_vector_lanes, lower
from compiler.parser import parse
from compiler.runtime.module import CompiledModule
from compiler.tuning import Kernel, _round_winners, plan_rounds, tunable_kernels, tune
from compiler.tuning_records import FORMAT, schedules_from

CONVS = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 16, 20, 20), float32], %w: Tensor[(32, 16, 3, 3), float32],
          %w2: Tensor[(32, 32, 1, 1), float32]) {
  nn.conv2d(nn.relu(nn.conv2d(%x, %w, padding=[1, 1, 1, 1])), %w2)
}
"""


@pytest.fixture(scope="module")
def params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {"w": rng.standard_normal((32, 16, 3, 3)).astype(np.float32),
            "w2": rng.standard_normal((32, 32, 1, 1)).astype(np.float32)}


def conv_numpy(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    return out


def kernel_decisions(options: BuildOptions, params: dict[str, np.ndarray]) -> dict[str, dict[str, object]]:
    model = lower(parse(CONVS, "convs.relay"), options, params)
    return {str(f.attrs.get(SCHEDULE_KEY_ATTR)): json.loads(str(f.attrs.get(DECISIONS_ATTR)))
            for f in model.prim_funcs if f.attrs.get(SCHEDULE_KEY_ATTR) is not None}


def test_a_schedule_reaches_its_kernel_and_leaves_the_results_bit_for_bit(
    tmp_path: Path, params: dict[str, np.ndarray]
) -> None:
    rules = kernel_decisions(BuildOptions(), params)
    assert len(rules) == 2
    schedules = {key: {"tile_rows": 3, "order": "panels" if d["order"] == "rows" else "rows", "band_rows": 5}
                 for key, d in rules.items()}
    tuned = dataclasses.replace(BuildOptions(), schedules=schedules)
    x = np.random.default_rng(4).standard_normal((1, 16, 20, 20)).astype(np.float32)

    chosen = kernel_decisions(tuned, params)
    build(CONVS, tmp_path / "rules", BuildOptions(), params, cache=None)
    build(CONVS, tmp_path / "tuned", tuned, params, cache=None)
    by_rules = CompiledModule(tmp_path / "rules").run({"x": x}).outputs[0]
    by_record = CompiledModule(tmp_path / "tuned").run({"x": x}).outputs[0]

    for key, d in chosen.items():
        assert d["tile_rows"] == 3 and d["order"] != rules[key]["order"]
        assert d.get("band_rows", 5) == 5
    assert any("band_rows" in d for d in chosen.values())
    np.testing.assert_array_equal(by_record, by_rules)
    want = conv_numpy(np.maximum(conv_numpy(x, params["w"], 1), 0), params["w2"], 0)
    np.testing.assert_allclose(by_record, want, rtol=1e-4, atol=1e-4)


def test_schedules_are_part_of_the_build_cache_key(tmp_path: Path, params: dict[str, np.ndarray]) -> None:
    from compiler.driver import build_key

    key = next(iter(kernel_decisions(BuildOptions(), params)))
    keys = {build_key(("relay", CONVS.encode()), dataclasses.replace(BuildOptions(), schedules=s), params,
                      source_name="convs.relay", executor=True, build_library=True, dump_kinds=())
            for s in ({}, {key: {"tile_rows": 4}}, {key: {"tile_rows": 5}})}

    assert len(keys) == 3


def test_tunable_kernels_come_with_alternatives_to_their_rules(params: dict[str, np.ndarray]) -> None:
    kernels = tunable_kernels(CONVS, BuildOptions(), params, "convs.relay")

    assert len(kernels) == 2
    for kernel in kernels:
        assert kernel.name.startswith("tvmgen_default_fused_nn_contrib_conv2d")
        assert kernel.alternatives
        for alternative in kernel.alternatives:
            (knob, value), = alternative.items()
            assert value != kernel.decisions[knob]


def test_tune_records_a_schedule_for_every_kernel_with_knobs(params: dict[str, np.ndarray]) -> None:
    lines: list[str] = []

    document = tune(CONVS, BuildOptions(), params, source_name="convs.relay", repeat=2, threads=1,
                    log=lines.append)

    assert document["format"] == FORMAT and document["threads"] == 1
    assert document["machine"]["vector_lanes"] == build_vector_lanes(BuildOptions())  # type: ignore[index]
    kernels = {k.key: k for k in tunable_kernels(CONVS, BuildOptions(), params, "convs.relay")}
    records = document["records"]
    assert isinstance(records, list) and {r["key"] for r in records} == set(kernels)
    for record in records:
        assert record["schedule"] == {} or record["schedule"] in [dict(a) for a in kernels[record["key"]].alternatives]
        assert record["ratio"] <= 1.0 and (record["ratio"] < 1.0) == bool(record["schedule"])
    assert schedules_from(document, "tuned").keys() == kernels.keys()
    rounds = 1 + len(plan_rounds(list(kernels.values())))
    assert lines[0] == f"2 kernels with schedule knobs, {rounds} builds" and lines[-1].startswith("tuned in ")


def test_tune_stops_when_a_round_computes_other_results(
    params: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_run = CompiledModule.run

    def skewed(self: CompiledModule, *args: object, **kwargs: object) -> object:
        result = real_run(self, *args, **kwargs)  # type: ignore[arg-type]
        if self.outdir.name == "round2":
            result.outputs[0][...] += 1.0
        return result

    monkeypatch.setattr(CompiledModule, "run", skewed)

    with pytest.raises(CompileError, match="tuning round 2 computed other outputs"):
        tune(CONVS, BuildOptions(), params, repeat=1, threads=1)


def test_tune_refuses_a_repeat_below_one(params: dict[str, np.ndarray]) -> None:
    with pytest.raises(ValueError, match="repeat must be at least 1"):
        tune(CONVS, BuildOptions(), params, repeat=0)


def kernel(i: int, alternatives: int = 2) -> Kernel:
    return Kernel(f"{i:016x}", f"k{i}", {"tile_rows": 6}, tuple({"tile_rows": 5 - j} for j in range(alternatives)))


def test_rounds_vary_half_the_kernels_and_keep_the_rest_as_controls() -> None:
    kernels = [kernel(0, 3), kernel(1, 1), kernel(2, 2), kernel(3, 2)]

    plan = plan_rounds(kernels)

    assert [sorted(varied) for varied in plan] == [
        [kernels[0].key, kernels[2].key], [kernels[1].key, kernels[3].key],
        [kernels[0].key, kernels[2].key], [kernels[3].key], [kernels[0].key]]
    assert plan[2][kernels[0].key] == {"tile_rows": 4}


def test_a_round_is_judged_against_its_controls_after_their_common_shift() -> None:
    kernels = [kernel(i) for i in range(6)]
    varied = {kernels[0].key: {}, kernels[1].key: {}}
    rules = {k.name: 100.0 for k in kernels}
    # The whole library ran 10% slower (controls at 1.09-1.11): k0 at 1.00 is a real 9% gain;
    # k1 at 1.08 is within the noise.
    timed = {"k0": 100.0, "k1": 108.0, "k2": 110.0, "k3": 109.0, "k4": 111.0, "k5": 110.0}

    winners = _round_winners(kernels, varied, rules, timed, 1, lambda _: None)

    assert list(winners) == [kernels[0].key]
    assert winners[kernels[0].key] == pytest.approx(100 / 110)


def test_with_too_few_controls_an_alternative_must_beat_the_rules_by_a_shared_hosts_spread() -> None:
    kernels = [kernel(0)]
    for time_us, wins in ((97.0, False), (94.0, True)):
        winners = _round_winners(kernels, {kernels[0].key: {}}, {"k0": 100.0}, {"k0": time_us}, 1, lambda _: None)
        assert bool(winners) == wins
