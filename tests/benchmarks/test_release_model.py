"""benchmarks/release_model.py's --stored helpers on a tiny in-code model's card (no assets)."""
from __future__ import annotations

import pytest

from tokenspace.models.card import render_card


@pytest.fixture(scope="module")
def rm(load_benchmark):
    return load_benchmark("release_model")


def test_stored_mode_reads_the_cards_recipe_and_swaps_only_its_notes(rm, make_model, tmp_path):
    recipe = {"name": "stair-drawings", "train_image_from": None, "lambda_image": 0.003, "lambda_text": 0.001}
    model = make_model()
    (tmp_path / "README.md").write_text(render_card(model, {"recipe": recipe, "steps": 12, "notes": "old table"}))
    assert rm.card_recipe(tmp_path) == recipe
    assert rm.recipe_note(rm.card_recipe(tmp_path)).endswith("FLOPs weight λ image/text 0.003/0.001")
    before = (tmp_path / "README.md").read_text()
    rm.replace_card_notes(tmp_path, "new table")
    after = (tmp_path / "README.md").read_text()
    assert "new table" in after and "old table" not in after
    assert after.split("## Notes")[0] == before.split("## Notes")[0]  # recipe, metrics: as trained
    assert after.split("## Licence")[1] == before.split("## Licence")[1]


def test_release_targets_read_v2_against_v1_and_the_dense_twin(rm):
    def res(r1, fm, photos, cov, label, nnz=(100.0, 39.0)):
        ret = {s: {"image_retrieval_recall@1": r1, "nnz_image": nnz[0], "nnz_text": nnz[1]} for s in rm.CORE
               if s in rm.RETRIEVAL}
        ret["photos:test"]["image_retrieval_recall@1"] = photos / 18
        return {"retrieval": ret, "zeroshot": {"fashion-mnist:test": {"ensemble_acc1": fm}},
                "tokens": {"emoji:test-concepts": {"token_acc1": label}},
                "word_coverage": {"emoji:val": cov, "openclipart:val": cov}}

    v2, v1 = res(0.13, 0.51, 12, 0.96, 0.26), res(0.04, 0.18, 3, 0.05, 0.25, nnz=(80.0, 33.0))
    dense = {"retrieval": {s: {"image_retrieval_recall@1": 0.07} for s in rm.RETRIEVAL}}
    rows = {name: (measured, met) for name, measured, _, met in rm.targets(v2, v1, dense)}
    assert all(met == "yes" for _, met in rows.values()), rows
    assert rows["Fashion-MNIST zero-shot top-1 (prompt ensemble)"][0] == "51.0 (v1 18.0)"
    assert rows["sample photos found by their own caption at rank 1 (of 18)"][0] == "12 (v1 3)"
    v2["zeroshot"]["fashion-mnist:test"]["ensemble_acc1"] = 0.49
    assert dict((n, m) for n, _, _, m in rm.targets(v2, v1, dense))[
        "Fashion-MNIST zero-shot top-1 (prompt ensemble)"] == "**no**"


def test_filter_finetune_trains_the_stair_part_under_the_filter_and_keeps_the_rest(rm, tiny_vocab, make_model,
                                                                                   tmp_path, monkeypatch):
    """The release's STAIR part fine-tuned under its query filter on tiny in-code data: its text tower and
    image head move, the shared backbone, the filter's tables, query_filter.json and ranking.json stay,
    and the stored folder loads back with the tuned part."""
    import json

    import numpy as np
    import torch

    from tokenspace.data.manifest import Record
    from tokenspace.data.specs import BackboneFeatures
    from tokenspace.models.config import ModelConfig
    from tokenspace.models.query_filter import fit_query_filter
    from tokenspace.models.registry import build_model, from_pretrained

    part = make_model("stair", seed=0).save_pretrained(tmp_path / "part")
    cfg = ModelConfig(name="tiny-release", family="fused", image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
                      text_tower={"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)}, max_text_len=16,
                      extra={"parts": [{"model": str(part), "image": 1.0, "text": 1.0}], "anchor": 1.0,
                             "related_min": 0.5, "related_dim": 4})
    fused = build_model(cfg, vocab=tiny_vocab).eval()
    vec = np.random.default_rng(0).normal(size=(len(tiny_vocab), 4)).astype(np.float32)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    fit_query_filter(fused, ["a red dog", "a blue cat", "the sun"], vec, related_min=0.5, top=3, min_share=0.6)
    folder = tmp_path / "release"
    recipe = {"name": "stair-drawings", "train_image_from": None, "lambda_image": 0.003, "lambda_text": 0.003}
    fused.save_pretrained(folder, card={"recipe": recipe}, dtype=torch.float16)  # as the release is stored
    (folder / "query_filter.json").write_text('{"hubs": {}}\n')
    (folder / "ranking.json").write_text('{"search": {"prior_weight": 0.25}}\n')

    words = ["red dog", "blue cat", "green car", "red tree", "blue dog", "green cat", "the sun", "a star"]
    records = [Record(id=str(i), image=f"{i}.png", text=t, split="train") for i, t in enumerate(words)]
    grid_shape = fused.image_grid(torch.zeros(1, 3, 32, 32)).shape[1:]
    grids = np.random.default_rng(1).normal(size=(len(records), *grid_shape)).astype(np.float32)
    monkeypatch.setattr(rm.pipeline, "load_data", lambda specs, home=None: records)
    monkeypatch.setattr(rm.pipeline, "image_grids", lambda model, recs, home=None, progress=True, at=None:
                        BackboneFeatures(grids=grids, records=list(recs), skipped={}))
    monkeypatch.setattr(rm, "split_build", lambda home: {"build": "tiny"})
    before = {k: v.clone() for k, v in from_pretrained(folder).state_dict().items()}
    rm.filter_finetune(folder, tmp_path / "run", steps=3, lr=1e-2, home=None, batch_size=4)

    after = from_pretrained(folder).state_dict()
    assert after.keys() == before.keys()
    moved = {k for k in after if not torch.equal(after[k], before[k])}
    assert any(k.startswith("parts.0.text_tower.") for k in moved)
    assert not any(k.startswith("image_tower.") or k in ("expansion_drop", "related") for k in moved), moved
    assert json.loads((folder / "ranking.json").read_text()) == {"search": {"prior_weight": 0.25}}
    assert (folder / "query_filter.json").read_text() == '{"hubs": {}}\n'
    assert json.loads((tmp_path / "run" / "recipe.json").read_text())["stages"][0]["name"] == "filtered"
