"""The capability protocol (models/capabilities.py): who has what, and a clear error where a feature
needs a capability the model lacks (the trainer, the loss and the heatmaps ask it, not hasattr)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tokenspace.models.capabilities import (
    CellScores,
    GradCheckpointing,
    LowPrecisionHeads,
    MissingCapability,
    OwnObjective,
    Regularized,
    RestrictsText,
    require,
)

CAPS = (RestrictsText, LowPrecisionHeads, OwnObjective, Regularized, CellScores)


@pytest.mark.parametrize("family, has", [
    ("stair", {RestrictsText, LowPrecisionHeads, CellScores}),
    ("visualsparta", {LowPrecisionHeads, OwnObjective, CellScores}),
    ("sparse-clip", {Regularized}),
    ("dense", set()),
])
def test_each_family_has_exactly_its_capabilities(make_model, family, has):
    m = make_model(family, extra={"layers": 1} if family == "visualsparta" else {})
    assert {c for c in CAPS if isinstance(m, c)} == has


def test_a_restrict_text_stage_on_a_model_without_it_is_a_clear_error(make_model, tmp_path):
    from tokenspace.train.recipe import Recipe, Stage
    from tokenspace.train.trainer import PairData, Trainer

    data = PairData.from_texts(np.zeros((4, 16, 2, 2), np.float32), ["a dog", "a cat", "a car", "a sun"])
    r = Recipe(name="t", model="tiny", stages=[Stage("masked", steps=1, restrict_text=True)], batch_size=2)
    for family in ("dense", "sparse-clip"):
        with pytest.raises(MissingCapability) as e:
            Trainer(make_model(family), r, data, tmp_path, progress=False)
        assert str(e.value) == ("a restrict_text stage needs a model that can restrict a text to its own tokens "
                                f"(STAIR stage 1, eq. 8); {family!r} models cannot")
        assert isinstance(e.value, ValueError)  # what the trainer raised before the protocol
    Trainer(make_model("stair"), r, data, tmp_path, progress=False)  # STAIR has it: no error


def test_text_embed_no_longer_swallows_options(make_model):
    # restrict_to_input used to vanish into **_ in four families: now it is a TypeError, not a no-op
    for family in ("dense", "sparse-clip", "visualsparta"):
        m = make_model(family)
        ids, mask = m.tokenize(["a red dog"])
        with pytest.raises(TypeError, match="restrict_to_input"):
            m.text_embed(ids, mask, restrict_to_input=True)


def test_require_names_the_family_and_heatmaps_ask_the_protocol(make_model):
    from PIL import Image

    from tokenspace.explain.heatmap import cell_activation, has_cell_scores

    dense = make_model("dense")
    with pytest.raises(MissingCapability, match=r"^a heatmap needs a model that scores every grid cell "
                                                r"against the vocabulary \(localisation heatmaps\); 'dense'"):
        require(dense, CellScores, "a heatmap")
    require(make_model("stair"), CellScores, "a heatmap")
    assert has_cell_scores(make_model("stair")) and not has_cell_scores(dense)
    with pytest.raises(TypeError, match="no per-cell token scores"):
        cell_activation(dense, Image.new("RGB", (32, 32)), None)


def test_the_loss_asks_for_the_objective_and_the_penalties(make_model):
    from tokenspace.train.losses import SparseContrastiveLoss

    img, txt = torch.rand(4, 32), torch.rand(4, 32)
    l1 = make_model("sparse-clip", expansion=4, extra={"l1": 0.5})
    assert {"l1_image", "l1_text"} <= set(SparseContrastiveLoss()(img, txt, l1, 0))
    assert "l1_image" not in SparseContrastiveLoss()(img, txt, make_model("dense"), 0)

    class TextToImage:  # any object with the members has the capability: nothing registers
        logit_scale = torch.tensor(1.0)
        score = staticmethod(lambda a, b: a @ b.T)
        calls = []

        def contrastive_objective(self, logits, cols=None, offset=0):
            self.calls.append(logits.shape)
            return logits.sum() * 0

    m = TextToImage()
    assert isinstance(m, OwnObjective)
    SparseContrastiveLoss()(img, txt, m, 0)
    assert m.calls == [(4, 4)]


def test_grad_checkpointing_goes_through_the_towers_own_switch(make_model, monkeypatch):
    from tokenspace.train.trainer import set_grad_checkpointing

    m = make_model()
    calls = []

    class Switch(torch.nn.Module):
        def set_grad_checkpointing(self, enable=True):
            calls.append(enable)

    assert isinstance(Switch(), GradCheckpointing) and not isinstance(torch.nn.Linear(1, 1), GradCheckpointing)
    monkeypatch.setattr(m, "image_tower", Switch())
    set_grad_checkpointing(m, True)
    set_grad_checkpointing(m, False)
    assert calls == [True, False]


def test_the_registry_asks_the_family_for_its_output_names(make_config, tiny_vocab):
    from tokenspace.models.registry import FAMILIES, build_model, register_family
    from tokenspace.models.sparse_clip import SparseClipModel

    class Renamed(SparseClipModel):  # a latent-feature family under another name: no special case by name
        family = "renamed-sparse-clip"

    try:
        register_family("renamed-sparse-clip", Renamed)
        m = build_model(make_config("renamed-sparse-clip", expansion=2), vocab=tiny_vocab)
        assert m.vocab.tokens[:2] == ["f00000", "f00001"] and len(m.vocab) == 16
        assert m.tokenizer.vocab is tiny_vocab
        stair = build_model(make_config("stair", vocab_size=len(tiny_vocab)), vocab=tiny_vocab)
        assert stair.vocab is tiny_vocab and stair.tokenizer.vocab is tiny_vocab
    finally:
        FAMILIES.pop("renamed-sparse-clip", None)
        from tokenspace.models.options import FAMILY_OPTIONS

        FAMILY_OPTIONS.pop("renamed-sparse-clip", None)
