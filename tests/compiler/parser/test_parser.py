"""Parser: every construct of the Relay text format we accept, and the IR it builds.

The modules here follow the shapes of TVM's LowerTE tests (a primitive function, a function for
an external compiler, an `Extern=1` definition, a dynamic result type) and of a partitioned
module with nested composite functions, written in our own words.
"""

from __future__ import annotations

import numpy as np
import pytest

from compiler.diagnostics import ParseError
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Call, Constant, Function, GlobalVar, If, Let, Op, Tuple, TupleGetItem, Var
from compiler.ir.module import IRModule
from compiler.ir.types import ANY, FuncType, TensorType, TupleType
from compiler.ir.structural import structural_equal, structural_hash
from compiler.parser import astext, parse, parse_expr

HEADER = '#[version = "0.0.5"]\n'


def parse_untyped(text: str) -> IRModule:
    return parse(HEADER + text, "test.relay", infer_types=False)


def main_body(text: str) -> object:
    return parse_untyped(text).main.body


def as_call(expr: object) -> Call:
    assert isinstance(expr, Call), expr
    return expr


def projected(expr: object) -> object:
    """The tuple a projection reads from."""
    assert isinstance(expr, TupleGetItem), expr
    return expr.tuple_value


def as_function(expr: object) -> Function:
    assert isinstance(expr, Function), expr
    return expr


PRIMITIVE_MODULE = """
def @main(%inp: Tensor[(4, 6), float32]) -> Tensor[(4, 6), float32] {
  %0 = fn(%u : Tensor[(4, 6), float32], %v : Tensor[(4, 6), float32], Primitive=1) -> Tensor[(4, 6), float32] {
    add(%u, %v)
  };
  %0(%inp, %inp)
}
"""

EXTERNAL_COMPILER_MODULE = """
def @main(%inp: Tensor[(4, 6), float32]) -> Tensor[(4, 6), float32] {
  %0 = fn(%u : Tensor[(4, 6), float32], %v : Tensor[(4, 6), float32], Primitive=1, Compiler="acme_npu", global_symbol="acme_add") -> Tensor[(4, 6), float32] {
    add(%u, %v)
  };
  %0(%inp, %inp)
}
"""

EXTERN_DEFINITION_MODULE = """
def @main(%inp: Tensor[(4, 6), float32]) -> Tensor[(4, 6), float32] {
  @ext_add(%inp, %inp)
}
def @ext_add(%u : Tensor[(4, 6), float32], %v : Tensor[(4, 6), float32], Extern=1) -> Tensor[(4, 6), float32] {
  add(%u, %v)
}
"""

DYNAMIC_EXTERN_MODULE = """
def @main(%inp: Tensor[(4, 6), float32]) -> Tensor[(?, ?), float32] {
  @ext_dyn(%inp, %inp)
}
def @ext_dyn(%u : Tensor[(4, 6), float32], %v : Tensor[(4, 6), float32], Extern=1) -> Tensor[(?, ?), float32] {
  add(%u, %v)
}
"""

PARTITIONED_MODULE = """
def @tvmgen_default_acme_main_0(%acme_0_i0: Tensor[(32, 400), float32] /* ty=Tensor[(32, 400), float32] */, %acme_0_i1: Tensor[(250, 400), float32] /* ty=Tensor[(250, 400), float32] */, %acme_0_i2: Tensor[(250), float32] /* ty=Tensor[(250), float32] */, %acme_0_i3: Tensor[(8, 250), float32] /* ty=Tensor[(8, 250), float32] */, %acme_0_i4: Tensor[(8), float32] /* ty=Tensor[(8), float32] */, Compiler="acme", Primitive=1, Inline=1, global_symbol="tvmgen_default_acme_main_0") -> Tensor[(32, 8), float32] {
  %23 = fn (%FunctionVar_1_01: Tensor[(32, 400), float32] /* ty=Tensor[(32, 400), float32] */, %FunctionVar_1_11: Tensor[(250, 400), float32] /* ty=Tensor[(250, 400), float32] */, %FunctionVar_1_21: Tensor[(250), float32] /* ty=Tensor[(250), float32] */, PartitionedFromPattern="nn.dense_nn.bias_add_nn.relu_", Composite="acme.dense_bias_relu") -> Tensor[(32, 250), float32] {
    %21 = nn.dense(%FunctionVar_1_01, %FunctionVar_1_11, units=None) /* ty=Tensor[(32, 250), float32] span=aten::linear_0:0:0 */;
    %22 = nn.bias_add(%21, %FunctionVar_1_21, axis=-1) /* ty=Tensor[(32, 250), float32] span=aten::linear_0:0:0 */;
    nn.relu(%22) /* ty=Tensor[(32, 250), float32] span=aten::relu_0:0:0 */
  } /* ty=fn (Tensor[(32, 400), float32], Tensor[(250, 400), float32], Tensor[(250), float32]) -> Tensor[(32, 250), float32] */;
  %24 = %23(%acme_0_i0, %acme_0_i1, %acme_0_i2) /* ty=Tensor[(32, 250), float32] */;
  %26 = fn (%FunctionVar_1_0: Tensor[(32, 250), float32] /* ty=Tensor[(32, 250), float32] */, %FunctionVar_1_1: Tensor[(8, 250), float32] /* ty=Tensor[(8, 250), float32] */, %FunctionVar_1_2: Tensor[(8), float32] /* ty=Tensor[(8), float32] */, PartitionedFromPattern="nn.dense_nn.bias_add_", Composite="acme.dense_bias") -> Tensor[(32, 8), float32] {
    %25 = nn.dense(%FunctionVar_1_0, %FunctionVar_1_1, units=None) /* ty=Tensor[(32, 8), float32] span=aten::linear_1:0:0 */;
    nn.bias_add(%25, %FunctionVar_1_2, axis=-1) /* ty=Tensor[(32, 8), float32] span=aten::linear_1:0:0 */
  } /* ty=fn (Tensor[(32, 250), float32], Tensor[(8, 250), float32], Tensor[(8), float32]) -> Tensor[(32, 8), float32] */;
  %26(%24, %acme_0_i3, %acme_0_i4) /* ty=Tensor[(32, 8), float32] */
}

def @main(%x: Tensor[(32, 400), float32], %w1: Tensor[(250, 400), float32], %b1: Tensor[(250), float32], %w2: Tensor[(8, 250), float32], %b2: Tensor[(8), float32]) -> Tensor[(32, 8), float32] {
  @tvmgen_default_acme_main_0(%x, %w1, %b1, %w2, %b2) /* ty=Tensor[(32, 8), float32] */
}
"""


def test_parser_reads_a_call_to_a_primitive_function_literal():
    mod = parse_untyped(PRIMITIVE_MODULE)
    call = as_call(mod.main.body)
    prim = as_function(call.op)
    assert prim.attrs == {"Primitive": 1}
    assert [p.name_hint for p in prim.params] == ["u", "v"]
    assert prim.ret_type == TensorType((4, 6), "float32")
    assert as_call(prim.body).op is Op.get("add")
    inp = mod.main.params[0]
    assert call.args == (inp, inp)


def test_parser_reads_external_compiler_attributes_on_a_function_literal():
    call = as_call(parse_untyped(EXTERNAL_COMPILER_MODULE).main.body)
    assert as_function(call.op).attrs == {"Primitive": 1, "Compiler": "acme_npu", "global_symbol": "acme_add"}


def test_parser_resolves_a_global_defined_after_its_use():
    mod = parse_untyped(EXTERN_DEFINITION_MODULE)
    call = as_call(mod.main.body)
    assert isinstance(call.op, GlobalVar)
    assert call.op is mod.get_global_var("ext_add")
    assert as_function(mod["ext_add"]).attrs == {"Extern": 1}


def test_parser_reads_dynamic_dimensions_in_return_types():
    mod = parse_untyped(DYNAMIC_EXTERN_MODULE)
    assert mod.main.ret_type == TensorType((ANY, ANY), "float32")
    assert as_function(mod["ext_dyn"]).ret_type == TensorType((ANY, ANY), "float32")


@pytest.mark.parametrize(
    "text", [PRIMITIVE_MODULE, EXTERNAL_COMPILER_MODULE, EXTERN_DEFINITION_MODULE, DYNAMIC_EXTERN_MODULE]
)
def test_parser_type_checks_the_lower_te_shaped_modules(text):
    mod = parse(HEADER + text)
    assert mod.main.body.checked_type in (TensorType((4, 6), "float32"), TensorType((ANY, ANY), "float32"))


def test_parser_reads_a_partitioned_module_with_nested_composites():
    mod = parse_untyped(PARTITIONED_MODULE)
    outer = as_function(mod["tvmgen_default_acme_main_0"])
    assert outer.attrs == {
        "Compiler": "acme",
        "Primitive": 1,
        "Inline": 1,
        "global_symbol": "tvmgen_default_acme_main_0",
    }
    last = as_call(outer.body)
    second = as_function(last.op)
    assert second.attrs == {"PartitionedFromPattern": "nn.dense_nn.bias_add_", "Composite": "acme.dense_bias"}
    first_call = as_call(last.args[0])
    first = as_function(first_call.op)
    assert first.attrs["Composite"] == "acme.dense_bias_relu"
    relu = as_call(first.body)
    bias_add = as_call(relu.args[0])
    dense = as_call(bias_add.args[0])
    assert (relu.op_name, bias_add.op_name, dense.op_name) == ("nn.relu", "nn.bias_add", "nn.dense")
    assert dense.attrs["units"] is None
    assert bias_add.attrs["axis"] == -1
    assert dense.args == first.params[:2]


def test_parser_type_checks_the_partitioned_module():
    mod = parse(HEADER + PARTITIONED_MODULE)
    assert mod.main.body.checked_type == TensorType((32, 8), "float32")


def test_parser_shares_one_object_for_every_use_of_a_graph_binding():
    body = as_call(
        main_body(
            """
        def @main(%a: Tensor[(3), float32]) {
          %0 = nn.relu(%a);
          %1 = (%0, %0);
          add(%1.0, %0)
        }"""
        )
    )
    first = body.args[0]
    assert isinstance(first, TupleGetItem) and first.index == 0
    pair = first.tuple_value
    assert isinstance(pair, Tuple)
    assert pair.fields[0] is pair.fields[1] is body.args[1]


def test_parser_scopes_graph_bindings_per_function_body():
    mod = parse_untyped(
        """
        def @first(%a: Tensor[(3), float32]) { %0 = negative(%a); %0 }
        def @second(%b: Tensor[(3), float32]) {
          %0 = fn (%c: Tensor[(3), float32]) { %0 = exp(%c); %0 };
          %0(%b)
        }"""
    )
    assert as_call(as_function(mod["first"]).body).op_name == "negative"
    outer = as_call(as_function(mod["second"]).body)
    assert as_call(as_function(outer.op).body).op_name == "exp"


def test_parser_lets_inner_functions_see_outer_graph_bindings():
    body = as_call(
        main_body(
            """
        def @main(%a: Tensor[(3), float32]) {
          %0 = exp(%a);
          %1 = fn (%b: Tensor[(3), float32]) { add(%b, %0) };
          %1(%a)
        }"""
        )
    )
    inner = as_call(as_function(body.op).body)
    assert as_call(inner.args[1]).op_name == "exp"


def test_parser_builds_real_lets_with_annotated_and_plain_variables():
    let = main_body(
        """
        def @main(%a: Tensor[(3), float32]) {
          let %t: Tensor[(3), float32] = exp(%a);
          let %t = add(%t, %t);
          %t
        }"""
    )
    assert isinstance(let, Let)
    assert let.var.name_hint == "t" and let.var.type_annotation == TensorType((3,), "float32")
    inner = let.body
    assert isinstance(inner, Let)
    assert inner.var.type_annotation is None
    assert as_call(inner.value).args == (let.var, let.var)
    assert inner.body is inner.var


def test_parser_turns_a_discarded_expression_into_a_let():
    mod = parse_untyped("def @main(%a: Tensor[(3), float32]) { exp(%a); %a }")
    let = mod.main.body
    assert isinstance(let, Let)
    assert as_call(let.value).op_name == "exp"
    assert let.body is mod.main.params[0]


def test_parser_reads_function_attributes_of_every_printed_kind():
    func = as_function(
        main_body(
            """
        def @main() {
          fn (%x: Tensor[(2), float32], Primitive=1, Inline=1, Extern=1, relay.reshape_only=1,
              hash="00ffa3b2c4d5e6f7", Compiler="acme", global_symbol="acme_f0", data_layout="NCHW",
              PartitionedFromPattern="nn.conv2d_add_", Composite="acme.conv_add") {
            %x
          }
        }"""
        )
    )
    assert dict(func.attrs) == {
        "Primitive": 1,
        "Inline": 1,
        "Extern": 1,
        "relay.reshape_only": 1,
        "hash": "00ffa3b2c4d5e6f7",
        "Compiler": "acme",
        "global_symbol": "acme_f0",
        "data_layout": "NCHW",
        "PartitionedFromPattern": "nn.conv2d_add_",
        "Composite": "acme.conv_add",
    }
    assert func.ret_type is None


def test_parser_reads_tuples_and_grouping():
    body = main_body("def @main(%a: float32, %b: float32) { ((), (%a,), (%a, %b,), (%b)) }")
    assert isinstance(body, Tuple)
    empty, single, pair, grouped = body.fields
    assert isinstance(empty, Tuple) and empty.fields == ()
    assert isinstance(single, Tuple) and len(single.fields) == 1
    assert isinstance(pair, Tuple) and len(pair.fields) == 2
    assert isinstance(grouped, Var) and grouped.name_hint == "b"


def test_parser_reads_chained_projections():
    body = main_body("def @main(%t: ((float32, int32), bool)) { %t.0.1 }")
    assert isinstance(body, TupleGetItem) and body.index == 1
    assert isinstance(body.tuple_value, TupleGetItem) and body.tuple_value.index == 0


def test_parser_reads_if_else_with_scoped_lets():
    body = main_body(
        """
        def @main(%c: bool, %x: float32) {
          if (%c) { let %y = negative(%x); %y } else { let %y = exp(%x); %y }
        }"""
    )
    assert isinstance(body, If)
    assert isinstance(body.true_branch, Let) and isinstance(body.false_branch, Let)
    assert body.true_branch.var is not body.false_branch.var


def test_parser_fills_attribute_defaults_and_reads_every_value_form():
    body = as_call(
        main_body(
            """
        def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
          %0 = nn.conv2d(%x, %w, strides=[1, 1], padding=[1i64, 1, 1, 1], channels=4, kernel_size=[3, 3], data_layout="NCHW", out_dtype="float32");
          %1 = nn.pad(%0, 0f, pad_width=[[0, 0], [0, 0], [1, 1], [2, 2]]);
          %2 = nn.batch_norm(%1, %1, %1, %1, %1, epsilon=1e-05f, center=False, scale=True);
          %3 = nn.dropout(%2.0, rate=0.25);
          %4 = nn.leaky_relu(%3.0, alpha=1);
          transpose(%4, axes=None)
        }"""
        )
    )
    assert body.attrs == {"axes": None}
    leaky = as_call(body.args[0])
    assert leaky.attrs["alpha"] == 1.0
    dropout = as_call(projected(leaky.args[0]))
    assert dropout.attrs == {"rate": 0.25}
    bn = as_call(projected(dropout.args[0]))
    assert bn.attrs == {"axis": 1, "epsilon": 1e-05, "center": False, "scale": True}
    pad = as_call(bn.args[0])
    assert pad.attrs["pad_width"] == ((0, 0), (0, 0), (1, 1), (2, 2))
    assert pad.attrs["pad_mode"] == "constant"
    conv = as_call(pad.args[0])
    assert conv.attrs["padding"] == (1, 1, 1, 1)
    assert conv.attrs["groups"] == 1 and conv.attrs["kernel_layout"] == "OIHW"
    assert conv.attrs["out_dtype"] == "float32"


def test_parser_reads_call_lowered_metadata_maps_with_globals():
    mod = parse_untyped(
        """
        def @main(%a: Tensor[(2), float32]) {
          call_lowered(@kernel, (%a,), metadata={relay_attrs={Primitive=1}, all_prim_fn_vars=[@kernel]})
        }
        def @kernel(%p: Tensor[(2), float32], Extern=1) { %p }"""
    )
    call = as_call(mod.main.body)
    metadata = call.attrs["metadata"]
    assert isinstance(metadata, Attrs)
    assert metadata["relay_attrs"] == {"Primitive": 1}
    assert metadata["all_prim_fn_vars"] == (mod.get_global_var("kernel"),)


@pytest.mark.parametrize(
    "literal, value, dtype",
    [
        ("1f", 1.0, "float32"),
        ("0.5f", 0.5, "float32"),
        ("1e-05f", 1e-05, "float32"),
        ("2", 2, "int32"),
        ("1i64", 1, "int64"),
        ("3i16", 3, "int16"),
        ("1f16", 1.0, "float16"),
        ("-2.5f64", -2.5, "float64"),
        ("True", True, "bool"),
        ("False", False, "bool"),
    ],
)
def test_parser_makes_scalar_constants_from_literals(literal, value, dtype):
    const = parse_expr(literal)
    assert isinstance(const, Constant)
    assert const.data.shape == () and str(const.data.dtype) == dtype
    assert const.data.item() == pytest.approx(value)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("%a + %b * %c", ("add", "a", ("multiply", "b", "c"))),
        ("%a - %b - %c", ("subtract", ("subtract", "a", "b"), "c")),
        ("%a / %b * %c", ("multiply", ("divide", "a", "b"), "c")),
        ("(%a + %b) * %c", ("multiply", ("add", "a", "b"), "c")),
        ("%a + %b < %c", ("less", ("add", "a", "b"), "c")),
        ("%a >= %b == %c <= %a", ("equal", ("greater_equal", "a", "b"), ("less_equal", "c", "a"))),
        ("%a > %b != %c", ("not_equal", ("greater", "a", "b"), "c")),
        ("%a -1f", ("subtract", "a", "1.0")),
    ],
)
def test_parser_applies_infix_precedence_and_left_associativity(text, expected):
    source = "free_var %a: float32; free_var %b: float32; free_var %c: float32; " + text
    assert _shape(parse_expr(source)) == expected


def _shape(expr: object) -> object:
    """A nested tuple view of an expression: (op, args...) for calls, names for variables."""
    if isinstance(expr, Let):
        return _shape(expr.body)
    if isinstance(expr, Var):
        return expr.name_hint
    if isinstance(expr, Constant):
        return str(expr.data.item())
    call = as_call(expr)
    return (call.op_name, *(_shape(a) for a in call.args))


@pytest.mark.parametrize(
    "annotation, expected",
    [
        ("Tensor[(1, 2), float32]", TensorType((1, 2), "float32")),
        ("Tensor[(5), int8]", TensorType((5,), "int8")),
        ("Tensor[(5,), uint8]", TensorType((5,), "uint8")),
        ("Tensor[(1i64, 4i64), float16]", TensorType((1, 4), "float16")),
        ("Tensor[(?, 3, ?), float32]", TensorType((ANY, 3, ANY), "float32")),
        ("Tensor[(), bool]", TensorType((), "bool")),
        ("float64", TensorType((), "float64")),
        ("(int32, Tensor[(2), float32])", TupleType((TensorType((), "int32"), TensorType((2,), "float32")))),
        ("(int64,)", TupleType((TensorType((), "int64"),))),
        ("(int64)", TensorType((), "int64")),
        ("()", TupleType(())),
        (
            "fn (float32, (int32,)) -> bool",
            FuncType((TensorType((), "float32"), TupleType((TensorType((), "int32"),))), TensorType((), "bool")),
        ),
    ],
)
def test_parser_reads_type_annotations(annotation, expected):
    func = parse_untyped(f"def @main(%p: {annotation}) -> {annotation} {{ %p }}").main
    assert func.params[0].type_annotation == expected
    assert func.ret_type == expected


def test_parser_resolves_meta_constants_and_shares_each_index():
    from compiler.parser.metadata import encode_metadata

    weights = np.arange(6, dtype="float32").reshape(2, 3)
    section = encode_metadata([weights, np.array([7, 8], dtype="int8")])
    body = as_call(
        main_body(
            """
        def @main(%x: Tensor[(2, 3), float32]) {
          %0 = add(%x, meta[relay.Constant][0] /* ty=Tensor[(2, 3), float32] */);
          multiply(%0, meta[relay.Constant][0])
        }
        #[metadata]
        """
            + section
        )
    )
    second = body.args[1]
    first = as_call(body.args[0]).args[1]
    assert isinstance(first, Constant) and first is second
    np.testing.assert_array_equal(first.data, weights)
    assert first.span is not None and (first.span.line, first.span.column) == (4, 24)


def test_parser_sets_spans_on_nodes_at_their_first_token():
    mod = parse_untyped(
        """def @main(%x: Tensor[(2), float32]) {
  %0 = (%x, 2f);
  nn.relu(%0.0)
}"""
    )
    func = mod.main
    call = as_call(func.body)
    getitem = call.args[0]
    assert isinstance(getitem, TupleGetItem)
    pair = getitem.tuple_value
    assert isinstance(pair, Tuple)
    constant = pair.fields[1]
    positions = {
        "function": func.span,
        "param": func.params[0].span,
        "call": call.span,
        "getitem": getitem.span,
        "tuple": pair.span,
        "constant": constant.span,
    }
    found = {k: (s.line, s.column, s.source_name) for k, s in positions.items() if s is not None}
    assert found == {
        "function": (2, 1, "test.relay"),
        "param": (2, 11, "test.relay"),
        "call": (4, 3, "test.relay"),
        "getitem": (4, 11, "test.relay"),
        "tuple": (3, 8, "test.relay"),
        "constant": (3, 13, "test.relay"),
    }


def test_parse_expr_reads_free_vars_and_optional_header():
    expr = parse_expr('#[version = "0.0.5"]\nfree_var %q: Tensor[(3), int32];\nnegative(%q)')
    call = as_call(expr)
    assert isinstance(call.args[0], Var) and call.args[0].type_annotation == TensorType((3,), "int32")
    assert isinstance(parse_expr("fn (%z: float32) -> float32 { %z }"), Function)


def test_parse_expr_shares_one_var_for_every_use_of_a_free_var_with_or_without_type():
    expr = as_call(parse_expr("free_var %a: Tensor[(2), float32];\nfree_var %b;\n%0 = add(%a, %b);\nmultiply(%0, %a)"))
    inner = as_call(expr.args[0])
    assert expr.args[1] is inner.args[0]
    assert inner.args[0].type_annotation == TensorType((2,), "float32")
    assert isinstance(inner.args[1], Var) and inner.args[1].type_annotation is None


def test_parse_expr_reports_a_free_var_without_a_variable_with_location():
    with pytest.raises(ParseError, match="1:10: error: expected a variable like %x after `free_var`"):
        parse_expr("free_var 3;\nnegative(%x)")


def test_parser_reads_blocks_curried_calls_and_infinite_literals():
    body = main_body("def @main(%x: float32) { { let %y = maximum(%x, -inff); %y } }")
    assert isinstance(body, Let)
    limit = as_call(body.value).args[1]
    assert isinstance(limit, Constant) and limit.data.item() == float("-inf")
    curried = as_call(parse_expr("free_var %f: fn (float32) -> fn (float32) -> float32; %f(1f)(2f)"))
    inner = as_call(curried.op)
    assert isinstance(inner.op, Var) and inner.op.name_hint == "f"


def test_parenthesized_let_sequence_is_an_operand():
    mod = parse("""#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  %0 = (let %w = exp(%x); %w);
  add(%0, (%1 = negative(%x); %1))
}""")
    body = mod.main.body
    assert body.op.name == "add"
    assert isinstance(body.args[0], Let) and body.args[0].var.name_hint == "w"
    assert body.args[1].op.name == "negative"


@pytest.mark.parametrize(
    "text",
    [PRIMITIVE_MODULE, EXTERNAL_COMPILER_MODULE, EXTERN_DEFINITION_MODULE, DYNAMIC_EXTERN_MODULE, PARTITIONED_MODULE],
    ids=["primitive", "external_compiler", "extern_definition", "dynamic_extern", "partitioned"],
)
def test_seed_shaped_modules_parse_print_and_parse_back_equal(text):
    from compiler.parser.printer import astext
    from compiler.ir.structural import structural_equal

    first = parse(HEADER + text)
    printed = astext(first)
    second = parse(printed)
    assert structural_equal(first, second)
    assert astext(second) == printed


@pytest.mark.parametrize(
    "dtype",
    ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"],
)
def test_parser_reads_every_scalar_dtype_spelling_in_tensor_and_bare_types(dtype):
    main = parse_untyped(f"def @main(%x: Tensor[(2), {dtype}], %y: {dtype}) {{ %x }}").main
    assert main.params[0].type_annotation == TensorType((2,), dtype)
    assert main.params[1].type_annotation == TensorType((), dtype)


WHILE_LOOP = """def @main(%x: Tensor[(2), float32], %n: int32) -> Tensor[(2), float32] {
  let %while_loop = fn (%i: int32, %acc: Tensor[(2), float32]) {
    if (less(%i, %n)) { %while_loop(add(%i, 1), add(%acc, %x)) } else { %acc }
  };
  %while_loop(0, %x)
}"""


def test_let_bound_function_sees_its_own_name_and_round_trips():
    mod = parse_untyped(WHILE_LOOP)
    let = mod.main.body
    assert isinstance(let, Let) and isinstance(let.value, Function)
    recursive_call = let.value.body.true_branch
    assert isinstance(recursive_call, Call) and recursive_call.op is let.var
    again = parse(astext(mod), infer_types=False)
    assert structural_equal(mod, again) and structural_hash(mod) == structural_hash(again)


def test_let_bound_non_function_does_not_see_its_own_name():
    with pytest.raises(ParseError, match="undefined variable %y"):
        parse_untyped("def @main(%x: float32) { let %y = add(%y, %x); %y }")


def test_parser_reads_from_pytorch_parameter_names_with_sequential_indices():
    mod = parse(
        '#[version = "0.0.5"]\n'
        "def @main(%input0: Tensor[(1, 4), float32], %layer1.0.fc.weight: Tensor[(2, 4), float32], "
        "%layer1.0.fc.bias: Tensor[(2), float32]) {\n"
        "  %0 = nn.dense(%input0, %layer1.0.fc.weight, units=None);\n"
        "  %1 = (%0, %layer1.0.fc.bias);\n"
        "  add(%1.0, %1.1)\n"
        "}\n"
    )
    main = mod["main"]
    assert [p.name_hint for p in main.params] == ["input0", "layer1.0.fc.weight", "layer1.0.fc.bias"]
    body = main.body
    assert isinstance(body, Call) and all(isinstance(a, TupleGetItem) for a in body.args)
    assert body.args[0].tuple_value.fields[1] is main.params[2]


@pytest.mark.parametrize("spelling, dtype", [("int", "int32"), ("uint", "uint32"), ("float", "float32")])
def test_a_dtype_kind_without_bits_is_32_bits_as_in_tvm(spelling, dtype):
    main = parse_untyped(f"def @main(%x: Tensor[(2), {spelling}], %y: {spelling}) {{ %x }}").main
    assert main.params[0].type_annotation == TensorType((2,), dtype)
    assert main.params[1].type_annotation == TensorType((), dtype)
