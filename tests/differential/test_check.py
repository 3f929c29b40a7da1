"""Differential testing in `make test`: a seeded sample of generated models, each compiled and
run against the interpreter, its memory plan checked (the long run is `make fuzz-diff`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler.driver import BuildOptions, lower
from compiler.testing.generate import GeneratorOptions, generate
from tests.differential.check import DYNAMIC_EVERY, check, compare, dynamic_text, region_counts
from tests.differential.codegens import TARGETS, library_accepts, test_codegens

SAMPLE_SEEDS = range(1_000_000, 1_000_050)
# Small and large models alike; every target (host code, cblas, the test codegens, several
# codegens in one build), both opt levels. 50 models: each codegen still draws its patterns in
# at least 6 of them (test_the_sample_has_regions_of_every_codegen), and the suite stays under
# its 10 minutes; `make fuzz-diff` is the long run.
OPTIONS = GeneratorOptions(max_ops=30, targets=("c", *TARGETS), codegens=test_codegens(), accepts=library_accepts)
CODEGENS = sorted({k.strip() for t in TARGETS for k in t.split(",")[:-1]})


@pytest.mark.parametrize("seed", SAMPLE_SEEDS)
def test_generated_model_compiles_and_matches_the_interpreter(seed: int, tmp_path: Path) -> None:
    model = generate(seed, OPTIONS)
    outcome = check(model, tmp_path)
    assert outcome.kind == "matched", (
        f"seed {seed} ({model.target}, opt level {model.opt_level}): {outcome}\n"
        f"regions {outcome.regions}\n"
        f"reproduce: python -m tests.differential.run 1 --first-seed {seed} --max-ops 30 "
        f"--targets '{';'.join(OPTIONS.targets)}'\n{model.text}"
    )
    assert outcome.plan_checked


def test_the_sample_has_regions_of_every_codegen() -> None:
    # So that a change to the generator or to a codegen's patterns cannot silently leave a
    # codegen untested: each draws its pattern-shaped chains in many models of the sample, and
    # most of the first four of those build with functions of it (a chain may still be taken
    # by a codegen named before it, or vetoed by cblas's checks).
    models = [generate(seed, OPTIONS) for seed in SAMPLE_SEEDS]
    for codegen in CODEGENS:
        drawn = [m for m in models if m.motifs.get(codegen)]
        assert len(drawn) >= 6, f"only {len(drawn)} sample models draw {codegen} patterns"
        with_region = []
        for model in drawn[:4]:
            built = lower(model.module, BuildOptions(target=model.target, opt_level=model.opt_level,
                                                     codegens=model.codegens), executor=False)
            if region_counts(built.source).get(codegen):
                with_region.append(model.seed)
        assert len(with_region) >= 2, (
            f"of the sample models {[m.seed for m in drawn[:4]]}, which draw {codegen} patterns, "
            f"only {with_region} build with a {codegen} function")


def test_a_target_string_names_the_codegens_a_model_builds_with() -> None:
    specs = OPTIONS.codegen_specs("acme_npu, toy_cg_thflow, cblas, c")
    assert [s.name for s in specs] == ["acme_npu", "toy_cg_thflow", "cblas"]
    assert OPTIONS.codegen_specs("c") == ()


def test_integer_outputs_must_match_bit_for_bit() -> None:
    expected = [np.array([1, 2, 3], dtype=np.int32)]
    assert compare([expected[0].copy()], expected) is None
    message = compare([np.array([1, 2, 4], dtype=np.int32)], expected)
    assert message is not None and "1 of 3 elements differ" in message and "flat index 2" in message


def test_float_outputs_allow_rounding_but_not_a_wrong_value() -> None:
    expected = [np.array([1.0, -2.0, np.nan, np.inf], dtype=np.float32)]
    close = np.array([1.00001, -2.00002, np.nan, np.inf], dtype=np.float32)
    assert compare([close], expected) is None
    assert compare([np.array([1.01, -2.0, np.nan, np.inf], dtype=np.float32)], expected) is not None
    assert compare([np.array([1.0, -2.0, 0.0, np.inf], dtype=np.float32)], expected) is not None
    assert compare([np.array([1.0, -2.0, np.nan, -np.inf], dtype=np.float32)], expected) is not None


def test_outputs_of_another_shape_dtype_or_count_are_reported() -> None:
    expected = [np.zeros((2, 3), np.float32)]
    assert "float32[3, 2]" in str(compare([np.zeros((3, 2), np.float32)], expected))
    assert "float64" in str(compare([np.zeros((2, 3), np.float64)], expected))
    assert "2 outputs" in str(compare([expected[0], expected[0]], expected))


def test_a_float64_output_computed_through_float32_gets_the_float32_tolerance() -> None:
    # fuzz-diff seed 5058: acosh in float32, then cast to float64; libm and numpy differ by an ulp.
    expected = [np.array([1.766904354095459], dtype=np.float64)]
    actual = [np.array([1.7669042348861694], dtype=np.float64)]
    assert compare(actual, expected) is not None
    assert compare(actual, expected, weakest="float32") is None


def test_an_overflow_to_infinity_near_the_top_of_the_range_is_not_a_mismatch() -> None:
    # fuzz-diff seed 20057: conv3d_transpose of values near 1e37 overflows a float32 sum that the
    # float64 reference keeps finite.
    expected = [np.array([-4.2040808e37, 1.0], dtype=np.float32)]
    assert compare([np.array([-np.inf, 1.0], dtype=np.float32)], expected) is None
    assert compare([np.array([np.inf, 1.0], dtype=np.float32)], expected) is not None
    assert compare([np.array([-np.inf, 1.0], dtype=np.float32)], [np.array([-3.0, 1.0], np.float32)]) is not None


def test_float_outputs_downstream_of_values_near_overflow_are_not_compared(tmp_path: Path) -> None:
    # fuzz-diff seed 200272 (reduced): a ceil_mode max_pool window with no input yields the
    # lowest float32; layer_norm's float32 mean of it overflows where the float64 reference
    # does not, and the compiled output is all zeros.
    from compiler.parser import parse
    from compiler.testing.generate import GeneratedModel
    from tests.differential.check import near_overflow

    text = """#[version = "0.0.5"]
def @main(%g: Tensor[(3), float32], %b: Tensor[(3), float32], %x: Tensor[(3, 4, 1), float32]) {
  nn.layer_norm(%x, %g, %b, axis=-3, epsilon=0.0009765625f, center=False)
}
"""
    x = np.full((3, 4, 1), 1.5, np.float32)
    x[1, 0, 0] = x[2, 2, 0] = np.finfo(np.float32).min
    inputs = {"g": np.ones(3, np.float32), "b": np.zeros(3, np.float32), "x": x}
    model = GeneratedModel(200272, parse(text), inputs, "c", 0, ["nn.layer_norm"])
    assert near_overflow(model)
    outcome = check(model, tmp_path)
    assert outcome.kind == "matched" and "near overflow" in outcome.message
    assert not near_overflow(generate(SAMPLE_SEEDS[0], OPTIONS))


def test_an_integer_computed_from_floats_may_differ_where_rounding_decides_a_tie() -> None:
    # fuzz-diff seed 202570 (reduced): argmax of a log_softmax whose largest values are 0 and
    # -3.6e-9 in float64 but both 0 in float32.
    expected = [np.arange(200, dtype=np.int32)]
    one_off = expected[0].copy()
    one_off[7] = 9
    assert compare([one_off], expected) is not None
    assert compare([one_off], expected, from_floats=frozenset({0})) is None
    assert compare([one_off + 1], expected, from_floats=frozenset({0})) is not None


FLOOR_OF_LOG_SOFTMAX = """#[version = "0.0.5"]
def @main(%x: Tensor[(3, 5), float16]) {
  floor(nn.log_softmax(%x, axis=0))
}
"""


def test_a_step_function_of_a_float_next_to_its_jump_may_land_on_either_side(tmp_path: Path) -> None:
    # make-test sample seed 1000060 (reduced): floor of a float16 log_softmax whose largest
    # values are about -3e-5 in float64 (floor -1) but 0 in float16 arithmetic (floor 0).
    from compiler.parser import parse
    from compiler.testing.generate import GeneratedModel
    from tests.differential.check import steps_near_jumps

    x = np.array([[12, 0, -4, 1, 2], [0, 12, -4, 1.5, 2], [1, 0, 8, 1, 2]], np.float16)
    model = GeneratedModel(1000060, parse(FLOOR_OF_LOG_SOFTMAX), {"x": x}, "c", 3, ["nn.log_softmax", "floor"])
    near = steps_near_jumps(model, "float16")[0]
    assert near[0, 0] and near[1, 1] and not near[0, 3]
    assert check(model, tmp_path).kind == "matched"
    # Away from a jump, one step off is still a mismatch.
    expected = [np.array([-1.0, -3.0], np.float16)]
    assert compare([np.array([0.0, -3.0], np.float16)], expected, near_steps={0: np.array([True, False])}) is None
    assert compare([np.array([-1.0, -2.0], np.float16)], expected, near_steps={0: np.array([True, False])}) is not None


def test_the_dynamic_variant_marks_the_first_input_dim_unknown_and_drops_the_declared_result() -> None:
    text = ('#[version = "0.0.5"]\ndef @main(%x0: float32, %x1: Tensor[(3, 4), int8], %x2: Tensor[(2), float32]) '
            "-> (float32, Tensor[(3, 4), int8]) {\n  (%x0, %x1)\n}\n")
    assert dynamic_text(text) == (
        '#[version = "0.0.5"]\ndef @main(%x0: float32, %x1: Tensor[(?, 4), int8], %x2: Tensor[(2), float32]) {\n'
        "  (%x0, %x1)\n}\n")
    assert dynamic_text('#[version = "0.0.5"]\ndef @main(%x0: float32) -> float32 {\n  %x0\n}\n') is None


def test_a_dynamic_variant_that_compiles_is_run_and_compared(tmp_path: Path) -> None:
    seed = next(s for s in range(0, 300, DYNAMIC_EVERY)
                if generate(s, GeneratorOptions(max_ops=3, ops=("add", "exp", "multiply"))).inputs)
    model = generate(seed, GeneratorOptions(max_ops=3, ops=("add", "exp", "multiply")))
    outcome = check(model, tmp_path)
    assert outcome.kind == "matched" and outcome.dynamic == "matched", outcome
