"""Shape transforms of compiler/ops/transform.py: reshape codes, transpose, squeeze, expand_dims,
broadcast_to, layout_transform, concatenate, stack, split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.types import ANY, TensorType, TupleType, Type
from compiler.ops.registry import AttrError, OpPattern, TypeRelationError
from tests.compiler.ops.shape_rule_eval import rule_dims

F32 = "float32"


def t(*shape: object, dtype: str = F32) -> TensorType:
    return TensorType(tuple(ANY if d == "?" else d for d in shape), dtype)


def infer(name: str, *types: Type, **attrs: object) -> Type:
    op = ops.get(name)
    return op.type_rel(list(types), op.make_attrs(attrs))


def run(name: str, *inputs: object, **attrs: object) -> object:
    op = ops.get(name)
    return op.reference(list(inputs), op.make_attrs(attrs))


def shape_of(name: str, *types: Type, **attrs: object) -> tuple[object, ...]:
    ty = infer(name, *types, **attrs)
    assert isinstance(ty, TensorType)
    return ty.shape


# --- reshape --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("newshape", "expected"),
    [
        ([0, -1], (2, 12)),
        ([-3, -2], (6, 4)),
        ([-4, 2, -1, -2], (2, 1, 3, 4)),
        ([6, -1], (6, 4)),
        ([-2], (2, 3, 4)),
        ([0, 0, 0], (2, 3, 4)),
        ([-1], (24,)),
        ([0, -4, -1, 1, 4], (2, 3, 1, 4)),
        ([2, -3], (2, 12)),
    ],
)
def test_reshape_special_codes(newshape: list[int], expected: tuple[int, ...]) -> None:
    assert shape_of("reshape", t(2, 3, 4), newshape=newshape) == expected
    x = np.arange(24, dtype=F32).reshape(2, 3, 4)
    out = run("reshape", x, newshape=newshape)
    assert out.shape == expected
    np.testing.assert_array_equal(out.reshape(-1), np.arange(24))


def test_reshape_with_unknown_dims() -> None:
    assert shape_of("reshape", t("?", 3, 4), newshape=[0, -1]) == (ANY, 12)
    assert shape_of("reshape", t("?", 3, 4), newshape=[-1, 4]) == (ANY, 4)
    assert shape_of("reshape", t(2, "?", 4), newshape=[-3, 2, 2]) == (ANY, 2, 2)
    assert shape_of("reshape", t("?", 6), newshape=[0, -4, 2, -1]) == (ANY, 2, 3)
    assert shape_of("reshape", t("?", 6), newshape=[-4, -1, 2, 6]) == (ANY, 2, 6)


def test_reshape_allowzero_makes_zero_a_real_dim() -> None:
    assert shape_of("reshape", t(0, 3), newshape=[3, 0], allowzero=1) == (3, 0)
    assert shape_of("reshape", t(2, 3), newshape=[0, 3]) == (2, 3)


def test_reshape_errors_name_the_shapes() -> None:
    with pytest.raises(
        TypeRelationError, match=r"reshape: cannot reshape \(2, 3, 4\) \(24 elements\) to newshape \[5, 5\]"
    ):
        infer("reshape", t(2, 3, 4), newshape=[5, 5])
    with pytest.raises(TypeRelationError, match="more than one -1"):
        infer("reshape", t(2, 3, 4), newshape=[-1, -1])
    with pytest.raises(TypeRelationError, match="cannot infer the -1"):
        infer("reshape", t(2, 3, 4), newshape=[5, -1])
    with pytest.raises(TypeRelationError, match="unsupported value -5"):
        infer("reshape", t(2, 3), newshape=[-5])
    with pytest.raises(TypeRelationError, match="cannot split dim 3"):
        infer("reshape", t(3, 4), newshape=[-4, 2, -1, 0])
    with pytest.raises(TypeRelationError, match="runs past the input rank"):
        infer("reshape", t(3), newshape=[-3])
    with pytest.raises(AttrError, match="requires attribute newshape"):
        ops.get("reshape").make_attrs({})


def test_reshape_like_ops_are_marked_reshape_only() -> None:
    marked = {op.name for op in ops.all_ops() if op.reshape_only}
    assert {"reshape", "squeeze", "expand_dims", "nn.batch_flatten"} <= marked
    assert "transpose" not in marked


# --- transpose, squeeze, expand_dims --------------------------------------------------------------


def test_transpose_reverses_without_axes_and_permutes_with_them() -> None:
    x = np.arange(24).reshape(2, 3, 4).astype(F32)
    assert run("transpose", x, axes=None).shape == (4, 3, 2)
    assert run("transpose", x, axes=[]).shape == (4, 3, 2)
    out = run("transpose", x, axes=[1, -1, 0])
    assert out.shape == (3, 4, 2) and out[2, 1, 0] == x[0, 2, 1]
    assert shape_of("transpose", t("?", 3, 4), axes=[2, 0, 1]) == (4, ANY, 3)


def test_transpose_rejects_non_permutations() -> None:
    with pytest.raises(TypeRelationError, match=r"transpose: axes \[0, 0, 1\] is not a permutation"):
        infer("transpose", t(2, 3, 4), axes=[0, 0, 1])
    with pytest.raises(TypeRelationError, match="one entry per dim"):
        infer("transpose", t(2, 3, 4), axes=[1, 0])
    with pytest.raises(AttrError, match="requires attribute axes"):
        ops.get("transpose").make_attrs({})


def test_squeeze_all_unit_dims_or_listed_ones() -> None:
    assert shape_of("squeeze", t(1, 3, 1, 2)) == (3, 2)
    assert shape_of("squeeze", t(1, 3, 1, 2), axis=[0]) == (3, 1, 2)
    assert shape_of("squeeze", t(1, "?", 1), axis=[0]) == (ANY, 1)
    assert shape_of("squeeze", t(1, "?", 2), axis=[1]) == (1, 2)
    assert run("squeeze", np.zeros((1, 3, 1), F32), axis=[-1]).shape == (1, 3)
    with pytest.raises(TypeRelationError, match=r"squeeze: axis 1 of \(1, 3, 1\) has size 3, not 1"):
        infer("squeeze", t(1, 3, 1), axis=[1])


def test_squeeze_without_axes_needs_every_dim_known() -> None:
    # Which `?` dims are 1 is only known at run time, so the rank would be unknown (TVM refuses too).
    with pytest.raises(TypeRelationError, match=r"squeeze: axis must be given for an input of unknown dims \(1, \?, 1\)"):
        infer("squeeze", t(1, "?", 1), axis=None)


def test_expand_dims_inserts_unit_dims_at_positive_and_negative_axes() -> None:
    assert shape_of("expand_dims", t(2, 3), axis=0) == (1, 2, 3)
    assert shape_of("expand_dims", t(2, 3), axis=2, num_newaxis=2) == (2, 3, 1, 1)
    assert shape_of("expand_dims", t(2, 3), axis=-1) == (2, 3, 1)
    assert shape_of("expand_dims", t(2, 3), axis=-3) == (1, 2, 3)
    assert run("expand_dims", np.zeros((2, 3), F32), axis=1).shape == (2, 1, 3)
    with pytest.raises(TypeRelationError, match=r"expand_dims: axis 3 is out of range \[-3, 2\]"):
        infer("expand_dims", t(2, 3), axis=3)
    assert ops.get("expand_dims").pattern is OpPattern.BROADCAST


def test_expand_dims_refuses_more_axes_than_the_maximum_rank_before_building_the_shape() -> None:
    # Found by the parser fuzzing: num_newaxis=2**63-1 built a tuple of that many 1s (MemoryError).
    assert len(shape_of("expand_dims", t(2, 3), axis=0, num_newaxis=62)) == 64
    with pytest.raises(TypeRelationError, match="expand_dims: 63 new axes on rank 2 exceed the maximum rank 64"):
        infer("expand_dims", t(2, 3), axis=0, num_newaxis=63)
    with pytest.raises(TypeRelationError, match="exceed the maximum rank 64"):
        infer("expand_dims", t(2, 3), axis=0, num_newaxis=2**63 - 1)


# --- broadcast_to ---------------------------------------------------------------------------------


def test_broadcast_to_expands_unit_and_missing_dims() -> None:
    x = np.array([[1.0], [2.0]], dtype=F32)
    out = run("broadcast_to", x, shape=[3, 2, 4])
    assert out.shape == (3, 2, 4) and out[2, 1, 3] == 2.0
    assert infer("broadcast_to", t("?", 1), shape=[5, 4]) == t(5, 4)
    with pytest.raises(
        TypeRelationError, match=r"broadcast_to: Tensor\[\(3\), float32\] does not broadcast to shape \[4\]"
    ):
        infer("broadcast_to", t(3), shape=[4])
    with pytest.raises(TypeRelationError, match="does not broadcast"):
        infer("broadcast_to", t(2, 3), shape=[3])


# --- layout_transform -----------------------------------------------------------------------------


def test_layout_transform_nchw_to_nhwc_moves_channels_last() -> None:
    x = np.arange(2 * 3 * 4 * 5, dtype=F32).reshape(2, 3, 4, 5)
    out = run("layout_transform", x, src_layout="NCHW", dst_layout="NHWC")
    assert out.shape == (2, 4, 5, 3)
    for n, c, h, w in [(0, 0, 0, 0), (1, 2, 3, 4), (0, 1, 2, 3)]:
        assert out[n, h, w, c] == x[n, c, h, w]


def test_layout_transform_nchw_to_nchw4c_blocks_channels() -> None:
    x = np.arange(1 * 8 * 2 * 3, dtype=F32).reshape(1, 8, 2, 3)
    out = run("layout_transform", x, src_layout="NCHW", dst_layout="NCHW4c")
    assert out.shape == (1, 2, 2, 3, 4)
    for c in range(8):
        for h in range(2):
            for w in range(3):
                assert out[0, c // 4, h, w, c % 4] == x[0, c, h, w]
    back = run("layout_transform", out, src_layout="NCHW4c", dst_layout="NCHW")
    np.testing.assert_array_equal(back, x)


def test_layout_transform_between_block_sizes_and_with_unknown_dims() -> None:
    x = np.arange(1 * 8 * 2 * 2, dtype=F32).reshape(1, 8, 2, 2)
    via4 = run("layout_transform", x, src_layout="NCHW", dst_layout="NCHW4c")
    via2 = run("layout_transform", via4, src_layout="NCHW4c", dst_layout="NHWC2c")
    direct = run("layout_transform", x, src_layout="NCHW", dst_layout="NHWC2c")
    np.testing.assert_array_equal(via2, direct)
    assert infer("layout_transform", t("?", 8, 4, 4), src_layout="NCHW", dst_layout="NCHW4c") == t(
        "?", 2, 4, 4, 4
    )
    assert infer("layout_transform", t(1, "?", 4, 4), src_layout="NCHW", dst_layout="NCHW4c") == t(
        1, "?", 4, 4, 4
    )


def test_layout_transform_errors() -> None:
    with pytest.raises(TypeRelationError, match="layout_transform: axis C of size 6 cannot be split by 4"):
        infer("layout_transform", t(1, 6, 2, 2), src_layout="NCHW", dst_layout="NCHW4c")
    with pytest.raises(TypeRelationError, match="do not have the same primal axes"):
        infer("layout_transform", t(1, 6, 2, 2), src_layout="NCHW", dst_layout="NCDW")
    with pytest.raises(TypeRelationError, match="has 4 axes but the tensor has rank 3"):
        infer("layout_transform", t(6, 2, 2), src_layout="NCHW", dst_layout="NHWC")


# --- concatenate, stack, split --------------------------------------------------------------------


def test_concatenate_takes_one_tuple_argument() -> None:
    a, b = np.ones((2, 3), F32), np.zeros((1, 3), F32)
    out = run("concatenate", (a, b))
    assert out.shape == (3, 3) and out[2].sum() == 0
    assert infer("concatenate", TupleType((t(2, 3), t(2, 5))), axis=-1) == t(2, 8)
    assert infer("concatenate", TupleType((t("?", 3), t(2, 3)))) == t(ANY, 3)
    assert infer("concatenate", TupleType((t("?", 3), t(2, 3))), axis=1) == t(2, 6)


def test_concatenate_errors_name_the_tuple() -> None:
    with pytest.raises(
        TypeRelationError,
        match=r"concatenate: Tensor\[\(2, 3\), float32\] and Tensor\[\(4, 4\), float32\] differ in dim 1",
    ):
        infer("concatenate", TupleType((t(2, 3), t(4, 4))))
    with pytest.raises(TypeRelationError, match="one dtype and rank"):
        infer("concatenate", TupleType((t(2, 3), t(2, 3, dtype="int32"))))
    with pytest.raises(TypeRelationError, match="expects a non-empty tuple of tensors"):
        infer("concatenate", t(2, 3))


def test_stack_inserts_a_new_axis() -> None:
    a, b = np.ones((2, 3), F32), np.zeros((2, 3), F32)
    out = run("stack", (a, b), axis=1)
    assert out.shape == (2, 2, 3) and out[0, 1].sum() == 0
    assert infer("stack", TupleType((t(2, 3),) * 3), axis=-1) == t(2, 3, 3)
    with pytest.raises(TypeRelationError, match="differ in dim 0"):
        infer("stack", TupleType((t(2, 3), t(3, 3))))


def test_split_into_sections_and_at_indices() -> None:
    x = np.arange(12, dtype=F32).reshape(6, 2)
    parts = run("split", x, indices_or_sections=3)
    assert [p.shape for p in parts] == [(2, 2)] * 3 and parts[2][0, 0] == 8
    parts = run("split", x, indices_or_sections=[1, 4])
    assert [p.shape for p in parts] == [(1, 2), (3, 2), (2, 2)]
    assert infer("split", t(2, 7), indices_or_sections=[2, 5], axis=1) == TupleType(
        (t(2, 2), t(2, 3), t(2, 2))
    )
    assert infer("split", t("?", 4), indices_or_sections=2) == TupleType((t("?", 4), t("?", 4)))
    assert infer("split", t("?", 4), indices_or_sections=[1]) == TupleType((t(1, 4), t("?", 4)))


def test_split_errors() -> None:
    with pytest.raises(TypeRelationError, match="split: axis 0 of size 7 does not split into 3 equal parts"):
        infer("split", t(7), indices_or_sections=3)
    with pytest.raises(TypeRelationError, match=r"indices \[3, 2\] must be ascending"):
        infer("split", t(7), indices_or_sections=[3, 2])
    with pytest.raises(TypeRelationError, match="must be ascending, positive and inside"):
        infer("split", t(7), indices_or_sections=[7])


def test_transform_patterns_follow_tvm() -> None:
    injective = ["reshape", "transpose", "squeeze", "concatenate", "split", "layout_transform", "stack"]
    assert all(ops.get(name).pattern is OpPattern.INJECTIVE for name in injective)
    assert ops.get("broadcast_to").pattern is OpPattern.BROADCAST


def test_concatenate_of_two_column_tensors_along_axis_0_compiles_correctly(tmp_path: Path) -> None:
    """Found by the domain draws. The generated C is right:

        for (ax0 = 0; ax0 < 5; ++ax0) for (ax1 = 0; ax1 < 2; ++ax1)
          out[ax0 * 2 + ax1] = (ax0 < 2) ? p0[ax0 * 2 + ax1] : p1[(ax0 - 2) * 2 + ax1];

    but gcc 12.2 at -O3 -mavx2 (or -march=native on an AVX2 machine) returns 0 for rows 2 and 3;
    -fno-tree-loop-if-convert or -fno-tree-loop-vectorize give the right answer. Inner extents
    other than 2 were not affected in the draws."""
    from compiler.backend.lower_primitive import lower_primitive
    from tests.compiler.backend.prim_library import build_prim_library
    from tests.compiler.ops.test_lowering import primitive_call

    op = ops.get("concatenate")
    a = np.arange(4, dtype="int32").reshape(2, 2) + 1
    b = np.arange(6, dtype="int32").reshape(3, 2) + 10
    types: list[Type] = [TupleType((TensorType((2, 2), "int32"), TensorType((3, 2), "int32")))]
    func = lower_primitive(primitive_call(op, types, op.make_attrs({"axis": 0})), "concat_columns")
    library = build_prim_library([func], tmp_path)
    np.testing.assert_array_equal(library.run("concat_columns", [a, b])[0], np.concatenate([a, b]))


def test_reshape_rule_infers_the_minus_one_from_the_run_time_element_count() -> None:
    assert rule_dims("reshape", [(4, 6)], t("?", 3), newshape=[-1, 3]) == [[8, 3]]
    assert rule_dims("reshape", [(6, 5)], t("?", "?", "?"), newshape=[-4, -1, 2, -2]) == [[3, 2, 5]]
    assert rule_dims("reshape", [(2, 3, 4)], t("?", "?"), newshape=[0, -1]) == [[2, 12]]
    assert rule_dims("reshape", [(2, 3, 4, 5)], t("?", "?", 5), newshape=[-3, -1, 5]) == [[6, 4, 5]]
    # the dims a code copies do not count towards the -1
    assert rule_dims("reshape", [(7, 2, 3)], t("?", "?", 1), newshape=[0, -1, 1]) == [[7, 6, 1]]


def test_split_rule_divides_the_run_time_extent() -> None:
    parts = TupleType((t("?", 2), t("?", 2), t("?", 2)))
    assert rule_dims("split", [(9, 2)], parts, indices_or_sections=3) == [[3, 2]] * 3
    assert rule_dims("split", [(9, 2)], parts, indices_or_sections=[2, 5]) == [[2, 2], [3, 2], [4, 2]]
