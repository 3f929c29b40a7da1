"""The content-addressed module key, as a property: two requests get the same module id exactly
when they ask for the same build. Every input that changes the build (the text, each param's
name, dtype, shape and bytes, the target, the module name, the config) changes the key; what
does not (the order params are given in, their memory layout, spellings of the same target)
leaves it alone. A key that misses an input serves a stale build; one that depends on noise
compiles the same model twice."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.driver import BuildOptions
from service.jobs.normalize import normal_form
from service.store.module_store import module_id

TEXTS = (
    '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) { exp(%x) }\n',
    '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) { exp(%x)  }\n',
    '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) { log(%x) }\n',
)
TARGETS = ("c", "cblas, c")
DTYPES = ("float32", "int32", "float16", "uint8")


@st.composite
def params(draw: st.DrawFn) -> dict[str, np.ndarray]:
    names = draw(st.lists(st.sampled_from(("w", "b", "gamma")), unique=True, max_size=3))
    arrays = {}
    for name in names:
        dtype = draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        values = draw(st.lists(st.integers(0, 3), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        arrays[name] = np.array(values, dtype=dtype).reshape(shape)
    return arrays


@st.composite
def requests(draw: st.DrawFn) -> tuple[object, ...]:
    return (
        draw(st.sampled_from(TEXTS)),
        draw(st.sampled_from(TARGETS)),
        draw(st.sampled_from(("default", "net"))),
        draw(st.sampled_from((0, 3))),
        draw(st.sampled_from(({}, {"relay.FuseOps.max_depth": 4}))),
        draw(params()),
    )


def key(request: tuple[object, ...], *, reverse_params: bool = False, fortran: bool = False) -> str:
    text, target, name, opt_level, pass_config, arrays = request
    options = BuildOptions(target=target, module_name=name, opt_level=opt_level, config=pass_config)  # type: ignore[arg-type]
    items = list(arrays.items())  # type: ignore[attr-defined]
    if reverse_params:
        items.reverse()
    # np.asfortranarray makes a 0-d array 1-d, so 0-d arrays are passed as they are.
    given_params = {k: (np.asfortranarray(v) if fortran and np.ndim(v) else v) for k, v in items}
    return module_id(normal_form(text, options, given_params))  # type: ignore[arg-type]


def same_build(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    *head_a, params_a = a
    *head_b, params_b = b
    if head_a != head_b or params_a.keys() != params_b.keys():  # type: ignore[attr-defined]
        return False
    return all(
        params_a[k].dtype == params_b[k].dtype and params_a[k].shape == params_b[k].shape  # type: ignore[index]
        and np.array_equal(params_a[k], params_b[k])  # type: ignore[index]
        for k in params_a  # type: ignore[attr-defined]
    )


@settings(max_examples=300, deadline=None)
@given(requests(), requests())
def test_two_requests_share_a_key_exactly_when_they_ask_for_the_same_build(a, b) -> None:  # type: ignore[no-untyped-def]
    assert (key(a) == key(b)) == same_build(a, b)


@settings(max_examples=100, deadline=None)
@given(requests())
def test_param_order_and_memory_layout_do_not_change_the_key(request) -> None:  # type: ignore[no-untyped-def]
    assert key(request) == key(request, reverse_params=True) == key(request, fortran=True)


def test_params_with_the_same_bytes_but_another_shape_or_dtype_get_another_key() -> None:
    base = (TEXTS[0], "c", "default", 3, {}, {"w": np.zeros((2, 2), "float32")})
    reshaped = base[:5] + ({"w": np.zeros((4,), "float32")},)
    retyped = base[:5] + ({"w": np.zeros((4,), "int32")},)
    assert len({key(base), key(reshaped), key(retyped)}) == 3


def test_a_scalar_param_and_a_one_element_vector_get_different_keys() -> None:
    # Found by the property test above: the digest took the shape after
    # np.ascontiguousarray, which makes a 0-d array 1-d.
    scalar = (TEXTS[0], "c", "default", 0, {}, {"w": np.array(0.0, "float32")})
    vector = scalar[:5] + ({"w": np.array([0.0], "float32")},)
    assert key(scalar) != key(vector)


def test_spellings_of_one_target_share_a_key() -> None:
    base = (TEXTS[0], "cblas, c", "default", 3, {}, {})
    assert key(base) == key((TEXTS[0], "cblas ,c", "default", 3, {}, {}))
