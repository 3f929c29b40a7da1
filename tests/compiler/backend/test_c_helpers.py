from __future__ import annotations

from compiler.backend.c_helpers import HELPERS, helper_suffix, helpers_used


def test_only_the_helpers_a_text_calls_are_included() -> None:
    used = helpers_used("x = relaycc_max_f32(a, b) + relaycc_floordiv_i64(c, d);")
    assert len(used) == 2
    assert any("relaycc_max_f32(float a, float b)" in h for h in used)
    assert any("relaycc_floordiv_i64(int64_t a, int64_t b)" in h for h in used)
    assert helpers_used("no helpers here") == []


def test_a_helper_brings_the_helpers_it_calls_before_itself() -> None:
    used = helpers_used("y = relaycc_erf_f32(x);")
    names = [next(n for n, t in HELPERS.items() if t == text) for text in used]
    assert names == ["relaycc_asint_f32", "relaycc_asfloat_i32", "relaycc_pick_f32", "relaycc_exp_f32",
                     "relaycc_erf_f32"]


def test_narrow_types_use_the_int32_variant() -> None:
    assert [helper_suffix(d) for d in ("int8", "uint16", "bool", "int32")] == ["i32"] * 4
    assert [helper_suffix(d) for d in ("int64", "uint32", "uint64")] == ["i64", "u32", "u64"]
    assert [helper_suffix(d) for d in ("float16", "float32", "float64")] == ["f32", "f32", "f64"]


def test_every_helper_is_static_inline_and_named_by_its_key() -> None:
    for name, text in HELPERS.items():
        assert text.startswith("static inline ") and f" {name}(" in text
