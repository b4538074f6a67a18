"""The Searcher (searcher.py), the one search session `tokenspace search`, the HTTP service and the demo
call: on a tiny index built in code through the ingestion road, it gives the hits and explanations the
library's own sequence gives (search_options -> steer -> explained_search), the same as the service's
response and the command's output; filters, steering, hybrid search, the collection metadata the index
records (and an older index's collection.json), and one-line errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tokenspace.data.manifest import Record
from tokenspace.encode import FileCollection, build_index
from tokenspace.explain.ranking import Ranking, encode_queries
from tokenspace.explain.search import explained_search, search_options
from tokenspace.explain.steer import steer
from tokenspace.index import InvertedIndex
from tokenspace.searcher import Collection, DenseHalf, Searcher, SearchError


@pytest.fixture
def built(make_model, tiny_pairs, tmp_path):
    """(model, its folder, records, index folder): the tiny collection indexed by encode.build_index, the
    road `index build` takes, recording the saved model and a default ranking."""
    model = make_model("stair")
    model.save_pretrained(tmp_path / "model")
    paths, texts = tiny_pairs
    records = [Record(p.stem, str(p), t, "test", label=p.stem.split("-")[1], source="tiny")
               for p, t in zip(paths, texts)]
    out = tmp_path / "index"
    build_index(model, FileCollection(records), out, tmp_path / "parts", part_size=5, batch_size=5, workers=0,
                info={"model": str(tmp_path / "model"), "ranking": Ranking(idf=0.5).to_dict()})
    return model, tmp_path / "model", records, out


def _library(index, model, text, k, ranking, steering=None, **filters):
    """What the three callers ran before the Searcher: the explained search of the shaped, steered query."""
    q = steer(encode_queries(model, [text], ranking), steering or {}, model.vocab)
    options = search_options(index, model.vocab, **filters)
    return explained_search(index, index.weigh(q, ranking.idf), k, vocab=model.vocab, **ranking.index_options(),
                            **options)


def _same(hits, want):
    assert [h.id for h in hits] == [w.id for w in want]
    assert [h.score for h in hits] == pytest.approx([w.score for w in want])
    for h, w in zip(hits, want):
        assert [(c.token, c.contribution) for c in h.parts] == [(c.token, pytest.approx(c.contribution)) for c in w.parts]


def test_opens_from_the_folder_alone_and_searches_as_the_library_does(built):
    model, _, records, out = built
    s = Searcher.open(out)  # no model given: the one the index records, with its ranking
    assert s.ranking == Ranking(idf=0.5) and s.collection.model.endswith("model")
    index = InvertedIndex.load(out)
    cases = [({}, None), ({"must": ["red"]}, None), ({"must_not": ["red"]}, None), ({"where": "red OR blue"}, None),
             ({"meta": {"caption": {"word": "dog"}}}, None), ({}, {"red": 3.0, "dog": 0.0})]
    for filters, steering in cases:
        res = s.search("a red dog", 6, steer=steering, filter=filters.get("meta"),
                       **{k: v for k, v in filters.items() if k != "meta"})
        _same(res.hits, _library(index, model, "a red dog", 6, Ranking(idf=0.5), steering, **filters))
        for h in res.hits:  # contributions sum to the score (no hub prior here)
            assert sum(c.contribution for c in h.parts) == pytest.approx(h.score, rel=1e-5)
            rec = next(r for r in records if r.id == h.id)
            assert h.item == {"image": rec.image, "text": rec.text, "label": rec.label, "source": "tiny"}
    filtered = s.search("a red dog", 12, filter={"caption": {"word": "dog"}}).hits
    assert filtered and {h.id for h in filtered} <= {"red-dog", "blue-dog", "green-dog"}
    # the query's tokens as scored: idf-weighted, heaviest first
    res = s.search("a red dog", 3)
    assert res.query == index.vocab.decode(index.weigh(encode_queries(model, ["a red dog"]), 0.5), top_k=None)[0]
    assert s.search("a red dog", 3, idf=0).query == model.vocab.decode(encode_queries(model, ["a red dog"]),
                                                                       top_k=None)[0]


def test_the_service_and_the_command_show_the_searcher_s_hits(built, capsys, restore_cli_logging):
    from tokenspace.cli import main
    from tokenspace.serve.service import SearchService

    model, _, records, out = built
    s = Searcher.open(out, model)
    want = s.search("a blue car", 4, steer={"blue": 2.0}, must=["car"])
    got = SearchService(s).search_text("a blue car", 4, must=["car"], steer={"blue": 2.0})
    assert [(h["id"], h["score"], h["text"], h["label"]) for h in got["hits"]] == \
        [(h.id, h.score, h.item["text"], h.item["label"]) for h in want.hits]
    assert [h["tokens"] for h in got["hits"]] == [[c.to_dict() for c in h.parts] for h in want.hits]
    assert all(h["image_url"] == f"/image/{h['id']}" for h in got["hits"])  # the rows carry their files
    assert main(["search", "--index", str(out), "a blue car", "-k", "4", "--steer", "blue=2", "--must", "car"]) == 0
    printed = capsys.readouterr().out
    for h in want.hits:  # no --model: the recorded one; each hit with its caption
        assert f"{h.score:.4f}  {h.id}  ({h.item['text']})" in printed


def test_image_queries_steering_and_errors(built, tiny_pairs):
    model, _, _, out = built
    s = Searcher.open(out, model)
    path = tiny_pairs[0][0]
    hits = s.search(path, 3).hits  # a Path is an image file
    assert hits[0].id == path.stem
    with pytest.raises(SearchError, match="^steer: reweighs a text query"):
        s.search(path, 3, steer={"red": 2})
    plain, steered = s.search("a red dog", 12).hits, s.search("a red dog", 12, steer={"cat": 5.0}).hits
    assert [h.score for h in plain] != [h.score for h in steered]
    for kwargs, says in (({"must": ["zebra"]}, "must: unknown tokens"), ({"steer": {"zebra": 2}}, "steer: unknown"),
                         ({"where": "dog AND (cat"}, "where:"), ({"prior_weight": 0.5}, "prior_weight: this index has no hub prior"),
                         ({"fusion": "rrf"}, "fusion: this search has no dense index")):
        with pytest.raises(SearchError, match=says):
            s.search("a red dog", 3, **kwargs)
    with pytest.raises(SearchError, match="the query text is empty"):
        s.search("   ", 3)
    assert s.search("a red dog", 3, explain=False).hits[0].parts == []


def test_hybrid_search_fuses_as_the_library_does(built, make_model, tmp_path):
    pytest.importorskip("faiss", reason="faiss-cpu is not installed (the 'dense' extra)")
    from PIL import Image

    from tokenspace.index.dense import DenseIndex
    from tokenspace.index.folder import write_dense_collection
    from tokenspace.index.hybrid import hybrid_search

    model, _, records, out = built
    dense_model = make_model("dense", seed=1)
    dense_model.save_pretrained(tmp_path / "dense-model")
    dense_index = DenseIndex.build(dense_model.encode_image([Image.open(r.image) for r in records]),
                                   [r.id for r in records])
    dense_index.save(tmp_path / "dense")
    write_dense_collection(tmp_path / "dense", tmp_path / "dense-model")
    s = Searcher.open(out, model, tmp_path / "dense")  # its model: the one its folder names
    for fusion, weight in (("rrf", 0.5), ("weighted", 0.3)):
        res = s.search("a red dog", 4, fusion=fusion, weight=weight)
        want = hybrid_search(s.index, s.query_vector("a red dog"), dense_index, dense_model.encode_text(["a red dog"]),
                             k=4, fusion=fusion, weight=weight, sparse_options={"prior_weight": 0.0})[0]
        assert [(h.id, h.score) for h in res.hits] == [(w.id, pytest.approx(w.score)) for w in want]
        assert res.fusion == fusion and all(h.parts for h in res.hits)  # the sparse side still explains
    assert s.search("a red dog", 4).hits == Searcher.open(out, model).search("a red dog", 4).hits  # no fusion asked
    with pytest.raises(SearchError, match="fusion: must filter on the sparse index"):
        s.search("a red dog", 4, fusion="rrf", must=["red"])
    with pytest.raises(ValueError, match="holds 2 images and the index 12"):
        Searcher.open(s.index, model, DenseHalf.open(DenseIndex.build(np.eye(2, 8, dtype=np.float32), ["x", "y"]), dense_model))


def test_an_older_index_with_collection_json_still_opens(built, tmp_path):
    model, model_dir, records, out = built
    old = tmp_path / "old"
    InvertedIndex.build(InvertedIndex.load(out).get([r.id for r in records]), [r.id for r in records]).save(old)
    doc = {"model": str(model_dir), "ranking": {"idf": 1.0},
           "items": {r.id: {"image": r.image, "text": r.text.upper(), "label": r.label} for r in records}}
    (old / "collection.json").write_text(json.dumps(doc))
    s = Searcher.open(old)
    assert s.ranking == Ranking(idf=1.0)
    hit = s.search("a red dog", 1).hits[0]
    assert hit.item["text"] == next(r.text.upper() for r in records if r.id == hit.id)
    assert len(s.collection) == 12
    (old / "collection.json").write_text("{not json")
    with pytest.raises(ValueError, match="collection.json: not readable JSON"):
        Searcher.open(old)
    # items given in code win over what the index records (the service's injection, the demo's tables)
    assert Collection.of(InvertedIndex.load(out), out, items={}).item("red-dog") is None
    without = tmp_path / "bare"
    InvertedIndex.build(InvertedIndex.load(out).get(["red-dog"]), ["red-dog"]).save(without)
    with pytest.raises(SearchError, match="does not name its model"):
        Searcher.open(without)


def test_a_search_that_finds_nothing_says_why(built):
    """An index whose images hold none of the query's tokens answers no hits and a note naming the query's
    tokens (with filters, that they filtered too); a search with hits has no such note."""
    from tokenspace.sparse import SparseBatch

    model = built[0]
    probe = Searcher.open(built[3], model)
    q = probe.query_vector("a red dog")
    held = set(q.to_scipy().indices.tolist())
    other = next(i for i in range(len(model.vocab)) if i not in held and not model.vocab.tokens[i].startswith("["))
    rows = SparseBatch.from_dicts([{other: 1.0}, {other: 0.5}], dim=len(model.vocab), vocab=model.vocab)
    searcher = Searcher.open(InvertedIndex.build(rows, ["a", "b"]), model)
    res = searcher.search("a red dog", 3)
    assert res.hits == [] and len(res.notes) == 1, res.notes
    top = [t for t, _ in model.vocab.decode(searcher.query_vector("a red dog"), top_k=5)[0]]
    assert res.notes[0].startswith(f"no indexed image holds any of the query's tokens ({', '.join(top)})")
    filtered = searcher.search("a red dog", 3, must=[model.vocab.tokens[other]])
    assert filtered.hits == [] and filtered.notes[-1].endswith("and passes the filters: try other or broader words")
    assert not any("no indexed image" in n for n in probe.search("a red dog", 3).notes)
