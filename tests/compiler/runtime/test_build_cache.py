from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from compiler.runtime.build_cache import LINK_BYTES, BuildCache, KeyHasher, package_identity

KEY = "ab" * 32


def _outdir(root: Path, big: bytes = b"\x7fELF" + bytes(LINK_BYTES)) -> list[Path]:
    files = {"metadata.json": b'{"format": "relaycc.metadata/1"}\n', "src/default_lib0.c": b"int x;\n",
             "libdefault.so": big}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return [root / name for name in files]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_stored_build_restores_byte_identical_into_another_directory(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    built = tmp_path / "built"
    cache.store(KEY, built, _outdir(built))
    restored = cache.restore(KEY, tmp_path / "again")
    assert restored is not None and len(restored) == 3
    assert _tree(tmp_path / "again") == _tree(built)
    assert cache.restore("cd" * 32, tmp_path / "other") is None


def test_large_files_are_linked_and_small_ones_copied(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    built = tmp_path / "built"
    cache.store(KEY, built, _outdir(built))
    cache.restore(KEY, tmp_path / "again")
    assert os.stat(tmp_path / "again" / "libdefault.so").st_ino == os.stat(built / "libdefault.so").st_ino
    assert os.stat(tmp_path / "again" / "metadata.json").st_ino != os.stat(built / "metadata.json").st_ino


def test_a_restore_replaces_a_linked_file_instead_of_writing_through_it(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    built = tmp_path / "built"
    cache.store(KEY, built, _outdir(built))
    (built / "libdefault.so").unlink()
    (built / "libdefault.so").write_bytes(b"a newer library")  # a fresh build renames one in
    cache.restore(KEY, built)
    assert (built / "libdefault.so").read_bytes()[:4] == b"\x7fELF"


def test_a_restore_into_the_directory_holding_the_entrys_links_leaves_them_in_place(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    built = tmp_path / "built"
    cache.store(KEY, built, _outdir(built))
    before = os.stat(built / "libdefault.so")
    (built / "metadata.json").write_bytes(b"{}")  # a small file: always written again
    restored = cache.restore(KEY, built)
    assert restored is not None and built / "libdefault.so" in restored
    after = os.stat(built / "libdefault.so")
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert (built / "metadata.json").read_bytes() == b'{"format": "relaycc.metadata/1"}\n'


def test_an_altered_small_file_is_a_miss_and_removes_the_entry(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    built = tmp_path / "built"
    cache.store(KEY, built, _outdir(built))
    stored = cache.entry(KEY) / "files" / "src" / "default_lib0.c"
    stored.write_bytes(b"int y;\n")
    assert cache.restore(KEY, tmp_path / "again") is None
    assert not cache.entry(KEY).exists()
    assert not (tmp_path / "again").exists()


def test_a_large_file_written_through_an_outdir_link_is_a_miss(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    built = tmp_path / "built"
    cache.store(KEY, built, _outdir(built))
    with open(built / "libdefault.so", "r+b") as stream:  # in place: the entry's inode too
        stream.write(b"EVIL")
    assert cache.restore(KEY, tmp_path / "again") is None
    assert not cache.entry(KEY).exists()


def test_a_truncated_large_file_or_a_damaged_manifest_is_a_miss(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    built = tmp_path / "built"
    cache.store(KEY, built, _outdir(built))
    os.truncate(cache.entry(KEY) / "files" / "libdefault.so", 100)
    assert cache.restore(KEY, tmp_path / "again") is None
    cache.store(KEY, built, _outdir(built))
    manifest = cache.entry(KEY) / "manifest"
    manifest.write_bytes(manifest.read_bytes()[:-2])
    assert cache.restore(KEY, tmp_path / "again") is None
    assert not cache.entry(KEY).exists()


def test_trim_evicts_the_least_recently_used_builds_beyond_the_bound(tmp_path: Path) -> None:
    built = tmp_path / "built"
    paths = _outdir(built, big=bytes(1000))
    size = sum(p.stat().st_size for p in paths)
    keys = [f"{k:02x}" * 32 for k in range(6)]
    for age, key in enumerate(keys):
        BuildCache(tmp_path / "cache").store(key, built, paths)
        os.utime(BuildCache(tmp_path / "cache").entry(key) / "manifest", (1_000_000 + age, 1_000_000 + age))
    cache = BuildCache(tmp_path / "cache", max_bytes=4 * size)
    assert cache.restore(keys[0], tmp_path / "used") is not None  # used just now: kept
    cache.trim()
    assert [k for k in keys if cache.entry(k).exists()] == [keys[0], keys[4], keys[5]]


def test_an_entry_larger_than_the_bound_stays_while_its_build_directory_shares_its_files(tmp_path: Path) -> None:
    built = tmp_path / "built"
    paths = _outdir(built)
    cache = BuildCache(tmp_path / "cache", max_bytes=LINK_BYTES // 2)
    cache.store(KEY, built, paths)  # the library is linked, so the entry costs the small files only
    assert cache.restore(KEY, tmp_path / "again") is not None
    for directory in (built, tmp_path / "again"):
        for path in sorted(directory.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
    cache.trim()  # now the library's only name is the entry's
    assert not cache.entry(KEY).exists()


def test_the_key_tells_apart_every_part_and_every_array_byte() -> None:
    def key(*parts: tuple[str, bytes], arrays: dict[str, np.ndarray] | None = None) -> str:
        hasher = KeyHasher()
        for label, data in parts:
            hasher.add(label, data)
        hasher.add_arrays("params", arrays or {})
        return hasher.hexdigest()

    weights = np.arange(9 << 20, dtype=np.float32)  # hashed in pieces on several threads
    base = key(("a", b"xy"), ("b", b"z"), arrays={"w": weights})
    assert base == key(("a", b"xy"), ("b", b"z"), arrays={"w": weights.copy()})
    changed = weights.copy()
    changed[-1] += 1
    others = [
        key(("a", b"x"), ("b", b"yz"), arrays={"w": weights}),
        key(("a", b"xy"), ("b", b"z"), arrays={"w": changed}),
        key(("a", b"xy"), ("b", b"z"), arrays={"v": weights}),
        key(("a", b"xy"), ("b", b"z"), arrays={"w": weights.reshape(3, -1)}),
        key(("a", b"xy"), ("b", b"z"), arrays={"w": weights.view(np.int32)}),
    ]
    assert len({base, *others}) == 6


def test_the_package_identity_changes_when_a_file_does(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text("x = 1\n")
    before = package_identity.__wrapped__(tmp_path)
    (tmp_path / "mod.py").write_text("x = 22\n")
    assert package_identity.__wrapped__(tmp_path) != before
