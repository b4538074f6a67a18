"""The sparsified family (models/sparsified.py): a sparse head trained on a frozen dense model's embeddings.

Tiny dense models built in code (the project's dense family over tiny towers, and one over tiny Hugging
Face CLIP towers), saved to a folder the sparsified config names, as a user's trained dense model is."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open

from tokenspace.models.config import ModelConfig
from tokenspace.models.lexicon import token_embeddings, vocabulary_embeddings
from tokenspace.models.registry import build_model, from_pretrained
from tokenspace.models.sparsified import FROM_DENSE
from tokenspace.train.recipe import Recipe, Stage, model_config
from tokenspace.train.trainer import PairData, Trainer

TINY_VISION = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
               "image_size": 32, "patch_size": 8}


def sparsified_config(dense, **extra) -> ModelConfig:
    return ModelConfig(name="tiny-sparsified", family="sparsified", image_tower=dict(FROM_DENSE),
                       text_tower=dict(FROM_DENSE), extra={"dense": str(dense), **extra})


@pytest.fixture
def dense_dir(make_model, tmp_path):
    """A trained-looking tiny dense model in its folder (dropout on in its text tower: the test of eval
    mode needs something to switch off)."""
    model = make_model("dense")
    return model.save_pretrained(tmp_path / "dense")


def tiny_data(n=12, channels=16, side=2, seed=0):
    rng = np.random.default_rng(seed)
    words = ["red dog", "blue cat", "green car", "red tree", "blue house", "green sun"]
    texts = [f"a {words[i % len(words)]}" for i in range(n)]
    return PairData.from_texts(rng.standard_normal((n, channels, side, side)).astype(np.float16), texts)


def fit(model, tmp_path, steps=3, lr=1e-2, **recipe):
    r = Recipe(name="t", model="tiny", stages=[Stage("head", steps=steps, lr=lr)], batch_size=6,
               lambda_image=1e-3, lambda_text=1e-3, **recipe)
    return Trainer(model, r, tiny_data(), tmp_path / "run", progress=False).fit()


def test_the_head_starts_as_the_dense_models_lexicon_scores(dense_dir, tiny_vocab):
    model = build_model(sparsified_config(dense_dir), vocab=tiny_vocab).eval()
    dense = from_pretrained(dense_dir)
    table = token_embeddings(dense)  # [V, D]: each token alone through the dense text side
    torch.testing.assert_close(model.lexicon.detach(), table)
    np.testing.assert_allclose(vocabulary_embeddings(dense), table.numpy())  # one road for both
    torch.manual_seed(0)
    grid = torch.randn(32, 16, 2, 2)
    with torch.no_grad():
        cos = dense.normalize(dense.image_embed(grid)) @ table.T  # [5, V]: STAIR's lexicon scores
        out = model.image_embed(grid)
    # before calibration (scale 1, b 0): log(1 + cosine) where positive; specials never emitted
    emitted = torch.tensor([not (t.startswith("[") and t.endswith("]")) for t in tiny_vocab.tokens])
    torch.testing.assert_close(out, torch.log1p(cos.clamp_min(0)) * emitted)
    i = int((cos * emitted).max(1).values.argmax())
    assert cos[i].max() > 0  # an image with a positive cosine (the tiny random model has some)
    top = model.decode(model.encode_image_grids(grid.numpy()), top_k=1)[i]
    assert top[0][0] == tiny_vocab.tokens[int((cos[i] * emitted).argmax())]  # its nearest word, from the start


def test_first_training_batch_calibrates_each_side_to_init_active(dense_dir, tiny_vocab):
    model = build_model(sparsified_config(dense_dir, init_active=0.25), vocab=tiny_vocab)
    grid = torch.randn(8, 16, 2, 2)
    ids, mask = model.tokenize(["a red dog", "blue cat", "the green car", "a big sun"])
    assert not model.image_calibrated and not model.text_calibrated
    model.train()
    with torch.no_grad():
        img, txt = model.image_embed(grid), model.text_embed(ids, mask)
    assert model.image_calibrated and model.text_calibrated
    n_emitted = int(model.output_mask.sum())
    for emb, rows in ((img, 8), (txt, 4)):
        assert (emb >= 0).all() and (emb[:, ~model.output_mask.bool()] == 0).all()
        # a quarter of the (emitted) lexicon scores are above the threshold: ties aside, exactly
        assert abs(int((emb > 0).sum()) - 0.25 * rows * n_emitted) <= 1
    before = model.image_bias.detach().clone()
    with torch.no_grad():
        model.image_embed(torch.randn(8, 16, 2, 2) * 3)  # a second batch never calibrates again
    torch.testing.assert_close(model.image_bias.detach(), before)
    rows = model.encode_image_grids(grid.numpy())  # SparseBatch: unit rows for the index's dot product
    assert rows.dim == len(tiny_vocab) and (rows.values > 0).all()
    norms = np.linalg.norm(rows.to_dense(), axis=1)  # one threshold for all: a row may have no token
    assert (norms > 0).sum() >= 4
    np.testing.assert_allclose(norms[norms > 0], 1.0, atol=1e-5)


def test_training_moves_only_the_head_and_keeps_the_dense_model_in_eval_mode(dense_dir, tiny_vocab, tmp_path):
    model = build_model(sparsified_config(dense_dir), vocab=tiny_vocab)
    assert all(not p.requires_grad for p in model.dense.parameters())
    model.train()
    assert model.training and not any(m.training for m in model.dense.modules())  # dropout off
    assert model.image_tower is model.dense.image_tower and model.text_tower is model.dense.text_tower
    dense_before = {k: v.clone() for k, v in model.dense.state_dict().items()}
    head_before = {k: v.detach().clone() for k, v in model.named_parameters() if not k.startswith("dense.")}
    modes = []
    forward = model.dense.text_embed
    model.dense.text_embed = lambda *a: (modes.append(model.dense.text_tower.training), forward(*a))[1]
    fit(model, tmp_path)
    assert modes and not any(modes)  # every training step ran the dense text tower in eval mode
    for k, v in model.dense.state_dict().items():
        assert torch.equal(v, dense_before[k]), k
    moved = [k for k, v in model.named_parameters() if not k.startswith("dense.") and not torch.equal(v, head_before[k])]
    assert {"lexicon", "image_bias", "text_bias", "image_scale", "text_scale"} <= set(moved)
    assert all(not p.requires_grad for p in model.dense.parameters())  # frozen again after the trainer's fit
    log = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert all("flops_image" in r and r["nnz_image"] < len(tiny_vocab) for r in log)


def test_saved_folder_round_trips_without_the_dense_folder(dense_dir, tiny_vocab, tmp_path):
    model = fit(build_model(sparsified_config(dense_dir, image_top_n=5), vocab=tiny_vocab), tmp_path)
    folder = model.save_pretrained(tmp_path / "sparsified")
    shutil.rmtree(dense_dir)
    loaded = from_pretrained(folder)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["image_tower"] == FROM_DENSE and cfg["text_tower"] == FROM_DENSE
    assert cfg["extra"]["dense"]["family"] == "dense" and cfg["extra"]["image_top_n"] == 5
    assert loaded.image_calibrated and loaded.image_top_n == 5
    grids = torch.randn(6, 16, 2, 2).numpy()
    texts = ["a red dog", "the blue car with a hat"]
    for a, b in ((model.encode_image_grids(grids), loaded.encode_image_grids(grids)),
                 (model.encode_text(texts), loaded.encode_text(texts))):
        np.testing.assert_array_equal(a.to_dense(), b.to_dense())
    assert max(np.diff(model.encode_image_grids(grids).indptr)) <= 5
    # the towers are the dense model's, stored once under dense.*
    with safe_open(folder / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert not any(k.startswith(("image_tower.", "text_tower.")) for k in keys)
    assert "dense.text_proj.weight" in keys and "lexicon" in keys
    assert loaded.config.image_tower == model.config.image_tower  # the dense spec in memory (grid cache key)


def test_a_dense_model_with_batchnorm_in_its_tower_reloads(make_model, tiny_vocab, tmp_path):
    # EfficientNet-Lite0 (random, 32 px): the dense twin's tower, whose BatchNorm buffers once read back
    # as unexpected keys when the tower was registered under two names
    dense = make_model("dense", image_tower={"type": "efficientnet-lite0", "weights": None, "image_size": 32})
    model = build_model(sparsified_config(dense.save_pretrained(tmp_path / "dense")), vocab=tiny_vocab)
    loaded = from_pretrained(model.save_pretrained(tmp_path / "sparsified"))
    pil = [Image.fromarray(np.full((32, 32, 3), c, np.uint8)) for c in (0, 90, 200)]
    np.testing.assert_array_equal(model.encode_image(pil).to_dense(), loaded.encode_image(pil).to_dense())


def test_a_dense_model_over_hugging_face_clip_towers(tiny_vocab, tmp_path):
    torch.manual_seed(0)
    clip_text = {"vocab_size": len(tiny_vocab), "hidden_size": 32, "num_hidden_layers": 1,
                 "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 32}
    dense = build_model(ModelConfig(name="tiny-clip-dense", family="dense", embed_dim=16, max_text_len=16,
                                    image_tower={"type": "hf-clip-vision", "config": TINY_VISION},
                                    text_tower={"type": "hf-clip-text", "config": clip_text}), vocab=tiny_vocab)
    dense_dir = dense.save_pretrained(tmp_path / "clip-dense")
    model = build_model(sparsified_config(dense_dir), vocab=tiny_vocab)
    assert model.lexicon.shape == (len(tiny_vocab), 16)
    r = Recipe(name="t", model="tiny", stages=[Stage("head", steps=2, lr=1e-2)], batch_size=6, lambda_image=1e-3)
    model = Trainer(model, r, tiny_data(channels=32, side=4), tmp_path / "run", progress=False).fit()
    folder = model.save_pretrained(tmp_path / "sparsified")
    shutil.rmtree(dense_dir)
    loaded = from_pretrained(folder)
    pil = [Image.fromarray(np.full((32, 32, 3), c, np.uint8)) for c in (0, 128, 255)]
    np.testing.assert_allclose(model.encode_image(pil).to_dense(), loaded.encode_image(pil).to_dense(), atol=1e-6)
    # the text side round-trips too (an untrained tiny head may leave a text with no positive token, so
    # the check is equality, not a count: transformers 5.24's initialisation left "a red dog" empty)
    texts = ["a red dog", "blue cat", "green car and a tree"]
    rows = loaded.encode_text(texts)
    np.testing.assert_allclose(model.encode_text(texts).to_dense(), rows.to_dense(), atol=1e-6)
    assert (rows.values > 0).all() and len(loaded.decode(rows)) == len(texts)


def test_bad_dense_references_and_options_are_one_line_errors(dense_dir, make_model, tiny_vocab, tmp_path):
    stair = make_model("stair").save_pretrained(tmp_path / "stair")
    cases = [
        (sparsified_config(stair), "already sparse"),
        (sparsified_config(tmp_path / "nowhere" / "model"), "no model folder"),
        (ModelConfig(name="s", family="sparsified", image_tower=dict(FROM_DENSE), text_tower=dict(FROM_DENSE)),
         "needs extra.dense"),
        (ModelConfig(name="s", family="sparsified", image_tower={"type": "tiny-cnn"},
                     text_tower=dict(FROM_DENSE), extra={"dense": str(dense_dir)}), "the dense model's towers"),
    ]
    for config, words in cases:
        with pytest.raises((ValueError, FileNotFoundError), match=words) as e:
            build_model(config, vocab=tiny_vocab)
        assert "\n" not in str(e.value)
    other = type(tiny_vocab)(tiny_vocab.tokens[:-1] + ["##zz"])
    with pytest.raises(ValueError, match="vocabulary"):
        build_model(sparsified_config(dense_dir), vocab=other)
    for extra, words in (({"init_active": 0}, "init_active"), ({"init_active": 1.5}, "init_active"),
                         ({"revive_grad": -1}, "revive_grad"), ({"dense": 3}, "option dense"),
                         ({"image_top_n": 0}, "image_top_n"), ({"denso": "x"}, "did you mean 'dense'")):
        with pytest.raises(ValueError, match=words):
            ModelConfig(name="s", family="sparsified", image_tower=dict(FROM_DENSE), text_tower=dict(FROM_DENSE),
                        extra={"dense": str(dense_dir), **extra})


def test_the_recipe_names_the_shipped_config_and_takes_another_dense_model():
    r = Recipe.load("sparsify-dense")
    config = model_config(r.model)
    assert config.family == "sparsified" and config.options.dense == "runs/demo/dense-emoji/model"
    assert r.lambda_image > 0 and r.lambda_text > 0 and len(r.stages) == 1
    r = Recipe.load("sparsify-dense", model={"extra": {"dense": "runs/o/dense/model"}})
    assert model_config(r.model).options.dense == "runs/o/dense/model"
    with pytest.raises(ValueError, match="init_active"):
        Recipe.load("sparsify-dense", model={"extra": {"init_active": 2}})
