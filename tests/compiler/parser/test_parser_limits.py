"""Parser limits: deep nesting is refused cleanly, long sequences parse without recursion."""

from __future__ import annotations

import sys

import pytest

from compiler.diagnostics import ParseError
from compiler.ir.expr import Call, Let
from compiler.parser import MAX_NESTING, parse, parse_expr

HEADER = '#[version = "0.0.5"]\n'
HUGE = 50_000


def nested(opening: str, inner: str, closing: str, depth: int) -> str:
    return opening * depth + inner + closing * depth


# Each template nests one construct `depth` times around `%v` (a float32 free variable).
CONSTRUCTS = {
    "parentheses": ("(", "%v", ")"),
    "calls": ("negative(", "%v", ")"),
    "tuples": ("(%v, ", "%v", ")"),
    "blocks": ("{ ", "%v", " }"),
    "functions": ("fn () { ", "%v", " }"),
    "conditionals": ("if (True) { ", "%v", " } else { %v }"),
}


@pytest.mark.parametrize("construct", sorted(CONSTRUCTS))
def test_parser_accepts_nesting_just_below_the_limit(construct):
    opening, inner, closing = CONSTRUCTS[construct]
    depth = MAX_NESTING - 5
    expr = parse_expr("free_var %v: float32; " + nested(opening, inner, closing, depth))
    assert expr is not None


@pytest.mark.parametrize("construct", sorted(CONSTRUCTS))
def test_parser_refuses_huge_nesting_with_a_parse_error(construct):
    opening, inner, closing = CONSTRUCTS[construct]
    with pytest.raises(ParseError, match=f"nests deeper than {MAX_NESTING} levels") as info:
        parse_expr("free_var %v: float32; " + nested(opening, inner, closing, HUGE))
    assert info.value.line == 1


def test_parser_refuses_huge_nesting_inside_a_module_and_restores_the_recursion_limit():
    limit = sys.getrecursionlimit()
    text = HEADER + "def @main(%x: float32) {\n  " + nested("add(", "%x", ", %x)", HUGE) + "\n}"
    with pytest.raises(ParseError) as info:
        parse(text)
    # The error points at the `(` that opens one level too many: `add(` is 4 characters wide.
    assert (info.value.line, info.value.column) == (3, 4 * MAX_NESTING + 2)
    assert sys.getrecursionlimit() == limit


@pytest.mark.parametrize(
    "annotation",
    [
        nested("(", "float32", ",)", HUGE),
        nested("fn (", "", ") -> float32", HUGE),
        nested("Tensor[(1), ", "", "]", 3) + nested("[", "", "]", HUGE),
    ],
    ids=["tuple types", "function types", "brackets"],
)
def test_parser_refuses_huge_nesting_in_types(annotation):
    with pytest.raises(ParseError):
        parse(HEADER + f"def @main(%x: {annotation}) {{ %x }}", infer_types=False)


def test_parser_refuses_huge_nesting_in_attribute_lists():
    text = HEADER + "def @main(%x: float32) { nn.softmax(%x, axis=" + nested("[", "1", "]", HUGE) + ") }"
    with pytest.raises(ParseError, match="nests deeper"):
        parse(text)


def test_parser_reads_fifty_thousand_graph_bindings():
    lines = [HEADER + "def @main(%x: Tensor[(2), float32]) {", "  %0 = add(%x, 1f);"]
    lines += [f"  %{i} = multiply(%{i - 1}, %x) /* ty=Tensor[(2), float32] */;" for i in range(1, HUGE)]
    lines += [f"  %{HUGE - 1}", "}"]
    mod = parse("\n".join(lines), infer_types=False)
    body = mod.main.body
    assert isinstance(body, Call) and body.op_name == "multiply"
    assert body.span is not None and body.span.line == HUGE + 2


def test_parser_reads_fifty_thousand_lets_without_recursing_over_the_chain():
    lines = [HEADER + "def @main(%x: Tensor[(2), float32]) {", "  let %v0 = add(%x, 1f);"]
    lines += [f"  let %v{i} = add(%v{i - 1}, %x);" for i in range(1, HUGE)]
    lines += [f"  %v{HUGE - 1}", "}"]
    mod = parse("\n".join(lines), infer_types=False)
    count, node = 0, mod.main.body
    while isinstance(node, Let):
        count, last, node = count + 1, node, node.body
    assert count == HUGE
    assert node is last.var


def test_parser_type_checks_long_binding_and_let_chains():
    # Deeper than Python's default recursion limit, so type inference must not recurse either.
    depth = 20_000
    graph = [HEADER + "def @main(%x: Tensor[(2), float32]) {", "  %0 = add(%x, 1f);"]
    graph += [f"  %{i} = add(%{i - 1}, %x);" for i in range(1, depth)] + [f"  %{depth - 1}", "}"]
    lets = [HEADER + "def @main(%x: Tensor[(2), float32]) {", "  let %v0 = add(%x, 1f);"]
    lets += [f"  let %v{i}: Tensor[(2), float32] = add(%v{i - 1}, %x);" for i in range(1, depth)]
    lets += [f"  %v{depth - 1}", "}"]
    for lines in (graph, lets):
        mod = parse("\n".join(lines))
        assert mod.main.body.checked_type == mod.main.params[0].type_annotation


def test_parser_accepts_tensor_types_of_the_maximum_rank_and_refuses_one_more():
    from compiler.ir.types import MAX_RANK

    def annotated(rank: int) -> str:
        return HEADER + f"def @main(%x: Tensor[({', '.join(['1'] * rank)}), float32]) {{ %x }}"

    assert len(parse(annotated(MAX_RANK)).main.params[0].checked_type.shape) == MAX_RANK
    with pytest.raises(ParseError) as info:
        parse(annotated(MAX_RANK + 1))
    assert info.value.message == f"a tensor type of rank {MAX_RANK + 1}: the maximum rank is {MAX_RANK}"
    assert (info.value.line, info.value.column) == (2, 22)
