"""Hugging Face towers: tiny random models saved to a temp folder, loaded back by path (no downloads)."""
import pytest
import torch

from tokenspace.models.config import ModelConfig
from tokenspace.models.registry import build_model
from tokenspace.models.towers import build_image_tower, build_text_tower

TINY_VISION = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
               "image_size": 32, "patch_size": 8}


def _save(model, path):
    model.save_pretrained(str(path))
    return str(path)


@pytest.mark.parametrize("kind", ["vit", "hf-clip-vision"])
def test_image_tower_from_a_local_folder_equals_the_saved_model(kind, tmp_path):
    torch.manual_seed(0)
    fresh = build_image_tower({"type": kind, "config": TINY_VISION}).eval()
    inner = fresh.vit if kind == "vit" else fresh.clip
    loaded = build_image_tower({"type": kind, "weights": _save(inner, tmp_path / kind)}).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        grid = loaded(x)
        torch.testing.assert_close(grid, fresh(x))
    assert grid.shape == (2, 32, 4, 4)  # [B, hidden, 32/8, 32/8]: patch tokens laid out as a grid
    assert loaded.out_channels == 32 and loaded.image_size == 32
    # the portable spec rebuilds the architecture without the folder
    rebuilt = build_image_tower({"type": kind, **loaded.portable_spec()})
    assert rebuilt.state_dict().keys() == loaded.state_dict().keys()


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        build_image_tower({"type": "vit", "weights": str(tmp_path / "nope")})
    with pytest.raises(ValueError, match="config"):
        build_image_tower({"type": "vit"})


def test_clip_text_tower_from_a_folder_drives_a_stair_model(tmp_path, tiny_vocab):
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    hf = CLIPTextModel(CLIPTextConfig(vocab_size=len(tiny_vocab), hidden_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=32))
    folder = _save(hf, tmp_path / "clip-text")
    tower = build_text_tower({"type": "hf-clip-text", "weights": folder}).eval()
    ids = torch.randint(5, len(tiny_vocab), (2, 7))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        torch.testing.assert_close(tower(ids, mask), hf(input_ids=ids, attention_mask=mask).last_hidden_state)
    assert tower.word_embeddings.shape == (len(tiny_vocab), 32)
    config = ModelConfig(name="t", family="stair", image_tower={"type": "vit", "config": TINY_VISION},
                         text_tower={"type": "hf-clip-text", "weights": folder}, max_text_len=16)
    model = build_model(config, vocab=tiny_vocab)
    emb = model.text_embed(*model.tokenize(["a red dog"]))
    emb.sum().backward()
    assert emb.shape == (1, len(tiny_vocab)) and model.text_tower.word_embeddings.grad is not None


def test_transformer_mlm_tower_masks_padding_and_checkpoints_gradients():
    torch.manual_seed(0)
    tower = build_text_tower({"type": "transformer-mlm", "vocab_size": 40, "width": 16, "layers": 2, "heads": 2,
                              "max_len": 12})
    tower.train()
    ids = torch.randint(5, 40, (2, 6))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    other = ids.clone()
    other[0, 4:] = 7  # different padding tokens: the real tokens' states must not change
    torch.testing.assert_close(tower(ids, mask)[0, :4], tower(other, mask)[0, :4])
    plain = tower(ids, mask).sum()
    g_plain = torch.autograd.grad(plain, tower.token_embedding.weight)[0]
    tower.set_grad_checkpointing(True)
    g_ckpt = torch.autograd.grad(tower(ids, mask).sum(), tower.token_embedding.weight)[0]
    torch.testing.assert_close(g_plain, g_ckpt)


def test_saved_model_with_folder_towers_reloads_without_the_folders(tmp_path, tiny_vocab):
    """save_pretrained stores the towers' portable specs: the model folder alone rebuilds it."""
    import shutil

    from transformers import CLIPTextConfig, CLIPTextModel, ViTConfig, ViTModel

    from tokenspace.models.dual import DualEncoder

    torch.manual_seed(0)
    vit_dir = _save(ViTModel(ViTConfig(**TINY_VISION), add_pooling_layer=False), tmp_path / "vit")
    text_dir = _save(CLIPTextModel(CLIPTextConfig(vocab_size=len(tiny_vocab), hidden_size=32, num_hidden_layers=1,
                                                  num_attention_heads=2, intermediate_size=64,
                                                  max_position_embeddings=32)), tmp_path / "text")
    config = ModelConfig(name="t", family="stair", image_tower={"type": "vit", "weights": vit_dir},
                         text_tower={"type": "hf-clip-text", "weights": text_dir}, max_text_len=16)
    model = build_model(config, vocab=tiny_vocab).eval()
    saved = model.save_pretrained(tmp_path / "model")
    shutil.rmtree(vit_dir)
    shutil.rmtree(text_dir)
    again = DualEncoder.from_pretrained(saved)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(again.image_embed(again.image_grid(x)), model.image_embed(model.image_grid(x)))
        torch.testing.assert_close(again.text_embed(*again.tokenize(["a red dog"])),
                                   model.text_embed(*model.tokenize(["a red dog"])))
