"""The random model generator: reproducible, well typed, connected, and within its options."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.ir.expr import Call, Function, Var
from compiler.ir.visitor import post_order
from compiler.testing.generate import GeneratorOptions, generatable_ops, generate


def _main(model) -> Function:  # type: ignore[no-untyped-def]
    return model.module[model.module.get_global_var("main")]


def test_the_same_seed_gives_the_same_model_and_inputs() -> None:
    first, second = generate(11), generate(11)
    assert first.text == second.text
    assert first.inputs.keys() == second.inputs.keys()
    for name in first.inputs:
        np.testing.assert_array_equal(first.inputs[name], second.inputs[name])
    assert generate(12).text != first.text


@pytest.mark.parametrize("seed", range(12))
def test_generated_models_type_check_and_bind_an_input_to_every_parameter(seed: int) -> None:
    model = generate(seed, GeneratorOptions(max_ops=25))
    main = _main(model)
    assert main.checked_type is not None
    assert [p.name_hint for p in main.params] == list(model.inputs)
    for param in main.params:
        value = model.inputs[param.name_hint]
        assert tuple(value.shape) == tuple(param.type_annotation.shape)
        assert str(value.dtype) == param.type_annotation.dtype
    assert 1 <= len(model.ops) <= 25 * 3  # adapters (reshape, cast) come on top of the drawn calls


def test_generated_calls_read_each_others_results() -> None:
    depths = []
    options = GeneratorOptions(min_ops=15, max_ops=15, ops=("add", "multiply", "exp", "tanh", "negative", "transpose"))
    for seed in range(10):
        body = _main(generate(seed, options)).body
        depth: dict[object, int] = {}
        for node in post_order(body):
            if isinstance(node, Call):
                depth[node] = 1 + max((depth.get(a, 0) for a in node.args), default=0)
        depths.append(max(depth.values(), default=0))
    assert max(depths) >= 4, f"no chain of four calls in ten 15-call models: {depths}"


def test_generated_models_share_values_between_calls() -> None:
    shared = 0
    # Elementwise and broadcast ops take any shape: their draws connect most often.
    options = GeneratorOptions(min_ops=12, max_ops=12, ops=("add", "multiply", "exp", "tanh", "negative"))
    for seed in range(10):
        readers: dict[object, int] = {}
        for node in post_order(_main(generate(seed, options)).body):
            if isinstance(node, Call):
                for arg in node.args:
                    if isinstance(arg, (Call, Var)):
                        readers[arg] = readers.get(arg, 0) + 1
        shared += sum(1 for n in readers.values() if n > 1)
    assert shared > 0


def test_only_the_operators_asked_for_are_drawn() -> None:
    allowed = ("exp", "add")
    for seed in range(5):
        used = set(generate(seed, GeneratorOptions(ops=allowed, max_ops=8)).ops)
        assert used <= {*allowed, "reshape", "cast"}, used


def test_an_option_that_leaves_no_operator_is_refused() -> None:
    with pytest.raises(ValueError, match="no operator"):
        generate(0, GeneratorOptions(ops=("no.such.op",)))


def test_every_operator_with_loops_can_be_drawn() -> None:
    names = {op.name for op in generatable_ops()}
    assert {"nn.conv2d", "nn.dense", "reshape", "strided_slice", "nn.max_pool2d"} <= names


# --- BYOC regions -------------------------------------------------------------------------------

_ACME = {"name": "acme", "patterns": [{"name": "conv_relu", "pattern": "nn.relu(nn.conv2d(*, *))",
                                       "attrs": ["nn.conv2d.strides", "nn.conv2d.padding"]}]}


def _acme_options(**kwargs: object) -> GeneratorOptions:
    from compiler.byoc.codegen_config import CodegenSpec

    return GeneratorOptions(max_ops=20, targets=("acme, c",), codegens=(CodegenSpec.from_document(_ACME),),
                            region_chance=0.5, **kwargs)  # type: ignore[arg-type]


def _relu_of_conv(model) -> list[Call]:  # type: ignore[no-untyped-def]
    return [n for n in post_order(_main(model).body) if isinstance(n, Call) and n.op_name == "nn.relu"
            and isinstance(n.args[0], Call) and n.args[0].op_name == "nn.conv2d"]


def test_a_target_naming_a_codegen_draws_its_patterns_as_chains() -> None:
    models = [generate(seed, _acme_options()) for seed in range(6)]
    assert all(m.target == "acme, c" and [s.name for s in m.codegens] == ["acme"] for m in models)
    assert sum(m.motifs.get("acme", 0) for m in models) >= 6
    chains = [relu for m in models for relu in _relu_of_conv(m)]
    assert chains
    for relu in chains:
        conv = relu.args[0]
        assert conv.checked_type.dtype == "float32"
        assert conv.attrs["groups"] == 1 and conv.attrs["data_layout"] == "NCHW"


def test_a_target_of_host_code_draws_no_chains() -> None:
    model = generate(3, GeneratorOptions(max_ops=20, targets=("c",), codegens=_acme_options().codegens))
    assert model.motifs == {} and model.codegens == ()


def test_the_library_veto_applies_to_every_call_of_a_claimed_op() -> None:
    asked: list[str] = []

    def ungrouped_only(codegen: str, op: str, sample: object) -> bool:
        asked.append(op)
        return op != "nn.conv2d" or sample.attrs.get("groups", 1) == 1  # type: ignore[attr-defined]

    for seed in range(6):
        model = generate(seed, _acme_options(ops=("nn.conv2d", "nn.relu", "add"), accepts=ungrouped_only))
        convs = [n for n in post_order(_main(model).body) if isinstance(n, Call) and n.op_name == "nn.conv2d"]
        assert all(c.attrs["groups"] == 1 for c in convs)
    assert {"nn.conv2d", "nn.relu"} <= set(asked) and "add" not in asked


def test_chains_keep_to_the_operators_asked_for() -> None:
    model = generate(0, _acme_options(ops=("exp", "add")))
    assert model.motifs == {} and set(model.ops) <= {"exp", "add", "reshape", "cast"}
