"""The same filter cases on every engine: the same answer or the same error (the filter rule and
the metadata filters). Token filters and metadata filters are resolved once, in the index layer
(filters.py, metadata.py); InvertedIndex, the ExactIndex oracle and MilvusIndex (Milvus Lite, when the
milvus extra is installed) must agree."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenspace.index import ExactIndex, InvertedIndex, parse_query
from tokenspace.index.metadata import MetaFilter, RowIndex, parse_cli
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

WORDS = [f"w{i}" for i in range(30)]
VOCAB = Vocabulary(WORDS, name="words")
N = 90
IDS = [f"d{i}" for i in range(N)]
CAPTIONS = ["a red dog on the beach", "A Dog.", "two dogs", "a cat", "the red car", "sunny beach", ""]
META = [{"source": ["emoji", "photos", "icons"][i % 3], "caption": CAPTIONS[i % len(CAPTIONS)], "year": 2000 + i % 4,
         "flag": i % 5 == 0, **({"extra": {"nested": [1, 2]}} if i % 7 == 0 else {})} for i in range(N)]
META[4] = {}  # a row with no field never matches a metadata filter


def _docs():
    rng = np.random.default_rng(11)
    # continuous weights and a distinct dim-0 weight per doc: no ties, so every engine has one right order
    dense = (0.5 + rng.random((N, len(WORDS)))).astype(np.float32)
    dense *= rng.random(dense.shape) < 0.2
    dense[:, 0] = 0.1 + np.arange(N) * 0.01  # every doc shares dim 0 with every query: k hits exist
    return SparseBatch.from_dense(dense).with_vocab(VOCAB)


def _queries():
    rng = np.random.default_rng(12)
    dense = rng.choice([0.5, 1.0], size=(4, len(WORDS))).astype(np.float32) * (rng.random((4, len(WORDS))) < 0.3)
    dense[:, 0] = 1.0
    return SparseBatch.from_dense(dense).with_vocab(VOCAB)


ENGINES = ["inverted", "exact"] + (
    ["milvus"] if importlib.util.find_spec("pymilvus") and importlib.util.find_spec("milvus_lite") else [])


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    docs = _docs()
    built = {"inverted": InvertedIndex.build(docs, IDS, metadata=META), "exact": ExactIndex.build(docs, IDS, metadata=META)}
    # a saved and loaded copy: the metadata goes through metadata.jsonl and the manifest
    root = tmp_path_factory.mktemp("filters") / "idx"
    built["inverted"].save(root)
    built["inverted"] = InvertedIndex.load(root)
    if "milvus" in ENGINES:
        from tokenspace.index.milvus import MilvusIndex  # optional extra: only when installed

        built["milvus"] = MilvusIndex.build(docs, IDS, uri=str(root.parent / "m.db"), collection="filters",
                                            metadata=META)
    yield built
    if "milvus" in built:
        built["milvus"].close()


ANSWERS = {
    "must tokens": {"must": ["w1", "w2"]},
    "must ints": {"must": [1, np.int64(2)]},
    "must_not": {"must_not": ["w3", 4]},
    "where string": {"where": "w5 OR (w6 NOT w7)"},
    "where node": {"where": parse_query("w8 OR w9", VOCAB)},
    "empty must": {"must": []},
    "subset": {"subset": IDS[::4]},
    "meta equality": {"meta": {"source": "emoji"}},
    "meta number": {"meta": {"year": 2001}},
    "meta float equals int": {"meta": {"year": 2001.0}},
    "meta bool": {"meta": {"flag": True}},
    "meta bool is not 1": {"meta": {"year": True}},
    "meta set": {"meta": {"source": {"in": ["emoji", "icons"]}}},
    "meta word": {"meta": {"caption": {"word": "dog"}}},
    "meta word case": {"meta": {"caption": {"word": "DOG"}}},
    "meta word not a prefix": {"meta": {"caption": {"word": "do"}}},
    "meta unknown field": {"meta": {"nope": "x"}},
    "meta and tokens": {"meta": {"source": "photos", "caption": {"word": "beach"}}, "must_not": ["w1"]},
    "meta from cli": {"meta": parse_cli(["source=emoji|photos", "year=2002", "caption~red"])},
    "meta object": {"meta": MetaFilter.resolve({"source": "icons"})},
}


def _hits(engine, options, k=5):
    """Ids per query, and the scores checked to 1e-4 against the oracle's (Milvus sums in float32)."""
    rows = engine.search(_queries(), k=k, **options)
    return [[(h.id, round(h.score, 3)) for h in row] for row in rows]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", list(ANSWERS))
def test_same_answer_on_every_engine(engines, engine, case):
    want = _hits(engines["exact"], ANSWERS[case])
    assert _hits(engines[engine], ANSWERS[case]) == want
    if set(ANSWERS[case]) == {"meta"}:
        # filtered inside the engine, before top-k: min(k, rows that pass) hits (every doc scores > 0)
        passing = sum(MetaFilter.resolve(ANSWERS[case]["meta"]).matches(r) for r in META)
        assert all(len(row) == min(5, passing) for row in want), case


def test_metadata_oracle_by_hand():
    """The reference itself, checked against a plain reading of the rows."""
    f = MetaFilter.resolve({"caption": {"word": "dog"}, "source": {"in": ["emoji", "photos"]}})
    got = [i for i, r in enumerate(META) if f.matches(r)]
    want = [i for i, r in enumerate(META) if "dog" in r.get("caption", "").lower().replace(".", " ").split()
            and r.get("source") in ("emoji", "photos")]
    assert got == want and got


ERRORS = {  # options -> (exception type, message part): the same on every engine
    "bool token": ({"must": [True]}, ValueError, "True is a bool, not a token or a dim"),
    "one string": ({"must": "ab"}, TypeError, "give a list of tokens or dims, not one string"),
    "unknown dim": ({"must": [99]}, ValueError, "99 is not a dim in [0, 30)"),
    "negative dim": ({"must_not": [-1]}, ValueError, "-1 is not a dim in [0, 30)"),
    "unknown token": ({"must": ["zebra"]}, ValueError, "unknown token 'zebra'"),
    "float dim": ({"must": [1.0]}, ValueError, "1.0 is not a dim"),
    "where unknown": ({"where": "zebra"}, ValueError, "zebra"),
    "where not a query": ({"where": 5}, TypeError, "where: give a query string or a query.Node"),
    "subset unknown": ({"subset": ["nope"]}, ValueError, "subset: 1 unknown id(s), e.g. 'nope'"),
    "subset string": ({"subset": "d1"}, TypeError, "not one string"),
    "meta field name": ({"meta": {"a b": 1}}, ValueError, "field name 'a b'"),
    "meta empty set": ({"meta": {"source": {"in": []}}}, ValueError, "non-empty list"),
    "meta list value": ({"meta": {"source": ["emoji"]}}, ValueError, "is not a string, number or bool"),
    "meta null value": ({"meta": {"source": None}}, ValueError, "is not a string, number or bool"),
    "meta bad op": ({"meta": {"source": {"like": "e"}}}, ValueError, '{"in": [values]} or {"word": "text"}'),
    "meta two words": ({"meta": {"caption": {"word": "red dog"}}}, ValueError, "takes one word"),
    "meta not an object": ({"meta": "source=emoji"}, TypeError, "give an object of field -> value"),
    "threads 0": ({"threads": 0}, ValueError, "threads must be a positive int"),
    "threads bool": ({"threads": True}, ValueError, "threads must be a positive int"),
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", list(ERRORS))
def test_same_error_on_every_engine(engines, engine, case):
    options, exc, message = ERRORS[case]
    with pytest.raises(exc) as e:
        engines[engine].search(_queries(), k=5, **options)
    assert message in str(e.value)


def test_exact_index_takes_threads(engines):
    """The protocol lists threads: the oracle accepts it (was a ValueError)."""
    assert engines["exact"].search(_queries(), k=3, threads=2) == engines["exact"].search(_queries(), k=3)


@pytest.mark.parametrize("engine", ENGINES)
def test_metadata_round_trip(engines, engine):
    assert engines[engine].metadata(["d4", "d7", "d0"]) == [META[4], META[7], META[0]]


def test_metadata_survives_add_delete_compact_and_reload(tmp_path):
    docs = _docs()
    index = InvertedIndex.build(docs[:50], IDS[:50], metadata=META[:50])
    index.add(docs[50:], IDS[50:])  # a segment without metadata: its rows match no metadata filter
    index.delete(["d0", "d3"])
    index.save(tmp_path / "idx")
    ref = ExactIndex.build(docs, IDS, metadata=META[:50] + [{}] * 40)
    ref.delete(["d0", "d3"])
    opts = {"meta": {"source": "emoji"}}
    again = InvertedIndex.load(tmp_path / "idx")
    assert _hits(again, opts, k=20) == _hits(ref, opts, k=20)
    assert not (tmp_path / "idx" / "seg-000002" / "metadata.jsonl").exists()
    again.compact()
    again.save(tmp_path / "idx")
    assert _hits(InvertedIndex.load(tmp_path / "idx"), opts, k=20) == _hits(ref, opts, k=20)


def test_bad_metadata_at_build():
    docs = _docs()
    with pytest.raises(ValueError, match="got 2 rows for 90 documents"):
        InvertedIndex.build(docs, IDS, metadata=[{}, {}])
    with pytest.raises(TypeError, match=r"metadata\[1\]: expected a dict"):
        InvertedIndex.build(docs, IDS, metadata=[{}, "x"] + [{}] * 88)
    with pytest.raises(ValueError, match=r"metadata\[0\]: not JSON"):
        InvertedIndex.build(docs, IDS, metadata=[{"x": float("nan")}] + [{}] * 89)


@pytest.mark.parametrize("text, why", [
    ("source", "expected field=value"), ("=x", "expected field=value"), ("source=", "expected field=value"),
    ("a b=1", "field name 'a b'"), ("caption~red dog", "takes one word"),
])
def test_cli_filter_syntax_errors(text, why):
    with pytest.raises(ValueError, match=why):
        parse_cli([text])


def test_cli_filter_syntax():
    assert parse_cli(["source=emoji", "year=2020", "flag=true", "caption~Dog", "lang=en|fr", "id=007x"]) == {
        "source": "emoji", "year": 2020, "flag": True, "caption": {"word": "Dog"}, "lang": {"in": ["en", "fr"]},
        "id": "007x"}
    with pytest.raises(ValueError, match="filtered twice"):
        parse_cli(["a=1", "a=2"])


_SCALARS = st.sampled_from(["a", "b", "A", "1", 1, 1.0, 2, 0, True, False, None])
_ROW = st.dictionaries(st.sampled_from(["f", "g"]), _SCALARS | st.sampled_from(["a b", "B a.", "x-a"]) | st.lists(_SCALARS, max_size=2),
                       max_size=2)
_CLAUSE = st.one_of(
    _SCALARS.filter(lambda v: v is not None),
    st.lists(_SCALARS.filter(lambda v: v is not None), min_size=1, max_size=3).map(lambda v: {"in": v}),
    st.sampled_from(["a", "B", "x", "1"]).map(lambda w: {"word": w}))


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(_ROW, max_size=12), spec=st.dictionaries(st.sampled_from(["f", "g"]), _CLAUSE, min_size=1))
def test_row_index_postings_match_the_row_by_row_reference(rows, spec):
    """InvertedIndex filters through RowIndex postings; ExactIndex reads row by row: same rows pass."""
    f = MetaFilter.resolve(spec)
    assert f.mask(RowIndex(rows)).tolist() == f.mask(rows).tolist()


def test_metadata_after_a_remapped_save(tmp_path):
    """save(remap=True) frees the built arrays and the rows' dicts: both are read back from the files."""
    docs = _docs()
    index = InvertedIndex.build(docs, IDS, metadata=META)
    index.save(tmp_path / "idx", remap=True)
    assert index._segments[0]._meta is None
    assert index.metadata(["d7"]) == [META[7]]
    assert _hits(index, {"meta": {"source": "emoji"}}) == _hits(ExactIndex.build(docs, IDS, metadata=META),
                                                                 {"meta": {"source": "emoji"}})


def test_a_crash_before_the_manifest_keeps_the_old_metadata(tmp_path, monkeypatch):
    """Metadata is written inside the new segment's folder (temp name + rename) and counts only once the
    manifest names it: a save killed before the manifest leaves the old rows and their fields."""
    from tokenspace.index import storage

    docs = _docs()
    root = tmp_path / "idx"
    index = InvertedIndex.build(docs[:50], IDS[:50], metadata=META[:50])
    index.save(root)
    index.add(docs[50:], IDS[50:], metadata=META[50:])

    def crash(*a, **k):
        raise OSError("power cut")

    monkeypatch.setattr(storage, "write_manifest", crash)
    with pytest.raises(OSError, match="power cut"):
        index.save(root)
    monkeypatch.undo()
    survivor = InvertedIndex.load(root)
    assert len(survivor) == 50 and survivor.metadata(["d49"]) == [META[49]]
    with pytest.raises(KeyError):
        survivor.metadata(["d50"])


@pytest.mark.parametrize("engine", ENGINES)
def test_has_metadata(engines, engine):
    assert engines[engine].has_metadata()
    if engine != "milvus":  # a Milvus collection has the fields from its creation
        plain = {"inverted": InvertedIndex, "exact": ExactIndex}[engine].build(_docs(), IDS)
        assert not plain.has_metadata()
