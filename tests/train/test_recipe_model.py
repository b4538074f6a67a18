"""A recipe's model may change fields of its config ({config: NAME, extra: {...}}), each key checked by the
family's typed options (models/options.py) before any data loads; the CLI reports a typo in one line."""
from __future__ import annotations

import pytest

from tokenspace.train.recipe import Recipe, model_config

STAGES = [{"name": "joint", "steps": 1}]


def test_a_model_mapping_changes_the_named_config():
    r = Recipe.from_dict({"name": "r", "model": {"config": "sparse-clip-emoji", "extra": {"topk": 64}},
                          "stages": STAGES})
    config = model_config(r.model)
    assert config.name == "sparse-clip-emoji" and config.options.topk == 64
    assert model_config("stair-emoji").options.image_revive_grad == 0.1  # a plain name, as before
    # extra adds to the config's own options instead of replacing them
    kept = model_config({"config": "stair-emoji", "extra": {"image_head_mid": 24}}).options
    assert (kept.image_revive_grad, kept.image_head_mid) == (0.1, 24)


def test_a_typo_in_the_recipe_model_fails_when_the_recipe_is_built():
    with pytest.raises(ValueError, match=r"^unknown option 'relu_' for family sparse-clip \(known: relu, topk"):
        Recipe.from_dict({"name": "r", "model": {"config": "sparse-clip-emoji", "extra": {"relu_": False}},
                          "stages": STAGES})
    with pytest.raises(ValueError, match=r"unknown model config keys \['embed_dims'\]"):
        Recipe.from_dict({"name": "r", "model": {"config": "sparse-clip-emoji", "embed_dims": 8}, "stages": STAGES})
    with pytest.raises(ValueError, match="config name or"):
        Recipe.from_dict({"name": "r", "model": {"extra": {}}, "stages": STAGES})


def test_a_set_model_override_changes_the_recipe_files_model():
    r = Recipe.load("sparse-clip-emoji", model={"extra": {"topk": 16}})
    assert r.model["config"] == "sparse-clip-emoji" and model_config(r.model).options.topk == 16
    assert Recipe.load("sparse-clip-emoji", model="dense-emoji").model == "dense-emoji"  # a name replaces


def test_cli_train_names_the_unknown_option_in_one_line(tmp_path, capsys, restore_cli_logging):
    from tokenspace.cli import main

    rc = main(["train", "--recipe", "sparse-clip-emoji", "--out", str(tmp_path / "run"),
               "--set", "model={extra: {relu_: false}}"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err == ("tokenspace train: error: unknown option 'relu_' for family sparse-clip "
                   "(known: relu, topk, l1, text_pooling); did you mean 'relu'?")
    assert not (tmp_path / "run").exists()  # refused before anything was written
