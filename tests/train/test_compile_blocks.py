"""Regional compilation, the recipe's ``compile: blocks`` (train/trainer.py ``compile_blocks``): the option
parses, the trainer compiles each repeated block of the towers that learn and nothing else, a training
step gives the uncompiled step's loss, and fit hands back a model whose blocks run their own forward.

The trainer's steps use dynamo with the ``eager`` backend (the same capture, no code generation: quick on
any CPU); one slow test runs inductor, what a GPU run uses, where a C++ compiler is present."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from tokenspace.train.recipe import Recipe
from tokenspace.train.trainer import PairData, Trainer, compile_blocks, tower_blocks, uncompile_blocks

VIT = {"type": "vit", "config": {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
                                 "intermediate_size": 32, "image_size": 16, "patch_size": 8}}


def text_tower(vocab_size):
    return {"type": "transformer-mlm", "vocab_size": vocab_size, "width": 16, "layers": 2, "heads": 2,
            "max_len": 16}


@pytest.fixture
def build(make_model, tiny_vocab):
    """A tiny STAIR with stair-paper's kinds of towers: a ViT (2 layers) and the text transformer (2)."""
    def make(seed=0):
        return make_model(seed=seed, image_tower=VIT, text_tower=text_tower(len(tiny_vocab)))
    return make


def recipe(**kw):
    stage = {"name": "joint", "steps": 2, "lr": 1e-2, "warmup_steps": 0}
    return Recipe(name="tiny-compile", model="tiny", stages=[stage], batch_size=4, optimizer="lamb",
                  lambda_image=1e-3, lambda_text=1e-3, train_image_tower=True, checkpoint_every=0, **kw)


def pairs(n=6):
    rng = np.random.default_rng(0)
    words = ["red dog", "blue cat", "green tree", "the sun", "a big car", "small fish"]
    return PairData.from_texts(rng.standard_normal((n, 3, 16, 16)).astype(np.float32), words[:n])


def is_compiled(block) -> bool:
    return "forward" in block.__dict__


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_the_recipe_option():
    assert recipe().compile is None  # off by default
    assert recipe(compile="blocks").compile == "blocks"
    assert recipe(compile=False).compile is None  # `compile: false` is off too
    for bad in (True, "all", "yes"):
        with pytest.raises(ValueError, match="compile must be null"):
            recipe(compile=bad)
    r = recipe(compile="blocks")
    assert Recipe.from_dict(r.to_dict()).compile == "blocks"  # a run's recipe.json keeps it


def test_the_blocks_are_the_towers_layers_not_the_heads(build):
    m = build()
    image, text = tower_blocks(m.image_tower), tower_blocks(m.text_tower)
    assert [type(b).__name__ for b in image] == ["ViTLayer"] * 2
    assert [type(b).__name__ for b in text] == ["TransformerEncoderLayer"] * 2
    heads = {id(x) for x in m.modules()} - {id(x) for t in (m.image_tower, m.text_tower) for x in t.modules()}
    assert heads  # the heads exist and compile_blocks never reaches them
    assert compile_blocks(m, backend="eager") == 4
    assert all(is_compiled(b) for b in image + text)
    assert not any(is_compiled(x) for x in m.modules() if id(x) in heads)
    assert compile_blocks(m, backend="eager") == 4  # a second call leaves them as they are
    assert uncompile_blocks(m) == 4 and not any(is_compiled(b) for b in image + text)


def steps(model, r, n=3, backend="eager"):
    t = Trainer(model, r, pairs(), "/nonexistent", progress=False)
    t.compile_backend = backend
    t._setup_model()
    t._train_mode()
    stage = r.stages[0]
    opt = t._optimizer(t._trainable(stage))
    losses = [t.step(np.arange(4), stage, s, opt)["loss"] for s in range(n)]
    return t, losses


def test_a_compiled_step_gives_the_eager_steps_loss(build):
    from torch._dynamo.utils import counters

    _, eager = steps(build(), recipe())
    graphs = int(counters["stats"]["unique_graphs"])
    model = build()
    t, compiled = steps(model, recipe(compile="blocks"))
    assert t.compiled_blocks == 4
    assert int(counters["stats"]["unique_graphs"]) > graphs  # dynamo captured the blocks
    assert compiled == pytest.approx(eager, rel=1e-5)
    uncompile_blocks(model)


def test_cached_grids_compile_the_text_tower_alone(build):
    model = build()
    r = recipe(compile="blocks")
    r.train_image_tower, r.train_image_from = False, None  # heads on cached grids: the image tower never runs
    t = Trainer(model, r, pairs(), "/nonexistent", progress=False)
    t.compile_backend = "eager"
    t._setup_model()
    assert t.compiled_blocks == 2
    assert not any(is_compiled(b) for b in tower_blocks(model.image_tower))
    uncompile_blocks(model)


def test_fit_compiles_then_hands_back_an_uncompiled_model(build, tmp_path):
    model = build()
    evaluated = []

    def evaluate(m):  # inside the run: the blocks are still compiled, and run eagerly here
        evaluated.append(all(is_compiled(b) for b in tower_blocks(m.text_tower)))
        return {"ok": 1.0}

    t = Trainer(model, recipe(compile="blocks"), pairs(), tmp_path / "run", progress=False, evaluate=evaluate)
    t.compile_backend = "eager"
    t.fit()
    assert t.compiled_blocks == 4 and evaluated == [True]
    assert not any(is_compiled(b) for t_ in (model.image_tower, model.text_tower) for b in tower_blocks(t_))
    assert (tmp_path / "run" / "model").is_dir()


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")),
                    reason="inductor compiles C++ on a CPU: no C++ compiler on this machine")
def test_an_inductor_compiled_step_gives_the_eager_steps_loss(build):
    """Inductor's generated kernels (what a GPU run uses): the same losses to float rounding. A cold
    compile of the two kinds of block takes ~30-60 s on a 2-core CPU."""
    _, eager = steps(build(), recipe())
    model = build()
    t, compiled = steps(model, recipe(compile="blocks"), backend="inductor")
    assert t.compiled_blocks == 4
    assert compiled == pytest.approx(eager, rel=1e-4)
    uncompile_blocks(model)


@pytest.mark.parametrize("given, whole, regional", [
    ({}, False, None),  # not given: the recipe's own (off)
    ({"compile": True}, True, None),  # ScaleTrainer's whole-forward flag
    ({"compile": "blocks"}, False, "blocks"),  # what `--set compile=blocks` passes (train/distributed.py)
    ({"compile": False}, False, None),
])
@pytest.mark.parametrize("as_instance", [False, True])
def test_scale_train_takes_compile_blocks_as_the_recipes_key(monkeypatch, tmp_path, given, whole, regional,
                                                             as_instance):
    from tokenspace.train import scale

    seen = {}

    class Trainer:
        def __init__(self, model, recipe, data, out_dir, *, compile, **kw):
            seen.update(recipe=recipe, whole=compile)

        def fit(self, resume=False):
            return "model"

    monkeypatch.setattr(scale, "ScaleTrainer", Trainer)
    monkeypatch.setattr(scale.pairs, "build_seeded", lambda r: None)
    monkeypatch.setattr(scale.pairs, "trunk_block", lambda r, m: None)
    monkeypatch.setattr(scale, "load_pairs", lambda *a, **k: [0, 1])
    monkeypatch.setattr(scale, "held_out_evaluator", lambda *a, **k: None)
    r = Recipe.load("stair-emoji") if as_instance else "stair-emoji"
    assert scale.train(r, tmp_path / "run", progress=False, **given) == "model"
    assert seen["whole"] is whole and seen["recipe"].compile == regional
