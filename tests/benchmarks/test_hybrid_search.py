"""benchmarks/hybrid_search.py: its recall and its table on made-up hit lists (the script itself runs for
minutes on real data)."""
from __future__ import annotations

import pytest

from tokenspace.index import Hit


@pytest.fixture(scope="module")
def hs(load_benchmark):
    return load_benchmark("hybrid_search")


def test_recall_counts_a_caption_whose_image_is_in_the_top_k(hs):
    hits = [[Hit(3, "a"), Hit(2, "b")], [Hit(3, "b")] + [Hit(1, f"x{i}") for i in range(8)] + [Hit(0, "c")], []]
    # caption 1 finds a at rank 1, caption 2 finds c at rank 10, caption 3 finds nothing
    assert hs.recall(hits, ["a", "c", "d"]) == {"R@1": pytest.approx(100 / 3), "R@10": pytest.approx(200 / 3)}


def test_table_has_a_row_per_result(hs):
    row = {"sparse": "tokenspace-stair-drawings", "dense": "runs/demo/dense-emoji/model", "split": "emoji:test",
           "captions": 3, "recall": {m: {"R@1": 10.0, "R@10": 50.0}
                                     for m in ("sparse", "dense", "hybrid rrf", "hybrid weighted")}}
    lines = hs.table([row]).splitlines()
    assert len(lines) == 3
    assert lines[2].startswith("| tokenspace-stair-drawings | dense-emoji | emoji:test (3 captions) | 10.0 / 50.0")
