"""The logit-scale cap (Sparse CLIP's sparsity knob) is applied to the parameter after every step, as
open_clip does: a parameter pushed over the cap sits at the cap, and can come back down."""
import math

import numpy as np
import pytest
import torch

from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.trainer import PairData, Trainer


def _data(n=8):
    rng = np.random.default_rng(0)
    texts = [f"a {w}" for w in ["red dog", "blue cat", "green car", "red tree", "blue house", "green sun",
                                "red star", "blue moon"][:n]]
    return PairData.from_texts(rng.standard_normal((n, 16, 2, 2)).astype(np.float32), texts)


@pytest.mark.parametrize("family", ["sparse-clip", "stair"])
def test_parameter_sits_at_the_cap_after_a_step_that_pushes_it_over_and_can_come_back(make_model, tmp_path, family):
    cap = 20.0
    over = {"expansion": 4} if family == "sparse-clip" else {}
    m = make_model(family, logit_scale_init=10.0, logit_scale_max=cap, **over)
    with torch.no_grad():
        m.log_logit_scale.fill_(math.log(cap) - 0.05)  # just under the cap
    trainer = Trainer(m, Recipe(name="t", model="tiny", stages=[Stage("joint", steps=2, lr=0.5)], batch_size=4),
                      _data(), tmp_path, progress=False)
    seen = []

    def push(image_emb, text_emb, model, step):
        # step 0: a loss that wants a larger scale (Adam moves the parameter ~lr = 0.5 up, past the cap);
        # step 1: one that wants a smaller scale
        seen.append(m.log_logit_scale.item())
        s = model.logit_scale
        return {"loss": -s if step == 0 else s}

    trainer.loss_fn.forward = push
    trainer.fit()
    assert seen[0] == pytest.approx(math.log(cap) - 0.05)
    assert seen[1] == pytest.approx(math.log(cap), abs=1e-6)  # at the cap, not 0.45 above it
    # at the cap the gradient still flows, so the second step brings it back below (old: stuck above)
    assert m.log_logit_scale.item() < math.log(cap) - 1e-3
