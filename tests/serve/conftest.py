"""A served tiny world: a tiny STAIR model, the 12 tiny coloured-square images, an index of them and
their collection.json in a temp folder, and a TestClient over the app."""
from __future__ import annotations

import numpy as np
import pytest

from tokenspace.sparse import SparseBatch


class _ListIndex:
    """Protocol stand-in used only while neither InvertedIndex nor ExactIndex is importable: an exact
    scan with the same filter options (must / must_not / where), enough to exercise the service."""

    def __init__(self, batch: SparseBatch, ids):
        self.batch, self.ids = batch, list(ids)
        self.pos = {d: i for i, d in enumerate(self.ids)}
        self.dims = [set(map(int, batch.row(i)[0])) for i in range(len(batch))]

    @classmethod
    def build(cls, batch, ids):
        return cls(batch, ids)

    def search(self, queries, k=10, must=(), must_not=(), where=None, subset=None):
        scores = queries.to_scipy() @ self.batch.to_scipy().T
        out = []
        for q in range(len(queries)):
            row = np.asarray(scores[q].todense()).ravel()
            ok = [i for i in range(len(self.ids))
                  if row[i] > 0 and set(must) <= self.dims[i] and not set(must_not) & self.dims[i]
                  and (where is None or where.matches(self.dims[i]))]
            from tokenspace.index.base import Hit

            out.append([Hit(float(row[i]), self.ids[i]) for i in sorted(ok, key=lambda i: -row[i])[:k]])
        return out

    def get(self, ids):
        return self.batch[[self.pos[i] for i in ids]]

    def stats(self):
        return {"engine": "list", "docs": len(self.ids)}

    def __len__(self):
        return len(self.ids)


def build_index(batch, ids, index_dir):
    """Build and save with the real engine when it is there, else the stand-in (kept in memory)."""
    for module, name in (("tokenspace.index", "InvertedIndex"), ("tokenspace.index.oracle", "ExactIndex")):
        try:
            engine = getattr(__import__(module, fromlist=[name]), name)
        except (ImportError, AttributeError):
            continue
        engine.build(batch, ids).save(index_dir)
        return engine.load(index_dir), True
    return _ListIndex.build(batch, ids), False


def caption_vectors(texts, vocab) -> SparseBatch:
    """Index rows that say what each image shows ({a, colour, shape}, L2-normalised): an untrained tiny
    model gives every image almost the same tokens, and filters need rows that differ."""
    rows = []
    for t in texts:
        w = {tok: (0.5 if tok == "a" else 2.0) for tok in t.split()}
        norm = sum(v * v for v in w.values()) ** 0.5
        rows.append({tok: v / norm for tok, v in w.items()})
    return SparseBatch.from_dicts(rows, vocab=vocab)


@pytest.fixture
def served(make_model, tiny_pairs, tmp_path):
    """(service, model, records, index_dir) over the tiny collection."""
    from tokenspace.data.manifest import Record
    from tokenspace.pipeline import write_collection_meta
    from tokenspace.serve.service import SearchService

    model = make_model("stair")
    paths, texts = tiny_pairs
    records = [Record(id=p.stem, image=str(p), text=t, split="test", label=p.stem.split("-")[1])
               for p, t in zip(paths, texts)]
    vectors = caption_vectors(texts, model.vocab)
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    index, on_disk = build_index(vectors, [r.id for r in records], index_dir)
    write_collection_meta(index_dir, records)
    if on_disk:
        service = SearchService.from_dir(model, index_dir)
    else:
        from tokenspace.pipeline import read_collection_meta

        service = SearchService(model, index, read_collection_meta(index_dir)["items"], base_dir=index_dir)
    return service, model, records, index_dir


@pytest.fixture
def client(served):
    from fastapi.testclient import TestClient

    from tokenspace.serve.app import build_app

    with TestClient(build_app(served[0])) as c:
        yield c
