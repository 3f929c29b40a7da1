from __future__ import annotations

import numpy as np
import pytest

from compiler import __version__
from compiler.diagnostics import InputError
from service.jobs.normalize import (
    build_options,
    checked_options,
    codegen_specs,
    fold_tvmc_config,
    merge_config,
    normal_form,
    normal_target,
    params_digest,
)


def test_tvmc_config_folds_into_a_target_string_and_config() -> None:
    target, config = fold_tvmc_config(
        [{"kind": "c"}], {"kind": "aot", "workspace-byte-alignment": 32}, {"kind": "crt"}, {"k": 1}
    )

    assert target == "c"
    assert config == {"pass_config": {"k": 1}, "workspace_byte_alignment": 32}


@pytest.mark.parametrize(
    ("targets", "executor", "message"),
    [
        ([{"kind": "c", "mcpu": "cortex-m55"}], None, "option 'mcpu' is not supported"),
        ([{"kind": "c"}], {"kind": "graph"}, "executor 'graph' is not supported"),
        ([{"kind": "c"}], {"kind": "aot", "unpacked-api": False}, "unpacked-api"),
        ([{"kind": ""}], None, "non-empty"),
    ],
)
def test_tvmc_config_refuses_what_relaycc_cannot_do(
    targets: list[dict[str, object]], executor: dict[str, object] | None, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        fold_tvmc_config(targets, executor, None, {})


def test_request_config_wins_over_the_tvmc_config_and_pass_configs_merge() -> None:
    merged = merge_config(
        {"pass_config": {"a": 1, "b": 2}, "workspace_byte_alignment": 32},
        {"pass_config": {"b": 3}, "workspace_byte_alignment": 64},
    )

    assert merged == {"pass_config": {"a": 1, "b": 3}, "workspace_byte_alignment": 64}


def test_normal_target_joins_kinds_with_one_space() -> None:
    assert normal_target(" cblas ,c ") == "cblas, c"


def test_normal_form_spells_out_defaults() -> None:
    implicit = normal_form("text", checked_options("c", "default", {}), {})
    explicit = normal_form("text", checked_options("c", "default", {"opt_level": 3, "workspace_byte_alignment": 16}), {})

    assert implicit == explicit
    assert implicit["compiler_version"] == __version__


def test_params_digest_depends_on_values_not_on_the_archive() -> None:
    a = {"w": np.ones((2, 2), "float32")}

    assert params_digest(a) == params_digest({"w": np.ones((2, 2), "float32").copy(order="F")})
    assert params_digest(a) != params_digest({"w": np.zeros((2, 2), "float32")})


@pytest.mark.parametrize("flag", ["-o/tmp/x", "@/etc/passwd", "-fplugin=evil.so", "-include/etc/shadow", "-D1BAD"])
def test_cflags_outside_the_allow_list_are_refused(flag: str) -> None:
    with pytest.raises(InputError, match="not allowed"):
        checked_options("c", "default", {"cflags": ["-O2", flag]})


def test_allowed_cflags_and_defines_pass() -> None:
    options = checked_options("c", "default", {"cflags": ["-O2", "-march=native", "-DTILE=4"]})

    assert options.cflags == ("-O2", "-march=native", "-DTILE=4")


def test_portable_x86_levels_and_the_vector_width_are_allowed() -> None:
    flags = ["-O3", "-march=x86-64-v3", "-mtune=generic", "-mprefer-vector-width=256"]

    assert checked_options("c", "default", {"cflags": flags}).cflags == tuple(flags)
    with pytest.raises(InputError, match="not allowed"):
        checked_options("c", "default", {"cflags": ["-march=x86-64-v9"]})


def test_build_options_read_back_the_normal_form() -> None:
    options = checked_options("c", "net", {"opt_level": 2, "cflags": ["-O1"]})

    again = build_options(normal_form("text", options, {}))

    assert (again.module_name, again.opt_level, again.cflags) == ("net", 2, ("-O1",))


def test_codegen_documents_become_specs_and_normalize_their_defaults() -> None:
    document = {"name": "acme", "patterns": [{"name": "relu", "pattern": "nn.relu(*)"}]}

    specs = codegen_specs([{"document": document, "sources": {}}])
    normal = normal_form("text", checked_options("acme, c", "default", {}, specs), {})

    assert [s.name for s in specs] == ["acme"]
    assert normal["target"] == "acme, c"
    codegen = normal["codegens"][0]
    assert codegen["document"]["mode"] == "relay_to_tir"
    assert codegen["document"]["patterns"][0]["symbol"] == "relu"


def test_a_bad_codegen_document_is_an_input_error() -> None:
    with pytest.raises(InputError, match="codegen acme"):
        codegen_specs([{"document": {"name": "acme", "mode": "sideways"}, "sources": {}}])


def test_record_passes_is_in_the_normal_form_only_when_asked_for() -> None:
    options = checked_options("c", "default", {})
    relay = "def @main(%x: Tensor[(2), float32]) { %x }"

    assert "record_passes" not in normal_form(relay, options, {})
    assert normal_form(relay, options, {}, record_passes=True)["record_passes"] is True


def test_tuning_records_normalize_to_what_a_build_reads() -> None:
    records = [{"key": "00000000000000b2", "kernel": "k2", "schedule": {"tile_rows": 5, "order": "rows"}, "us": 9.0},
               {"key": "00000000000000a1", "schedule": {}}]
    shuffled = [{"key": "00000000000000a1", "schedule": {}, "us": 1.0},
                {"key": "00000000000000b2", "schedule": {"order": "rows", "tile_rows": 5}}]
    forms = [normal_form("text", checked_options("c", "net", {"tuning_records": {"format": "relaycc.tuning/1",
                                                                                  "records": r}}), {})
             for r in (records, shuffled)]

    assert forms[0] == forms[1]
    assert forms[0]["config"]["tuning_records"]["records"][0] == {"key": "00000000000000a1", "schedule": {}}
    assert build_options(forms[0]).schedules == {"00000000000000a1": {},
                                                 "00000000000000b2": {"order": "rows", "tile_rows": 5}}


def test_a_request_without_tuning_records_keeps_its_normal_form() -> None:
    assert "tuning_records" not in normal_form("text", checked_options("c", "net", {}), {})["config"]
