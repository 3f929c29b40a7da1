import numpy as np
import pytest

from compiler.ir.structural import structural_equal
from compiler.parser import parse
from compiler.passes.convert_layout import ConvertLayout
from compiler.passes.fold_constant import FoldConstant
from compiler.runtime.interpreter import run_main

NHWC_OHWI = {"nn.conv2d": ("NHWC", "OHWI")}


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def assert_converts(before_text, expected_text, desired=NHWC_OHWI, inputs=None):
    before = parse(before_text)
    after = ConvertLayout(desired)(before)
    expected = parse(expected_text)
    assert structural_equal(after, expected), after.astext()
    if inputs is not None:
        for got, want in zip(run_main(after, inputs), run_main(before, inputs)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return after


def test_conv2d_runs_in_the_desired_layouts_between_transforms():
    rng = np.random.default_rng(0)
    assert_converts(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 6, 6), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1, 1, 1])
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 6, 6), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NHWC");
  %1 = layout_transform(%w, src_layout="OIHW", dst_layout="OHWI");
  %2 = nn.conv2d(%0, %1, padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI");
  layout_transform(%2, src_layout="NHWC", dst_layout="NCHW")
}""",
        inputs={"x": _rand(rng, 1, 3, 6, 6), "w": _rand(rng, 4, 3, 3, 3)},
    )


def test_new_layout_flows_through_bias_add_relu_and_the_next_conv():
    rng = np.random.default_rng(1)
    assert_converts(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 6, 6), float32], %w1: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32],
          %w2: Tensor[(2, 4, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]);
  %1 = nn.bias_add(%0, %b);
  %2 = nn.relu(%1);
  %3 = nn.conv2d(%2, %w2);
  multiply(%3, 2f)
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 6, 6), float32], %w1: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32],
          %w2: Tensor[(2, 4, 1, 1), float32]) {
  %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NHWC");
  %1 = layout_transform(%w1, src_layout="OIHW", dst_layout="OHWI");
  %2 = nn.conv2d(%0, %1, padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI");
  %3 = nn.bias_add(%2, %b, axis=3);
  %4 = nn.relu(%3);
  %5 = layout_transform(%w2, src_layout="OIHW", dst_layout="OHWI");
  %6 = nn.conv2d(%4, %5, data_layout="NHWC", kernel_layout="OHWI");
  %7 = multiply(%6, 2f);
  layout_transform(%7, src_layout="NHWC", dst_layout="NCHW")
}""",
        inputs={"x": _rand(rng, 1, 3, 6, 6), "w1": _rand(rng, 4, 3, 3, 3), "b": _rand(rng, 4),
                "w2": _rand(rng, 2, 4, 1, 1)},
    )


def test_layout_sensitive_consumer_gets_the_original_layout_back_once():
    before = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 4, 4), float32], %w: Tensor[(2, 2, 1, 1), float32]) {
  %0 = nn.conv2d(%x, %w);
  %1 = sum(%0, axis=[1]);
  %2 = max(%0, axis=[1]);
  (%1, %2)
}""")
    after = ConvertLayout(NHWC_OHWI)(before)
    text = after.astext()
    assert text.count('src_layout="NHWC", dst_layout="NCHW"') == 1
    rng = np.random.default_rng(2)
    inputs = {"x": _rand(rng, 1, 2, 4, 4), "w": _rand(rng, 2, 2, 1, 1)}
    for got, want in zip(run_main(after, inputs), run_main(before, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_broadcast_with_a_full_shape_operand_transforms_that_operand():
    before = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 2, 3, 3), float32], %w: Tensor[(2, 2, 1, 1), float32], %y: Tensor[(1, 2, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w);
  add(%0, %y)
}""")
    after = ConvertLayout(NHWC_OHWI)(before)
    text = after.astext()
    assert 'layout_transform(%y, src_layout="NCHW", dst_layout="NHWC")' in text
    rng = np.random.default_rng(3)
    inputs = {"x": _rand(rng, 1, 2, 3, 3), "w": _rand(rng, 2, 2, 1, 1), "y": _rand(rng, 1, 2, 3, 3)}
    np.testing.assert_allclose(run_main(after, inputs)[0], run_main(before, inputs)[0], rtol=1e-5, atol=1e-5)


def test_conv2d_already_in_the_desired_layouts_is_unchanged():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 4, 4, 2), float32], %w: Tensor[(3, 1, 1, 2), float32]) {
  nn.conv2d(%x, %w, data_layout="NHWC", kernel_layout="OHWI")
}""")
    assert ConvertLayout(NHWC_OHWI)(mod) is mod


def test_nhwc_to_nchw_with_the_default_kernel_layout():
    rng = np.random.default_rng(4)
    assert_converts(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 5, 5, 2), float32], %w: Tensor[(3, 3, 2, 4), float32]) {
  nn.conv2d(%x, %w, data_layout="NHWC", kernel_layout="HWIO")
}""",
        """#[version = "0.0.5"]
def @main(%x: Tensor[(1, 5, 5, 2), float32], %w: Tensor[(3, 3, 2, 4), float32]) {
  %0 = layout_transform(%x, src_layout="NHWC", dst_layout="NCHW");
  %1 = layout_transform(%w, src_layout="HWIO", dst_layout="OIHW");
  %2 = nn.conv2d(%0, %1, data_layout="NCHW", kernel_layout="OIHW");
  layout_transform(%2, src_layout="NCHW", dst_layout="NHWC")
}""",
        desired={"nn.conv2d": ("NCHW", "default")},
        inputs={"x": _rand(rng, 1, 5, 5, 2), "w": _rand(rng, 3, 3, 2, 4)},
    )


def test_constant_weights_fold_into_the_new_layout():
    weight = np.arange(4 * 3 * 3 * 3, dtype="float32").reshape(4, 3, 3, 3)
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 6, 6), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  nn.conv2d(%x, %w, padding=[1, 1, 1, 1])
}""")
    from compiler.passes.bind_params import BindParams

    bound = BindParams({"w": weight})(mod)
    after = FoldConstant()(ConvertLayout(NHWC_OHWI)(bound))
    text = after.astext()
    assert text.count("layout_transform(") == 2  # data in, result out; the weight is folded
    conv = after.main.body.args[0]
    assert conv.attrs["kernel_layout"] == "OHWI"
    np.testing.assert_array_equal(conv.args[1].data, weight.transpose(0, 2, 3, 1))


def test_composite_takes_the_new_layouts_and_transforms_stay_outside():
    before = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 6, 6), float32], %w: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32]) {
  %0 = fn (%d: Tensor[(1, 3, 6, 6), float32], %k: Tensor[(4, 3, 3, 3), float32], %c: Tensor[(4), float32],
           Composite="acme.conv2d_bias_relu") {
    %1 = nn.conv2d(%d, %k, padding=[1, 1, 1, 1]);
    %2 = nn.bias_add(%1, %c);
    nn.relu(%2)
  };
  %0(%x, %w, %b)
}""")
    after = ConvertLayout(NHWC_OHWI)(before)
    expected = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(1, 3, 6, 6), float32], %w: Tensor[(4, 3, 3, 3), float32], %b: Tensor[(4), float32]) {
  %0 = fn (%d: Tensor[(1, 6, 6, 3), float32], %k: Tensor[(4, 3, 3, 3), float32], %c: Tensor[(4), float32],
           Composite="acme.conv2d_bias_relu") {
    %1 = nn.conv2d(%d, %k, padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI");
    %2 = nn.bias_add(%1, %c, axis=3);
    nn.relu(%2)
  };
  %3 = layout_transform(%x, src_layout="NCHW", dst_layout="NHWC");
  %4 = layout_transform(%w, src_layout="OIHW", dst_layout="OHWI");
  %5 = %0(%3, %4, %b);
  layout_transform(%5, src_layout="NHWC", dst_layout="NCHW")
}""")
    assert structural_equal(after, expected), after.astext()
    rng = np.random.default_rng(5)
    inputs = {"x": _rand(rng, 1, 3, 6, 6), "w": _rand(rng, 4, 3, 3, 3), "b": _rand(rng, 4)}
    np.testing.assert_allclose(run_main(after, inputs)[0], run_main(before, inputs)[0], rtol=1e-4, atol=1e-4)


def test_function_type_is_unchanged():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3, 5, 5), float32], %w: Tensor[(6, 3, 3, 3), float32]) {
  nn.conv2d(%x, %w, strides=[2, 2])
}""")
    after = ConvertLayout(NHWC_OHWI)(mod)
    assert str(after.main.checked_type) == str(mod.main.checked_type)


@pytest.mark.parametrize(
    "desired, message",
    [
        ({"nn.dense": ("NC",)}, "cannot convert 'nn.dense'"),
        ({"nn.conv2d": ("NCWH",)}, "data layout 'NCWH'"),
        ({"nn.conv2d": ("NHWC", "OIHWX")}, "kernel layout 'OIHWX'"),
        ({"nn.conv2d": ()}, "takes a data layout"),
    ],
)
def test_bad_desired_layouts_are_rejected_when_the_pass_is_made(desired, message):
    with pytest.raises(ValueError, match=message):
        ConvertLayout(desired)
