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
