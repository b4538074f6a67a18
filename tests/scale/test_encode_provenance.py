"""tokenspace encode reuses a work folder's parts only when they come from the same shards, part size and
model (encode.json), extends them when shards are added after the recorded ones, encodes damaged parts
again, and names the pattern, file or sample behind bad input."""
import io
import json
import logging

import numpy as np
import pytest
from PIL import Image

from tokenspace import encode
from tokenspace.data.webdataset import TarCollection, write_shards
from tokenspace.encode import RECORD, encode_to_index, open_shards
from tokenspace.index import InvertedIndex

PART = 5


def _png(rng) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def shards(tmp_path):
    """a.tar: 4 samples, b.tar: 12 samples (keys a000.., b000..), c.tar: 5 samples, c002 not an image."""
    rng = np.random.default_rng(0)
    out = {}
    for name, n in (("a", 4), ("b", 12), ("c", 5)):
        samples = ((f"{name}{i:03d}", b"not an image" if name == "c" and i == 2 else _png(rng), "a red dog")
                   for i in range(n))
        out[name], = write_shards(samples, str(tmp_path / f"{name}-%d.tar"), per_shard=100)
    return out


def _encode(model, specs, tmp_path, index="idx", work="work", part_size=PART):
    return encode_to_index(model, open_shards(specs), tmp_path / index, tmp_path / work, part_size=part_size,
                           batch_size=2, workers=0, tower="torch")


def _parts(work) -> dict[str, object]:
    """The parts' contents (not their bytes: a zip member carries the time it was written)."""
    out = {}
    for p in sorted(work.glob("part-*")):
        if p.suffix == ".npz":
            with np.load(p) as z:
                out[p.name] = {k: z[k].tobytes() for k in z.files}
        else:
            out[p.name] = p.read_text()
    return out


@pytest.fixture
def encoded_parts(monkeypatch):
    """A list that gets the collection rows of every batch the model encodes."""
    seen = []
    real = encode.encode_pixels

    def spy(model, x, *a, **kw):
        seen.append(len(x))
        return real(model, x, *a, **kw)

    monkeypatch.setattr(encode, "encode_pixels", spy)
    return seen


def _same_rows(a: InvertedIndex, b: InvertedIndex, ids):
    x, y = a.get(ids), b.get(ids)
    np.testing.assert_array_equal(x.indptr, y.indptr)
    np.testing.assert_array_equal(x.indices, y.indices)
    np.testing.assert_allclose(x.values, y.values, rtol=1e-6)


# ------------------------------------------------------------------------------------------ reruns
def test_the_same_run_resumes_without_encoding_anything(make_model, shards, tmp_path, encoded_parts):
    model = make_model()
    _encode(model, [shards["a"], shards["b"]], tmp_path)
    record = json.loads((tmp_path / "work" / RECORD).read_text())
    assert [s["rows"] for s in record["shards"]] == [4, 12] and record["part_size"] == PART
    assert record["model"]["vocab_size"] == len(model.vocab)
    before, n = _parts(tmp_path / "work"), len(encoded_parts)
    index = _encode(model, [shards["a"], shards["b"]], tmp_path)
    assert len(encoded_parts) == n and _parts(tmp_path / "work") == before
    assert len(index) == 16


def test_other_shards_are_refused_not_silently_read_from_the_old_parts(make_model, shards, tmp_path):
    """The audit's case: a.tar then b.tar with the same --index said 'indexed 4 of 12' and indexed none of b."""
    model = make_model()
    _encode(model, [shards["a"]], tmp_path)
    before = _parts(tmp_path / "work")
    with pytest.raises(ValueError) as e:
        _encode(model, [shards["b"]], tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "work") in msg and "other shards" in msg and "b-0.tar" in msg and "a-0.tar" in msg
    assert "new --index" in msg
    assert _parts(tmp_path / "work") == before  # nothing lost
    assert sorted(InvertedIndex.load(tmp_path / "idx").ids()) == [f"a{i:03d}" for i in range(4)]
    _encode(model, [shards["a"], shards["b"]], tmp_path, index="idx2", work="work2")
    with pytest.raises(ValueError, match=r"other shards \(2 shard\(s\) then, 1 now\)"):  # fewer: refused too
        _encode(model, [shards["a"]], tmp_path, index="idx2", work="work2")


def test_more_shards_after_the_recorded_ones_extend_the_index(make_model, shards, tmp_path):
    model = make_model()
    _encode(model, [shards["a"]], tmp_path)  # 4 rows: one short part
    index = _encode(model, [shards["a"], shards["b"]], tmp_path)
    ids = index.ids()
    assert len(ids) == len(set(ids)) == 16 and len(InvertedIndex.load(tmp_path / "idx")) == 16
    # the same rows as encoding both shards in one go
    ref = _encode(model, [shards["a"], shards["b"]], tmp_path, index="ref", work="ref-work")
    _same_rows(index, ref, ref.ids())
    assert _parts(tmp_path / "work") == _parts(tmp_path / "ref-work")
    assert [s["rows"] for s in json.loads((tmp_path / "work" / RECORD).read_text())["shards"]] == [4, 12]


@pytest.mark.parametrize("other, said", [(dict(seed=1), "its weights differ"),
                                         (dict(embed_dim=4), "its config or vocabulary differs")])
def test_another_model_is_refused(make_model, shards, tmp_path, other, said):
    _encode(make_model(), [shards["a"]], tmp_path)
    with pytest.raises(ValueError) as e:
        _encode(make_model(**other), [shards["a"]], tmp_path, index="idx2")
    assert str(tmp_path / "work") in str(e.value) and "another model" in str(e.value) and said in str(e.value)


def test_another_vocabulary_is_refused_by_name_not_as_an_unreadable_part(make_model, make_config, shards,
                                                                         tmp_path):
    """Before, this said 'part-000000.npz: not a readable SparseBatch file'."""
    import torch

    from tokenspace.models.registry import build_model
    from tokenspace.vocab import Vocabulary

    model = make_model()
    _encode(model, [shards["a"]], tmp_path)
    vocab = Vocabulary(model.vocab.tokens + ["extra"], name="tiny")
    torch.manual_seed(0)
    cfg = make_config("stair", len(vocab))
    with pytest.raises(ValueError, match=f"a vocabulary of {len(model.vocab)} then, {len(vocab)} now"):
        _encode(build_model(cfg, vocab=vocab), [shards["a"]], tmp_path, index="idx2")


def test_another_part_size_is_refused_with_the_one_to_use(make_model, shards, tmp_path):
    model = make_model()
    _encode(model, [shards["a"]], tmp_path)
    with pytest.raises(ValueError, match="hold 5 images each, not 3: rerun with --part-size 5"):
        _encode(model, [shards["a"]], tmp_path, part_size=3)


def test_a_work_folder_from_before_the_record_is_adopted(make_model, shards, tmp_path, encoded_parts, caplog):
    model = make_model()
    _encode(model, [shards["a"], shards["b"]], tmp_path)
    (tmp_path / "work" / RECORD).unlink()
    before, n = _parts(tmp_path / "work"), len(encoded_parts)
    with caplog.at_level(logging.WARNING, logger="tokenspace.encode"):
        index = _encode(model, [shards["a"], shards["b"]], tmp_path)
    assert "no encode.json" in caplog.text and "cannot be checked" in caplog.text
    assert len(encoded_parts) == n and _parts(tmp_path / "work") == before and len(index) == 16
    assert (tmp_path / "work" / RECORD).exists()
    # an old folder whose parts hold other samples: those parts are encoded again, not indexed as they are
    (tmp_path / "work" / RECORD).unlink()
    index = _encode(model, [shards["b"]], tmp_path, index="idx-b")
    assert sorted(index.ids()) == [f"b{i:03d}" for i in range(12)]


def test_a_damaged_record_is_named(make_model, shards, tmp_path):
    model = make_model()
    _encode(model, [shards["a"]], tmp_path)
    (tmp_path / "work" / RECORD).write_text('{"shards": ')
    with pytest.raises(ValueError, match=f"{tmp_path / 'work' / RECORD}: damaged .*delete it"):
        _encode(model, [shards["a"]], tmp_path)


def test_a_record_without_parts_is_taken_over(make_model, shards, tmp_path):
    """A run killed before its first part leaves nothing to protect: another run may use the folder."""
    model = make_model()
    _encode(model, [shards["a"]], tmp_path)
    for p in (tmp_path / "work").glob("part-*"):
        p.unlink()
    index = _encode(model, [shards["b"]], tmp_path, index="idx-b")
    assert len(index) == 12


# ---------------------------------------------------------------------------------- damaged parts
@pytest.mark.parametrize("damage, said", [
    (lambda npz, ids: npz.write_bytes(npz.read_bytes()[:100]), "part-000001.npz is damaged (BadZipFile"),
    (lambda npz, ids: ids.write_text(""), "part-000001.ids is damaged (0 ids for the 5 rows"),
    (lambda npz, ids: ids.write_text("b000\n"), "part-000001.ids is damaged (1 ids for the 5 rows"),
    (lambda npz, ids: ids.write_text("b000\nb001"), "part-000001.ids is damaged (cut short)"),
    (lambda npz, ids: ids.write_text("".join(f"b{i:03d}\n" for i in range(7, 12))), "not keys of the samples"),
])
def test_a_damaged_part_is_named_and_encoded_again(make_model, shards, tmp_path, caplog, encoded_parts,
                                                   damage, said):
    model = make_model()
    _encode(model, [shards["a"], shards["b"]], tmp_path)
    before, n = _parts(tmp_path / "work"), len(encoded_parts)
    work = tmp_path / "work"
    damage(work / "part-000001.npz", work / "part-000001.ids")
    with caplog.at_level(logging.WARNING, logger="tokenspace.encode"):
        index = _encode(model, [shards["a"], shards["b"]], tmp_path)
    assert said in caplog.text and "encoding part 1 again" in caplog.text
    assert str(work / "part-000001") in caplog.text
    assert sum(encoded_parts[n:]) == PART  # that part only
    assert _parts(work) == before  # the same part as before the damage
    ids = index.ids()
    assert len(ids) == len(set(ids)) == 16
    # on a fresh index too: the part encoded again is the one indexed (before, an empty ids file gave an
    # empty index and "none of the samples has a readable image")
    damage(work / "part-000001.npz", work / "part-000001.ids")
    fresh = _encode(model, [shards["a"], shards["b"]], tmp_path, index="fresh")
    assert sorted(fresh.ids()) == sorted(ids)


# ------------------------------------------------------------------------------- patterns, images
@pytest.mark.parametrize("pattern", ["*.nomatch", "x-{5..1}.tar"])
def test_a_pattern_matching_no_shard_is_named(shards, tmp_path, pattern):
    with pytest.raises(ValueError, match=r"--shards .*: no shard file matches this pattern"):
        open_shards([str(tmp_path / pattern)])
    with pytest.raises(ValueError, match="no shard file matches"):  # also beside a pattern that matches
        open_shards([shards["a"], str(tmp_path / pattern)])


def test_a_corrupt_image_is_logged_with_its_shard_and_key(make_model, shards, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        index = _encode(make_model(), [shards["c"]], tmp_path)
    assert sorted(index.ids()) == ["c000", "c001", "c003", "c004"]
    line, = [r.getMessage() for r in caplog.records if "c-0.tar:" in r.getMessage()]
    assert line.startswith(f"skipped {shards['c']}:c002: not a readable image (")
    assert "object at 0x" not in line and line.count("c002") == 1


def test_cli_encode_reports_bad_reruns_and_patterns_in_one_line(make_model, shards, tmp_path, capsys):
    from tokenspace.cli import main

    model_dir = make_model().save_pretrained(tmp_path / "model")
    base = ["encode", "--model", str(model_dir), "--index", str(tmp_path / "e5"), "--workers", "0",
            "--tower", "torch", "--part-size", str(PART)]
    assert main([*base, "--shards", shards["a"]]) == 0
    assert "indexed 4 of 4" in capsys.readouterr().out
    assert main([*base, "--shards", shards["b"]]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("tokenspace encode: error: ") and "e5.parts" in err
    assert "other shards" in err
    assert main([*base, "--shards", shards["a"], shards["b"]]) == 0
    assert "indexed 16 of 16" in capsys.readouterr().out
    assert main([*base, "--shards", str(tmp_path / "*.nomatch")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "*.nomatch: no shard file matches this pattern" in err
    assert TarCollection.open([shards["a"], shards["b"]]).keys == sorted(InvertedIndex.load(tmp_path / "e5").ids())
