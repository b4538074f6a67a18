"""Exports: exact file contents on tiny batches, including tokens that need JSON escaping."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tokenspace.index.export import (
    rank_features_mapping,
    read_jsonl,
    write_jsonl,
    write_jsonl_quantized,
    write_rank_features,
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


def test_quantized_rounds_half_up_and_drops_zeros(tmp_path):
    path = write_jsonl_quantized(_batch(), ["d0", "d1", "d2"], tmp_path / "q.jsonl", scale=100)
    assert path.read_text(encoding="utf-8") == (
        '{"id": "d0", "vector": {"dog": 50, "back\\\\slash": 125, "##s": 30}}\n'
        '{"id": "d1", "vector": {"\\"quote\\"": 200}}\n'  # 0.004 * 100 = 0.4 rounds to 0: dropped
        '{"id": "d2", "vector": {}}\n'
    )
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert all(isinstance(w, int) for doc in lines for w in doc["vector"].values())
    # exactly representable halves: 0.5 -> 1 and 2.5 -> 3 (half up, not Python's half-to-even 0 and 2)
    one = SparseBatch.from_dense(np.array([[0.125, 0.625]], np.float32))
    assert write_jsonl_quantized(one, ["x"], tmp_path / "h.jsonl", scale=4).read_text() == (
        '{"id": "x", "vector": {"0": 1, "1": 3}}\n')


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
    with pytest.raises(ValueError, match="scale"):
        write_jsonl_quantized(_batch(), ["a", "b", "c"], tmp_path / "x.jsonl", scale=0)
