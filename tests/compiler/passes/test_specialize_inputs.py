from __future__ import annotations

import pytest

from compiler.diagnostics import InputError
from compiler.ir.types import TensorType
from compiler.parser import parse
from compiler.passes.specialize_inputs import SpecializeInputs, parse_input_shapes

BATCHED = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 4), float32], %w: Tensor[(3, 4), float32]) -> Tensor[(?, 3), float32] {
  nn.dense(%x, %w, units=3)
}"""


def test_the_given_shape_makes_the_whole_graph_static():
    mod = SpecializeInputs({"x": (2, 4)})(parse(BATCHED))
    main = mod.main
    assert main.params[0].type_annotation == TensorType((2, 4), "float32")
    assert main.body.checked_type == TensorType((2, 3), "float32")


def test_inputs_not_named_keep_their_type():
    mod = SpecializeInputs({"x": (5, 4)})(parse(BATCHED))
    assert mod.main.params[1].type_annotation == TensorType((3, 4), "float32")


@pytest.mark.parametrize(("shapes", "message"), [
    ({"y": (1, 4)}, r"--input-shapes names 'y', which is not an input of @main \(it takes x, w\)"),
    ({"x": (2, 4, 1)}, r"input x: shape \[2, 4, 1\] has 3 dims"),
    ({"x": (2, 5)}, r"input x: shape \[2, 5\] does not conform to the declared"),
    ({"x": (-1, 4)}, r"does not conform"),
])
def test_a_shape_that_does_not_fit_is_an_error_naming_the_input(shapes, message):
    with pytest.raises(InputError, match=message):
        SpecializeInputs(shapes)(parse(BATCHED))


def test_tvmc_form_is_parsed_with_or_without_spaces_in_a_shape():
    assert parse_input_shapes("x:[1,3,224,224] y:[8]") == {"x": (1, 3, 224, 224), "y": (8,)}
    assert parse_input_shapes(" x:[1, 3]  %y:[] ") == {"x": (1, 3), "y": ()}


@pytest.mark.parametrize(("text", "message"), [
    ("x=[1,2]", "is not NAME:"), ("x:[1,a]", "must be integers"), ("x:[1] x:[2]", "names 'x' twice"),
])
def test_a_malformed_input_shapes_text_is_an_error(text, message):
    with pytest.raises(InputError, match=message):
        parse_input_shapes(text)
