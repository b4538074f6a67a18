"""tokenspace/outputs.py: what a folder holds, told by the names tokenspace writes there, and the one
output rule (new, empty or the command's own state; never inside an index)."""
from __future__ import annotations

import pytest

from tokenspace import outputs
from tokenspace.index import InvertedIndex
from tokenspace.sparse import SparseBatch


def test_each_mark_is_the_name_its_writer_uses():
    """outputs.py imports nothing of the package: its names are checked against their writers here."""
    from tokenspace.cli.run.index import FOLDER_FORMATS
    from tokenspace.encode import RECORD
    from tokenspace.index import qdrant, storage
    from tokenspace.index.folder import DENSE_IDS
    from tokenspace.models.config import CONFIG_FILE
    from tokenspace.models.export_st import MARKER

    marks = dict(outputs.KINDS)
    assert {storage.MANIFEST, DENSE_IDS} == set(marks[outputs.INDEX])
    assert RECORD in marks[outputs.PARTS]
    assert {MARKER, FOLDER_FORMATS["opensearch"][0], qdrant.COLLECTION_FILE} == set(marks[outputs.EXPORT])
    assert marks[outputs.MODEL] == (CONFIG_FILE,)


def _index(folder):
    InvertedIndex.build(SparseBatch.from_dicts([{0: 1.0}], dim=3), ["d"]).save(folder)
    return folder


@pytest.mark.parametrize("entry,kind", [
    ("MANIFEST.json", outputs.INDEX), ("encode.json", outputs.PARTS), ("part-000000.npz", outputs.PARTS),
    ("log.jsonl", outputs.RUN), ("checkpoint/", outputs.RUN), ("shard-000003.tar", outputs.SHARDS),
    ("config.json", outputs.MODEL), ("tokenspace_export.json", outputs.EXPORT), ("holiday.jpg", outputs.FILES),
])
def test_what_a_folder_holds(tmp_path, entry, kind):
    (tmp_path / "f").mkdir()
    p = tmp_path / "f" / entry.rstrip("/")
    p.mkdir() if entry.endswith("/") else p.write_text("x")
    assert outputs.holds(tmp_path / "f") == (kind, entry.rstrip("/"))


def test_new_empty_and_own_folders_pass(tmp_path):
    assert outputs.check_output(tmp_path / "new" / "deeper", "--out") is None
    (tmp_path / "empty").mkdir()
    assert outputs.check_output(tmp_path / "empty", "--out") is None
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.jsonl").write_text("")
    assert outputs.check_output(run, "--out", own=(outputs.RUN,)) == outputs.RUN
    with pytest.raises(outputs.OutputRefused, match=r"^--out .* already holds a training run: choose a new"):
        outputs.check_output(run, "--out", own=(outputs.INDEX,))


def test_a_file_a_users_folder_and_anything_inside_an_index_are_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(outputs.OutputRefused, match="is a file"):
        outputs.check_output(tmp_path / "file", "--out")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("x")
    with pytest.raises(outputs.OutputRefused, match=r"not empty and holds no run folder \(such as notes.txt\)"):
        outputs.check_output(mine, "--out", what="run folder")
    idx = _index(tmp_path / "idx")
    for inside in (idx / "parts", idx / "a" / "b"):
        with pytest.raises(outputs.OutputRefused, match=f"is in the index folder {idx}"):
            outputs.check_output(inside, "--work", own=(outputs.PARTS,))


def test_another_tools_manifest_above_does_not_close_the_tree(tmp_path):
    (tmp_path / "MANIFEST.json").write_text('{"format": "some other tool"}')
    (tmp_path / "ids.json").write_text("[]")  # without a FAISS file: not a dense index
    assert outputs.index_above(tmp_path / "out") is None
    assert outputs.check_output(tmp_path / "out", "--out") is None
