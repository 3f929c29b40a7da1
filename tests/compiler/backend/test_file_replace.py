import pytest

from compiler.backend.file_replace import replace_file


def test_a_new_file_takes_a_free_name(tmp_path):
    tmp = tmp_path / ".a.tmp"
    tmp.write_text("new")
    replace_file(tmp, tmp_path / "a")
    assert (tmp_path / "a").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_a_new_file_replaces_the_old_one_and_leaves_nothing_aside(tmp_path):
    (tmp_path / "a").write_text("old")
    tmp = tmp_path / ".a.tmp"
    tmp.write_text("new")
    replace_file(tmp, tmp_path / "a")
    assert (tmp_path / "a").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_a_missing_temporary_file_is_an_error_that_keeps_the_old_file_in_place(tmp_path):
    (tmp_path / "a").write_text("old")
    with pytest.raises(FileNotFoundError):
        replace_file(tmp_path / ".a.tmp", tmp_path / "a")
    assert (tmp_path / "a").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
