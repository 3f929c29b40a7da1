import pytest

from compiler.ir.attrs import Attrs


def test_attrs_freeze_lists_to_tuples_and_compare_by_value():
    a = Attrs({"strides": [1, 2], "pad": [[0, 1], [1, 0]]})
    assert a["strides"] == (1, 2)
    assert a.pad == ((0, 1), (1, 0))
    assert a == Attrs(strides=(1, 2), pad=((0, 1), (1, 0)))
    assert hash(a) == hash(Attrs(strides=(1, 2), pad=((0, 1), (1, 0))))


def test_attrs_are_immutable():
    a = Attrs(x=1)
    with pytest.raises(AttributeError):
        a.x = 2  # noqa: B010
    assert a.with_attr("x", 2).x == 2 and a.x == 1


def test_attrs_keep_insertion_order_and_drop_keys():
    a = Attrs({"b": 1, "a": 2, "c": 3})
    assert list(a) == ["b", "a", "c"]
    assert list(a.without("a")) == ["b", "c"]


def test_missing_attr_is_an_attribute_error():
    with pytest.raises(AttributeError):
        Attrs().missing
