"""export-st replaces OUT only when OUT is empty or a previous export (its tokenspace_export.json says so):
a user's folder, a file or the model's own folder is refused, with nothing written or deleted."""
import json

import pytest

from tokenspace.models.export_st import MARKER, export_sentence_transformers


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def stair(make_model, tmp_path):
    model = make_model("stair")
    model.save_pretrained(tmp_path / "model")
    return model


def test_an_export_carries_its_marker_and_a_previous_export_is_replaced(stair, tmp_path):
    out = export_sentence_transformers(stair, tmp_path / "st")
    assert json.loads((out / MARKER).read_text())["format"] == "sentence-transformers-sparse-encoder"
    (out / "stale.txt").write_text("from the previous export")
    export_sentence_transformers(stair, out)
    assert not (out / "stale.txt").exists() and (out / "modules.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]  # no temporary folder left
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (export_sentence_transformers(stair, empty) / MARKER).exists()


def test_a_folder_that_is_not_an_export_is_refused_and_kept(stair, tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.txt").write_text("years of work")
    with pytest.raises(ValueError) as e:
        export_sentence_transformers(stair, precious)
    assert str(e.value).startswith(f"{precious}: is a non-empty folder that is not a previous export")
    assert MARKER in str(e.value) and "\n" not in str(e.value)
    assert snapshot(precious) == {"thesis.txt": b"years of work"}
    (precious / MARKER).write_text("not json")  # a damaged marker is no marker
    with pytest.raises(ValueError, match="not a previous export"):
        export_sentence_transformers(stair, precious)
    assert (precious / "thesis.txt").exists()


def test_a_file_is_refused(stair, tmp_path):
    f = tmp_path / "out"
    f.write_text("keep me")
    with pytest.raises(ValueError, match="out: is a file, not a folder"):
        export_sentence_transformers(stair, f)
    assert f.read_text() == "keep me"


@pytest.mark.parametrize("where, words", [("model", "is the model's own folder"),
                                          ("model/st", "lies inside the model folder"),
                                          (".", "holds the model folder")])
def test_the_models_own_folder_is_refused(stair, tmp_path, where, words):
    before = snapshot(tmp_path / "model")
    with pytest.raises(ValueError, match=words):
        export_sentence_transformers(stair, tmp_path / where, source=tmp_path / "model")
    assert snapshot(tmp_path / "model") == before and not (tmp_path / "model" / "st").exists()
