import numpy as np

from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.passes.simplify_inference import SimplifyInference
from compiler.runtime.interpreter import run_main


def random_inputs(mod, seed=0, low=0.5, high=2.0):
    rng = np.random.default_rng(seed)
    return {
        p.name_hint: rng.uniform(low, high, size=p.type_annotation.shape).astype(p.type_annotation.dtype)
        for p in mod.main.params
    }


def assert_simplifies(before_text, expected_text):
    before = parse(before_text)
    after = SimplifyInference()(before)
    expected = parse(expected_text)
    assert structural_equal(after, expected), after.astext()
    inputs = random_inputs(before)
    for got, want in zip(run_main(after, inputs), run_main(before, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


BN_SIGNATURE = (
    "%x: Tensor[(2, 3, 4, 4), float32], %g: Tensor[(3), float32], %b: Tensor[(3), float32], "
    "%m: Tensor[(3), float32], %v: Tensor[(3), float32]"
)


def test_batch_norm_becomes_scale_and_shift_along_the_channel_axis():
    assert_simplifies(
        f"""#[version = "0.0.5"]
def @main({BN_SIGNATURE}) {{
  %0 = nn.batch_norm(%x, %g, %b, %m, %v, epsilon=0.001f);
  nn.relu(%0.0)
}}""",
        f"""#[version = "0.0.5"]
def @main({BN_SIGNATURE}) {{
  %0 = add(%v, 0.001f);
  %1 = sqrt(%0);
  %2 = divide(1f, %1);
  %3 = multiply(%2, %g);
  %4 = negative(%m);
  %5 = multiply(%4, %3);
  %6 = add(%5, %b);
  %7 = expand_dims(%3, axis=1, num_newaxis=2);
  %8 = multiply(%x, %7);
  %9 = expand_dims(%6, axis=1, num_newaxis=2);
  %10 = add(%8, %9);
  nn.relu(%10)
}}""",
    )


def test_batch_norm_without_scale_and_center_on_the_last_axis_needs_no_expand_dims():
    assert_simplifies(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 5), float32], %g: Tensor[(5), float32], %b: Tensor[(5), float32],
          %m: Tensor[(5), float32], %v: Tensor[(5), float32]) {
  %0 = nn.batch_norm(%x, %g, %b, %m, %v, axis=-1, center=False, scale=False);
  %0.0
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 5), float32], %g: Tensor[(5), float32], %b: Tensor[(5), float32],
          %m: Tensor[(5), float32], %v: Tensor[(5), float32]) {
  %0 = add(%v, 1e-05f);
  %1 = sqrt(%0);
  %2 = divide(1f, %1);
  %3 = negative(%m);
  %4 = multiply(%3, %2);
  %5 = multiply(%x, %2);
  add(%5, %4)
}""",
    )


def test_batch_norm_statistics_projections_are_the_moving_statistics():
    assert_simplifies(
        f"""#[version = "0.0.5"]
def @main({BN_SIGNATURE}) {{
  %0 = nn.batch_norm(%x, %g, %b, %m, %v);
  (%0.1, %0.2)
}}""",
        f"""#[version = "0.0.5"]
def @main({BN_SIGNATURE}) {{
  (%m, %v)
}}""",
    )


def test_layer_norm_becomes_mean_variance_and_rsqrt():
    assert_simplifies(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 6), float32], %g: Tensor[(6), float32], %b: Tensor[(6), float32]) {
  nn.layer_norm(%x, %g, %b)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 6), float32], %g: Tensor[(6), float32], %b: Tensor[(6), float32]) {
  %0 = mean(%x, axis=[-1], keepdims=True);
  %1 = subtract(%x, %0);
  %2 = multiply(%1, %1);
  %3 = mean(%2, axis=[-1], keepdims=True);
  %4 = add(%3, 1e-05f);
  %5 = rsqrt(%4);
  %6 = multiply(%1, %5);
  %7 = multiply(%6, %g);
  add(%7, %b)
}""",
    )


def test_layer_norm_on_a_middle_axis_broadcasts_gamma_and_beta():
    assert_simplifies(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32], %g: Tensor[(3), float32], %b: Tensor[(3), float32]) {
  nn.layer_norm(%x, %g, %b, axis=1, epsilon=0.01f, center=False)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 4), float32], %g: Tensor[(3), float32], %b: Tensor[(3), float32]) {
  %0 = mean(%x, axis=[1], keepdims=True);
  %1 = subtract(%x, %0);
  %2 = multiply(%1, %1);
  %3 = mean(%2, axis=[1], keepdims=True);
  %4 = add(%3, 0.01f);
  %5 = rsqrt(%4);
  %6 = multiply(%1, %5);
  %7 = expand_dims(%g, axis=1);
  multiply(%6, %7)
}""",
    )


def test_dropout_output_is_its_input():
    assert_simplifies(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = nn.dropout(%x, rate=0.2f);
  exp(%0.0)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  exp(%x)
}""",
    )


def test_dropout_mask_keeps_every_element():
    assert_simplifies(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = nn.dropout(%x);
  %0.1
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  ones_like(%x)
}""",
    )


def test_dropout_used_as_a_whole_tuple_is_kept():
    text = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = nn.dropout(%x);
  (%0, %0.0)
}"""
    assert_simplifies(text, text.replace("%0.0", "%x"))


def test_functions_in_every_global_are_simplified_but_primitive_ones_are_not():
    before = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(2, 3), float32], Primitive=1) {
    %1 = nn.dropout(%p0);
    %1.0
  };
  %2 = %0(%x);
  @helper(%2)
}
def @helper(%y: Tensor[(2, 3), float32]) {
  %0 = nn.dropout(%y);
  %0.0
}"""
    expected = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = fn (%p0: Tensor[(2, 3), float32], Primitive=1) {
    %1 = nn.dropout(%p0);
    %1.0
  };
  %2 = %0(%x);
  @helper(%2)
}
def @helper(%y: Tensor[(2, 3), float32]) {
  %y
}"""
    assert_simplifies(before, expected)


def test_result_is_typed():
    mod = SimplifyInference()(parse(f"""#[version = "0.0.5"]
def @main({BN_SIGNATURE}) {{
  %0 = nn.batch_norm(%x, %g, %b, %m, %v);
  %0.0
}}"""))
    assert str(mod.main.body.checked_type) == "Tensor[(2, 3, 4, 4), float32]"


def test_module_without_normalisation_is_returned_unchanged():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) { exp(%x) }""")
    assert SimplifyInference()(mod) is mod
