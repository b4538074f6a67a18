import os
import stat
from pathlib import Path

import numpy as np
import pytest

from tokenspace.atomic import atomic_open, atomic_path, replace_folder, write_bytes, write_text


def test_write_replaces_the_whole_file(tmp_path):
    p = tmp_path / "sub" / "a.json"
    write_text(p, "old")
    write_text(p, "new")
    assert p.read_text() == "new"
    write_bytes(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    assert [q.name for q in p.parent.iterdir()] == ["a.json"]  # no temporary left behind


def test_an_error_leaves_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "a.txt"
    write_text(p, "old")
    with pytest.raises(RuntimeError), atomic_open(p) as f:
        f.write("half of the ne")
        raise RuntimeError("killed half-way")
    assert p.read_text() == "old"
    assert [q.name for q in tmp_path.iterdir()] == ["a.txt"]


def test_writers_that_append_a_suffix_keep_the_target_name(tmp_path):
    p = tmp_path / "grids.npy"
    with atomic_path(p) as tmp:
        np.save(tmp, np.arange(3))
    np.testing.assert_array_equal(np.load(p), np.arange(3))
    assert [q.name for q in tmp_path.iterdir()] == ["grids.npy"]


def test_only_whole_file_modes(tmp_path):
    with pytest.raises(ValueError, match="mode must start with 'w'"), atomic_open(tmp_path / "x", "a"):
        pass


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_written_files_honour_the_umask(tmp_path, umask):
    # a temporary created private (0600, as tempfile.mkstemp does) would hand that mode to every
    # manifest, vocab and export through the rename; the result must be what a plain open() gives
    old = os.umask(umask)
    try:
        write_text(tmp_path / "MANIFEST.json", "{}")
        with atomic_path(tmp_path / "grids.npy") as tmp:
            np.save(tmp, np.arange(3))
        with open(tmp_path / "plain.txt", "w") as f:
            f.write("reference")
    finally:
        os.umask(old)
    want = 0o666 & ~umask
    for name in ("MANIFEST.json", "grids.npy", "plain.txt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == want, name


def _folder(path, text):
    path.mkdir()
    (path / "f.txt").write_text(text)
    return path


def test_replace_folder_puts_the_new_folder_in_place_and_leaves_nothing_beside_it(tmp_path):
    replace_folder(_folder(tmp_path / "new1", "1"), tmp_path / "out")
    replace_folder(_folder(tmp_path / "new2", "2"), tmp_path / "out")
    assert (tmp_path / "out" / "f.txt").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_replace_folder_brings_the_old_folder_back_when_the_rename_fails(tmp_path, monkeypatch):
    _folder(tmp_path / "out", "old")
    new = _folder(tmp_path / "new", "new")
    real = Path.rename

    def failing(self, target):
        if self == new:
            raise OSError("disk gone")
        return real(self, target)

    monkeypatch.setattr(Path, "rename", failing)
    with pytest.raises(OSError, match="disk gone"):
        replace_folder(new, tmp_path / "out", aside=tmp_path / "out.old")
    assert (tmp_path / "out" / "f.txt").read_text() == "old"
    assert not (tmp_path / "out.old").exists()


def test_replace_folder_drops_a_crashed_runs_aside_copy(tmp_path):
    _folder(tmp_path / "out.old", "crashed between the renames")  # no out/: the state a crash leaves
    replace_folder(_folder(tmp_path / "new", "new"), tmp_path / "out", aside=tmp_path / "out.old")
    assert (tmp_path / "out" / "f.txt").read_text() == "new" and not (tmp_path / "out.old").exists()
