import numpy as np
import pytest

from compiler import ops
from compiler.diagnostics import ParseError
from compiler.parser.printer import astext
from compiler.ir.structural import structural_equal
from compiler.ir.types import TensorType, TupleType
from compiler.ops import annotation
from compiler.parser import parse
from compiler.runtime.interpreter import run_main

ANNOTATED = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  %0 = annotation.compiler_begin(%x, compiler="acme");
  %1 = nn.relu(%0);
  annotation.compiler_end(%1, compiler="acme")
}
"""


def test_annotations_are_internal_identity_ops():
    for opdef in (annotation.COMPILER_BEGIN, annotation.COMPILER_END):
        assert ops.get(opdef.name) is opdef and opdef.extras["internal"]
        ty = TupleType((TensorType((2,), "int8"), TensorType((3, 4), "float32")))
        assert opdef.type_rel([ty], opdef.make_attrs({"compiler": "acme"})) == ty
        x = np.arange(4.0)
        assert opdef.reference([x], opdef.make_attrs({"compiler": "acme"})) is x


def test_annotated_programs_parse_print_and_run():
    mod = parse(ANNOTATED)
    assert mod.main.body.checked_type == TensorType((2, 3), "float32")
    assert structural_equal(parse(astext(mod)), mod)
    x = np.array([[-1, 2, -3], [4, -5, 6]], dtype="float32")
    np.testing.assert_array_equal(run_main(mod, {"x": x})[0], np.maximum(x, 0))


def test_the_compiler_attribute_is_required():
    with pytest.raises(ParseError, match="requires attribute compiler"):
        parse(ANNOTATED.replace(', compiler="acme");\n  %1', ");\n  %1"))
