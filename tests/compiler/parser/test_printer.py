import math
import random
import sys
import textwrap

import numpy as np
import pytest

from compiler.ir.attrs import Attrs
from compiler.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
    const,
)
from compiler.ir.module import IRModule
from compiler.parser.printer import astext, format_attr_value, scalar_literal
from compiler.ir.structural import structural_equal
from compiler.ir.types import ANY, FuncType, TensorType, TupleType
from compiler.ops import get as get_op
from compiler.parser import parse, parse_expr
from compiler.parser.metadata import decode_metadata

F8 = TensorType((1, 8), "float32")
BOOL = TensorType((), "bool")


def call(name: str, *args, **attrs) -> Call:
    """A call whose attrs are complete, as the parser would build them."""
    opdef = get_op(name)
    return Call(Op.get(name), args, opdef.make_attrs(attrs))


def module(**defs: Function) -> IRModule:
    return IRModule({GlobalVar(name): f for name, f in defs.items()})


def expected(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# --- exact text of small modules --------------------------------------------------------------


def test_printer_writes_a_def_with_an_add_and_its_return_type():
    x, y = Var("x", F8), Var("y", F8)
    mod = module(main=Function([x, y], call("add", x, y), ret_type=F8))
    assert astext(mod) == expected(
        """
        #[version = "0.0.5"]
        def @main(%x: Tensor[(1, 8), float32], %y: Tensor[(1, 8), float32]) -> Tensor[(1, 8), float32] {
          add(%x, %y)
        }
        """
    )


def test_printer_takes_the_return_type_from_the_inferred_function_type():
    x = Var("x", F8)
    func = Function([x], call("nn.relu", x))
    func.set_checked_type(FuncType((F8,), F8))
    assert "def @main(%x: Tensor[(1, 8), float32]) -> Tensor[(1, 8), float32] {" in astext(module(main=func))


def test_printer_writes_fn_literal_with_primitive_and_compiler_attributes_after_params():
    x = Var("x", F8)
    p = Var("p0", F8)
    inner = Function([p], call("nn.relu", p), attrs={"Primitive": 1, "Compiler": "acme"})
    mod = module(main=Function([x], Call(inner, [x])))
    assert astext(mod) == expected(
        """
        #[version = "0.0.5"]
        def @main(%x: Tensor[(1, 8), float32]) {
          %0 = fn (%p0: Tensor[(1, 8), float32], Primitive=1, Compiler="acme") {
            nn.relu(%p0)
          };
          %0(%x)
        }
        """
    )


def test_printer_writes_let_bindings_then_the_body():
    x = Var("x", F8)
    a, b = Var("a"), Var("b", F8)
    body = Let(a, call("negative", x), Let(b, call("add", a, x), call("multiply", b, b)))
    assert astext(module(main=Function([x], body))) == expected(
        """
        #[version = "0.0.5"]
        def @main(%x: Tensor[(1, 8), float32]) {
          let %a = negative(%x);
          let %b: Tensor[(1, 8), float32] = add(%a, %x);
          multiply(%b, %b)
        }
        """
    )


def test_printer_writes_if_with_a_scope_per_branch():
    c, x = Var("c", BOOL), Var("x", F8)
    body = If(c, call("nn.relu", call("negative", x)), x)
    assert astext(module(main=Function([c, x], body))) == expected(
        """
        #[version = "0.0.5"]
        def @main(%c: bool, %x: Tensor[(1, 8), float32]) {
          if (%c) {
            %0 = negative(%x);
            nn.relu(%0)
          } else {
            %x
          }
        }
        """
    )


def test_printer_binds_a_value_used_by_both_branches_before_the_if():
    c, x = Var("c", BOOL), Var("x", F8)
    shared = call("negative", x)
    body = If(c, call("nn.relu", shared), call("exp", shared))
    assert astext(module(main=Function([c, x], body))) == expected(
        """
        #[version = "0.0.5"]
        def @main(%c: bool, %x: Tensor[(1, 8), float32]) {
          %0 = negative(%x);
          if (%c) {
            nn.relu(%0)
          } else {
            exp(%0)
          }
        }
        """
    )


def test_printer_binds_a_value_shared_with_a_fn_literal_outside_the_literal():
    x, y = Var("x", F8), Var("y", F8)
    shared = call("negative", x)
    closure = Function([y], call("add", y, shared))
    mod = module(main=Function([x], Call(closure, [shared])))
    text = astext(mod)
    assert text == expected(
        """
        #[version = "0.0.5"]
        def @main(%x: Tensor[(1, 8), float32]) {
          %0 = negative(%x);
          %1 = fn (%y: Tensor[(1, 8), float32]) {
            add(%y, %0)
          };
          %1(%0)
        }
        """
    )


def test_printer_writes_tuples_one_tuples_and_unchained_projections():
    x = Var("x", F8)
    pair = Tuple([x, x])
    nested = Tuple([Tuple([x])])
    body = Tuple([pair, TupleGetItem(TupleGetItem(nested, 0), 0), Tuple([])])
    assert astext(module(main=Function([x], body))) == expected(
        """
        #[version = "0.0.5"]
        def @main(%x: Tensor[(1, 8), float32]) {
          %0 = (%x, %x);
          %1 = (%x,);
          %2 = (%1,);
          %3 = %2.0;
          %4 = %3.0;
          %5 = ();
          (%0, %4, %5)
        }
        """
    )


def test_printer_writes_a_shared_node_once_and_refers_to_it_by_number():
    x = Var("x", F8)
    shared = call("add", x, x)
    text = astext(module(main=Function([x], call("multiply", shared, shared))))
    assert text.count("add(") == 1
    assert "multiply(%0, %0)" in text


def test_printer_wraps_a_let_that_is_not_a_block_result_in_parentheses():
    x, a = Var("x", F8), Var("a")
    inner = Let(a, call("negative", x), call("exp", a))
    body = call("add", inner, x)
    assert astext(module(main=Function([x], body))) == expected(
        """
        #[version = "0.0.5"]
        def @main(%x: Tensor[(1, 8), float32]) {
          %0 = (
            let %a = negative(%x);
            exp(%a)
          );
          add(%0, %x)
        }
        """
    )


def test_printer_sorts_defs_by_name_and_numbers_temporaries_across_the_module():
    x, y = Var("x", F8), Var("x", F8)
    helper = GlobalVar("helper")
    mod = IRModule()
    mod.add(GlobalVar("main"), Function([x], Call(helper, [call("negative", x)])))
    mod.add(helper, Function([y], call("exp", call("negative", y))))
    assert astext(mod) == expected(
        """
        #[version = "0.0.5"]
        def @helper(%x: Tensor[(1, 8), float32]) {
          %0 = negative(%x);
          exp(%0)
        }

        def @main(%x: Tensor[(1, 8), float32]) {
          %1 = negative(%x);
          @helper(%1)
        }
        """
    )


def test_printer_shows_call_types_when_asked():
    x = Var("x", F8)
    neg = call("negative", x)
    neg.set_checked_type(F8)
    body = call("exp", neg)
    body.set_checked_type(F8)
    text = astext(module(main=Function([x], body)), show_types=True)
    assert "%0 = negative(%x) /* ty=Tensor[(1, 8), float32] */;" in text
    assert "exp(%0) /* ty=Tensor[(1, 8), float32] */" in text
    assert "/* ty" not in astext(module(main=Function([x], body)))


def test_printer_prints_an_expression_without_header_declaring_its_free_vars_first():
    x = Var("x", F8)
    shared = call("add", x, x)
    assert astext(call("multiply", shared, shared)) == expected(
        """
        free_var %x: Tensor[(1, 8), float32];
        %0 = add(%x, %x);
        multiply(%0, %0)
        """
    )


def test_printer_declares_free_vars_in_first_use_order_with_inferred_or_no_type():
    a, b, c = Var("b"), Var("a"), Var("c")
    b.set_checked_type(TensorType((2,), "float32"))
    assert astext(call("add", a, call("multiply", b, c))) == expected(
        """
        free_var %b;
        free_var %a: Tensor[(2), float32];
        free_var %c;
        %0 = multiply(%a, %c);
        add(%b, %0)
        """
    )


def test_printer_names_free_vars_before_bound_vars_of_the_same_name():
    free, bound = Var("x", F8), Var("x", F8)
    text = astext(call("add", free, Call(Function([bound], call("negative", bound)), [free])))
    assert text.startswith("free_var %x: Tensor[(1, 8), float32];\n")
    assert "fn (%x1: Tensor[(1, 8), float32]) {" in text


def test_printer_prints_a_fn_expression_as_a_literal():
    x = Var("x", TensorType((ANY, 4), "float32"))
    text = astext(Function([x], x, ret_type=TupleType((F8,))))
    assert text == "fn (%x: Tensor[(?, 4), float32]) -> (Tensor[(1, 8), float32],) {\n  %x\n}\n"


# --- names --------------------------------------------------------------------------------------


def test_printer_makes_clashing_variable_names_unique_within_a_def():
    x1, x2, x3 = Var("x", F8), Var("x", F8), Var("x1", F8)
    mod = module(main=Function([x1, x2, x3], Tuple([x1, x2, x3])))
    assert "def @main(%x: Tensor[(1, 8), float32], %x1: Tensor[(1, 8), float32], %x11: " in astext(mod)
    assert "(%x, %x1, %x11)" in astext(mod)


def test_printer_reuses_names_in_different_defs():
    a, b = Var("x", F8), Var("x", F8)
    text = astext(module(f=Function([a], a), g=Function([b], b)))
    assert "def @f(%x: " in text and "def @g(%x: " in text


def test_printer_prefixes_names_that_do_not_start_with_a_letter_and_replaces_dots():
    a, b, c = Var("0", F8), Var("_ok", F8), Var("dense.weight", F8)
    text = astext(module(main=Function([a, b, c], Tuple([a, b, c]))))
    assert "(%v0, %_ok, %dense_weight)" in text


def test_printer_renames_a_let_variable_that_shadows_a_parameter():
    x, shadow = Var("x", F8), Var("x")
    text = astext(module(main=Function([x], Let(shadow, call("negative", x), call("add", shadow, x)))))
    assert "let %x1 = negative(%x);" in text
    assert "add(%x1, %x)" in text


# --- attributes ---------------------------------------------------------------------------------


def test_printer_writes_required_op_attrs_always_and_others_only_when_changed():
    x, w, b = Var("x", F8), Var("w", TensorType((4, 8))), Var("b", TensorType((4,)))
    dense = call("nn.dense", x, w, units=None)
    body = call("nn.bias_add", call("nn.bias_add", dense, b, axis=-1), b, axis=1)
    text = astext(module(main=Function([x, w, b], body)))
    assert "nn.dense(%x, %w, units=None)" in text
    assert "nn.bias_add(%0, %b, axis=-1)" in text
    assert "nn.bias_add(%1, %b)" in text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1, "1"),
        (-3, "-3"),
        (1e-05, "1e-05f"),
        (0.5, "0.5f"),
        (0.1, "0.1f"),
        (float("inf"), "inff"),
        (float("-inf"), "-inff"),
        ("NCHW", '"NCHW"'),
        ("", '""'),
        (True, "True"),
        (False, "False"),
        (None, "None"),
        ((1, 2), "[1, 2]"),
        (((0, 0), (1, 1)), "[[0, 0], [1, 1]]"),
        ((), "[]"),
        (np.int64(7), "7"),
        (np.float32(0.25), "0.25f"),
        (Attrs({"Primitive": 1, "hash": "ab"}), '{Primitive=1, hash="ab"}'),
        (GlobalVar("tvmgen_default_add"), "@tvmgen_default_add"),
        ((GlobalVar("f"), GlobalVar("g")), "[@f, @g]"),
    ],
)
def test_format_attr_value_writes_each_kind_as_the_parser_reads_it(value, text):
    assert format_attr_value(value) == text


def test_format_attr_value_round_trips_doubles_exactly():
    for value in [1 / 3, 1e-300, 2.5e17, -7.25e-8, 123456.789]:
        printed = format_attr_value(value)
        assert printed.endswith("f") and float(printed[:-1]) == value


def test_format_attr_value_rejects_values_it_cannot_print():
    with pytest.raises(TypeError, match="cannot print attribute value"):
        format_attr_value(object())


@pytest.mark.parametrize("value", [math.nan, np.float32("nan"), (1.0, -math.nan)])
def test_format_attr_value_refuses_nan_which_relay_text_cannot_express(value):
    with pytest.raises(ValueError, match="NaN has no literal"):
        format_attr_value(value)


def test_printer_names_the_call_attribute_that_is_nan():
    x = Var("x", F8)
    clipped = Call(Op.get("clip"), [x], Attrs({"a_min": math.nan, "a_max": 6.0}))
    with pytest.raises(ValueError, match="cannot print attribute a_min of call to clip: NaN"):
        astext(module(main=Function([x], clipped)))


def test_printer_names_the_function_attribute_that_is_nan():
    x = Var("x", F8)
    with pytest.raises(ValueError, match="cannot print attribute threshold of a function: NaN"):
        astext(Function([x], x, attrs={"threshold": math.nan}))


def test_printer_writes_attrs_and_global_vars_inside_call_attributes():
    x = Var("x", F8)
    meta = Attrs({"relay_attrs": Attrs({"Primitive": 1}), "all_prim_fn_vars": (GlobalVar("f"),)})
    text = astext(Call(Var("g"), [x], meta))
    assert text.endswith("\n%g(%x, relay_attrs={Primitive=1}, all_prim_fn_vars=[@f])\n")


# --- constants ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "dtype", "text"),
    [
        (3, "int32", "3"),
        (-3, "int32", "-3"),
        (3, "int64", "3i64"),
        (-3, "int16", "-3i16"),
        (0.5, "float32", "0.5f"),
        (0.1, "float32", "0.1f"),
        (1e-05, "float32", "1e-05f"),
        (-2.0, "float32", "-2.0f"),
        (0.5, "float16", "0.5f16"),
        (0.1, "float64", "0.1f64"),
        (True, "bool", "True"),
        (False, "bool", "False"),
        (math.inf, "float32", "inff"),
        (-math.inf, "float32", "-inff"),
    ],
)
def test_printer_writes_simple_scalars_as_literals(value, dtype, text):
    assert scalar_literal(np.array(value, dtype=dtype)) == text


@pytest.mark.parametrize(
    "array",
    [
        np.array(3, dtype="int8"),
        np.array(3, dtype="uint8"),
        np.array(np.nan, dtype="float32"),
        np.array(np.inf, dtype="float64"),
        np.array([1.0], dtype="float32"),
        np.zeros((2, 2), dtype="int32"),
    ],
)
def test_printer_leaves_other_constants_to_the_metadata_section(array):
    assert scalar_literal(array) is None


def test_printer_writes_float_scalars_with_digits_that_round_trip_exactly():
    rng = np.random.default_rng(0)
    for dtype, decades in (("float16", 4), ("float32", 30), ("float64", 300)):
        scales = 10.0 ** rng.integers(-decades, decades, 200)
        for value in (rng.standard_normal(200) * scales).astype(dtype):
            text = scalar_literal(np.array(value))
            assert text is not None
            digits = text.removesuffix("f16").removesuffix("f64").removesuffix("f")
            assert np.array(float(digits), dtype=dtype) == value


def test_printer_numbers_meta_constants_by_first_use_and_appends_the_metadata_section():
    x = Var("x", TensorType((2, 2), "float32"))
    weight = Constant(np.arange(4, dtype="float32").reshape(2, 2))
    small = Constant(np.array(7, dtype="int8"))
    body = Tuple([call("add", x, weight), call("multiply", x, weight), small, const(2.0)])
    text = astext(module(main=Function([x], body)))
    assert "%0 = add(%x, meta[relay.Constant][0]);" in text
    assert "%1 = multiply(%x, meta[relay.Constant][0]);" in text
    assert "(%0, %1, meta[relay.Constant][1], 2.0f)" in text
    program, section = text.split("#[metadata]\n")
    assert program.endswith("}\n")
    constants = decode_metadata(section, None)["relay.Constant"]
    assert len(constants) == 2
    assert np.array_equal(constants[0].data, weight.data)
    assert constants[1].data.dtype == np.int8 and int(constants[1].data) == 7


def test_printer_writes_no_metadata_section_without_meta_constants():
    x = Var("x", F8)
    assert "#[metadata]" not in astext(module(main=Function([x], call("add", x, const(1.0)))))


# --- other definitions and bad input -------------------------------------------------------------


def test_printer_writes_a_non_relay_definition_as_a_comment():
    class LoopFunc:
        def __str__(self) -> str:
            return "for i in 0..4 { out[i] = a[i] /* sum */ }"

    mod = IRModule({GlobalVar("kernel"): LoopFunc(), GlobalVar("main"): Function([], const(1))})
    text = astext(mod)
    assert "/* @kernel = LoopFunc:\nfor i in 0..4 { out[i] = a[i] / * sum * / }\n*/\n" in text
    assert parse(text).has("main")


def test_printer_rejects_objects_that_are_not_modules_or_expressions():
    with pytest.raises(TypeError, match="cannot print int"):
        astext(42)  # type: ignore[arg-type]  # deliberately wrong input


# --- deep programs ------------------------------------------------------------------------------


def test_printer_prints_a_10000_deep_let_chain_without_recursion():
    x = Var("x", F8)
    names = [Var(f"v{i}") for i in range(10_000)]
    body = names[-1]
    for i in reversed(range(10_000)):
        body = Let(names[i], call("negative", x if i == 0 else names[i - 1]), body)
    limit = sys.getrecursionlimit()
    text = astext(module(main=Function([x], body)))
    assert sys.getrecursionlimit() == limit
    lines = text.splitlines()
    assert lines[2] == "  let %v0 = negative(%x);"
    assert lines[-3] == "  let %v9999 = negative(%v9998);"
    assert lines[-2] == "  %v9999"


def test_printer_prints_a_10000_deep_nested_call_chain_without_recursion():
    x = Var("x", F8)
    node = x
    for _ in range(10_000):
        node = call("negative", node)
    text = astext(module(main=Function([x], node)))
    lines = text.splitlines()
    assert lines[2] == "  %0 = negative(%x);"
    assert lines[-2] == "  negative(%9998)"


def test_printer_prints_deeply_nested_ifs_without_recursion():
    c, x = Var("c", BOOL), Var("x", F8)
    node = x
    for _ in range(2_000):
        node = If(c, node, x)
    text = astext(module(main=Function([c, x], node)))
    assert text.count("if (%c) {") == 2_000


# --- round trips through the parser -------------------------------------------------------------


def assert_round_trips(mod: IRModule) -> None:
    text = astext(mod)
    again = parse(text)
    assert structural_equal(again, mod), text
    # Inference adds return types to the text; without it the text is a fixed point.
    assert astext(parse(text, infer_types=False)) == text


def test_round_trip_of_an_mlp_with_dense_bias_add_and_relu():
    x = Var("x", TensorType((1, 8)))
    w1, b1 = Var("w1", TensorType((16, 8))), Var("b1", TensorType((16,)))
    w2, b2 = Var("w2", TensorType((4, 16))), Var("b2", TensorType((4,)))
    hidden = call("nn.relu", call("nn.bias_add", call("nn.dense", x, w1, units=None), b1, axis=-1))
    out = call("nn.bias_add", call("nn.dense", hidden, w2, units=4), b2, axis=-1)
    assert_round_trips(module(main=Function([x, w1, b1, w2, b2], call("nn.softmax", out))))


def test_round_trip_of_a_conv2d_with_meta_constants():
    rng = np.random.default_rng(1)
    data = Var("data", TensorType((1, 3, 8, 8)))
    weight = Constant(rng.standard_normal((4, 3, 3, 3)).astype("float32"))
    bias = Constant(rng.standard_normal((4,)).astype("float32"))
    conv = call("nn.conv2d", data, weight, padding=(1, 1, 1, 1), channels=4, kernel_size=(3, 3))
    body = call("nn.relu", call("nn.bias_add", conv, bias))
    assert_round_trips(module(main=Function([data], body)))


def test_round_trip_of_tuples_lets_and_if():
    c, x = Var("c", BOOL), Var("x", F8)
    a, t = Var("a", F8), Var("t")
    pair = Tuple([call("negative", x), x])
    branch = If(c, TupleGetItem(pair, 0), call("exp", a))
    body = Let(a, call("add", x, const(1.0)), Let(t, Tuple([branch, a]), TupleGetItem(t, 1)))
    assert_round_trips(module(main=Function([c, x], body)))


def test_round_trip_of_fn_literals_with_composite_and_compiler_attributes():
    x, w = Var("x", F8), Var("w", TensorType((4, 8)))
    p0, p1 = Var("FunctionVar_0_0", F8), Var("FunctionVar_0_1", TensorType((4, 8)))
    composite = Function(
        [p0, p1],
        call("nn.relu", call("nn.dense", p0, p1, units=None)),
        attrs={"Composite": "acme.dense_relu", "PartitionedFromPattern": "nn.dense_nn.relu_"},
    )
    a0, a1 = Var("acme_0_i0", F8), Var("acme_0_i1", TensorType((4, 8)))
    external = Function(
        [a0, a1],
        Call(composite, [a0, a1]),
        attrs={"Compiler": "acme", "Primitive": 1, "Inline": 1, "global_symbol": "tvmgen_default_acme_main_0"},
    )
    gv = GlobalVar("tvmgen_default_acme_main_0")
    mod = IRModule()
    mod.add(gv, external)
    mod.add(GlobalVar("main"), Function([x, w], call("nn.relu", Call(gv, [x, w]))))
    assert_round_trips(mod)


def test_round_trip_keeps_sharing():
    x = Var("x", F8)
    shared = call("negative", x)
    mod = module(main=Function([x], call("add", shared, shared)))
    again = parse(astext(mod))
    add = again.main.body
    assert isinstance(add, Call) and add.args[0] is add.args[1]


def test_round_trip_of_scalar_constants_of_every_literal_dtype():
    x = Var("x", F8)
    scalars = [
        const(3),
        const(-3, "int64"),
        const(5, "int16"),
        const(0.1),
        const(1 / 3, "float64"),
        const(0.3, "float16"),
        const(True, "bool"),
        const(np.inf),
        const(7, "int8"),
    ]
    assert_round_trips(module(main=Function([x], Tuple([x, *scalars]))))


class RandomProgram:
    """Random bodies with lets, ifs, fn literals, tuples and nodes shared across all of them."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.cond = Var("c", BOOL)
        self.made: list[tuple[Expr, frozenset[Var]]] = []  # nodes and the variables they need

    def operand(self, scope: frozenset[Var]) -> Expr:
        usable = [e for e, needs in self.made if needs <= scope]
        if usable and self.rng.random() < 0.5:
            return self.rng.choice(usable)
        return self.rng.choice(sorted(scope, key=lambda v: v.uid))

    def value(self, scope: frozenset[Var], depth: int) -> Expr:
        kind = self.rng.randrange(7 if depth > 0 else 4)
        if kind == 0:
            e: Expr = call("add", self.operand(scope), self.operand(scope))
        elif kind == 1:
            e = call("negative", self.operand(scope))
        elif kind == 2:
            e = Tuple([self.operand(scope) for _ in range(self.rng.randrange(3))])
        elif kind == 3:
            e = TupleGetItem(Tuple([self.operand(scope), self.operand(scope)]), self.rng.randrange(2))
        elif kind == 4:
            p = Var(self.rng.choice(["p", "x", "0"]), F8)
            attrs = self.rng.choice([{}, {"Primitive": 1}, {"Composite": "acme.f"}])
            e = Call(Function([p], self.block(scope | {p}, depth - 1), attrs=attrs), [self.operand(scope)])
        elif kind == 5:
            e = If(self.cond, self.block(scope, depth - 1), self.block(scope, depth - 1))
        else:
            e = call("multiply", self.value(scope, depth - 1), self.operand(scope))
        self.made.append((e, scope))
        return e

    def block(self, scope: frozenset[Var], depth: int) -> Expr:
        lets = []
        for _ in range(self.rng.randrange(3)):
            var = Var(self.rng.choice(["v", "x", "a"]))
            lets.append((var, self.value(scope, depth)))
            scope = scope | {var}
        body = self.value(scope, depth) if self.rng.random() < 0.8 else self.operand(scope)
        for var, value in reversed(lets):
            body = Let(var, value, body)
        return body


def test_round_trip_of_random_programs_with_sharing_across_scopes():
    for seed in range(300):
        program = RandomProgram(seed)
        x = Var("x", F8)
        mod = module(main=Function([program.cond, x], program.block(frozenset({x}), 3)))
        text = astext(mod)
        again = parse(text, infer_types=False)
        assert structural_equal(again, mod), text
        assert astext(again) == text

def test_round_trip_of_a_closed_expression():
    x, y = Var("x", F8), Var("y", F8)
    shared = call("negative", x)
    func = Function([x, y], Tuple([call("add", shared, y), shared]), attrs={"Primitive": 1})
    assert structural_equal(parse_expr(astext(func)), func)


def test_round_trip_of_an_expression_with_free_vars():
    x, w = Var("x", F8), Var("w", TensorType((4, 8), "float32"))
    y, a = Var("y"), Var("a")
    dense = call("nn.dense", x, w, units=4)
    expr = Let(a, call("nn.relu", dense), Tuple([call("add", a, y), dense, TupleGetItem(Tuple([y]), 0)]))
    text = astext(expr)
    assert text.startswith(
        "free_var %x: Tensor[(1, 8), float32];\nfree_var %w: Tensor[(4, 8), float32];\nfree_var %y;\n"
    )
    again = parse_expr(text)
    assert structural_equal(again, expr, map_free_vars=True), text
    assert not structural_equal(again, expr)
    assert astext(again) == text


def test_round_trip_of_a_let_that_is_an_operand():
    x, a = Var("x", F8), Var("a")
    body = call("add", Let(a, call("negative", x), call("exp", a)), x)
    assert_round_trips(module(main=Function([x], body)))


def test_type_definitions_are_separated_by_a_blank_line_as_tvm_prints_a_module():
    text = astext(parse("""#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil }
type Option[A] { Some(A), None }
def @main(%x: float32) { %x }"""))
    assert "  Nil,\n}\n\ntype Option[A] {\n  Some(A),\n  None,\n}\n\ndef @main(" in text
