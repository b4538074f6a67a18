"""Exports: exact file contents on tiny batches, and each format read by its engine (or its reader's rules).

* Seismic (pyseismic-lsr) builds an index from the float JSONL file and answers the queries read from
  the query file with the same top-10 as InvertedIndex.
* Anserini/pyserini need Java 21 and a 165 MB pyserini sdist with ~45 more packages, so the integer
  JSONL is checked against the reader's code instead: ``JsonVectorCollection`` (Jackson ``asInt()``, the
  token repeated that many times into a whitespace-split pseudo-document) and the ``JsonStringVector``
  topic reader (``qid`` + ``vector``); impact scoring (sum of query weight x term frequency) on what that
  reader sees gives the same top-10 as InvertedIndex on the same integers.
* rank_features bulk files are checked against the field parser's rules (Elasticsearch/OpenSearch
  ``RankFeaturesFieldMapper`` + Lucene ``FeatureField``).
"""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from tokenspace.index import InvertedIndex
from tokenspace.index.export import (
    FLOAT32_MIN_NORMAL,
    SPARSE_VECTOR_PARAMETERS,
    opensearch_queries,
    quantization_ceiling,
    quantize,
    rank_feature_name,
    rank_features_mapping,
    read_jsonl,
    sparse_vector_mapping,
    write_jsonl,
    write_jsonl_quantized,
    write_opensearch_queries,
    write_queries_jsonl,
    write_queries_tsv,
    write_rank_features,
    write_sparse_vector,
)
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

# tokens a WordPiece vocabulary really has, plus ones that must be escaped in JSON
TOKENS = ["dog", '"quote"', "back\\slash", "é", "tab\there", "##s"]


def _batch(vocab=True) -> SparseBatch:
    dense = np.array(
        [[0.5, 0.0, 1.25, 0.0, 0.0, 0.3],
         [0.0, 2.0, 0.0, 0.004, 0.0, 0.0],
         [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]],
        dtype=np.float32,
    )
    return SparseBatch.from_dense(dense, vocab=Vocabulary(TOKENS, name="esc") if vocab else None)


def _corpus(n_docs=300, n_queries=25, dim=60, seed=0):
    """Random docs/queries over a WordPiece-like vocabulary, weights k/64 (exact in float16 and float32)."""
    rng = np.random.default_rng(seed)
    tokens = ["[PAD]", "[UNK]", ".", "é", "##s", "100%"] + [f"w{i}" for i in range(dim - 6)]

    def rows(n, density):
        dense = np.where(rng.random((n, dim)) < density, rng.integers(1, 129, (n, dim)) / 64, 0.0)
        return SparseBatch.from_dense(dense.astype(np.float32), vocab=Vocabulary(tokens))

    return rows(n_docs, 0.2), rows(n_queries, 0.1)


# ----------------------------------------------------------------- exact file contents
def test_jsonl_exact_contents_with_escaping(tmp_path):
    path = write_jsonl(_batch(), ["d0", "d\"1", "d2"], tmp_path / "c.jsonl")
    assert path.read_text(encoding="utf-8") == (
        '{"id": "d0", "vector": {"dog": 0.5, "back\\\\slash": 1.25, "##s": 0.3}}\n'
        '{"id": "d\\"1", "vector": {"\\"quote\\"": 2.0, "é": 0.004}}\n'
        '{"id": "d2", "vector": {}}\n'
    )
    # and every line is valid JSON that reads back to the same vectors
    back, ids = read_jsonl(path, vocab=Vocabulary(TOKENS))
    assert ids == ["d0", 'd"1', "d2"]
    np.testing.assert_array_equal(back.to_dense(), _batch().to_dense())


def test_jsonl_without_vocab_uses_dim_ids(tmp_path):
    path = write_jsonl(_batch(vocab=False), ["a", "b", "c"], tmp_path / "c.jsonl")
    assert path.read_text().splitlines()[1] == '{"id": "b", "vector": {"1": 2.0, "3": 0.004}}'
    back, _ = read_jsonl(path, dim=6)
    np.testing.assert_array_equal(back.to_dense(), _batch().to_dense())


def test_quantized_rounds_half_up_and_keeps_every_nonzero_weight(tmp_path):
    b = _batch(vocab=False)
    path = write_jsonl_quantized(b, ["d0", "d1", "d2"], tmp_path / "q.jsonl", scale=100)
    assert path.read_text(encoding="utf-8") == (
        '{"id": "d0", "vector": {"0": 50, "2": 125, "5": 30}}\n'
        '{"id": "d1", "vector": {"1": 200, "3": 1}}\n'  # 0.004 * 100 = 0.4: lifted to 1, not dropped
        '{"id": "d2", "vector": {}}\n'
    )
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert all(isinstance(w, int) and w >= 1 for doc in lines for w in doc["vector"].values())
    # exactly representable halves: 0.5 -> 1 and 2.5 -> 3 (half up, not Python's half-to-even 0 and 2)
    one = SparseBatch.from_dense(np.array([[0.125, 0.625]], np.float32))
    assert write_jsonl_quantized(one, ["x"], tmp_path / "h.jsonl", scale=4).read_text() == (
        '{"id": "x", "vector": {"0": 1, "1": 3}}\n')


def test_quantize_error_bound_and_no_zero():
    rng = np.random.default_rng(1)
    w = np.concatenate([rng.random(2000) * 3, rng.random(200) * 1e-3, [1e-30, 0.005, 0.015]]).astype(np.float32)
    for scale in (10, 100, 1000):
        q = quantize(w, scale)
        assert q.dtype == np.int64 and (q >= 1).all()
        err = np.abs(q / scale - w.astype(np.float64))
        small = w < 0.5 / scale
        assert (err[~small] <= 0.5 / scale + 1e-9).all()
        assert (err[small] <= 1 / scale).all()
    assert quantize(np.array([0.0, 0.3]), 100).tolist() == [0, 30]


def test_queries_file_formats(tmp_path):
    b = _batch(vocab=False)
    f = write_queries_jsonl(b, ["q0", "q1", "q2"], tmp_path / "queries.jsonl")
    assert f.read_text().splitlines()[0] == '{"id": "q0", "vector": {"0": 0.5, "2": 1.25, "5": 0.3}}'
    t = write_queries_tsv(b, ["q0", "q1", "q2"], tmp_path / "queries.tsv", scale=4)
    # each token repeated round(w * 4) times (0.004 * 4 lifted to 1); an empty query keeps its line
    assert t.read_text() == "q0\t0 0 2 2 2 2 2 5\nq1\t1 1 1 1 1 1 1 1 3\nq2\t\n"


def test_rank_features_mapping_and_bulk(tmp_path):
    paths = write_rank_features(_batch(), ["d0", "d1", "d2"], tmp_path / "os", index="img", docs_per_file=2)
    assert [p.name for p in paths] == ["mapping.json", "bulk-00000.ndjson", "bulk-00001.ndjson"]
    assert json.loads(paths[0].read_text()) == {"mappings": {"properties": {"vector": {"type": "rank_features"}}}}
    assert json.loads(paths[0].read_text()) == rank_features_mapping()
    assert paths[1].read_text(encoding="utf-8") == (
        '{"index": {"_index": "img", "_id": "d0"}}\n'
        '{"vector": {"dog": 0.5, "back\\\\slash": 1.25, "##s": 0.3}}\n'
        '{"index": {"_index": "img", "_id": "d1"}}\n'
        '{"vector": {"\\"quote\\"": 2.0, "é": 0.004}}\n'
    )
    assert paths[2].read_text() == '{"index": {"_index": "img", "_id": "d2"}}\n{"vector": {}}\n'


def test_control_characters_escaped(tmp_path):
    b = SparseBatch.from_dense(np.array([[0, 0, 0, 0, 1.0, 0]], np.float32), vocab=Vocabulary(TOKENS))
    line = write_jsonl(b, ["t"], tmp_path / "t.jsonl").read_text()
    assert line == '{"id": "t", "vector": {"tab\\there": 1.0}}\n'
    assert json.loads(line)["vector"] == {"tab\there": 1.0}


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="ids"):
        write_jsonl(_batch(), ["a"], tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="unique"):
        write_jsonl(_batch(), ["a", "a", "b"], tmp_path / "x.jsonl")
    for bad in (0, -1, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="scale"):
            write_jsonl_quantized(_batch(vocab=False), ["a", "b", "c"], tmp_path / "x.jsonl", scale=bad)
    # "tab\there" would become two Anserini terms: refused, naming the token
    tab = SparseBatch.from_dense(np.array([[0, 0, 0, 0, 1.0, 0]], np.float32), vocab=Vocabulary(TOKENS))
    with pytest.raises(ValueError, match="whitespace"):
        write_jsonl_quantized(tab, ["a"], tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="whitespace"):
        write_queries_tsv(tab, ["a"], tmp_path / "x.tsv", scale=10)
    with pytest.raises(ValueError, match="tab or newline"):
        write_queries_tsv(_batch(vocab=False), ["a", "b\tc", "d"], tmp_path / "x.tsv")
    (tmp_path / "bad.jsonl").write_text('{"id": "a", "vector": {"1": 1}}\n{"id": "b"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_jsonl(tmp_path / "bad.jsonl", dim=3)
    assert not list(tmp_path.glob("*.tmp"))


# ----------------------------------------------------------------- read by the engines
def _top10(index: InvertedIndex, queries: SparseBatch) -> list[list[tuple[str, float]]]:
    return [[(h.id, h.score) for h in hits] for hits in index.search(queries, k=10)]


def _assert_same_top10(ours, theirs, exact_scores, doc_ids):
    """The same top-10 ids in the same order, up to the order of docs whose exact scores tie.

    Docs tied at the 10th score may be cut differently; every other score's docs must be the same set.
    Without ties this is id-by-id equality of the two lists.
    """
    for q, (a, b) in enumerate(zip(ours, theirs)):
        assert len(a) == len(b) == 10
        np.testing.assert_allclose([s for _, s in b], [s for _, s in a], rtol=1e-3)  # reported scores
        truth = dict(zip(doc_ids, exact_scores[q].tolist()))  # float64 reference dot products
        best = sorted(truth.values(), reverse=True)[:10]
        assert [truth[d] for d, _ in a] == best and [truth[d] for d, _ in b] == best, f"query {q}"
        for s in set(best) - {best[-1]}:
            assert {d for d, _ in a if truth[d] == s} == {d for d, _ in b if truth[d] == s}, f"query {q}"


def test_seismic_reads_the_files_with_the_same_top10(tmp_path):
    seismic = pytest.importorskip("seismic", reason="pyseismic-lsr is in the dev extra")
    docs, queries = _corpus()
    doc_ids = [f"img{i:04d}" for i in range(len(docs))]
    q_ids = [f"q{i}" for i in range(len(queries))]
    doc_file = write_jsonl(docs, doc_ids, tmp_path / "docs.jsonl")
    q_file = write_queries_jsonl(queries, q_ids, tmp_path / "queries.jsonl")

    # n_postings >= docs and summaries keeping all energy: Seismic's pruning cannot drop a true hit
    index = seismic.SeismicIndex.build(str(doc_file), n_postings=len(docs), summary_energy=1.0,
                                       load_content=False, num_threads=1)
    assert index.len == len(docs) and index.nnz == docs.nnz
    string = seismic.get_seismic_string()
    theirs = []
    for line in q_file.read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        tokens = np.array(list(q["vector"]), dtype=string)
        weights = np.array(list(q["vector"].values()), dtype=np.float32)
        hits = index.search(q["id"], tokens, weights, k=10, query_cut=len(tokens), heap_factor=1.0)
        theirs.append([(doc, score) for _, score, doc in hits])

    ours = _top10(InvertedIndex.build(docs, doc_ids), queries)
    exact = queries.to_dense().astype(np.float64) @ docs.to_dense().astype(np.float64).T
    _assert_same_top10(ours, theirs, exact, doc_ids)


def _anserini_pseudo_document(line: str) -> tuple[str, Counter]:
    """What JsonVectorCollection + the pretokenized (whitespace) analyzer make of one line."""
    doc = json.loads(line)
    text = ""
    for token, value in doc["vector"].items():
        cnt = int(value) if isinstance(value, (int, float)) else 0  # Jackson asInt(): truncation
        text += (token + " ") * cnt
    return str(doc["id"]), Counter(text.split())


def _anserini_topic(line: str) -> tuple[str, Counter]:
    """TsvString topic reader (id, then the text after the first tab) + whitespace bag of words."""
    qid, _, text = line.rstrip("\n").partition("\t")
    return qid, Counter(text.split())


def _anserini_files(tmp_path, seed=3):
    docs, queries = _corpus(seed=seed)
    rng = np.random.default_rng(seed + 1)  # continuous weights in (0, 1): asInt() alone would make them all 0
    docs = SparseBatch.from_dense((docs.to_dense() > 0) * rng.uniform(0.001, 1, (len(docs), docs.dim)),
                                  vocab=docs.vocab)
    doc_ids = [f"img{i:04d}" for i in range(len(docs))]
    q_ids = [f"q{i}" for i in range(len(queries))]
    (tmp_path / "collection").mkdir()  # Anserini parses every file of this folder: the docs alone
    doc_file = write_jsonl_quantized(docs, doc_ids, tmp_path / "collection" / "docs.jsonl", scale=100)
    q_file = write_queries_tsv(queries, q_ids, tmp_path / "queries.tsv", scale=100)
    return docs, doc_ids, q_ids, doc_file, q_file


def _integer_reference(doc_file, q_file, vocab, doc_ids):
    """InvertedIndex's top-10 on the integer vectors Anserini reads, and their exact dot products."""
    seen = [_anserini_pseudo_document(line) for line in doc_file.read_text(encoding="utf-8").splitlines()]
    topics = [_anserini_topic(line) for line in q_file.read_text(encoding="utf-8").splitlines()]
    d_int = SparseBatch.from_dicts([tf for _, tf in seen], vocab=vocab)
    q_int = SparseBatch.from_dicts([tf for _, tf in topics], vocab=vocab)
    exact = q_int.to_dense().astype(np.float64) @ d_int.to_dense().astype(np.float64).T
    return seen, topics, _top10(InvertedIndex.build(d_int, doc_ids), q_int), exact


def test_anserini_reader_rules_keep_every_weight_and_ranking(tmp_path):
    docs, doc_ids, q_ids, doc_file, q_file = _anserini_files(tmp_path)
    vocab = docs.vocab
    seen, topics, ours, exact = _integer_reference(doc_file, q_file, vocab, doc_ids)
    assert [d for d, _ in seen] == doc_ids and [q for q, _ in topics] == q_ids
    dense = docs.to_dense()
    for i, (_, tf) in enumerate(seen):
        # every nonzero weight is a term with frequency >= 1, and exactly quantize(w)
        assert set(tf) == {vocab.tokens[j] for j in np.flatnonzero(dense[i])}
        assert all(tf[vocab.tokens[j]] == quantize(dense[i, j : j + 1], 100)[0] for j in np.flatnonzero(dense[i]))
    # impact scoring (sum over query terms of query count x document term frequency), ranked
    anserini = [[(doc_ids[j], exact[q, j]) for j in np.argsort(-exact[q], kind="stable")[:10]]
                for q in range(len(topics))]
    _assert_same_top10(ours, anserini, exact, doc_ids)


def _java21():
    import os
    import shutil
    import subprocess

    for java in filter(None, [os.environ.get("TOKENSPACE_JAVA"), shutil.which("java")]):
        out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
        major = out.split('"')[1].split(".")[0] if '"' in out else "0"
        if major.isdigit() and int(major) >= 21:
            return java
    return None


def test_anserini_jar_reads_the_files(tmp_path):
    """The real engine, where it is installed: TOKENSPACE_ANSERINI_JAR = an Anserini fatjar (pyserini's
    wheel ships one: pyserini/resources/jars/), Java >= 21 (TOKENSPACE_JAVA or java on PATH)."""
    import os
    import subprocess

    jar, java = os.environ.get("TOKENSPACE_ANSERINI_JAR"), _java21()
    if not jar or not java:
        pytest.skip("set TOKENSPACE_ANSERINI_JAR (and Java >= 21) to run Anserini itself")
    docs, doc_ids, _, doc_file, q_file = _anserini_files(tmp_path)
    run = tmp_path / "run.txt"
    subprocess.run([java, "-cp", jar, "io.anserini.index.IndexCollection", "-collection", "JsonVectorCollection",
                    "-input", str(doc_file.parent), "-index", str(tmp_path / "idx"), "-generator",
                    "DefaultLuceneDocumentGenerator", "-threads", "1", "-impact", "-pretokenized"],
                   check=True, capture_output=True)
    subprocess.run([java, "-cp", jar, "io.anserini.search.SearchCollection", "-index", str(tmp_path / "idx"),
                    "-topics", str(q_file), "-topicReader", "TsvString", "-output", str(run), "-impact",
                    "-pretokenized", "-hits", "10", "-threads", "1"], check=True, capture_output=True)
    theirs: dict[str, list] = {}
    for line in run.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        theirs.setdefault(qid, []).append((doc, float(score)))
    _, topics, ours, exact = _integer_reference(doc_file, q_file, docs.vocab, doc_ids)
    _assert_same_top10(ours, [theirs.get(q, []) for q, _ in topics], exact, doc_ids)


def _check_rank_features_source(source: dict, field: str) -> None:
    """The rules of a rank_features field (ES/OpenSearch RankFeaturesFieldMapper, Lucene FeatureField)."""
    features = source[field]
    assert isinstance(features, dict), "rank_features fields must be json objects"
    for name, value in features.items():
        assert name and "." not in name, f"dots are not allowed in feature names: {name!r}"
        assert isinstance(value, (int, float)) and not isinstance(value, bool)
        v32 = np.float32(value)  # the parser reads a float
        assert np.isfinite(v32) and v32 >= np.finfo(np.float32).tiny, f"{name}: {value} is not a positive normal float"


def test_rank_features_files_follow_the_field_rules(tmp_path):
    docs, _ = _corpus(n_docs=50, seed=5)
    dense = docs.to_dense()
    dense[0, 2] = 0.75  # the token "."
    dense[0, 3] = 1e-40  # subnormal in float32: FeatureField would reject it
    docs = SparseBatch.from_dense(dense, vocab=docs.vocab)
    ids = [f"d{i}" for i in range(len(docs))]
    paths = write_rank_features(docs, ids, tmp_path / "os", docs_per_file=20)
    assert len(paths) == 4
    seen_ids = []
    for p in paths[1:]:
        lines = p.read_text(encoding="utf-8").splitlines()
        for action, source in zip(lines[::2], lines[1::2]):
            seen_ids.append(json.loads(action)["index"]["_id"])
            pairs = json.loads(source, object_pairs_hook=lambda kv: kv)  # duplicate keys would show here
            names = [k for k, _ in pairs[0][1]]
            assert len(names) == len(set(names)), "each feature once per document"
            _check_rank_features_source(json.loads(source), "vector")
    assert seen_ids == ids
    first = json.loads(paths[1].read_text().splitlines()[1])["vector"]
    assert first["%2E"] == 0.75
    assert first["é"] == pytest.approx(FLOAT32_MIN_NORMAL, rel=1e-6)  # lifted, not dropped
    # names are reversible and never clash: "." and "%" percent-encoded
    assert rank_feature_name(".") == "%2E" and rank_feature_name("100%") == "100%25"
    assert rank_feature_name("a%2E") != rank_feature_name("a.")
    with pytest.raises(ValueError, match="dots"):
        rank_features_mapping("a.b")


# ----------------------------------------------------------------- OpenSearch 3.x: sparse_vector and query bodies
# The shapes below are those of OpenSearch's documentation:
# sparse_vector mapping and ingest: https://docs.opensearch.org/latest/mappings/supported-field-types/sparse-vector/
#   and https://docs.opensearch.org/latest/vector-search/ai-search/neural-sparse-ann/ (tokens as integers);
# neural_sparse with raw vectors: https://docs.opensearch.org/latest/query-dsl/specialized/neural-sparse/;
# rank_feature with "linear": Elasticsearch's rank_feature query docs, OpenSearch 1.1+ (OpenSearch#1025);
# _msearch NDJSON: https://docs.opensearch.org/latest/api-reference/search-apis/multi-search/.
def test_sparse_vector_mapping_and_bulk_follow_the_documented_example(tmp_path):
    paths = write_sparse_vector(_batch(), ["d0", "d1", "d2"], tmp_path / "os", index="img", docs_per_file=2)
    assert [p.name for p in paths] == ["mapping.json", "bulk-00000.ndjson", "bulk-00001.ndjson"]
    mapping = json.loads(paths[0].read_text())
    assert mapping == {"settings": {"index": {"sparse": True}}, "mappings": {"properties": {"vector": {
        "type": "sparse_vector", "method": {"name": "seismic", "parameters": {
            "quantization_ceiling_ingest": 2.0, "quantization_ceiling_search": 2.0}}}}}}
    assert set(mapping["mappings"]["properties"]["vector"]["method"]["parameters"]) <= set(SPARSE_VECTOR_PARAMETERS)
    # tokens as integer ids (the dimension: the row of the vocabulary), weights positive floats
    assert paths[1].read_text(encoding="utf-8") == (
        '{"index": {"_index": "img", "_id": "d0"}}\n'
        '{"vector": {"0": 0.5, "2": 1.25, "5": 0.3}}\n'
        '{"index": {"_index": "img", "_id": "d1"}}\n'
        '{"vector": {"1": 2.0, "3": 0.004}}\n'
    )
    for line in paths[1].read_text().splitlines()[1::2]:
        vec = json.loads(line)["vector"]
        assert all(k.isdigit() and int(k) < 6 and v > 0 for k, v in vec.items())
    tuned = write_sparse_vector(_batch(), ["d0", "d1", "d2"], tmp_path / "os2", query_ceiling=0.9,
                                parameters={"n_postings": 300, "approximate_threshold": 0})
    params = json.loads(tuned[0].read_text())["mappings"]["properties"]["vector"]["method"]["parameters"]
    assert params == {"quantization_ceiling_ingest": 2.0, "quantization_ceiling_search": 0.9, "n_postings": 300,
                      "approximate_threshold": 0}
    with pytest.raises(ValueError, match="unknown sparse_vector parameter.*'n_posting'"):
        sparse_vector_mapping(parameters={"n_posting": 3})
    with pytest.raises(ValueError, match="cluster_ratio must be a finite number"):
        sparse_vector_mapping(parameters={"cluster_ratio": "0.1"})
    with pytest.raises(ValueError, match="dots"):
        sparse_vector_mapping("a.b")


@pytest.mark.parametrize("values, ceiling", [([0.73], 0.73), ([0.731, 0.2], 0.74), ([2.0], 2.0), ([0.0042], 0.0042),
                                             ([123.0], 130.0), ([], 1.0), ([0.0], 1.0), ([0.99999], 1.0)])
def test_quantization_ceiling_is_just_above_the_largest_weight(values, ceiling):
    got = quantization_ceiling(np.array(values, np.float32))
    assert got == pytest.approx(ceiling) and (not values or got >= max(values))


def test_query_bodies_have_the_documented_shapes(tmp_path):
    b = _batch()  # tokens dog, "quote", back\slash, é, tab\there, ##s
    neural = opensearch_queries(b)
    assert neural[0] == {"size": 10, "query": {"neural_sparse": {"vector": {"query_tokens": {
        "dog": 0.5, "back\\slash": 1.25, "##s": 0.3}}}}}
    assert neural[2] == {"size": 10, "query": {"match_none": {}}}  # an empty row matches nothing
    ann = opensearch_queries(b, field="emb", field_type="sparse_vector", k=5)
    assert ann[1] == {"size": 5, "query": {"neural_sparse": {"emb": {
        "query_tokens": {"1": 2.0, "3": 0.004}, "method_parameters": {"k": 5, "top_n": 2}}}}}
    rank = opensearch_queries(b, query_type="rank_feature")
    assert rank[0] == {"size": 10, "query": {"bool": {"should": [
        {"rank_feature": {"field": "vector.dog", "linear": {}, "boost": 0.5}},
        {"rank_feature": {"field": "vector.back\\slash", "linear": {}, "boost": 1.25}},
        {"rank_feature": {"field": "vector.##s", "linear": {}, "boost": 0.3}}]}}}
    dotted = SparseBatch.from_dense(np.array([[1.0, 0.5]], np.float32), vocab=Vocabulary([".", "a.b"]))
    assert opensearch_queries(dotted)[0]["query"]["neural_sparse"]["vector"]["query_tokens"] == {"%2E": 1.0,
                                                                                                 "a%2Eb": 0.5}
    path = write_opensearch_queries(b, tmp_path / "q" / "queries.ndjson", index="img", query_type="rank_feature")
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 2 * len(b) + 1  # header + body per query, final newline
    assert [json.loads(x) for x in lines[0:-1:2]] == [{"index": "img"}] * 3
    assert [json.loads(x) for x in lines[1::2]] == rank
    with pytest.raises(ValueError, match="rank_feature queries read rank_features fields"):
        opensearch_queries(b, field_type="sparse_vector", query_type="rank_feature")
    for bad in ({"k": 0}, {"k": True}, {"field_type": "knn_vector"}, {"query_type": "match"}, {"field": "a.b"}):
        with pytest.raises(ValueError):
            opensearch_queries(b, **bad)


def _bulk_docs(paths, field="vector") -> dict[str, dict[str, float]]:
    docs = {}
    for p in paths[1:]:
        lines = p.read_text(encoding="utf-8").splitlines()
        for action, source in zip(lines[::2], lines[1::2]):
            docs[json.loads(action)["index"]["_id"]] = json.loads(source)[field]
    return docs


def _opensearch_score(body: dict, doc: dict[str, float], field="vector") -> float:
    """A document's score under a query body, by the query's documented meaning: neural_sparse sums
    query weight x document weight over the query's tokens; a linear rank_feature clause scores its
    feature's value times its boost, and bool.should adds the clauses up."""
    q = body["query"]
    if "match_none" in q:
        return 0.0
    if "neural_sparse" in q:
        return sum(w * doc.get(t, 0.0) for t, w in q["neural_sparse"][field]["query_tokens"].items())
    prefix = field + "."
    return sum(c["rank_feature"]["boost"] * doc.get(c["rank_feature"]["field"][len(prefix):], 0.0)
               for c in q["bool"]["should"])


@pytest.mark.parametrize("field_type, query_type", [("rank_features", "neural_sparse"),
                                                    ("rank_features", "rank_feature"),
                                                    ("sparse_vector", "neural_sparse")])
def test_query_bodies_over_the_bulk_files_rank_as_the_index_does(tmp_path, field_type, query_type):
    """Names in the queries are the names in the documents, and the score is the dot product: the top-10
    of every query, scored over what the bulk files hold, is InvertedIndex's."""
    docs, queries = _corpus(seed=7)
    ids = [f"d{i}" for i in range(len(docs))]
    write = write_sparse_vector if field_type == "sparse_vector" else write_rank_features
    stored = _bulk_docs(write(docs, ids, tmp_path / "os"))
    bodies = opensearch_queries(queries, field_type=field_type, query_type=query_type)
    theirs = []
    for body in bodies:
        scores = {d: _opensearch_score(body, vec) for d, vec in stored.items()}
        theirs.append(sorted(((d, s) for d, s in scores.items() if s > 0), key=lambda x: (-x[1], x[0]))[:10])
    exact = queries.to_dense().astype(np.float64) @ docs.to_dense().astype(np.float64).T
    _assert_same_top10(_top10(InvertedIndex.build(docs, ids), queries), theirs, exact, ids)
