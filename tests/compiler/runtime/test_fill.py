from __future__ import annotations

import numpy as np
import pytest

from compiler.backend.interface_c import TensorInfo
from compiler.diagnostics import InputError
from compiler.runtime.fill import fill_inputs

X = TensorInfo("x", "x", (2, 3), "float32", 24)
IDS = TensorInfo("ids", "ids", (4,), "int64", 32)
MASK = TensorInfo("mask", "mask", (5,), "bool", 5)


def test_random_fill_gives_each_input_its_shape_and_dtype_and_is_seeded() -> None:
    first = fill_inputs([X, IDS, MASK], "random", seed=7)
    again = fill_inputs([X, IDS, MASK], "random", seed=7)

    assert {k: (v.shape, str(v.dtype)) for k, v in first.items()} == {
        "x": ((2, 3), "float32"), "ids": ((4,), "int64"), "mask": ((5,), "bool")}
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert ((0 <= first["x"]) & (first["x"] < 1)).all() and ((0 <= first["ids"]) & (first["ids"] < 10)).all()


def test_zeros_and_ones_fill_every_element() -> None:
    assert (fill_inputs([X], "zeros")["x"] == 0).all()
    assert (fill_inputs([IDS], "ones")["ids"] == 1).all()


def test_an_input_with_a_run_time_dim_cannot_be_made_up() -> None:
    with pytest.raises(InputError, match=r"input x has a dim known only at run time \(\?, 3\); give --inputs"):
        fill_inputs([TensorInfo("x", "x", (-1, 3), "float32", 0)], "ones")


def test_an_unknown_fill_mode_is_an_input_error() -> None:
    with pytest.raises(InputError, match="unknown fill mode 'noise'"):
        fill_inputs([X], "noise")
