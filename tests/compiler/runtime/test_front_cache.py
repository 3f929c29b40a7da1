from __future__ import annotations

import os
from pathlib import Path

import pytest

from compiler.runtime.front_cache import FrontCache, front_key

PARTS: list[tuple[str, bytes | str]] = [("command", "compile"), ("model", b"def @main() { 1f }")]


def test_front_key_is_the_same_for_the_same_command_line_and_differs_for_another() -> None:
    assert front_key(PARTS, {}) == front_key(list(PARTS), {})
    assert front_key(PARTS, {}) != front_key([("command", "compile"), ("model", b"def @main() { 2f }")], {})
    assert front_key(PARTS, {}) != front_key([("command", "lower"), PARTS[1]], {})
    # Parts are length-prefixed: moving bytes from one part to the next changes the key.
    assert front_key([("a", "xy"), ("b", "")], {}) != front_key([("a", "x"), ("b", "y")], {})


def test_front_key_follows_the_environment_a_build_reads_and_ignores_the_rest() -> None:
    base = front_key(PARTS, {})
    assert front_key(PARTS, {"CC": "clang"}) != base
    assert front_key(PARTS, {"RELAYCC_CFLAGS": "-O2"}) != base
    assert front_key(PARTS, {"TERM": "xterm", "SSH_TTY": "/dev/pts/3"}) == base


def test_front_key_follows_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = front_key(PARTS, {})
    monkeypatch.chdir(tmp_path)  # relative paths in the command line now name other files
    assert front_key(PARTS, {}) != before


def test_lookup_gives_the_build_key_while_its_libraries_are_unchanged(tmp_path: Path) -> None:
    library = tmp_path / "libblas.so"
    library.write_bytes(b"\x7fELF")
    cache = FrontCache(tmp_path / "cache")
    cache.store("ab" * 32, "cd" * 32, [library])
    assert cache.lookup("ab" * 32) == "cd" * 32
    info = library.stat()
    os.utime(library, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))  # a new package
    assert cache.lookup("ab" * 32) is None
    assert not cache.path("ab" * 32).exists()


def test_a_damaged_or_missing_entry_is_no_key(tmp_path: Path) -> None:
    cache = FrontCache(tmp_path)
    assert cache.lookup("ef" * 32) is None
    cache.path("ef" * 32).parent.mkdir(parents=True)
    cache.path("ef" * 32).write_text('{"key": ')
    assert cache.lookup("ef" * 32) is None
    assert not cache.path("ef" * 32).exists()


def test_entries_of_evicted_builds_are_forgotten(tmp_path: Path) -> None:
    cache = FrontCache(tmp_path)
    cache.store("01" * 32, "kept", [])
    cache.store("02" * 32, "gone", [])
    cache.forget_missing(lambda key: key == "kept")
    assert cache.lookup("01" * 32) == "kept"
    assert not cache.path("02" * 32).exists()
