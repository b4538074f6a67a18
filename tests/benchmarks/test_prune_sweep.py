"""experiments/prune_sweep.py on a tiny in-code STAIR model and in-code grids (no assets)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tomllib
import torch

from tokenspace.data.manifest import Record
from tokenspace.eval import RetrievalEvaluator
from tokenspace.pipeline import BackboneFeatures

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ps(load_benchmark):
    return load_benchmark("prune_sweep")


def test_sweep_rows_equal_retrieval_on_rows_pruned_by_hand(ps, make_model):
    """Each row's recall and token counts equal those of the full vectors cut to their top n (SparseBatch
    prune_topk, renormalised) and scored by RetrievalEvaluator: the model option and a slow reference agree."""
    model = make_model().eval()
    torch.manual_seed(1)
    texts = ["a red dog", "blue stars", "a green tree", "the cat", "red car and tree", "a small blue dog"]
    records = [Record(f"i{i}", f"i{i}.png", t, "val") for i, t in enumerate(texts)]
    enc = BackboneFeatures(torch.randn(len(texts), 16, 2, 2).numpy(), records, 0)
    rows = ps.sweep(model, {"tiny:val": enc}, image_ns=[0, 3], text_ns=[0, 2])
    assert [(r["image_top_n"], r["text_top_n"]) for r in rows] == [(0, 0), (0, 2), (3, 0), (3, 2)]
    model.image_top_n = model.text_top_n = None
    full_img, full_txt = model.encode_image_grids(enc.grids), model.encode_text(texts)

    def cut(batch, n):
        dense = (batch.prune_topk(n) if n else batch).to_dense()
        return dense / np.maximum(np.linalg.norm(dense, axis=1, keepdims=True), 1e-12)

    for r in rows:
        img, txt = cut(full_img, r["image_top_n"]), cut(full_txt, r["text_top_n"])
        ref = RetrievalEvaluator(np.arange(len(texts)))(img, txt)
        got = r["splits"]["tiny:val"]
        for k in [k for k in ref if "recall" in k]:
            assert got[k] == pytest.approx(ref[k]), (r["image_top_n"], r["text_top_n"], k)
        assert r["mean_recall"] == pytest.approx(100 * ref["mean_recall"])
        if r["image_top_n"]:
            assert got["nnz_image"] <= r["image_top_n"]
    assert rows[0]["nnz_image"] > 3  # the tiny model is dense enough for the cut to bite


@pytest.mark.parametrize("spec", ["emoji:test", "emoji:test-concepts", "openclipart:test:300"])
def test_the_sweep_refuses_test_splits(ps, capsys, tmp_path, spec):
    from experiments import config

    cfg = tomllib.loads((ROOT / "experiments" / "prune_sweep.toml").read_text())
    cfg["sweep"]["splits"], cfg["output"]["json"] = ["emoji:val", spec], "/dev/null"
    (tmp_path / "run.toml").write_text(config.dumps(cfg))
    with pytest.raises(SystemExit):
        ps.main(["--config", str(tmp_path / "run.toml")])
    assert "val splits only" in capsys.readouterr().err
