from __future__ import annotations

import os
from pathlib import Path

from compiler.runtime.compile_cache import FORMAT, CompileCache, compiler_identity, object_key

CC = ["cc"]
FLAGS = ["-O3", "-fPIC"]
KERNEL = b'#include <stdint.h>\n#include "scale.h"\nint32_t twice(int32_t x) { return SCALE * x; }\n'


def test_the_environment_names_the_cache_or_turns_it_off(tmp_path: Path) -> None:
    assert CompileCache.from_environment({"RELAYCC_CACHE_DIR": str(tmp_path)}) == CompileCache(tmp_path)
    for off in ("off", "", "OFF", " 0 "):
        assert CompileCache.from_environment({"RELAYCC_CACHE_DIR": off, "HOME": str(tmp_path)}) is None
    xdg = CompileCache.from_environment({"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)})
    assert xdg == CompileCache(tmp_path / "xdg" / "relaycc")
    home = CompileCache.from_environment({"HOME": str(tmp_path)})
    assert home == CompileCache(tmp_path / ".cache" / "relaycc")


def test_a_stored_object_loads_back(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    assert cache.load("ab" * 32) is None
    cache.store("ab" * 32, b"\x7fELF object")
    assert cache.load("ab" * 32) == b"\x7fELF object"
    assert not list(cache.path("ab" * 32).parent.glob("*.tmp"))


def test_a_truncated_or_altered_entry_is_a_miss_and_is_removed(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path)
    for key, damage in (("01" * 32, lambda b: b[:-3]), ("02" * 32, lambda b: b[:-1] + b"X"),
                        ("03" * 32, lambda b: b"not an entry"), ("04" * 32, lambda b: b"")):
        cache.store(key, b"object bytes " * 100)
        path = cache.path(key)
        path.write_bytes(damage(path.read_bytes()))
        assert cache.load(key) is None
        assert not path.exists()


def test_trim_removes_the_least_recently_used_entries_beyond_the_bound(tmp_path: Path) -> None:
    entry = len(FORMAT) + 32 + 1000
    cache = CompileCache(tmp_path, max_bytes=4 * entry)
    keys = [f"{k:02x}" * 32 for k in range(6)]
    for age, key in enumerate(keys):
        cache.store(key, bytes(1000))
        stamp = 1_000_000 + age
        os.utime(cache.path(key), (stamp, stamp))
    cache.load(keys[0])  # used just now: kept
    cache.trim()
    kept = [k for k in keys if cache.path(k).exists()]
    assert kept == [keys[0], keys[4], keys[5]]


def test_trim_keeps_a_cache_within_its_bound(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path, max_bytes=10_000)
    for k in range(3):
        cache.store(f"{k:02x}" * 32, bytes(100))
    cache.trim()
    assert all(cache.path(f"{k:02x}" * 32).exists() for k in range(3))


def test_the_key_ignores_where_the_files_are_but_not_what_they_say(tmp_path: Path) -> None:
    def key(directory: str, scale: str = "2", flags: list[str] = FLAGS, text: bytes = KERNEL) -> str | None:
        root = tmp_path / directory
        (root / "src").mkdir(parents=True, exist_ok=True)
        (root / "include").mkdir(exist_ok=True)
        (root / "include" / "scale.h").write_text(f"#define SCALE {scale}\n")
        source = root / "src" / "k.c"
        source.write_bytes(text)
        return object_key(CC, flags, source, text, [root / "include"])

    first = key("a")
    assert first is not None and key("b") == first
    assert key("c", scale="3") != first
    assert key("d", flags=["-O2", "-fPIC"]) != first
    assert key("e", text=KERNEL + b"\n") != first


def test_a_file_whose_dependencies_cannot_be_seen_has_no_key(tmp_path: Path) -> None:
    source = tmp_path / "k.c"
    for text in (b"#define H <stdint.h>\n#include H\n", b'const char* built = __DATE__ " " __TIME__;\n'):
        source.write_bytes(text)
        assert object_key(CC, FLAGS, source, text, []) is None


def test_a_native_build_names_the_cpu_in_the_compiler_identity() -> None:
    native, portable = compiler_identity(("cc",), True), compiler_identity(("cc",), False)
    assert native.startswith(portable) and len(native) > len(portable)
