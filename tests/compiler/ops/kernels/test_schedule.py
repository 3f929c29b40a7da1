from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.ops.kernels.schedule import check_schedule, choose, variants
from compiler.tir.compute import KernelContext


def test_a_record_value_the_kernel_allows_replaces_the_rule() -> None:
    ctx = KernelContext(schedule={"tile_rows": 4})

    assert choose(ctx, "tile_rows", 6, range(1, 7)) == 4
    assert ctx.decisions["tile_rows"] == 4
    assert ctx.decisions["tile_rows:allowed"] == [1, 6]


def test_a_record_value_the_kernel_cannot_take_leaves_the_rule() -> None:
    # More tile rows than the registers hold (a record from an AVX-512 machine on an AVX2 one).
    ctx = KernelContext(schedule={"tile_rows": 14, "order": "columns"})

    assert choose(ctx, "tile_rows", 6, range(1, 7)) == 6
    assert choose(ctx, "order", "rows", ("rows", "panels")) == "rows"


def test_without_a_record_the_rule_is_chosen_and_noted() -> None:
    ctx = KernelContext()

    assert choose(ctx, "band_rows", 7, range(1, 29)) == 7
    assert ctx.decisions == {"band_rows": 7, "band_rows:allowed": [1, 28]}


def test_variants_change_one_knob_each_within_what_the_kernel_allows() -> None:
    decisions = {"tile_rows": 6, "tile_rows:allowed": [1, 6], "order": "rows", "order:allowed": ["rows", "panels"],
                 "band_rows": 4, "band_rows:allowed": [1, 28]}

    found = variants(decisions, limit=10)

    assert found == [{"tile_rows": 5}, {"order": "panels"}, {"band_rows": 28}, {"band_rows": 8}, {"band_rows": 2},
                     {"tile_rows": 4}]


def test_variants_try_the_next_reduction_chunking_up_and_down() -> None:
    decisions = {"k_chunks": 4, "k_chunks:allowed": [1, 2, 4, 8, 16]}

    assert variants(decisions) == [{"k_chunks": 8}, {"k_chunks": 2}]
    assert variants({"k_chunks": 1, "k_chunks:allowed": [1, 3]}) == [{"k_chunks": 3}]


def test_variants_try_the_other_unrolling_where_the_kernel_offers_one() -> None:
    assert variants({"unroll_k": 1, "unroll_k:allowed": [1, 16]}) == [{"unroll_k": 16}]
    assert variants({"unroll_k": 16, "unroll_k:allowed": [1, 16]}) == [{"unroll_k": 1}]
    assert variants({"unroll_k": 1, "unroll_k:allowed": [1]}) == []


def test_variants_skip_values_outside_the_allowed_range_and_repeats() -> None:
    decisions = {"tile_rows": 1, "tile_rows:allowed": [1, 1], "band_rows": 28, "band_rows:allowed": [1, 28]}

    assert variants(decisions) == [{"band_rows": 14}]


@pytest.mark.parametrize(("schedule", "message"), [
    ({"unroll": 2}, "unknown schedule knob 'unroll'"),
    ({"tile_rows": 0}, "tile_rows must be a positive integer, got 0"),
    ({"band_rows": True}, "band_rows must be a positive integer, got True"),
    ({"order": "columns"}, "order must be one of rows, panels, got 'columns'"),
    ({"k_chunks": -2}, "k_chunks must be a positive integer, got -2"),
    ([1, 2], "a schedule is a JSON object"),
])
def test_a_bad_schedule_is_refused_with_where_it_is(schedule: object, message: str) -> None:
    with pytest.raises(ValueError, match=r"^records\[2\]\.schedule: ") as raised:
        check_schedule(schedule, "records[2].schedule")
    assert message in str(raised.value)


def test_a_good_schedule_is_kept_as_given() -> None:
    assert check_schedule({"tile_rows": 5, "order": "panels"}, "x") == {"tile_rows": 5, "order": "panels"}


# Every product kernel with knobs: a 3x3 layer and a stride-2 layer that copy their input in
# bands, a 1x1 layer read in place and another with a relu, a dense and a batch_matmul; and a
# float16 layer, whose tile stores round in stages. The three with a relu may take their
# reduction in chunks (the 3x3 layer while one thread takes all its bands).
PRODUCTS = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(1, 8, 15, 15), float32], %d: Tensor[(20, 64), float32], %a: Tensor[(2, 13, 20), float32],
          %b: Tensor[(2, 20, 24), float32], %h: Tensor[(1, 16, 9, 9), float16],
          %w1: Tensor[(32, 8, 3, 3), float32], %w2: Tensor[(32, 32, 3, 3), float32], %w3: Tensor[(16, 32, 1, 1), float32],
          %wd: Tensor[(24, 64), float32], %wh: Tensor[(32, 16, 3, 3), float16], %w4: Tensor[(16, 32, 1, 1), float32]) {
  %0 = nn.relu(nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]));
  %1 = nn.relu(nn.conv2d(%0, %w2, strides=[2, 2], padding=[1, 1, 1, 1]));
  (nn.conv2d(%1, %w3), nn.relu(nn.dense(%d, %wd, units=None)), nn.batch_matmul(%a, %b, transpose_b=False),
   nn.conv2d(%h, %wh, padding=[1, 1, 1, 1]), nn.relu(nn.conv2d(%1, %w4)))
}
"""
WEIGHTS = {"w1": (32, 8, 3, 3), "w2": (32, 32, 3, 3), "w3": (16, 32, 1, 1), "wd": (24, 64), "wh": (32, 16, 3, 3),
           "w4": (16, 32, 1, 1)}


def schedule_rounds(decisions: dict[str, object]) -> list[dict[str, object]]:
    """Schedules that together give each knob every value the kernel allows (band rows: the
    ends, the small heights and the middle) but the rule's: round r takes each knob's r-th
    value, so the rounds are as many as the longest knob has values."""
    values: dict[str, list[object]] = {}
    for knob in ("tile_rows", "order", "band_rows", "k_chunks", "unroll_k"):
        allowed = decisions.get(f"{knob}:allowed")
        if not isinstance(allowed, list):
            continue
        if knob in ("order", "k_chunks", "unroll_k"):
            every: list[object] = list(allowed)
        elif knob == "tile_rows":
            every = list(range(allowed[0], allowed[1] + 1))
        else:
            every = sorted({1, 2, 3, allowed[1] // 2, allowed[1] - 1, allowed[1]})
        values[knob] = [v for v in every if v != decisions[knob]]
    rounds = max(len(v) for v in values.values())
    return [{knob: v[r % len(v)] for knob, v in values.items() if v} for r in range(rounds)]


def conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            window = xp[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            out += np.einsum("nchw,oc->nohw", window, w[:, :, i, j].astype(np.float64))
    return out


def test_every_schedule_of_every_product_kernel_computes_the_rules_results(tmp_path: Path) -> None:
    # A record only reorders work (compiler/ops/kernels/schedule.py), so every value a kernel
    # allows must reproduce the rules' build bit for bit, and numpy within float rounding.
    from compiler.driver import BuildOptions, build
    from compiler.runtime.module import CompiledModule
    from compiler.tuning import tunable_kernels

    rng = np.random.default_rng(11)
    params = {name: rng.standard_normal(shape).astype(np.float16 if name == "wh" else np.float32)
              for name, shape in WEIGHTS.items()}
    inputs = {"x": rng.standard_normal((1, 8, 15, 15)).astype(np.float32),
              "d": rng.standard_normal((20, 64)).astype(np.float32),
              "a": rng.standard_normal((2, 13, 20)).astype(np.float32),
              "b": rng.standard_normal((2, 20, 24)).astype(np.float32),
              "h": rng.standard_normal((1, 16, 9, 9)).astype(np.float16)}
    kernels = tunable_kernels(PRODUCTS, BuildOptions(), params, "products.relay")
    plans = {k.key: schedule_rounds(dict(k.decisions)) for k in kernels}
    assert len(kernels) == 7 and all(plans.values())
    # The convolutions with a relu may chunk; those reading 16-channel blocks (the float16 one
    # included) may unroll.
    assert sum("k_chunks" in k.decisions for k in kernels) == 3
    assert sum("unroll_k" in k.decisions for k in kernels) == 4
    rounds = max(len(p) for p in plans.values())

    outputs = []
    for r in range(rounds + 1):
        schedules = {key: plan[r - 1] for key, plan in plans.items() if 0 < r <= len(plan)}
        build(PRODUCTS, tmp_path / f"round{r}", BuildOptions(schedules=schedules), params,
              source_name="products.relay", cache=None)
        outputs.append(CompiledModule(tmp_path / f"round{r}").run(inputs).outputs)

    y1 = np.maximum(conv(np.maximum(conv(inputs["x"], params["w1"], 1, 1), 0), params["w2"], 2, 1), 0)
    y = conv(y1, params["w3"], 1, 0)
    want = [y, np.maximum(inputs["d"] @ params["wd"].T, 0), inputs["a"] @ inputs["b"],
            conv(inputs["h"], params["wh"], 1, 1), np.maximum(conv(y1, params["w4"], 1, 0), 0)]
    for r, got in enumerate(outputs):
        for i, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_array_equal(g, outputs[0][i], err_msg=f"round {r}, output {i}")
            tol = 2e-2 if g.dtype == np.float16 else 1e-4
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.abs(w).max(), err_msg=f"round {r}, output {i}")
