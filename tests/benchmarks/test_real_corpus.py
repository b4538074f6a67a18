"""benchmarks/real_corpus.py on a few hundred fixture passages: collection, query hold-out, resumable
parts and the --corpus-dir layout, with a stand-in encoder (no model, no Debian package)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tokenspace.sparse import SparseBatch


@pytest.fixture(scope="module")
def rc(load_benchmark):
    return load_benchmark("real_corpus")


class CountingEncoder:
    """Row i of a call: token (len(text) % 50) with weight 1, token 50 with weight len(words)."""

    def __init__(self):
        self.calls = []

    def __call__(self, texts):
        self.calls.append(len(texts))
        rows = [{len(t) % 50: 1.0, 50: float(len(t.split()))} for t in texts]
        return SparseBatch.from_dicts(rows, dim=60)


def _sources():
    gcide = [f"word{i}: the sense number {i} of a word" for i in range(300)]
    man = [f"page{i}: a paragraph of manual page {i}" for i in range(200)]
    man += ["other: the sense number 3 of a word"]  # same body as a GCIDE passage: dropped
    return [("gcide", gcide), ("man", man)]


CANDIDATES = [f"lemma {chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(26 * 26)]


def test_collect_dedupes_by_body_caps_and_shuffles(rc):
    got, counts = rc.collect(_sources(), n=1000)
    assert counts == {"gcide": 300, "man": 200} and len(got) == 500 == len(set(got))
    assert got[:5] != sorted(got)[:5]  # shuffled: no source's order survives
    capped, counts = rc.collect(_sources(), n=320)
    assert counts == {"gcide": 300, "man": 20} and len(capped) == 320
    assert capped == rc.collect(_sources(), n=320)[0]  # the seed fixes the order


def test_build_is_resumable_and_writes_the_corpus_layout(rc, tmp_path):
    enc = CountingEncoder()
    stats = rc.build(tmp_path, n=450, part_size=100, n_queries=30, encode=enc, srcs=_sources(),
                     candidates=CANDIDATES)
    assert enc.calls == [100, 100, 100, 100, 50, 30]  # five parts, then the queries
    assert stats["docs"] == 450 and stats["queries"] == 30
    passages = (tmp_path / "passages.txt").read_text().splitlines()
    queries = (tmp_path / "queries.txt").read_text().splitlines()
    assert len(passages) == 450 and len(queries) == 30 and not set(queries) & set(passages)
    d_indptr = np.load(tmp_path / "d_indptr.npy")
    d_data = np.load(tmp_path / "d_data.npy")
    assert d_indptr.dtype == np.int64 and len(d_indptr) == 451
    # row i of the corpus is passage i (token 50 carries its word count)
    d_indices = np.load(tmp_path / "d_indices.npy")
    for i in (0, 123, 449):
        a, b = d_indptr[i], d_indptr[i + 1]
        assert d_data[a:b][d_indices[a:b] == 50][0] == len(passages[i].split())

    # a rerun encodes only what is missing: one part removed, as if killed before writing it
    (tmp_path / "parts/part-00002.npz").unlink()
    enc2 = CountingEncoder()
    again = rc.build(tmp_path, n=450, part_size=100, n_queries=30, encode=enc2, srcs=_sources(),
                     candidates=CANDIDATES)
    assert enc2.calls == [100, 30]
    assert np.array_equal(np.load(tmp_path / "d_data.npy"), d_data)
    assert again["doc_nnz_mean"] == stats["doc_nnz_mean"]
    assert json.loads((tmp_path / "stats.json").read_text())["docs"] == 450


def test_prefix_only_writes_the_parts_done_so_far(rc, tmp_path):
    enc = CountingEncoder()
    passages, _ = rc.prepare_texts(tmp_path, 450, 30, _sources(), CANDIDATES)
    rc.encode_parts(passages[:200], tmp_path / "parts", enc, 100)  # parts 0 and 1 only
    (tmp_path / "parts/part-00003.npz").write_bytes((tmp_path / "parts/part-00000.npz").read_bytes())
    stats = rc.build(tmp_path, n=450, part_size=100, n_queries=30, encode=enc, prefix_only=True)
    assert stats["docs"] == 200  # part 3 is not contiguous with the prefix: not taken
    assert enc.calls == [100, 100, 30]


def test_prefix_only_without_parts_is_a_clear_error(rc, tmp_path):
    rc.prepare_texts(tmp_path, 100, 10, _sources(), CANDIDATES)
    with pytest.raises(SystemExit, match="no encoded parts"):
        rc.build(tmp_path, n=100, part_size=50, n_queries=10, encode=CountingEncoder(), prefix_only=True)


def test_shards_split_the_parts_and_the_last_one_writes_the_corpus(rc, tmp_path):
    enc0, enc1 = CountingEncoder(), CountingEncoder()
    kw = dict(n=450, part_size=100, n_queries=30, srcs=_sources(), candidates=CANDIDATES)
    assert rc.build(tmp_path, encode=enc0, shard=(0, 2), **kw) is None  # parts 0, 2, 4; 1 and 3 missing
    assert enc0.calls == [100, 100, 50]
    assert not (tmp_path / "d_indptr.npy").exists()
    stats = rc.build(tmp_path, encode=enc1, shard=(1, 2), **kw)
    assert enc1.calls == [100, 100, 30] and stats["docs"] == 450


def test_doc_passages_reads_rest_gzip_and_html_and_skips_generated_pages(rc, tmp_path):
    import gzip

    (tmp_path / "a").mkdir()
    (tmp_path / "a/intro.rst.txt").write_text("Intro\n=====\n\nThis paragraph explains the whole module briefly.\n")
    with gzip.open(tmp_path / "a/kernel.rst.gz", "wt") as f:
        f.write("The kernel schedules tasks on every processor it finds.\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b/select.html").write_text("<p>The select command retrieves rows from tables.</p>")
    (tmp_path / "b/_modules").mkdir()
    (tmp_path / "b/_modules/x.html").write_text("<p>def f(x): return x plus one more</p>")
    (tmp_path / "b/genindex.html").write_text("<p>an index page with many many words</p>")
    (tmp_path / "a/broken.rst.gz").write_bytes(b"not gzip at all")  # unreadable: skipped, not fatal
    docs = ((str(tmp_path / "a/**/*.rst.txt"), "text"), (str(tmp_path / "a/**/*.rst.gz"), "text"),
            (str(tmp_path / "b/**/*.html"), "html"))
    assert rc.doc_passages(docs) == ["intro: This paragraph explains the whole module briefly.",
                                     "kernel: The kernel schedules tasks on every processor it finds.",
                                     "select: The select command retrieves rows from tables."]


def test_missing_splade_weights_are_a_clear_error(rc, tmp_path, monkeypatch, capsys):
    """Without the SPLADE-tiny weights in the asset cache the command says how to install them and exits
    2, with no traceback."""
    out = tmp_path / "corpus"
    out.mkdir()
    (out / "passages.txt").write_text("a passage\n")  # the Debian text was read before
    monkeypatch.setenv("TOKENSPACE_HOME", str(tmp_path / "empty-cache"))
    assert rc.cli(["--out", str(out), "--n", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "tokenspace assets install splade-tiny" in err
