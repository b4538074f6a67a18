import json

import numpy as np
import pytest
import torch

from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.trainer import BatchSampler, PairData, Trainer


def tiny_data(n=12, seed=0):
    rng = np.random.default_rng(seed)
    words = ["red dog", "blue cat", "green car", "red tree", "blue house", "green sun"]
    texts = [f"a {words[i % len(words)]}" for i in range(n)]
    grids = rng.standard_normal((n, 16, 2, 2)).astype(np.float16)
    return PairData.from_texts(grids, texts)


def recipe(stages, **kw):
    return Recipe(name="t", model="tiny", stages=stages, batch_size=4, lambda_image=1e-3, lambda_text=1e-3, **kw)


def test_two_step_training_run_logs_losses_and_sparsity(make_model, tmp_path):
    m = make_model()
    r = recipe([Stage("joint", steps=2, lr=1e-3)])
    Trainer(m, r, tiny_data(), tmp_path, progress=False).fit()
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    for key in ("contrastive", "flops_image", "flops_text", "loss", "nnz_image", "nnz_text", "flops", "lr"):
        assert np.isfinite(rows[-1][key])
    assert (tmp_path / "model" / "model.safetensors").exists()
    assert (tmp_path / "checkpoint" / "optimizer.pt").exists()


def test_stage2_freezes_the_image_side_and_trains_the_text_side(make_model, tmp_path):
    m = make_model()
    data = tiny_data()
    grid = torch.from_numpy(data.inputs[:3].astype(np.float32))
    m.eval()
    with torch.no_grad():
        img_before = m.image_embed(grid).clone()
        ids, mask = m.tokenize(data.texts[:3])
        txt_before = m.text_embed(ids, mask).clone()
    Trainer(m, recipe([Stage("frozen-image", steps=3, lr=1e-2, freeze_image=True)]), data, tmp_path,
            progress=False).fit()
    with torch.no_grad():
        assert torch.equal(m.image_embed(grid), img_before)
        assert not torch.allclose(m.text_embed(ids, mask), txt_before)


def test_stage1_trains_with_text_restricted_to_its_tokens(make_model, tmp_path):
    m = make_model()
    seen = []
    orig = m.text_embed

    def spy(ids, mask, restrict_to_input=False):
        out = orig(ids, mask, restrict_to_input=restrict_to_input)
        seen.append((restrict_to_input, out.detach(), m.token_mask(ids, mask)))
        return out

    m.text_embed = spy
    Trainer(m, recipe([Stage("masked", steps=2, restrict_text=True)]), tiny_data(), tmp_path, progress=False).fit()
    assert seen and all(flag for flag, _, _ in seen)
    for _, out, token_mask in seen:
        assert ((out > 0) <= (token_mask > 0)).all()


def test_resume_continues_at_the_exact_step(make_model, tmp_path):
    stages = [Stage("a", steps=2), Stage("b", steps=2, lr=5e-4)]
    full = make_model(seed=1)
    Trainer(full, recipe(stages), tiny_data(), tmp_path / "full", progress=False).fit()

    part = make_model(seed=1)
    Trainer(part, recipe(stages[:1]), tiny_data(), tmp_path / "part", progress=False).fit()
    resumed = make_model(seed=1)
    Trainer(resumed, recipe(stages), tiny_data(), tmp_path / "part", progress=False).fit(resume=True)
    steps = [json.loads(x)["step"] for x in (tmp_path / "part" / "log.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    for a, b in zip(full.state_dict().values(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b)


def test_batches_never_hold_two_pairs_of_one_group():
    groups = np.array([0, 0, 1, 1, 2, 3, 3, 4])
    s = BatchSampler(groups, batch_size=4, rng=np.random.default_rng(0))
    for _ in range(20):
        b = s.next()
        assert len(set(groups[b])) == len(b) == 4


def test_pair_data_rejects_empty_texts():
    with pytest.raises(ValueError, match="empty texts"):
        PairData.from_texts(np.zeros((2, 1, 1, 1)), ["a dog", ""])


def test_recipe_files_load_and_validate(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("model: tiny\nloss: {lambda: 1.0e-3, flops_warmup: 5}\nstages:\n  - {name: s, steps: 3}\n")
    r = Recipe.load(p)
    assert r.lambda_image == r.lambda_text == 1e-3 and r.total_steps == 3 and r.name == "r"
    p.write_text("model: tiny\nbogus: 1\nstages: [{name: s, steps: 1}]\n")
    with pytest.raises(ValueError, match="unknown recipe keys"):
        Recipe.load(p)


@pytest.mark.parametrize("per_stage, expect", [(True, [0, 1, 2, 0, 1, 2]), (False, [0, 1, 2, 3, 4, 5])])
def test_flops_warmup_restarts_with_each_stage_unless_told(make_model, tmp_path, per_stage, expect):
    """The paper trains each stage "using the same configuration" (lr warm-up and lambda's quadratic
    growth included), so by default the FLOPs ramp starts again at every stage."""
    m = make_model()
    r = recipe([Stage("masked-text", steps=3, restrict_text=True), Stage("joint", steps=3)],
               flops_warmup=3, flops_warmup_per_stage=per_stage)
    t = Trainer(m, r, tiny_data(), tmp_path, progress=False)
    steps, orig = [], t.loss_fn.forward
    t.loss_fn.forward = lambda img, txt, model, step: steps.append(step) or orig(img, txt, model, step)
    t.fit()
    assert steps == expect
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines() if "loss" in line]
    assert (rows[3]["flops_image"] == 0.0) == per_stage  # stage 2's first step: lambda back at 0, or not
