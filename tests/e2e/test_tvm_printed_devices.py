"""A CNN placed on a CPU and a GPU as TVM's PlanDevices prints it, in the TVM 0.9+ form
(virtual devices) and the TVM 0.8 form (device types) (tests/e2e/tvm_printed_devices.py):
parses, round-trips, types to its `ty=` comments, compiles on our one CPU and matches the
interpreter, and computes what the same model without placement computes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from tests.e2e.printed_checks import (assert_outputs_match, assert_round_trips_with_printed_types,
                                      compile_and_run, interpret, relaycc)
from tests.e2e.tvm_printed import WEIGHT_FORMS
from tests.e2e.tvm_printed_devices import BLAS_MODELS, DEVICES, MODELS

# The TVM 0.8 spellings compute what their newer siblings do: one weight form is enough.
BUILDS = [(name, form, "c") for name in MODELS for form in WEIGHT_FORMS
          if not (name.endswith("_tvm08") and form == "params")] + [
    (name, "constants", "cblas, c") for name in BLAS_MODELS]


@pytest.mark.parametrize("form", WEIGHT_FORMS)
@pytest.mark.parametrize("name", list(MODELS))
def test_placed_model_parses_round_trips_and_types_as_printed(name: str, form: str) -> None:
    assert_round_trips_with_printed_types(MODELS[name](form))


def test_virtual_devices_are_where_plan_devices_put_them() -> None:
    module = parse(MODELS["cnn_plan_devices"]("params").text)
    main = module.main
    devices = {p.name_hint: p.virtual_device for p in main.params}
    assert devices["data"] == devices["classifier.weight"] == DEVICES[0] == main.attrs["virtual_device"]
    assert devices["features.0.weight"] == DEVICES[1] and DEVICES[1].memory_scope == "global"


def test_memory_scopes_are_where_texture_planning_put_them() -> None:
    main = parse(MODELS["cnn_texture_scopes"]("params").text).main
    scopes = {p.name_hint: p.virtual_device.memory_scope for p in main.params}  # type: ignore[union-attr]
    assert scopes == {"data": "global", "features.0.weight": "global.texture-weight",
                      "features.0.bias": "global.texture-weight", "features.2.weight": "global.texture-weight",
                      "features.2.bias": "global.texture-weight", "classifier.weight": "global",
                      "classifier.bias": "global"}
    copy = main.body  # softmax(... device_copy ...): find the copy into the texture scope
    while not (getattr(copy, "op", None) is not None and getattr(copy.op, "name", "") == "device_copy"
               and copy.attrs["dst_virtual_device"].memory_scope == "global.texture"):
        copy = copy.args[0]
    assert copy.attrs["src_virtual_device"].memory_scope == "global"


@pytest.mark.parametrize(("name", "form", "target"), BUILDS)
def test_compiled_placed_model_matches_the_interpreter(name: str, form: str, target: str, tmp_path: Path) -> None:
    printed = MODELS[name](form)
    want = interpret(printed, tmp_path, printed.make_inputs(seed=7))
    assert_outputs_match(compile_and_run(tmp_path, target), want)


def _without_placement(text: str) -> str:
    """The model with every on_device / device_copy call replaced by its argument and the
    parameters' and @main's placement removed, by text."""
    text = re.sub(r" \{virtual_device=meta\[VirtualDevice\]\[\d\]\}", "", text)
    text = re.sub(r", (virtual_device=meta\[VirtualDevice\]\[\d\]|param_device_types=\[[\d, ]*\], "
                  r"result_device_type=\d)\) ->", ") ->", text)
    return re.sub(r"(on_device|device_copy)\((%\w+|meta\[relay\.Constant\]\[\d+\] /\* ty=[^*]*\*/), [^)]*\)",
                  r"\2", text)


@pytest.mark.parametrize("name", list(MODELS))
def test_placement_does_not_change_the_program(name: str, tmp_path: Path) -> None:
    """On one CPU the placed model interprets to the same values as the model without
    placement, and lowers to the same program."""
    printed = MODELS[name]("constants")
    plain = _without_placement(printed.text)
    assert "device" not in plain.split("#[metadata]")[0]
    inputs = printed.make_inputs(seed=3)
    np.testing.assert_array_equal(run_main(parse(printed.text), inputs)[0], run_main(parse(plain), inputs)[0])
    lowered = []
    for label, text in (("placed", printed.text), ("plain", plain)):
        (tmp_path / f"{label}.relay").write_text(text)
        result = relaycc("lower", str(tmp_path / f"{label}.relay"), "-o", str(tmp_path / label))
        assert result.returncode == 0, result.stderr
        lowered.append((tmp_path / label / "lowered.relay").read_text())
    assert lowered[0] == lowered[1]


def test_report_lists_the_placement_it_dropped() -> None:
    from compiler.driver import lower

    printed = MODELS["cnn_plan_devices"]("params")
    report = lower(parse(printed.text), executor=False).report
    kinds = {entry["kind"] for entry in report["devices"]}  # type: ignore[union-attr]
    assert {"parameter", "function", "device_copy"} <= kinds
    data = next(e for e in report["devices"] if e.get("name") == "%data")  # type: ignore[union-attr]
    assert "virtual_device" in data["attrs"] and re.fullmatch(r"\d+:\d+", data["location"])
