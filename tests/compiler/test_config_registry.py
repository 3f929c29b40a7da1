from __future__ import annotations

import json

import pytest

from compiler import config_registry as registry
from compiler.backend.te_compiler import PARALLEL_KEY
from compiler.config_registry import (
    PASS_CONFIG,
    ConfigError,
    check_config_keys,
    check_pass_config,
    is_allowed_cflag,
    parse_pass_config_item,
)
from compiler.passes.check_compilable import MAX_TENSOR_BYTES, MAX_TENSOR_BYTES_KEY
from compiler.passes.fusion_groups import DEFAULT_MAX_DEPTH
from compiler.runtime.vector_width import VECTOR_LANES_KEY


def test_an_unknown_key_is_an_error_naming_it_and_the_nearest_known_one():
    with pytest.raises(ConfigError, match=r"unknown pass_config key 'relay.FuseOps.max_dept' "
                                          r"\(did you mean 'relay.FuseOps.max_depth'\?\)") as caught:
        check_pass_config({"relay.FuseOps.max_dept": 3})
    assert caught.value.key == "pass_config.relay.FuseOps.max_dept"


def test_a_key_far_from_every_known_one_gets_no_suggestion():
    with pytest.raises(ConfigError) as caught:
        check_pass_config({"relay.bogus.key": 1})
    assert "'relay.bogus.key'" in caught.value.message and "did you mean" not in caught.value.message


def test_a_value_of_the_wrong_type_is_an_error_naming_the_key_and_the_type():
    with pytest.raises(ConfigError, match=r"'tir.parallel' takes a boolean .* got 'yes'"):
        check_pass_config({"tir.parallel": "yes"})
    with pytest.raises(ConfigError, match=r"'relay.FuseOps.max_depth' takes an integer, got True"):
        check_pass_config({"relay.FuseOps.max_depth": True})
    with pytest.raises(ConfigError, match=r"'relay.FuseOps.max_depth' must be at least 1, got 0"):
        check_pass_config({"relay.FuseOps.max_depth": 0})


def test_the_issues_example_of_a_silently_accepted_config_is_refused():
    with pytest.raises(ConfigError, match="relay.bogus.key"):
        check_pass_config({"relay.bogus.key": 1, "tir.disable_vectorize": "yes"})
    with pytest.raises(ConfigError, match=r"'tir.disable_vectorize' takes a boolean"):
        check_pass_config({"tir.disable_vectorize": "yes"})


def test_tvm_bool_keys_take_zero_and_one_as_booleans():
    assert check_pass_config({"tir.parallel": 0, "relay.FuseOps.link_params": 1}) == {
        "tir.parallel": False, "relay.FuseOps.link_params": True}


def test_tvms_own_keys_are_accepted_with_their_types_and_ignored_ones_say_why():
    config = {"relay.backend.use_auto_scheduler": True, "tir.noalias": True, "tir.disable_vectorize": False}
    assert check_pass_config(config) == config
    assert PASS_CONFIG["relay.backend.use_auto_scheduler"].support == "ignored"
    assert "reads no TVM tuning logs" in PASS_CONFIG["relay.backend.use_auto_scheduler"].help


def test_a_refused_tvm_key_is_accepted_at_tvms_default_and_refused_otherwise():
    assert check_pass_config({"tir.disable_assert": False}) == {"tir.disable_assert": False}
    with pytest.raises(ConfigError, match=r"'tir.disable_vectorize' is not supported: .*omp simd"):
        check_pass_config({"tir.disable_vectorize": True})


def test_the_keys_the_compiler_reads_are_registered_with_its_defaults():
    assert PASS_CONFIG["relay.FuseOps.max_depth"].default == DEFAULT_MAX_DEPTH
    assert PASS_CONFIG[MAX_TENSOR_BYTES_KEY].default == MAX_TENSOR_BYTES
    assert PASS_CONFIG[PARALLEL_KEY].default is True
    for key in (VECTOR_LANES_KEY, "relay.FuseOps.link_params"):
        assert PASS_CONFIG[key].support == "used"


def test_command_line_values_are_parsed_to_the_keys_type():
    assert parse_pass_config_item("relay.FuseOps.max_depth=8") == ("relay.FuseOps.max_depth", 8)
    assert parse_pass_config_item("tir.parallel=false") == ("tir.parallel", False)
    assert parse_pass_config_item(" tir.parallel = 1 ") == ("tir.parallel", True)
    with pytest.raises(ConfigError, match="takes an integer, got 'eight'"):
        parse_pass_config_item("relay.FuseOps.max_depth=eight")
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_pass_config_item("tir.parallel")
    with pytest.raises(ConfigError, match="unknown pass_config key 'relay.bogus'"):
        parse_pass_config_item("relay.bogus=1")


def test_unknown_top_level_config_keys_suggest_the_nearest():
    with pytest.raises(ConfigError, match=r"unknown config key 'opt_levle' \(did you mean 'opt_level'\?\)"):
        check_config_keys({"opt_levle": 2})


def test_allowed_cflags_are_the_list_and_defines():
    assert is_allowed_cflag("-O2") and is_allowed_cflag("-DFOO=1")
    assert not is_allowed_cflag("-fplugin=x.so") and not is_allowed_cflag("-D1X")


def test_the_catalog_is_json_and_lists_every_key_once():
    catalog = json.loads(json.dumps(registry.catalog()))
    names = [entry["name"] for entry in catalog["pass_config"]]
    assert sorted(names) == sorted(PASS_CONFIG) and len(names) == len(set(names))
    assert catalog["opt_level"] == {"minimum": 0, "maximum": 4, "default": 3}
    assert "-O3" in catalog["allowed_cflags"]
