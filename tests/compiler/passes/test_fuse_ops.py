
import numpy as np
import pytest

from compiler.diagnostics import InputError
from compiler.ir.expr import Call, Function, GlobalVar, Op, Var
from compiler.ir.module import IRModule
from compiler.ir.structural import structural_equal
from compiler.ir.types import TensorType
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.passes.bind_params import BindParams
from compiler.passes.fold_constant import FoldConstant
from compiler.passes.fuse_ops import FuseOps
from compiler.passes.pass_infra import PassContext
from compiler.passes.simplify_inference import SimplifyInference
from compiler.runtime.interpreter import run_main


def random_inputs(mod, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for p in mod.main.params:
        ty = p.type_annotation
        out[p.name_hint] = rng.uniform(-1, 1, size=ty.shape).astype(ty.dtype)
    return out


def assert_fuses(before_text, expected_text, ctx=None, fuse=None):
    before = parse(before_text)
    after = (fuse or FuseOps())(before, ctx or PassContext())
    expected = parse(expected_text)
    assert structural_equal(after, expected), after.astext()
    assert_fully_typed(after)
    inputs = random_inputs(before)
    for got, want in zip(run_main(after, inputs), run_main(before, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return after


def assert_fully_typed(mod):
    for _, func in mod.functions():
        for node in post_order(func):
            assert isinstance(node, (Op, GlobalVar)) or node.has_type, node


def primitive_functions(mod):
    return [n for n in post_order(mod.main) if isinstance(n, Function) and n.attr("Primitive") is not None]


CONV_ARGS = "%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32]"


def test_conv2d_bias_add_relu_is_one_group():
    assert_fuses(
        f"""#[version = "0.0.5"]
def @main({CONV_ARGS}) {{
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = nn.bias_add(%0, %b);
  nn.relu(%1)
}}""",
        f"""#[version = "0.0.5"]
def @main({CONV_ARGS}) {{
  %0 = fn (%p0: Tensor[(1, 3, 8, 8), float32], %p1: Tensor[(4, 3, 3, 3), float32],
           %p2: Tensor[(4), float32], Primitive=1) -> Tensor[(1, 4, 8, 8), float32] {{
    %1 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
    %2 = nn.bias_add(%1, %p2);
    nn.relu(%2)
  }};
  %0(%x, %w, %b)
}}""",
    )


def test_dense_bias_add_relu_is_one_group():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(3, 4), float32], %b: Tensor[(3), float32]) {
  %0 = nn.dense(%x, %w, units=3);
  %1 = nn.bias_add(%0, %b, axis=-1);
  nn.relu(%1)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(3, 4), float32], %b: Tensor[(3), float32]) {
  %0 = fn (%p0: Tensor[(2, 4), float32], %p1: Tensor[(3, 4), float32], %p2: Tensor[(3), float32],
           Primitive=1) -> Tensor[(2, 3), float32] {
    %1 = nn.dense(%p0, %p1, units=3);
    %2 = nn.bias_add(%1, %p2, axis=-1);
    nn.relu(%2)
  };
  %0(%x, %w, %b)
}""",
    )


def test_add_relu_with_scalar_constant_inside():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) {
  %0 = add(%x, %y);
  %1 = multiply(%0, 2f);
  nn.relu(%1)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(2, 3), float32], %p1: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    %1 = add(%p0, %p1);
    %2 = multiply(%1, 2f);
    nn.relu(%2)
  };
  %0(%x, %y)
}""",
    )


def test_elementwise_op_feeding_a_conv2d_does_not_fuse_into_it():
    assert_fuses(
        f"""#[version = "0.0.5"]
def @main({CONV_ARGS}) {{
  %0 = add(%x, 1f);
  nn.conv2d(%0, %w)
}}""",
        f"""#[version = "0.0.5"]
def @main({CONV_ARGS}) {{
  %0 = fn (%p0: Tensor[(1, 3, 8, 8), float32], Primitive=1) -> Tensor[(1, 3, 8, 8), float32] {{
    add(%p0, 1f)
  }};
  %1 = %0(%x);
  %2 = fn (%p0: Tensor[(1, 3, 8, 8), float32], %p1: Tensor[(4, 3, 3, 3), float32],
           Primitive=1) -> Tensor[(1, 4, 6, 6), float32] {{
    nn.conv2d(%p0, %p1)
  }};
  %2(%1, %w)
}}""",
    )


def test_two_heavy_ops_never_share_a_group():
    after = FuseOps()(parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32], %w1: Tensor[(4, 4), float32], %w2: Tensor[(3, 4), float32]) {
  %0 = nn.dense(%x, %w1, units=4);
  %1 = nn.relu(%0);
  nn.dense(%1, %w2, units=3)
}"""))
    groups = [[n.op.name for n in post_order(f.body) if isinstance(n, Call)] for f in primitive_functions(after)]
    assert sorted(groups) == [["nn.dense"], ["nn.dense", "nn.relu"]]


def test_elementwise_producer_fuses_into_a_reduction_but_not_its_consumer():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) {
  %0 = add(%x, %y);
  %1 = sum(%0, axis=[1]);
  exp(%1)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(2, 3), float32], %p1: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2), float32] {
    %1 = add(%p0, %p1);
    sum(%1, axis=[1])
  };
  %2 = %0(%x, %y);
  %3 = fn (%p0: Tensor[(2), float32], Primitive=1) -> Tensor[(2), float32] {
    exp(%p0)
  };
  %3(%2)
}""",
    )


def test_reshape_then_transpose_is_one_injective_group():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = reshape(%x, newshape=[6, 4]);
  transpose(%0, axes=[1, 0])
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = fn (%p0: Tensor[(2, 3, 4), float32], Primitive=1) -> Tensor[(4, 6), float32] {
    %1 = reshape(%p0, newshape=[6, 4]);
    transpose(%1, axes=[1, 0])
  };
  %0(%x)
}""",
    )


def test_group_of_reshape_only_ops_is_marked():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = reshape(%x, newshape=[6, 4, 1]);
  squeeze(%0, axis=[2])
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32]) {
  %0 = fn (%p0: Tensor[(2, 3, 4), float32], Primitive=1, relay.reshape_only=1) -> Tensor[(6, 4), float32] {
    %1 = reshape(%p0, newshape=[6, 4, 1]);
    squeeze(%1, axis=[2])
  };
  %0(%x)
}""",
    )


def test_softmax_absorbs_the_elementwise_op_after_it():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 5), float32]) {
  %0 = nn.softmax(%x);
  multiply(%0, 3f)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 5), float32]) {
  %0 = fn (%p0: Tensor[(2, 5), float32], Primitive=1) -> Tensor[(2, 5), float32] {
    %1 = nn.softmax(%p0);
    multiply(%1, 3f)
  };
  %0(%x)
}""",
    )


def test_diamond_fuses_into_one_group_with_one_parameter_per_input():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = exp(%x);
  %1 = negative(%x);
  add(%0, %1)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    %1 = exp(%p0);
    %2 = negative(%p0);
    add(%1, %2)
  };
  %0(%x)
}""",
    )


def test_conv2d_fuses_through_a_diamond_of_elementwise_ops():
    assert_fuses(
        f"""#[version = "0.0.5"]
def @main({CONV_ARGS}) {{
  %0 = nn.conv2d(%x, %w);
  %1 = exp(%0);
  %2 = negative(%0);
  add(%1, %2)
}}""",
        f"""#[version = "0.0.5"]
def @main({CONV_ARGS}) {{
  %0 = fn (%p0: Tensor[(1, 3, 8, 8), float32], %p1: Tensor[(4, 3, 3, 3), float32],
           Primitive=1) -> Tensor[(1, 4, 6, 6), float32] {{
    %1 = nn.conv2d(%p0, %p1);
    %2 = exp(%1);
    %3 = negative(%1);
    add(%2, %3)
  }};
  %0(%x, %w)
}}""",
    )


def test_opaque_dropout_stays_alone_and_its_projection_joins_the_consumer():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = exp(%x);
  %1 = nn.dropout(%0);
  %2 = %1.0;
  negative(%2)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    exp(%p0)
  };
  %1 = %0(%x);
  %2 = fn (%p0: Tensor[(2, 3), float32], Primitive=1) -> (Tensor[(2, 3), float32], Tensor[(2, 3), float32]) {
    nn.dropout(%p0)
  };
  %3 = %2(%1);
  %4 = fn (%p0: (Tensor[(2, 3), float32], Tensor[(2, 3), float32]), Primitive=1) -> Tensor[(2, 3), float32] {
    %5 = %p0.0;
    negative(%5)
  };
  %4(%3)
}""",
    )


def test_concatenate_fuses_its_tuple_and_the_injective_fields():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) {
  %0 = exp(%x);
  %1 = negative(%y);
  %2 = (%0, %1);
  concatenate(%2, axis=1)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(2, 3), float32], %p1: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 6), float32] {
    %1 = exp(%p0);
    %2 = negative(%p1);
    %3 = (%1, %2);
    concatenate(%3, axis=1)
  };
  %0(%x, %y)
}""",
    )


def test_tuple_result_stays_a_plain_tuple_of_group_calls():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = exp(%x);
  (%0, %x)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    exp(%p0)
  };
  %1 = %0(%x);
  (%1, %x)
}""",
    )


def test_split_fuses_with_the_projections_and_their_consumer():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 3), float32]) {
  %0 = split(%x, indices_or_sections=2);
  %1 = %0.0;
  %2 = %0.1;
  add(%1, %2)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 3), float32]) {
  %0 = fn (%p0: Tensor[(4, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    %1 = split(%p0, indices_or_sections=2);
    %2 = %1.0;
    %3 = %1.1;
    add(%2, %3)
  };
  %0(%x)
}""",
    )


def test_group_may_return_a_tuple():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 3), float32]) {
  split(%x, indices_or_sections=2)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 3), float32]) {
  %0 = fn (%p0: Tensor[(4, 3), float32], Primitive=1) -> (Tensor[(2, 3), float32], Tensor[(2, 3), float32]) {
    split(%p0, indices_or_sections=2)
  };
  %0(%x)
}""",
    )


def test_tensor_constants_are_parameters_unless_linked():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(3), float32], %c: Tensor[(3), float32]) {
  add(%x, %c)
}""")
    mod = BindParams({"c": np.array([1, 2, 3], dtype="float32")})(mod)
    default = FuseOps()(mod)
    func = default.main.body.op
    assert [p.name_hint for p in func.params] == ["p0", "p1"]
    linked = FuseOps(link_params=True)(mod)
    func = linked.main.body.op
    assert [p.name_hint for p in func.params] == ["p0"]
    by_config = FuseOps()(mod, PassContext(config={"relay.FuseOps.link_params": True}))
    assert structural_equal(by_config, linked)
    x = np.arange(3, dtype="float32")
    for fused in (default, linked):
        np.testing.assert_array_equal(run_main(fused, {"x": x})[0], x + np.array([1, 2, 3], dtype="float32"))


def test_fuse_opt_level_zero_puts_every_op_alone():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = add(%x, 1f);
  nn.relu(%0)
}"""
    expected = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(2, 3), float32], %p1: float32, Primitive=1) -> Tensor[(2, 3), float32] {
    add(%p0, %p1)
  };
  %1 = %0(%x, 1f);
  %2 = fn (%p0: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    nn.relu(%p0)
  };
  %2(%1)
}"""
    assert_fuses(text, expected, fuse=FuseOps(fuse_opt_level=0))
    assert_fuses(text, expected, ctx=PassContext(opt_level=0))


def test_let_is_a_fusion_barrier():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  let %y = exp(%x);
  negative(%y)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    exp(%p0)
  };
  let %y = %0(%x);
  %1 = fn (%p0: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    negative(%p0)
  };
  %1(%y)
}""",
    )


def test_every_global_is_fused_and_primitive_globals_are_left_alone():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = @helper(%x);
  @kernel(%0)
}
def @helper(%y: Tensor[(2, 3), float32]) {
  %0 = exp(%y);
  negative(%0)
}
def @kernel(%z: Tensor[(2, 3), float32], Primitive=1) {
  %0 = exp(%z);
  negative(%0)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = @helper(%x);
  @kernel(%0)
}
def @helper(%y: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
    %1 = exp(%p0);
    negative(%1)
  };
  %0(%y)
}
def @kernel(%z: Tensor[(2, 3), float32], Primitive=1) {
  %0 = exp(%z);
  negative(%0)
}""",
    )


def test_function_literal_bodies_are_fused_too():
    assert_fuses(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = fn (%y: Tensor[(2, 3), float32]) {
    %1 = exp(%y);
    negative(%1)
  };
  %0(%x)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = fn (%y: Tensor[(2, 3), float32]) {
    %1 = fn (%p0: Tensor[(2, 3), float32], Primitive=1) -> Tensor[(2, 3), float32] {
      %2 = exp(%p0);
      negative(%2)
    };
    %1(%y)
  };
  %0(%x)
}""",
    )


def test_max_depth_bounds_the_group_size():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) {
  %0 = nn.relu(%x);
  %1 = exp(%0);
  %2 = negative(%1);
  %3 = exp(%2);
  negative(%3)
}"""
    after = FuseOps()(parse(text), PassContext(config={"relay.FuseOps.max_depth": 2}))
    groups = [[n.op.name for n in post_order(f.body) if isinstance(n, Call)] for f in primitive_functions(after)]
    assert sorted(groups) == [["negative"], ["negative", "exp"], ["nn.relu", "exp"]]


def test_bad_max_depth_config_is_an_input_error():
    mod = parse('#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) { exp(%x) }')
    with pytest.raises(InputError, match="relay.FuseOps.max_depth"):
        FuseOps()(mod, PassContext(config={"relay.FuseOps.max_depth": "lots"}))


def test_long_elementwise_chain_fuses_in_bounded_groups_quickly():
    x = Var("x", TensorType((4,), "float32"))
    node = x
    n = 20_000  # twenty times Python's recursion limit
    for i in range(n):
        node = Call(Op.get("exp" if i % 2 else "negative"), (node,))
    mod = IRModule.from_expr(Function((x,), node))
    after = FuseOps()(mod)
    assert_fully_typed(after)
    calls = after.main.body
    sizes = []
    while isinstance(calls, Call) and isinstance(calls.op, Function):
        body_calls = [c for c in post_order(calls.op.body) if isinstance(c, Call)]
        sizes.append(len(body_calls))
        calls = calls.args[0]
    assert sum(sizes) == n
    assert max(sizes) == 256 and all(s <= 256 for s in sizes)


def test_fusing_twice_changes_nothing():
    once = FuseOps()(parse(f"""#[version = "0.0.5"]
def @main({CONV_ARGS}) {{
  %0 = nn.conv2d(%x, %w);
  %1 = nn.relu(%0);
  %2 = nn.max_pool2d(%1, pool_size=[2, 2]);
  nn.softmax(%2)
}}"""))
    assert structural_equal(FuseOps()(once), once)


def test_simplified_and_folded_batch_norm_joins_the_conv_group():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32], %g: Tensor[(4), float32],
          %b: Tensor[(4), float32], %m: Tensor[(4), float32], %v: Tensor[(4), float32]) {
  %0 = nn.conv2d(%x, %w);
  %1 = nn.batch_norm(%0, %g, %b, %m, %v);
  nn.relu(%1.0)
}""")
    rng = np.random.default_rng(1)
    params = {name: rng.uniform(0.5, 1.5, size=4).astype("float32") for name in "gbmv"}
    inputs = random_inputs(mod)
    want = run_main(mod, {"x": inputs["x"], "w": inputs["w"], **params})[0]
    mod = BindParams(params)(mod)
    mod = FoldConstant()(SimplifyInference()(mod))
    fused = FuseOps()(mod)
    (func,) = primitive_functions(fused)
    ops_in_group = [n.op.name for n in post_order(func.body) if isinstance(n, Call)]
    assert ops_in_group == ["nn.conv2d", "multiply", "add", "nn.relu"]
    # The folded per-channel scale and shift are tensors, so they are parameters.
    assert [str(p.type_annotation) for p in func.params[2:]] == ["Tensor[(4, 1, 1), float32]"] * 2
    got = run_main(fused, {"x": inputs["x"], "w": inputs["w"]})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
