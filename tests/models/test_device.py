"""The Python API follows the model's device: ``model.to(dev)`` then ``encode_*`` works.

No accelerator here, so the model goes to the "meta" device (shapes only, no data): every tensor the
towers and heads receive must be on it. A CPU input reaching a meta weight would be a device mismatch on
a GPU too. The BERT text tower cannot run on meta (transformers calls ``.item()`` on the mask), so its
forward is replaced by a recorder returning zeros on the input's device; everything after it (the MLM
head, max projection, pooling) runs for real. The output conversion is recorded instead of copied
(meta tensors have no data to copy).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

FAMILIES = ["stair", "dense", "sparse-clip", "visualsparta"]


def draw(color: str, _shape: int = 0) -> Image.Image:
    return Image.new("RGB", (32, 32), color)


def _record_inputs(model, seen):
    """Record the device of every tensor passed to the towers and heads, and the grad mode."""
    def note(where, *tensors):
        for t in tensors:
            if isinstance(t, torch.Tensor):
                seen.append((where, t.device.type, torch.is_inference_mode_enabled()))

    text = model.text_tower
    hidden = getattr(text, "hidden_size", 0)

    def fake_text_forward(input_ids, attention_mask):
        note("text_tower", input_ids, attention_mask)
        return torch.zeros(*input_ids.shape, hidden, device=input_ids.device)

    text.forward = fake_text_forward
    model.image_tower.register_forward_pre_hook(lambda mod, args: note("image_tower", *args))
    for name in ("image_embed", "text_embed"):
        method = getattr(model, name)
        setattr(model, name, lambda *a, _m=method, _n=name, **kw: (note(_n, *a), _m(*a, **kw))[1])
    outputs = []
    model._to_output = lambda emb, top_n=None: outputs.append(emb.device.type)
    model._concat = lambda outs, n: outs
    return outputs


@pytest.mark.parametrize("family", FAMILIES)
def test_encode_follows_the_model_to_another_device(make_model, family):
    model = make_model(family).to("meta")
    assert model.device.type == "meta"
    seen: list = []
    outputs = _record_inputs(model, seen)
    model.encode_text(["a red dog", "the blue cat on a car"], batch_size=1)
    model.encode_image([draw("red", 0), draw("blue", 1), draw("green", 2)], batch_size=2)
    model.encode_image_grids(np.zeros((3, model.image_tower.out_channels, 4, 4), np.float32), batch_size=2)
    model.encode_image_grids(torch.zeros(1, model.image_tower.out_channels, 4, 4))
    where = {w for w, _, _ in seen}
    assert {"image_tower", "image_embed", "text_embed"} <= where
    if family != "visualsparta":  # VisualSparta's query side is a bag of tokens: no text network
        assert "text_tower" in where
    assert {dev for _, dev, _ in seen} == {"meta"}, seen
    assert all(inference for _, _, inference in seen)  # encode runs under torch.inference_mode
    assert outputs == ["meta"] * (2 + 2 + 2 + 1)  # batching: one head call per batch


def test_batches_give_the_same_rows_and_the_weights_still_train(make_model):
    model = make_model("stair")
    texts = ["a red dog", "the blue cat on a car", "a big green tree", "sun and moon"]
    one = model.encode_text(texts, batch_size=1)
    all_at_once = model.encode_text(texts, batch_size=64)
    np.testing.assert_allclose(one.to_dense(), all_at_once.to_dense(), atol=1e-6)
    with pytest.raises(ValueError, match="batch_size"):
        model.encode_text(texts, batch_size=0)
    # the weights still train after an encode (inference mode left no inference tensors behind)
    ids, mask = model.tokenize(texts)
    model.text_embed(ids, mask).sum().backward()
    assert model.text_tower.word_embeddings.grad is not None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("family", FAMILIES)
def test_cuda_encodes_as_the_cpu_does(make_model, family):
    cpu = make_model(family)
    texts = ["a red dog", "the blue cat"]
    images = [draw("red", 0), draw("blue", 1)]
    ref_t, ref_i = cpu.encode_text(texts), cpu.encode_image(images)
    gpu = cpu.to("cuda")
    got_t, got_i = gpu.encode_text(texts), gpu.encode_image(images)
    dense = (lambda x: x.to_dense()) if cpu.sparse else (lambda x: x)
    np.testing.assert_allclose(dense(got_t), dense(ref_t), atol=1e-4)
    np.testing.assert_allclose(dense(got_i), dense(ref_i), atol=1e-4)
