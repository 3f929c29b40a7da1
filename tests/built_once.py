"""Test helper: a costly session or module fixture built by one xdist worker, loaded by the others.

The op-compiling fixtures (a registry's worth of lowered functions, emitted as C and linked into
one library) cost seconds of Python before gcc starts. Every worker that runs one of their tests
used to pay that again. Here the first worker to need a value builds it under a file lock, in a
directory all workers of the run share (the parent of their own temporary directories, as
pytest-xdist documents), and pickles it beside the built files; the others wait for the lock and
unpickle it. Outside xdist the value is simply built.

A value that does not pickle, or does not unpickle (an exception that cannot be rebuilt from its
arguments, say), is built again by each worker, as before: sharing is a saving, never a change in
what a test sees.
"""

from __future__ import annotations

import copyreg
import fcntl
import io
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import pytest

from compiler.ir.attrs import Attrs
from compiler.ir.expr import Op
from compiler.ops import registry
from compiler.ops.registry import OpDef

T = TypeVar("T")


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """`build(directory)`, run once per test run for `name` (a fixture's own name): under
    xdist the first worker builds and the others load its result."""
    shared = shared_directory(tmp_path_factory)
    if shared is None:
        return build(tmp_path_factory.mktemp(name))
    return built_once_in(shared / name, build)


def shared_directory(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The directory the xdist workers of this run share, or None outside xdist."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    return tmp_path_factory.getbasetemp().parent / "built-once"


def built_once_in(directory: Path, build: Callable[[Path], T]) -> T:
    """`build` of a fresh directory under `directory`, unless a process already pickled its result
    there."""
    directory.mkdir(parents=True, exist_ok=True)
    done = directory / "value.pickle"
    with open(directory / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            try:
                return cast(T, load(done.read_bytes()))
            except Exception:  # noqa: BLE001  a value that does not unpickle is built again
                pass
        value = build(_fresh(directory))
        try:
            data = dump(value)
        except Exception:  # noqa: BLE001  nor is one that does not pickle shared
            return value
        partial = done.with_suffix(f".{os.getpid()}")
        partial.write_bytes(data)
        os.replace(partial, done)
        return value


def _fresh(directory: Path) -> Path:
    """A build directory nobody used: a build that failed in another worker may have left one."""
    taken = [int(m.group(1)) for p in directory.iterdir() if (m := re.fullmatch(r"build(\d+)", p.name))]
    path = directory / f"build{max(taken, default=-1) + 1}"
    path.mkdir()
    return path


def _reduce_attrs(attrs: Attrs) -> tuple[type[Attrs], tuple[dict[str, object]]]:
    # Attrs answers attribute reads from its items, which pickle's default path calls before
    # the items exist (endless recursion); rebuilt from its items instead.
    return Attrs, (dict(attrs),)


def _reduce_op(op: Op) -> tuple[Callable[[str], Op], tuple[str]]:
    # Relay ops are interned (compared with `is`): loaded as the loading process's own.
    return Op.get, (op.name,)


def _reduce_opdef(op: OpDef) -> tuple[Callable[[str], OpDef], tuple[str]]:
    # Registry entries are compared with `is` too, and hold lambdas pickle cannot write.
    if registry.lookup(op.name) is not op:
        raise pickle.PicklingError(f"{op.name} is not the registry's own entry")
    return registry.get, (op.name,)


def dump(value: object) -> bytes:
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {**copyreg.dispatch_table, Attrs: _reduce_attrs, Op: _reduce_op, OpDef: _reduce_opdef}
    pickler.dump(value)
    return buffer.getvalue()


def load(data: bytes) -> object:
    return pickle.loads(data)
