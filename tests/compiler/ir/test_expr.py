import numpy as np
import pytest

from compiler.ir.expr import Constant


def test_a_constant_holds_a_read_only_copy_of_its_array():
    source = np.arange(6, dtype="float32").reshape(2, 3)
    constant = Constant(source)
    source[0, 0] = 100.0
    assert constant.data[0, 0] == 0.0
    with pytest.raises(ValueError):
        constant.data[0, 0] = 1.0


def test_a_constant_of_a_transposed_view_holds_its_values_in_c_order():
    source = np.arange(12, dtype="int16").reshape(3, 4)
    constant = Constant(source.T)
    assert constant.data.flags.c_contiguous
    np.testing.assert_array_equal(constant.data, source.T)
    assert constant.data.tobytes() == np.ascontiguousarray(source.T).tobytes()
