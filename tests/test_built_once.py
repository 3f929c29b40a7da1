"""The helper that lets one xdist worker build a fixture's value and the others load it."""

from __future__ import annotations

import dataclasses
import pickle
import threading
from pathlib import Path

import numpy as np
import pytest

from compiler import ops
from compiler.ir.attrs import Attrs
from compiler.ir.expr import Op
from compiler.tir.expr import Buffer
from compiler.tir.stmt import PrimFunc, Store, for_range
from tests.built_once import built_once_in, dump, load
from tests.compiler.backend.prim_library import build_prim_library


class Builds:
    """A build function that counts its calls and the directories it was given."""

    def __init__(self, value: object) -> None:
        self.value = value
        self.directories: list[Path] = []

    def __call__(self, directory: Path) -> object:
        self.directories.append(directory)
        assert directory.is_dir() and not any(directory.iterdir())
        return self.value


def test_the_first_call_builds_and_later_calls_load_its_result(tmp_path: Path) -> None:
    build = Builds({"numbers": [1, 2, 3], "attrs": Attrs(axis=1, shape=(2, 3))})
    first = built_once_in(tmp_path / "value", build)
    second = built_once_in(tmp_path / "value", build)
    assert len(build.directories) == 1
    assert second == first and second is not first
    assert second["attrs"].axis == 1 and isinstance(second["attrs"], Attrs)


def test_a_value_that_does_not_pickle_is_built_by_every_caller(tmp_path: Path) -> None:
    build = Builds(threading.Lock())
    built_once_in(tmp_path / "value", build)
    built_once_in(tmp_path / "value", build)
    assert len(build.directories) == 2


class NeedsTwoArguments(Exception):
    def __init__(self, what: str, where: int) -> None:
        super().__init__(f"{what} at {where}")


def test_a_value_that_pickles_but_does_not_unpickle_is_built_by_every_caller(tmp_path: Path) -> None:
    build = Builds({"error": NeedsTwoArguments("broken", 3)})
    with pytest.raises(TypeError):
        load(dump(build.value))
    assert str(built_once_in(tmp_path / "value", build)["error"]) == "broken at 3"
    assert str(built_once_in(tmp_path / "value", build)["error"]) == "broken at 3"
    assert len(build.directories) == 2


def test_a_failed_build_leaves_the_next_caller_a_fresh_directory(tmp_path: Path) -> None:
    def failing(directory: Path) -> object:
        (directory / "half-written").write_text("")
        raise RuntimeError("gcc died")

    with pytest.raises(RuntimeError, match="gcc died"):
        built_once_in(tmp_path / "value", failing)
    build = Builds(7)
    assert built_once_in(tmp_path / "value", build) == 7
    assert built_once_in(tmp_path / "value", build) == 7
    assert len(build.directories) == 1


def _doubling(name: str) -> PrimFunc:
    x, y = Buffer("x", (5,), "float32"), Buffer("y", (5,), "float32")
    return PrimFunc(name, (x, y), for_range("i", 5, lambda i: Store(y, (i,), x[i] * 2.0)), num_inputs=1)


def test_a_loaded_prim_library_loads_its_shared_library_again_and_runs(tmp_path: Path) -> None:
    build = Builds(None)

    def build_library(directory: Path) -> object:
        build(directory)
        return build_prim_library([_doubling("twice")], directory, "once")

    built_once_in(tmp_path / "value", build_library)
    loaded = built_once_in(tmp_path / "value", build_library)
    assert len(build.directories) == 1
    x = np.arange(5, dtype="float32")
    np.testing.assert_array_equal(loaded.run("twice", [x])[0], x * 2)
    assert loaded.funcs["twice"].name == "twice"


def test_a_load_of_a_value_pickled_with_attrs_keeps_their_order() -> None:
    attrs = Attrs({"b": 1, "a": (2, 3)})
    loaded = load(dump(attrs))
    assert list(loaded) == ["b", "a"] and loaded == attrs


def test_registered_ops_load_as_the_loading_process_own_objects() -> None:
    loaded = load(dump({"op": Op.get("add"), "opdef": ops.get("nn.dense")}))
    assert loaded["op"] is Op.get("add") and loaded["opdef"] is ops.get("nn.dense")


def test_an_op_definition_outside_the_registry_is_not_dumped() -> None:
    stray = dataclasses.replace(ops.get("exp"))
    with pytest.raises(pickle.PicklingError, match="not the registry's own entry"):
        dump(stray)
