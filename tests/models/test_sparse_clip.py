"""Sparse CLIP: the logit-scale cap (during training too), ReLU vs no-ReLU arms, L0 tracking."""
import json
import math

import numpy as np
import pytest
import torch

from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.trainer import PairData, Trainer


def tiny_data(n=12, seed=0):
    rng = np.random.default_rng(seed)
    words = ["red dog", "blue cat", "green car", "red tree", "blue house", "green sun"]
    texts = [f"a {words[i % len(words)]}" for i in range(n)]
    return PairData.from_texts(rng.standard_normal((n, 16, 2, 2)).astype(np.float16), texts)


def test_loss_never_sees_a_scale_above_the_cap_even_when_the_parameter_is_past_it(make_model, tmp_path):
    cap = 12.0
    m = make_model("sparse-clip", expansion=4, logit_scale_init=10.0, logit_scale_max=cap)
    with torch.no_grad():
        m.log_logit_scale.fill_(math.log(cap) + 3.0)  # the parameter has grown far past the cap
    trainer = Trainer(m, Recipe(name="t", model="tiny", stages=[Stage("joint", steps=3, lr=0.5)], batch_size=4),
                      tiny_data(), tmp_path, progress=False)
    seen, forward = [], trainer.loss_fn.forward

    def spy(image_emb, text_emb, model, step):
        seen.append(model.logit_scale.item())
        return forward(image_emb, text_emb, model, step)

    trainer.loss_fn.forward = spy
    trainer.fit()
    # first step: the forward clamp; later steps: the parameter clamp, after which it may come back down
    assert len(seen) == 3 and seen[0] == pytest.approx(cap) and all(s <= cap + 1e-4 for s in seen)
    logged = [json.loads(x)["logit_scale"] for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert all(s <= cap + 1e-4 for s in logged)
    # the parameter itself is clamped after each step (open_clip's clamp_): at the cap, not past it
    assert m.log_logit_scale.item() <= math.log(cap) + 1e-6


def test_capped_loss_equals_the_loss_at_the_cap(make_model):
    from tokenspace.train.losses import SparseContrastiveLoss

    m = make_model("sparse-clip", expansion=4, logit_scale_init=10.0, logit_scale_max=20.0)
    img, txt = torch.rand(4, m.config.embed_dim * 4), torch.rand(4, m.config.embed_dim * 4)
    loss = SparseContrastiveLoss()
    with torch.no_grad():
        m.log_logit_scale.fill_(math.log(20.0))
        at_cap = loss(img, txt, m, 0)["loss"]
        m.log_logit_scale.fill_(math.log(500.0))
        above = loss(img, txt, m, 0)["loss"]
    torch.testing.assert_close(above, at_cap)


def test_lower_cap_gives_a_lower_scale(make_model):
    hi = make_model("sparse-clip", expansion=4, logit_scale_init=10.0, logit_scale_max=50.0)
    lo = make_model("sparse-clip", expansion=4, logit_scale_init=10.0, logit_scale_max=20.0)
    for m in (hi, lo):
        with torch.no_grad():
            m.log_logit_scale.fill_(10.0)
    assert lo.logit_scale.item() == pytest.approx(20.0) and hi.logit_scale.item() == pytest.approx(50.0)


def test_relu_and_no_relu_arms(make_model):
    grid = torch.randn(5, 16, 2, 2)
    relu = make_model("sparse-clip", expansion=4).eval()
    dense = make_model("sparse-clip", expansion=1, extra={"relu": False}).eval()
    with torch.no_grad():
        assert (relu.image_embed(grid) >= 0).all()
        assert (dense.image_embed(grid) < 0).any()  # signed: the dense ablation arm of Fig. 2a
    rows = relu.encode_image_grids(grid.numpy())
    assert rows.vocab.tokens[0] == "f00000" and rows.dim == relu.config.embed_dim * 4
    np.testing.assert_allclose(np.linalg.norm(rows.to_dense(), axis=1), 1.0, atol=1e-5)


def test_tracking_evaluator_reports_l0_and_recall(make_model):
    from tokenspace.train.tracking import tracking_evaluator

    data = tiny_data(6)
    ev = tracking_evaluator(data.inputs, data.texts, np.arange(6))
    relu = ev(make_model("sparse-clip", expansion=4))
    width = 8 * 4
    assert 0 <= relu["l0_image"] <= width and relu["l0_frac_image"] == pytest.approx(relu["l0_image"] / width)
    assert 0 <= relu["image_retrieval_recall@1"] <= 1 and "text_retrieval_recall@10" in relu
    signed = ev(make_model("sparse-clip", expansion=1, extra={"relu": False}))
    # without ReLU nothing is exactly zero: every feature is active (the paper's "sparsity never emerges")
    assert signed["l0_image"] == pytest.approx(8) and signed["l0_frac_text"] == pytest.approx(1.0)


def test_tracking_through_training_lands_in_the_log(make_model, tmp_path):
    from tokenspace.train.tracking import eval_history, tracking_evaluator

    data = tiny_data()
    ev = tracking_evaluator(data.inputs[:6], data.texts[:6], np.arange(6))
    r = Recipe(name="t", model="tiny", stages=[Stage("joint", steps=4)], batch_size=4, eval_every=2)
    Trainer(make_model("sparse-clip", expansion=4), r, data, tmp_path, evaluate=ev, progress=False).fit()
    hist = eval_history(tmp_path / "log.jsonl")
    assert [h["step"] for h in hist] == [2, 4, 4]  # every 2 steps, plus the stage end
    assert all("l0_image" in h and "image_retrieval_recall@1" in h for h in hist)


# ------------------------------------------------------------------ Fig. 2b ablation arms: TopK and L1
def test_topk_arm_keeps_the_k_largest_preactivations_then_relu(make_model):
    m = make_model("sparse-clip", expansion=4, extra={"topk": 5}).eval()
    grid = torch.randn(6, 16, 2, 2)
    with torch.no_grad():
        out = m.image_embed(grid)
        pre = m.image_proj(grid.flatten(2).mean(2))  # slow reference: sort each row by hand
    for o, p in zip(out, pre):
        keep = torch.argsort(p, descending=True)[:5]
        ref = torch.zeros_like(p)
        ref[keep] = p[keep].clamp_min(0)
        torch.testing.assert_close(o, ref)
    assert ((out > 0).sum(1) <= 5).all()
    for bad in (0, 33, 2.5, True):
        with pytest.raises(ValueError, match="topk"):
            make_model("sparse-clip", expansion=4, extra={"topk": bad})
    with pytest.raises(ValueError, match="ReLU"):
        make_model("sparse-clip", expansion=4, extra={"topk": 4, "relu": False})


def test_l1_arm_adds_named_parts_on_the_normalised_rows(make_model):
    from tokenspace.train.losses import SparseContrastiveLoss

    plain = make_model("sparse-clip", expansion=4)
    l1 = make_model("sparse-clip", expansion=4, extra={"l1": 0.3})
    img, txt = torch.rand(4, 32), torch.rand(4, 32)
    assert plain.regularization(img, txt) == {}
    parts = SparseContrastiveLoss()(img, txt, l1, 0)
    by_hand = 0.3 * (img / img.norm(dim=1, keepdim=True)).abs().sum(1).mean()
    torch.testing.assert_close(parts["l1_image"], by_hand)
    torch.testing.assert_close(parts["loss"], parts["contrastive"] + parts["l1_image"] + parts["l1_text"])
    # scale-free: doubling the raw rows changes nothing (the cosine loss cannot shrink its way out)
    torch.testing.assert_close(l1.regularization(2 * img, txt)["l1_image"], parts["l1_image"])
    with pytest.raises(ValueError, match="l1"):
        make_model("sparse-clip", expansion=4, extra={"l1": -1.0})


def test_l1_arm_trains_sparser_than_relu_alone(make_model, tmp_path):
    """One step apart: the L1 term's gradient lowers the active fraction of a batch (checked in the log)."""
    logs = {}
    for name, extra in (("relu", {}), ("l1", {"l1": 5.0})):
        r = Recipe(name=name, model="tiny", stages=[Stage("joint", steps=30, lr=1e-2)], batch_size=12)
        Trainer(make_model("sparse-clip", expansion=4, extra=extra), r, tiny_data(), tmp_path / name,
                progress=False).fit()
        logs[name] = [json.loads(x) for x in (tmp_path / name / "log.jsonl").read_text().splitlines()]
    assert "l1_image" in logs["l1"][-1] and "l1_image" not in logs["relu"][-1]
    assert logs["l1"][-1]["nnz_image"] < logs["relu"][-1]["nnz_image"]


# ------------------------------------------------------------------ paper config: OpenCLIP pooling + schedule
def test_eos_pooling_reads_the_last_real_token_of_a_causal_tower(make_model):
    text_tower = {"type": "transformer-mlm", "vocab_size": 34, "width": 16, "layers": 1, "heads": 2,
                  "max_len": 16, "causal": True}
    m = make_model("sparse-clip", expansion=2, text_tower=text_tower, extra={"text_pooling": "eos"}).eval()
    ids, mask = m.tokenize(["a red dog", "a cat"])  # the second row is padded
    with torch.no_grad():
        h = m.text_tower(ids, mask)
        last = mask.sum(1) - 1
        ref = torch.relu(m.text_proj(h[torch.arange(2), last]))
        torch.testing.assert_close(m.text_embed(ids, mask), ref)
        # causal: a later token never changes an earlier position
        ids2 = ids.clone()
        ids2[0, 2] = 5
        h2 = m.text_tower(ids2, mask)
        torch.testing.assert_close(h2[0, :2], h[0, :2])
        assert not torch.allclose(h2[0, 2:], h[0, 2:])
    assert m.tokenizer.vocab.token(int(ids[1, last[1]])) == "[SEP]"
    with pytest.raises(ValueError, match="text_pooling"):
        make_model("sparse-clip", expansion=2, extra={"text_pooling": "cls"})


def test_vit_class_token_output_is_a_1x1_grid():
    from tokenspace.models.hf_towers import ViTTower

    cfg = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
           "image_size": 32, "patch_size": 8}
    torch.manual_seed(0)
    patches = ViTTower(config=cfg).eval()
    cls = ViTTower(config=cfg, output="cls").eval()
    cls.load_state_dict(patches.state_dict())
    px = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        g = cls(px)
        full = patches.vit(pixel_values=px).last_hidden_state
    assert g.shape == (2, 16, 1, 1) and patches(px).shape == (2, 16, 4, 4)
    torch.testing.assert_close(g[:, :, 0, 0], full[:, 0])
    assert cls.portable_spec()["output"] == "cls" and "output" not in patches.portable_spec()
    with pytest.raises(ValueError, match="output"):
        ViTTower(config=cfg, output="mean")


def test_paper_config_pools_like_openclip_and_round_trips(tiny_vocab, tmp_path):
    from tokenspace.models.config import ModelConfig
    from tokenspace.models.dual import DualEncoder
    from tokenspace.models.registry import build_model
    from tokenspace.models.shrink import shrink

    config = ModelConfig.load("sparse-clip-vitb32")
    assert config.image_tower["output"] == "cls" and config.text_tower["causal"] is True
    assert config.extra["text_pooling"] == "eos"
    torch.manual_seed(0)
    m = build_model(shrink(config, width=32, layers=1, vocab=len(tiny_vocab)), vocab=tiny_vocab).eval()
    assert m.image_grid(torch.randn(2, 3, 32, 32)).shape == (2, 32, 1, 1)
    assert m.text_tower.causal and m.text_pooling == "eos"
    back = DualEncoder.from_pretrained(m.save_pretrained(tmp_path / "m"))
    assert back.image_tower.output == "cls" and back.text_tower.causal and back.text_pooling == "eos"
    px, texts = torch.randn(2, 3, 32, 32), ["a red dog", "a cat"]
    np.testing.assert_allclose(back.encode_text(texts).to_dense(), m.encode_text(texts).to_dense(), atol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(back.image_embed(back.image_grid(px)), m.image_embed(m.image_grid(px)))


def test_cosine_schedule_is_openclips():
    from tokenspace.train.recipe import Recipe
    from tokenspace.train.trainer import lr_at

    st = Stage("joint", steps=110, lr=1.0, warmup_steps=10, schedule="cosine")
    assert lr_at(st, 0) == pytest.approx(0.1) and lr_at(st, 9) == pytest.approx(1.0)  # linear warm-up
    for step in (10, 35, 60, 85, 109):
        e, es = step - 10, 100
        assert lr_at(st, step) == pytest.approx(0.5 * (1 + math.cos(math.pi * e / es)))
    assert lr_at(st, 60) == pytest.approx(0.5)
    lin = Stage("joint", steps=110, lr=1.0, warmup_steps=10)
    assert lr_at(lin, 60) == pytest.approx(0.5) and lr_at(lin, 35) == pytest.approx(0.75)
    assert lr_at(st, 35) > lr_at(lin, 35)  # cosine stays high longer
    assert Recipe.load("sparse-clip-vitb32").stages[0].schedule == "cosine"
    with pytest.raises(ValueError, match="schedule"):
        Stage("x", steps=1, schedule="step")
