"""benchmarks/release_model.py's --stored helpers on a tiny in-code model's card (no assets)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tokenspace.models.card import render_card

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rm():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # release_model imports its sibling scripts
    try:
        spec = importlib.util.spec_from_file_location("release_model", ROOT / "benchmarks/release_model.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        for name in ("reproduce", "tagger_zeroshot"):
            sys.modules.pop(name, None)


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
