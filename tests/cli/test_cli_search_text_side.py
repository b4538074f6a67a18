"""`tokenspace search` with query texts runs no torch, torch installed or not: a fused (release-like) model's
text side in numpy answers them (Searcher.open's text_only), with the hits, scores and query tokens that
the torch model itself gives; the torch model still loads where a session needs it (an image query, a
model without a numpy text side), and a text-only session refuses an image query in words."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tokenspace.cli import main
from tokenspace.models.fused_queries import FusedQueries
from tokenspace.searcher import Searcher, SearchError

TEXTS = ["a red dog", "a blue car and a green tree", "big cat", "the", "red red red"]


def test_the_cli_text_search_answers_as_the_torch_model(tiny_fused_index, capsys, restore_cli_logging):
    model, folder, index_dir, _ = tiny_fused_index
    want = Searcher.open(index_dir, model)  # the torch model itself encodes the queries
    assert main(["search", "--index", str(index_dir), "--model", str(folder), *TEXTS, "-k", "5", "--json"]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(got) == len(TEXTS) and sum(len(line["hits"]) for line in got) >= 10
    for text, line in zip(TEXTS, got):
        res = want.search(text, 5)
        assert [h["id"] for h in line["hits"]] == [h.id for h in res.hits], text
        assert np.allclose([h["score"] for h in line["hits"]], [h.score for h in res.hits], rtol=0, atol=1e-5)
        assert [t["token"] for t in line["query_tokens"]] == [t for t, _ in res.query], text
        assert np.allclose([t["weight"] for t in line["query_tokens"]], [w for _, w in res.query], rtol=0, atol=1e-5)
        assert line["notes"] == list(res.notes), text


def test_a_text_only_session_loads_the_text_side_and_refuses_images(tiny_fused_index):
    model, folder, index_dir, paths = tiny_fused_index
    s = Searcher.open(index_dir, folder, text_only=True)
    assert isinstance(s.model, FusedQueries)
    want = Searcher.open(index_dir, model)
    for text in TEXTS:
        a, b = s.search(text, 5), want.search(text, 5)
        assert [h.id for h in a.hits] == [h.id for h in b.hits] and a.notes == b.notes
        assert np.allclose([h.score for h in a.hits], [h.score for h in b.hits], rtol=0, atol=1e-5)
    with pytest.raises(SearchError, match="^image: this session was opened for text queries alone"):
        s.search(paths[0], 3)
    full = Searcher.open(index_dir, folder)  # not text-only: the model itself, image tower and all
    assert not isinstance(full.model, FusedQueries) and full.search(paths[0], 3).hits


def test_a_text_only_session_loads_a_model_without_a_numpy_text_side_in_torch(make_model, tiny_pairs, tmp_path):
    from tokenspace.index import InvertedIndex

    model = make_model("visualsparta").eval()  # its text side is not reproduced in numpy: the torch model
    folder = model.save_pretrained(tmp_path / "vs")
    paths, _ = tiny_pairs
    InvertedIndex.build(model.encode_image(paths), [p.stem for p in paths]).save(tmp_path / "index")
    s = Searcher.open(tmp_path / "index", folder, text_only=True)
    assert type(s.model).__name__ == type(model).__name__
    assert [h.id for h in s.search("a red dog", 3).hits] == [h.id for h in Searcher.open(tmp_path / "index", model)
                                                             .search("a red dog", 3).hits]


def test_the_cli_text_search_imports_no_torch(tiny_fused_index):
    _, folder, index_dir, _ = tiny_fused_index
    code = ("import sys; from tokenspace.cli import main; "
            f"code = main(['search', '--index', {str(index_dir)!r}, '--model', {str(folder)!r}, 'a red dog']); "
            "print('torch-imported' if 'torch' in sys.modules else 'no-torch', code, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stderr.strip().splitlines()[-1] == "no-torch 0", p.stderr
    assert "1." in p.stdout  # the hits were printed
