"""einsum (compiler/ops/einsum.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.driver import export, lower
from compiler.parser.printer import astext
from compiler.ir.types import ANY, TensorType, TupleType, Type
from compiler.ops.registry import AttrError, OpPattern, TypeRelationError
from compiler.parser import parse
from compiler.runtime.interpreter import run_main
from compiler.runtime.module import CompiledModule

F32 = "float32"


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(equation: str, *types: Type) -> Type:
    op = ops.get("einsum")
    return op.type_rel([TupleType(tuple(types))], op.make_attrs({"equation": equation}))


def run(equation: str, *arrays: np.ndarray) -> np.ndarray:
    op = ops.get("einsum")
    attrs = op.make_attrs({"equation": equation})
    ty = op.type_rel([TupleType(tuple(TensorType(a.shape, str(a.dtype)) for a in arrays))], attrs)
    out = op.reference([tuple(arrays)], attrs)  # type: ignore[list-item]  # a tuple argument
    assert ty == TensorType(out.shape, str(out.dtype))
    return out


RNG = np.random.default_rng(0)
A, B = RNG.normal(size=(3, 4)).astype(F32), RNG.normal(size=(4, 5)).astype(F32)


def test_einsum_contracts_shared_labels() -> None:
    np.testing.assert_allclose(run("ij,jk->ik", A, B), A @ B, rtol=1e-6)


def test_einsum_implicit_output_is_the_single_labels_in_alphabetical_order() -> None:
    assert infer("ba", t(2, 3)) == t(3, 2)
    assert infer("ij,jk", t(3, 4), t(4, 5)) == t(3, 5)
    assert infer("ii", t(3, 3)) == t()
    np.testing.assert_allclose(run("ba", A), A.T)


def test_einsum_repeated_label_in_one_operand_walks_the_diagonal() -> None:
    x = np.arange(9, dtype="int32").reshape(3, 3)
    np.testing.assert_array_equal(run("ii->i", x), [0, 4, 8])
    assert run("ii", x) == 12


def test_einsum_ellipsis_dims_broadcast_and_lead_the_implicit_output() -> None:
    x, y = np.ones((2, 1, 2, 3), F32), np.ones((4, 3, 2), F32)
    assert run("...ij,...jk", x, y).shape == (2, 4, 2, 2)
    assert infer("...ij,...jk", t(2, 1, 2, 3), t(4, 3, 2)) == t(2, 4, 2, 2)
    assert infer("i...->...", t(3, 2, 5)) == t(2, 5)
    assert infer("...", t(2)) == t(2)


def test_einsum_integer_sums_are_exact() -> None:
    x = np.full((4, 4), 1 << 20, "int64")
    assert run("ij->", x) == 16 << 20


def test_einsum_unknown_dims_take_the_known_size() -> None:
    assert infer("ij,jk->ik", t("?", 4), t("?", 5)) == t("?", 5)


def test_einsum_errors_name_the_equation_and_the_problem() -> None:
    with pytest.raises(TypeRelationError, match="einsum: equation 'ij,jk' names 2 operands, got 1"):
        infer("ij,jk", t(3, 4))
    with pytest.raises(TypeRelationError, match="operand 0 'ijk' of equation 'ijk' labels 3 dims, the"):
        infer("ijk", t(3, 4))
    with pytest.raises(TypeRelationError, match="label 'j' of 'ij,jk' has size 4 and, in operand 1, size 5"):
        infer("ij,jk", t(3, 4), t(5, 6))
    with pytest.raises(TypeRelationError, match="output label 'z' of 'ij->z' labels no operand dim"):
        infer("ij->z", t(3, 4))
    with pytest.raises(TypeRelationError, match="repeats a label"):
        infer("ij->ii", t(3, 4))
    with pytest.raises(TypeRelationError, match="has 1 dims under '...' but its output has no '...'"):
        infer("...i->i", t(2, 3))
    with pytest.raises(TypeRelationError, match="invalid label '1'"):
        infer("i1", t(2, 3))
    with pytest.raises(TypeRelationError, match="einsum needs tensors of one dtype"):
        infer("i,i", t(2), t(2, dtype="int32"))
    with pytest.raises(AttrError, match="requires attribute equation"):
        ops.get("einsum").make_attrs({})


def test_einsum_pattern_follows_tvm() -> None:
    assert ops.get("einsum").pattern == OpPattern.INJECTIVE


MODEL = """#[version = "0.0.5"]
def @main(%a: Tensor[(2, 3, 4), float32], %b: Tensor[(2, 4, 5), float32], %c: Tensor[(5, 5), float32]) {
  %0 = einsum((%a, %b), equation="bij,bjk->bik");
  %1 = einsum((%0, %c), equation="...k,kl");
  %2 = einsum((%c,), equation="ii->i");
  (nn.relu(%1), %2)
}
"""


def test_einsum_equation_round_trips_through_the_printer() -> None:
    mod = parse(MODEL)
    text = astext(mod)
    assert astext(parse(text)) == text
    assert 'equation="...k,kl"' in text


def test_einsum_model_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    mod = parse(MODEL)
    rng = np.random.default_rng(3)
    inputs = {name: rng.uniform(0.5, 1.5, shape).astype(F32)
              for name, shape in (("a", (2, 3, 4)), ("b", (2, 4, 5)), ("c", (5, 5)))}
    export(lower(mod), tmp_path, MODEL)
    got = CompiledModule(tmp_path).run(inputs).outputs
    expected = run_main(mod, inputs)
    assert len(got) == len(expected) == 2
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5)
    ab = np.einsum("bij,bjk->bik", inputs["a"].astype(np.float64), inputs["b"].astype(np.float64))
    np.testing.assert_allclose(got[0], np.maximum(ab @ inputs["c"], 0), rtol=1e-5)
