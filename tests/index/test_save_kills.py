"""A save is atomic whatever the folder held: a kill before any of its write steps leaves the folder's
previous state (the old index, or the same error as before when it could not be read) or the new index,
never a mix (the old rows under the new vocabulary, a vocabulary whose crc32 fails).

Fault injection, not timing: a forked child patches the os calls a save writes through (fsync, rename,
replace, unlink, rmdir, mkdir) and ends itself with os._exit at the Nth one, for every N up to the
save's last step; the parent then loads the folder both ways (verify=True and False). Beside the kill
test of test_storage.py (a failing manifest write), for saves over a different index."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from _inverted_data import as_older_format, ids_for, random_batch

from tokenspace.index import IndexCorruptError, InvertedIndex, storage
from tokenspace.vocab import Vocabulary

STEPS = ("fsync", "rename", "replace", "unlink", "rmdir", "mkdir")
KILLED = 137


def _index(n, dim, prefix, seed, *, tombstones=False, hub=False):
    vocab = Vocabulary([f"{prefix}{i}" for i in range(dim)], name=prefix)
    docs = random_batch(n, dim, 0.2, seed=seed, zipf=True).with_vocab(vocab)
    index = InvertedIndex.build(docs, ids_for(n, prefix), approx_top_n=4)
    if hub:
        index.set_hub_prior(random_batch(8, dim, 0.3, seed=seed + 1), k=2, order=False)
    if tombstones:
        index.delete(ids_for(n, prefix)[::7])
    return index


def _as_version(root, version):
    """The folder as tokenspace wrote it at format ``version`` (6 or 7): the vocabulary in vocab.txt, whole
    main lists and nested heads."""
    doc = as_older_format(root, json.loads((root / storage.MANIFEST).read_text()), version)  # nested heads
    doc.pop("manifest_crc32")
    if doc["vocab"] is not None:
        (root / doc["vocab"]["file"]).rename(root / storage.VOCAB)
        doc["vocab"]["file"] = storage.VOCAB
    doc["version"] = version
    doc["manifest_crc32"] = storage._manifest_crc(doc)
    (root / storage.MANIFEST).write_text(json.dumps(doc, indent=1, sort_keys=True))


def _state(root):
    """What a reader finds in ``root``: (ids, tokens, dim, top hits) per load mode, or the error."""
    out = []
    for verify in (True, False):
        try:
            index = InvertedIndex.load(root, verify=verify)
        except (IndexCorruptError, FileNotFoundError) as e:
            out.append(("error", type(e).__name__))
            continue
        q = random_batch(3, index.dim, 0.3, seed=5)
        hits = [[(h.id, round(h.score, 5)) for h in row] for row in index.search(q, k=5)]
        out.append((sorted(index.ids()), index.vocab.tokens if index.vocab else None, index.dim, hits))
    return out


def _save_in_child(index, root, kill_at: int | None) -> int:
    """Save ``index`` to ``root`` in a forked child that exits (status 137) before its ``kill_at``-th
    write step. kill_at None: the child saves in full and the return value is its number of steps."""
    count_file = root.parent / "steps"
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            taken = [0]

            def step(fn):
                def wrapped(*a, **k):
                    taken[0] += 1
                    if kill_at is not None and taken[0] == kill_at:
                        os._exit(KILLED)
                    return fn(*a, **k)
                return wrapped

            for name in STEPS:
                # a kill, not a power cut: what fsync makes durable is not in question here, only the
                # order of the steps, so it is counted and skipped (the test's time went to the disk)
                fn = (lambda *a, **k: None) if name == "fsync" else getattr(os, name)
                setattr(os, name, step(fn))
            index.save(root)
            count_file.write_text(str(taken[0]))
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, KILLED), f"the child's save failed (exit {code})"
    return int(count_file.read_text()) if kill_at is None else code


OLD = {  # the folder's previous content, each a different index from the new one
    "other vocabulary": lambda root: _index(120, 40, "alt", 3, tombstones=True).save(root),
    "other dimension": lambda root: _index(90, 64, "tok", 4, hub=True).save(root),
    "format version 7": lambda root: (_index(100, 40, "tok", 6, tombstones=True).save(root), _as_version(root, 7)),
    "format version 6 with a hub prior": lambda root: (_index(80, 30, "old", 7, hub=True).save(root),
                                                       _as_version(root, 6)),
    "unreadable format version": lambda root: (_index(50, 40, "new", 8).save(root), _as_version(root, 99)),
}


@pytest.mark.slow
@pytest.mark.parametrize("old", list(OLD))
def test_a_kill_at_every_write_step_of_a_save_over_another_index(tmp_path, old):
    template = tmp_path / "template"
    OLD[old](template)
    new = _index(150, 40, "tok", 11, tombstones=True, hub=True)
    before = _state(template)
    after_root = tmp_path / "after"
    shutil.copytree(template, after_root)
    steps = _save_in_child(new, after_root, None)
    after = _state(after_root)
    assert after[0][0] != "error" and after[0][1] == [f"tok{i}" for i in range(40)]
    assert before != after and steps > 10
    seen = set()
    for n in range(1, steps + 1):
        root = tmp_path / f"kill-{n}"
        shutil.copytree(template, root)
        assert _save_in_child(new, root, n) == KILLED
        state = _state(root)
        assert state in (before, after), f"a kill before write step {n} of {steps} left a mix"
        seen.add("before" if state == before else "after")
        # the next save over what the kill left completes and cleans up
        if n % 5 == 0:
            assert _save_in_child(new, root, None) > 0 and _state(root) == after
            assert not [p.name for p in root.iterdir() if p.name.startswith(".")]
        shutil.rmtree(root)
    assert seen == {"before", "after"}


def test_a_kill_at_every_write_step_of_an_in_place_save(tmp_path):
    """add + delete saved again into the folder it was loaded from (the incremental commit)."""
    template = tmp_path / "template"
    _index(100, 40, "tok", 21, tombstones=True).save(template)
    _as_version(template, 7)  # an index from before version 8 keeps its vocab.txt
    before = _state(template)
    more = random_batch(30, 40, 0.2, seed=22).with_vocab(Vocabulary([f"tok{i}" for i in range(40)]))

    def changed(root):
        index = InvertedIndex.load(root)
        index.add(more, ids_for(30, "x"))
        index.delete(["tok3", "tok4"])
        return index

    after_root = tmp_path / "after"
    shutil.copytree(template, after_root)
    steps = _save_in_child(changed(after_root), after_root, None)
    after = _state(after_root)
    assert (after_root / storage.VOCAB).exists()  # kept, not written again
    for n in range(1, steps + 1):
        root = tmp_path / f"kill-{n}"
        shutil.copytree(template, root)
        assert _save_in_child(changed(root), root, n) == KILLED
        assert _state(root) in (before, after), f"a kill before write step {n} of {steps} left a mix"
        shutil.rmtree(root)


def test_the_probe_reproduction_vocabulary_swap(tmp_path):
    """The fault probe's case: an index of tokens tok* in D; one of alt* (same dim) saved over it, its
    manifest write killed: D still loads, both ways, with tok* and its own rows."""
    root = tmp_path / "D"
    _index(60, 30, "tok", 1).save(root)
    new = _index(70, 30, "alt", 2)
    pid = os.fork()
    if pid == 0:
        try:
            def killed(*a, **k):
                os._exit(KILLED)
            storage.write_manifest = killed
            new.save(root)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == KILLED
    for verify in (True, False):
        index = InvertedIndex.load(root, verify=verify)
        assert index.vocab.tokens[0] == "tok0" and sorted(index.ids()) == sorted(ids_for(60, "tok"))


def test_an_index_written_before_version_8_loads_and_saves(tmp_path):
    root = tmp_path / "idx"
    index = _index(80, 30, "tok", 9, tombstones=True)
    index.save(root)
    _as_version(root, 7)
    loaded = InvertedIndex.load(root)
    assert loaded.vocab.tokens == index.vocab.tokens and len(loaded) == len(index)
    q = random_batch(4, 30, 0.3, seed=1)
    assert loaded.search(q, k=5) == index.search(q, k=5)
    loaded.delete(["tok1"])
    loaded.save(root)  # in place: its vocab.txt stays the vocabulary file
    assert json.loads((root / storage.MANIFEST).read_text())["vocab"]["file"] == storage.VOCAB
    other = tmp_path / "other"
    InvertedIndex.load(root).save(other)  # elsewhere: a file of this generation's name
    names = sorted(p.name for p in other.iterdir() if p.name.startswith("vocab"))
    assert len(names) == 1 and storage.VOCAB_FILE.fullmatch(names[0]) and names[0] != storage.VOCAB
    assert np.array_equal(InvertedIndex.load(other).get(["tok2"]).to_dense(), index.get(["tok2"]).to_dense())


def _dense_state(root):
    from tokenspace.index.dense import DenseIndex

    try:
        index = DenseIndex.load(root)
    except ValueError as e:
        return ("error", str(e)[:0])
    q = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    return sorted(index._ids.values()), [[(h.id, round(h.score, 4)) for h in row] for row in index.search(q, k=4)]


def test_a_kill_at_every_write_step_of_a_dense_save(tmp_path):
    """A DenseIndex folder (the dense half of a hybrid search): its FAISS file is named per save, so a kill
    never pairs the new vectors with the old ids.json (same row count: no check would see it)."""
    pytest.importorskip("faiss")
    import json as _json

    from tokenspace.index.dense import DenseIndex

    rng = np.random.default_rng(7)
    template = tmp_path / "template"
    DenseIndex.build(rng.standard_normal((20, 8)).astype(np.float32), [f"a{i}" for i in range(20)]).save(template)
    # as format version 1 wrote it: flat.faiss, no file name in ids.json
    meta = _json.loads((template / "ids.json").read_text())
    (template / meta.pop("faiss")).rename(template / "flat.faiss")
    (template / "ids.json").write_text(_json.dumps(dict(meta, version=1)))
    before = _dense_state(template)
    assert before[0] != "error"
    new = DenseIndex.build(rng.standard_normal((20, 8)).astype(np.float32), [f"b{i}" for i in range(20)])
    after_root = tmp_path / "after"
    shutil.copytree(template, after_root)
    steps = _save_in_child(new, after_root, None)
    after = _dense_state(after_root)
    assert after != before and sorted(p.name for p in after_root.iterdir()) == ["flat-000001.faiss", "ids.json"]
    for n in range(1, steps + 1):
        root = tmp_path / f"kill-{n}"
        shutil.copytree(template, root)
        assert _save_in_child(new, root, n) == KILLED
        assert _dense_state(root) in (before, after), f"a kill before write step {n} of {steps} left a mix"
        shutil.rmtree(root)
