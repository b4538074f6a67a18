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
