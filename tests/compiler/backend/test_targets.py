"""The target-kind registry and the RelayToTIR hook runner."""

from __future__ import annotations

import pytest

from compiler.backend import targets
from compiler.backend.targets import (
    TARGETS,
    TargetKind,
    TargetRegistry,
    compiler_names,
    lookup_target_kind,
    register_target_kind,
    run_relay_to_tir_hooks,
)
from compiler.ir.module import IRModule
from compiler.parser import parse

PARTITIONED = parse("""#[version = "0.0.5"]
def @main(%a: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
  %0 = fn (%x: Tensor[(4,), float32], Primitive=1, Compiler="zeta", global_symbol="zeta_0") -> Tensor[(4,), float32] {
    negative(%x)
  };
  %1 = %0(%a);
  %2 = @alpha_0(%1);
  %3 = fn (%y: Tensor[(4,), float32], Primitive=1, Compiler="zeta", global_symbol="zeta_1") -> Tensor[(4,), float32] {
    exp(%y)
  };
  %3(%2)
}
def @alpha_0(%x: Tensor[(4,), float32], Primitive=1, Compiler="alpha", global_symbol="alpha_0") -> Tensor[(4,), float32] {
  negative(%x)
}
""")


def test_host_target_kind_is_registered_without_hooks() -> None:
    host = lookup_target_kind(targets.HOST)
    assert host == TargetKind("c")
    assert host.relay_to_tir is None and host.codegen is None


def test_target_kind_names_its_function_at_a_time_codegen_like_tvm() -> None:
    assert TargetKind("acme_npu").codegen_name == "relay.ext.acme_npu"


def test_target_kind_needs_a_name() -> None:
    with pytest.raises(ValueError, match="non-empty name"):
        TargetKind("")


def test_registry_refuses_second_kind_with_same_name_unless_replacing() -> None:
    registry = TargetRegistry()
    first = registry.register(TargetKind("acme"))
    with pytest.raises(ValueError, match="acme is already registered"):
        registry.register(TargetKind("acme"))
    second = registry.register(TargetKind("acme", codegen=lambda func: None), replace=True)
    assert registry.lookup("acme") is second is not first
    registry.unregister("acme")
    assert registry.lookup("acme") is None
    assert registry.names() == []


def test_scoped_registration_restores_previous_kinds() -> None:
    before = lookup_target_kind(targets.HOST)
    replacement = TargetKind(targets.HOST, codegen=lambda func: None)
    with TARGETS.scoped(replacement, TargetKind("temporary")):
        assert lookup_target_kind(targets.HOST) is replacement
        assert lookup_target_kind("temporary") is not None
    assert lookup_target_kind(targets.HOST) is before
    assert lookup_target_kind("temporary") is None


def test_register_target_kind_adds_to_the_process_wide_registry() -> None:
    try:
        kind = register_target_kind("test_targets_kind", codegen=lambda func: None)
        assert lookup_target_kind("test_targets_kind") is kind
    finally:
        TARGETS.unregister("test_targets_kind")


def test_compiler_names_finds_global_and_literal_functions_once_each_sorted() -> None:
    assert compiler_names(PARTITIONED) == ["alpha", "zeta"]


def test_relay_to_tir_hooks_run_once_per_compiler_in_name_order() -> None:
    runs: list[str] = []

    def hook(name: str) -> targets.RelayToTIR:
        def run(mod: IRModule) -> IRModule:
            runs.append(name)
            return mod.copy()

        return run

    registry = TargetRegistry((TargetKind("zeta", relay_to_tir=hook("zeta")), TargetKind("alpha", relay_to_tir=hook("alpha"))))
    out = run_relay_to_tir_hooks(PARTITIONED, registry)
    assert runs == ["alpha", "zeta"]
    assert out is not PARTITIONED


def test_relay_to_tir_hooks_skip_kinds_without_hook_or_registration() -> None:
    registry = TargetRegistry((TargetKind("alpha", codegen=lambda func: None),))
    assert run_relay_to_tir_hooks(PARTITIONED, registry) is PARTITIONED


def test_relay_to_tir_hook_must_return_a_module() -> None:
    registry = TargetRegistry((TargetKind("alpha", relay_to_tir=lambda mod: None),))  # type: ignore[arg-type,return-value]  # the mistake under test
    with pytest.raises(TypeError, match="relay_to_tir hook of target alpha returned NoneType"):
        run_relay_to_tir_hooks(PARTITIONED, registry)
