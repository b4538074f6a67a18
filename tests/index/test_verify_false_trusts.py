"""What load(verify=False) trusts, as docs/usage.md lists it: the fault probe's classes of damage that a
fast load takes as they are (a term id, an id's bytes, a tombstone, a hub-prior value, each changed in
range). Each loads and answers differently with verify=False, is refused by the default load (crc32),
and is named in the docs' table."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from _inverted_data import ids_for, random_batch

from tokenspace.index import IndexCorruptError, InvertedIndex

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"
QS = random_batch(5, 30, 0.3, seed=3)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("trust") / "idx"
    index = InvertedIndex.build(random_batch(60, 30, 0.2, seed=4, zipf=True), ids_for(60))
    index.set_hub_prior(random_batch(8, 30, 0.3, seed=5), k=2, order=False)
    index.delete(["d7"])
    index.save(root)
    return root


def _rewrite(path: Path, edit) -> None:
    a = np.array(np.load(path))
    edit(a)
    size = path.stat().st_size
    with open(path, "wb") as f:
        np.lib.format.write_array(f, a, allow_pickle=False)
    assert path.stat().st_size == size


def _term_id(root: Path) -> None:
    ptr = np.load(root / "seg-000001" / "fwd_indptr.npy")

    def edit(ind):
        for r in range(len(ptr) - 1):
            for j in range(ptr[r], ptr[r + 1]):
                nxt = ind[j + 1] if j + 1 < ptr[r + 1] else 30
                if ind[j] + 1 < nxt:
                    ind[j] += 1  # still in range and in order
                    return
        raise AssertionError("no term id to move")
    _rewrite(root / "seg-000001" / "fwd_indices.npy", edit)


def _id_bytes(root: Path) -> None:
    start = int(np.load(root / "seg-000001" / "ids_ptr.npy")[0])

    def edit(blob):
        blob[start + 1] = ord("Z")  # "d0" -> "dZ": UTF-8, unique
    _rewrite(root / "seg-000001" / "ids_blob.npy", edit)


def _tombstone(root: Path) -> None:
    def edit(t):
        t[3] = 1 - t[3]
    _rewrite(next(root.glob("seg-000001.del-*.npy")), edit)


def _prior(root: Path) -> None:
    def edit(p):
        p[:] = p[::-1] + 1.0  # finite, >= 0
    _rewrite(next(root.glob("seg-000001.prior-*.npy")), edit)


DAMAGES = {"fwd_indices.npy": _term_id, "ids_blob.npy": _id_bytes, "del-": _tombstone, "prior-": _prior}


def _answers(index):
    hits = [[(h.id, round(h.score, 5)) for h in row] for row in index.search(QS, k=10)]
    return sorted(index.ids()), hits, index.get(sorted(index.ids())[:20]).to_dense().tolist()


@pytest.mark.parametrize("name", list(DAMAGES))
def test_a_damage_verify_false_trusts(saved, tmp_path, name):
    root = tmp_path / "idx"
    shutil.copytree(saved, root)
    before = _answers(InvertedIndex.load(root))
    DAMAGES[name](root)
    assert _answers(InvertedIndex.load(root, verify=False)) != before  # loads, answers otherwise
    with pytest.raises(IndexCorruptError, match="crc32 mismatch"):
        InvertedIndex.load(root)


def test_the_docs_name_each_trusted_file():
    text = USAGE.read_text(encoding="utf-8")
    table = text[text.index("What `verify=False` trusts"):text.index("## search")]
    for name in ("fwd_indices.npy", "ids_ptr.npy", "ids_blob.npy", "seg-*.del-*.npy", "seg-*.prior-*.npy", "hub-*.npy"):
        assert re.search(re.escape(f"`{name}`"), table), name
