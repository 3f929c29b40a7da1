"""DynamicToStatic: dyn.* calls with constant shapes become their static ops, before fusion."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from compiler.diagnostics import TypeCheckError
from compiler.driver import BuildOptions, lower
from compiler.ir.expr import Call
from compiler.ir.module import IRModule
from compiler.ir.structural import structural_equal
from compiler.ir.visitor import post_order
from compiler.parser import parse
from compiler.parser.printer import astext
from compiler.passes.bind_params import BindParams
from compiler.passes.dynamic_to_static import DynamicToStatic
from compiler.runtime.interpreter import run_main
from tests.compiler.ops.relay_text import check_text_model

HEADER = '#[version = "0.0.5"]\n'


def bound(text: str, params: Mapping[str, np.ndarray] | None = None) -> IRModule:
    """The module of `text` with `params` bound as Constants (what `relaycc compile --params`
    and a `meta[relay.Constant]` give)."""
    mod = parse(HEADER + text)
    return BindParams(dict(params))(mod) if params else mod


def op_names(mod: IRModule) -> list[str]:
    return [n.op_name for n in post_order(mod.main) if isinstance(n, Call) and n.op_name]


def assert_becomes(before: IRModule, expected_text: str, inputs: Mapping[str, np.ndarray]) -> IRModule:
    after = DynamicToStatic()(before)
    expected = parse(HEADER + expected_text)
    assert structural_equal(after, expected), astext(after)
    for got, want in zip(run_main(after, inputs), run_main(before, inputs)):
        np.testing.assert_array_equal(got, want)
    return after


def test_constant_newshape_makes_reshape_static() -> None:
    before = bound("def @main(%x: Tensor[(2, 3, 4), float32], %s: Tensor[(2), int64]) { dyn.reshape(%x, %s) }",
                   {"s": np.array([6, -1])})
    after = assert_becomes(before, "def @main(%x: Tensor[(2, 3, 4), float32]) { reshape(%x, newshape=[6, -1]) }",
                           {"x": np.arange(24, dtype="float32").reshape(2, 3, 4)})
    assert str(after.main.body.checked_type) == "Tensor[(6, 4), float32]"


def test_shape_of_a_static_tensor_folds_into_the_static_op() -> None:
    before = bound("""def @main(%x: Tensor[(2, 3, 4), float32], %y: Tensor[(6, 4), float32]) {
  %0 = shape_of(%y, dtype="int64");
  %1 = minimum(%0, 1i64);
  %2 = dyn.reshape(%x, %0);
  add(%2, dyn.zeros(%1, dtype="float32"))
}""")
    assert_becomes(before, """def @main(%x: Tensor[(2, 3, 4), float32], %y: Tensor[(6, 4), float32]) {
  add(reshape(%x, newshape=[6, 4]), zeros(shape=[1, 1], dtype="float32"))
}""", {"x": np.ones((2, 3, 4), "float32"), "y": np.ones((6, 4), "float32")})


def test_a_call_made_static_lets_the_next_shape_of_fold() -> None:
    before = bound("""def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(3, 2), float32]) {
  %0 = dyn.reshape(%x, shape_of(%y));
  dyn.broadcast_to(%y, shape_of(%0))
}""")
    after = DynamicToStatic()(before)
    assert "dyn.reshape" not in op_names(after) and "dyn.broadcast_to" not in op_names(after)
    assert str(after.main.body.checked_type) == "Tensor[(3, 2), float32]"


def test_shapes_known_only_at_run_time_are_left_alone() -> None:
    before = bound("""def @main(%x: Tensor[(2, 3), float32], %s: Tensor[(2), int64], %z: Tensor[(?, 2), float32]) {
  %0 = dyn.reshape(%x, %s);
  dyn.reshape(%0, shape_of(%z))
}""")
    after = DynamicToStatic()(before)
    assert structural_equal(after, before)
    assert str(after.main.body.checked_type) == "Tensor[(?, ?), float32]"


@pytest.mark.parametrize(
    ("params", "call", "values", "expected"),
    [
        ("%x: Tensor[(4, 5), float32], %b: Tensor[(2), int64], %e: Tensor[(2), int64], %t: Tensor[(2), int64]",
         'dyn.strided_slice(%x, %b, %e, %t, slice_mode="end")',
         {"b": [3, 0], "e": [0, 5], "t": [-1, 2]},
         "strided_slice(%x, begin=[3, 0], end=[0, 5], strides=[-1, 2], axes=None)"),
        ("%x: Tensor[(3, 5), float32], %k: int32", 'dyn.topk(%x, %k, ret_type="values", is_ascend=True)',
         {"k": 2}, 'topk(%x, k=2, ret_type="values", is_ascend=True)'),
        ("%x: Tensor[(2, 3), float32], %r: Tensor[(3), int64]", "dyn.tile(%x, %r)", {"r": [2, 1, 2]},
         "tile(%x, reps=[2, 1, 2])"),
        ("%x: Tensor[(2, 3), float32], %w: Tensor[(2, 2), int64]", 'dyn.nn.pad(%x, %w, 0f, pad_mode="edge")',
         {"w": [[1, 0], [2, 1]]}, 'nn.pad(%x, 0f, pad_width=[[1, 0], [2, 1]], pad_mode="edge")'),
        ("%x: Tensor[(1, 2, 3, 4), float32], %s: Tensor[(2), int64], %r: Tensor[(4), float32]",
         'dyn.image.resize2d(%x, %s, %r, method="nearest_neighbor")', {"s": [6, 8], "r": [0.0, 0.0, 1.0, 1.0]},
         'image.resize2d(%x, size=[6, 8], roi=[0f, 0f, 1f, 1f], method="nearest_neighbor")'),
        ("%x: Tensor[(2, 3), float32], %a: int64", "dyn.expand_dims(%x, %a, num_newaxis=2)", {"a": -1},
         "expand_dims(%x, axis=-1, num_newaxis=2)"),
        ("%x: Tensor[(1, 3, 1), float32], %a: Tensor[(1), int64]", "dyn.squeeze(%x, %a)", {"a": [0]},
         "squeeze(%x, axis=[0])"),
        ("%v: float32, %s: Tensor[(2), int64]", 'dyn.full(%v, %s, dtype="int32")', {"s": [2, 2]},
         'full(%v, shape=[2, 2], dtype="int32")'),
        ("%s: Tensor[(1), int32]", 'dyn.ones(%s, dtype="int8")', {"s": [3]}, 'ones(shape=[3], dtype="int8")'),
        ("%i: Tensor[(2), int32], %d: int32", 'dyn.one_hot(%i, 1f, 0f, %d, dtype="float32")', {"d": 4},
         'one_hot(%i, 1f, 0f, depth=4, dtype="float32")'),
        ("%i: Tensor[(2), int32], %v: Tensor[(2), float32], %s: Tensor[(1), int64]",
         "dyn.sparse_to_dense(%i, %v, 0f, %s)", {"s": [5]}, "sparse_to_dense(%i, %v, 0f, output_shape=[5])"),
    ],
)
def test_each_dyn_op_becomes_its_static_op(
    params: str, call: str, values: Mapping[str, object], expected: str
) -> None:
    before = bound(f"def @main({params}) {{ {call} }}")
    dtypes = {p.name_hint: p.type_annotation.dtype for p in before.main.params}  # type: ignore[union-attr]  # tensors
    arrays = {k: np.array(v, dtype=dtypes[k]) for k, v in values.items()}
    after = DynamicToStatic()(BindParams(arrays)(before))
    kept = ", ".join(p for p in re.split(r", (?=%)", params) if p.split(":")[0][1:] not in values)
    want = parse(HEADER + f"def @main({kept}) {{ {expected} }}")
    assert structural_equal(after, want), astext(after)


def test_values_no_static_op_accepts_are_a_located_error_naming_the_dyn_call() -> None:
    before = bound("def @main(%x: Tensor[(2, 3), float32], %s: Tensor[(2), int64]) {\n  dyn.reshape(%x, %s)\n}",
                   {"s": np.array([-2, 3])})
    with pytest.raises(TypeCheckError) as info:
        DynamicToStatic()(before)
    assert info.value.message.startswith("dyn.reshape: newshape [-2, 3]: value -2 is not valid")
    assert (info.value.line, info.value.column) == (3, 3)


def test_constant_values_the_static_op_refuses_are_located_by_its_type_relation() -> None:
    before = bound("def @main(%x: Tensor[(2, 3), float32], %s: Tensor[(2), int64]) {\n  dyn.reshape(%x, %s)\n}",
                   {"s": np.array([4, 2])})
    with pytest.raises(TypeCheckError) as info:
        DynamicToStatic()(before)
    assert "reshape: cannot reshape (2, 3)" in info.value.message
    assert (info.value.line, info.value.column) == (3, 3)


def test_the_driver_runs_it_after_simplify_inference_and_before_fold_constant() -> None:
    mod = bound("def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(3, 2), float32]) { dyn.reshape(%x, shape_of(%y)) }")
    model = lower(mod, BuildOptions(), executor=False)
    names = [entry[0] if isinstance(entry, (list, tuple)) else entry["name"] for entry in model.report["passes"]]  # type: ignore[union-attr, index]
    assert names.index("SimplifyInference") < names.index("DynamicToStatic") < names.index("FoldConstant")
    assert "dyn.reshape" not in astext(model.lowered)


# --- end to end -----------------------------------------------------------------------------------


def test_model_with_a_meta_constant_newshape_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    mod = bound("""def @main(%x: Tensor[(2, 3, 4), float32], %s: Tensor[(3), int64]) {
  %0 = dyn.reshape(%x, %s);
  nn.relu(%0)
}""", {"s": np.array([4, 0, -1])})
    text = astext(mod)
    assert "dyn.reshape(%x, meta[relay.Constant][0]" in text
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype("float32")
    (out,) = check_text_model(text, {"x": x}, tmp_path)
    np.testing.assert_array_equal(out, np.maximum(x.reshape(4, 3, 2), 0))


def test_reshape_to_the_shape_of_a_static_tensor_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    text = HEADER + """def @main(%x: Tensor[(2, 3, 4), float32], %y: Tensor[(6, 4), float32]) {
  %0 = dyn.reshape(%x, shape_of(%y));
  add(%0, %y)
}
"""
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((2, 3, 4)).astype("float32"), rng.standard_normal((6, 4)).astype("float32")
    (out,) = check_text_model(text, {"x": x, "y": y}, tmp_path)
    np.testing.assert_allclose(out, x.reshape(6, 4) + y, rtol=1e-6)


def test_model_of_several_dyn_ops_with_constant_shapes_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    mod = bound("""def @main(%x: Tensor[(1, 2, 4, 6), float32], %b: Tensor[(4), int64], %e: Tensor[(4), int64],
          %t: Tensor[(4), int64], %w: Tensor[(4, 2), int64], %k: int32, %size: Tensor[(2), int64],
          %roi: Tensor[(4), float32], %r: Tensor[(2), int64]) {
  %0 = dyn.strided_slice(%x, %b, %e, %t);
  %1 = dyn.nn.pad(%0, %w, 0.5f);
  %2 = dyn.image.resize2d(%1, %size, %roi, method="nearest_neighbor");
  %3 = dyn.topk(%2, %k, axis=1, ret_type="values");
  %4 = dyn.broadcast_to(%3, shape_of(%2));
  dyn.tile(%4, %r)
}""", {
        "b": np.array([0, 0, 1, 0]), "e": np.array([1, 2, 4, 6]), "t": np.array([1, 1, 1, 2]),
        "w": np.array([[0, 0], [0, 0], [1, 1], [0, 1]]), "k": np.array(1, "int32"), "r": np.array([1, 2]),
        "size": np.array([10, 8]), "roi": np.zeros(4, "float32")})
    text = astext(mod)
    x = np.random.default_rng(2).standard_normal((1, 2, 4, 6)).astype("float32")
    (out,) = check_text_model(text, {"x": x}, tmp_path)
    assert out.shape == (1, 2, 10, 16)


def test_onnx_flatten_pattern_as_tvm_prints_it_compiles_and_matches_the_interpreter(tmp_path: Path) -> None:
    """The ONNX importer's Flatten: the new shape computed from shape_of, typed `?` in the
    printed text (and in @main's declared result), all of it known at compile time."""
    text = HEADER + """def @main(%x: Tensor[(2, 3, 4), float32] /* ty=Tensor[(2, 3, 4), float32] */,
          %w: Tensor[(5, 12), float32] /* ty=Tensor[(5, 12), float32] */) -> Tensor[(?, 5), float32] {
  %0 = shape_of(%x, dtype="int64") /* ty=Tensor[(3), int64] */;
  %1 = strided_slice(%0, begin=[0], end=[1], strides=[1], axes=None) /* ty=Tensor[(1), int64] */;
  %2 = expand_dims(-1i64 /* ty=int64 */, axis=0) /* ty=Tensor[(1), int64] */;
  %3 = (%1, %2) /* ty=(Tensor[(1), int64], Tensor[(1), int64]) */;
  %4 = concatenate(%3) /* ty=Tensor[(2), int64] */;
  %5 = dyn.reshape(%x, %4, newshape=[]) /* ty=Tensor[(?, ?), float32] */;
  nn.dense(%5, %w, units=None) /* ty=Tensor[(?, 5), float32] */
}
"""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 3, 4)).astype("float32"), rng.standard_normal((5, 12)).astype("float32")
    (out,) = check_text_model(text, {"x": x, "w": w}, tmp_path)
    np.testing.assert_allclose(out, x.reshape(2, 12) @ w.T, rtol=1e-5, atol=1e-5)


def test_a_module_without_dyn_calls_is_returned_as_it_is() -> None:
    mod = bound("def @main(%x: Tensor[(2, 3), float32]) { reshape(shape_of(%x), newshape=[-1]) }")
    assert DynamicToStatic()(mod) is mod
