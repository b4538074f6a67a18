"""Two runs of one recipe start from the same weights: the new layers are drawn from recipe.seed."""
from __future__ import annotations

import torch

from tokenspace import pipeline
from tokenspace.train.recipe import Recipe


def _recipe(tmp_path, tiny_vocab, make_config, family, seed):
    tiny_vocab.save(tmp_path / "vocab.txt")
    make_config(family, len(tiny_vocab), vocab=str(tmp_path / "vocab.txt")).save(tmp_path / "model.json")
    return Recipe.from_dict({"name": "seeded", "model": str(tmp_path / "model.json"), "seed": seed,
                             "stages": [{"name": "contrastive", "steps": 1}]})


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_same_seed_same_initial_weights_whatever_ran_before(tmp_path, tiny_vocab, make_config):
    for family in ("stair", "dense"):
        recipe = _recipe(tmp_path, tiny_vocab, make_config, family, seed=3)
        first = _state(pipeline.build_seeded(recipe))
        torch.rand(1000)  # other work between runs moves the global generator
        second = _state(pipeline.build_seeded(recipe))
        assert first.keys() == second.keys()
        for name in first:
            assert torch.equal(first[name], second[name]), (family, name)


def test_another_seed_gives_other_heads(tmp_path, tiny_vocab, make_config):
    a = _state(pipeline.build_seeded(_recipe(tmp_path, tiny_vocab, make_config, "stair", seed=0)))
    b = _state(pipeline.build_seeded(_recipe(tmp_path, tiny_vocab, make_config, "stair", seed=1)))
    assert any(not torch.equal(a[k], b[k]) for k in a if a[k].is_floating_point())
