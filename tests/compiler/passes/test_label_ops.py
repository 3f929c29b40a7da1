import re

from compiler.ir.expr import Function
from compiler.ir.structural import structural_equal, structural_hash
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.passes.fuse_ops import FuseOps
from compiler.passes.label_ops import LabelOps, primitive_name, std_string_hash


def primitives(mod):
    return [n for n in post_order(mod.main) if isinstance(n, Function) and n.attr("Primitive")]


TWO_DENSE = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(4, 4), float32], %b: Tensor[(4), float32]) {
  %0 = nn.dense(%x, %w, units=4);
  %1 = nn.bias_add(%0, %b, axis=-1);
  %2 = nn.relu(%1);
  %3 = nn.dense(%2, %w, units=4);
  %4 = nn.bias_add(%3, %b, axis=-1);
  nn.relu(%4)
}"""


def test_every_function_gets_a_sixteen_digit_hash_of_itself():
    mod = LabelOps()(FuseOps()(parse(TWO_DENSE)))
    for func in [mod.main, *primitives(mod)]:
        digest = func.attr("hash")
        assert re.fullmatch(r"[0-9a-f]{16}", digest)
        assert digest == f"{structural_hash(func.with_attrs(hash=None)):016x}"


def test_structurally_equal_primitives_share_a_hash_and_different_ones_do_not():
    mod = LabelOps()(FuseOps()(parse(TWO_DENSE)))
    first, second = primitives(mod)
    assert first.attr("hash") == second.attr("hash")
    other = LabelOps()(FuseOps()(parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(4, 4), float32]) {
  %0 = nn.dense(%x, %w, units=4);
  nn.relu(%0)
}""")))
    assert primitives(other)[0].attr("hash") != first.attr("hash")


def test_layout_attributes_of_the_calls_are_copied_to_the_function():
    mod = LabelOps()(FuseOps()(parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w);
  nn.max_pool2d(%0, pool_size=[2, 2])
}""")))
    conv, pool = primitives(mod)
    if conv.body.op.name != "nn.conv2d":
        conv, pool = pool, conv
    assert (conv.attr("data_layout"), conv.attr("kernel_layout"), conv.attr("out_layout")) == ("NCHW", "OIHW", "")
    assert pool.attr("layout") == "NCHW"
    assert mod.main.attr("data_layout") is None


def test_labelling_twice_changes_nothing():
    once = LabelOps()(FuseOps()(parse(TWO_DENSE)))
    twice = LabelOps()(once)
    assert structural_equal(once, twice)
    assert [f.attr("hash") for f in primitives(once)] == [f.attr("hash") for f in primitives(twice)]
    assert once.main.attr("hash") == twice.main.attr("hash")


def test_external_compiler_globals_are_not_labelled():
    mod = LabelOps()(parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) { @ext(%x) }
def @ext(%y: Tensor[(2), float32], Compiler="acme", global_symbol="ext", Primitive=1) { exp(%y) }"""))
    assert mod["ext"].attr("hash") is None
    assert mod.main.attr("hash") is not None


def test_primitive_name_lists_the_ops_operands_first():
    mod = FuseOps()(parse(TWO_DENSE))
    assert [primitive_name(f) for f in primitives(mod)] == ["fused_nn_dense_nn_bias_add_nn_relu"] * 2
    diamond = FuseOps()(parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  %0 = exp(%x);
  %1 = negative(%x);
  %2 = add(%0, %1);
  multiply(%2, %0)
}"""))
    assert primitive_name(primitives(diamond)[0]) == "fused_exp_negative_add_multiply"


def test_long_primitive_name_is_cut_and_suffixed_with_the_hash_tvm_uses():
    body = "%x"
    for _ in range(20):
        body = f"nn.relu({body})"
    mod = FuseOps()(parse(f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) {{ {body} }}'))
    (func,) = primitives(mod)
    assert primitive_name(func) == (
        "fused_nn_relu_nn_relu_nn_relu_nn_relu_nn_relu_nn_relu_nn_relu_nn_relu_nn_relu_nn" + "_cc4654ad65f8f6a8_"
    )


def test_std_string_hash_matches_libstdcxx():
    # Values printed by `std::hash<std::string>{}` compiled with g++ on x86-64 Linux.
    assert std_string_hash("") == 0x553E93901E462A6E
    assert std_string_hash("a") == 0x454DDEE488C1ED6B
    assert std_string_hash("fused_nn_conv2d") == 0xC83DC82268333CAE
