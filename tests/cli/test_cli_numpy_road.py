"""`tokenspace search` on a small index loads no numba: the index opens and answers its one query in numpy
(index/road.py), with the hits and scores the kernels give; a session that answers many queries (the
service: Searcher.fast_text) loads the kernels at start and answers the same."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from tokenspace.searcher import Searcher

TEXTS = ["a red dog", "a blue car and a green tree", "big cat"]

SESSION = """
import json, sys
from tokenspace.searcher import Searcher
s = Searcher.open(sys.argv[1], sys.argv[2], text_only=True)
texts = json.loads(sys.argv[3])
out = {"numpy": [[(h.id, h.score) for h in s.search(t, 5).hits] for t in texts], "numba_before": "numba" in sys.modules}
s.fast_text()  # what the service does at start
out["numba_after"] = "numba" in sys.modules
out["kernels"] = [[(h.id, h.score) for h in s.search(t, 5).hits] for t in texts]
print(json.dumps(out))
"""


def test_the_cli_search_loads_no_numba_and_answers_as_the_kernels(tiny_fused_index):
    model, folder, index_dir, _ = tiny_fused_index
    code = ("import sys; from tokenspace.cli import main; "
            f"code = main(['search', '--index', {str(index_dir)!r}, '--model', {str(folder)!r}, *sys.argv[1:], "
            "'-k', '5', '--json']); "
            "print('numba-imported' if 'numba' in sys.modules else 'no-numba', code, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code, *TEXTS], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stderr.strip().splitlines()[-1] == "no-numba 0", p.stderr
    got = [json.loads(line) for line in p.stdout.splitlines()]
    want = Searcher.open(index_dir, model)  # this process has loaded the kernels: they answer here
    assert sum(len(line["hits"]) for line in got) >= 5
    for text, line in zip(TEXTS, got):
        res = want.search(text, 5)
        assert [h["id"] for h in line["hits"]] == [h.id for h in res.hits], text
        assert np.allclose([h["score"] for h in line["hits"]], [h.score for h in res.hits], rtol=0, atol=1e-5)


def test_a_session_of_many_queries_loads_the_kernels_at_start(tiny_fused_index):
    _, folder, index_dir, _ = tiny_fused_index
    p = subprocess.run([sys.executable, "-c", SESSION, str(index_dir), str(folder), json.dumps(TEXTS)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["numba_before"] is False and out["numba_after"] is True
    assert out["numpy"] == out["kernels"] and any(out["numpy"])
