"""open_clip towers (models/openclip_towers.py): the real package when it is installed (an extra that
skips in CI, with its reason), and the adapter itself against a fake open_clip module (runs everywhere)."""
import copy
import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn


@pytest.mark.skipif(importlib.util.find_spec("open_clip") is None,
                    reason="open_clip_torch not installed: no CI extra can install it (it imports torchvision, "
                           "whose PyPI wheels do not import beside torch 2.13); the fake-module tests below "
                           "cover the adapter")
def test_open_clip_towers_from_a_local_dir(tmp_path):
    # a child process: on CPU-only machines the check stubs torchvision, which must not leak into pytest
    script = Path(__file__).with_name("openclip_check.py")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, check=False,
                       timeout=300, env=env)
    assert "OPENCLIP-OK" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]


# ------------------------------------------------------------------ the adapter against a fake open_clip
# No CI extra can install open_clip (it imports torchvision, whose PyPI wheels do not import beside
# torch 2.13), so the test above skips everywhere. These run our adapter (models/openclip_towers.py) for
# real against a tiny stand-in with the names and shapes of the open_clip API it calls: CLIP(**cfg) with
# .visual (output_tokens, image_size, transformer.width, set_grad_checkpointing; forward -> (pooled,
# patch tokens)), token_embedding, positional_embedding, transformer(x, attn_mask=...), ln_final,
# attn_mask, context_length; create_model, get_model_config, load_checkpoint.


class _FakeTransformer(nn.Module):
    def __init__(self, width: int, layers: int, heads: int):
        super().__init__()
        self.width, self.grad_checkpointing = width, False
        self.resblocks = nn.ModuleList(
            nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True) for _ in range(layers))

    def forward(self, x, attn_mask=None):
        for block in self.resblocks:
            x = block(x, src_mask=attn_mask)
        return x


class _FakeVisionTransformer(nn.Module):
    def __init__(self, image_size, patch_size, width, layers, head_width, output_dim):
        super().__init__()
        self.image_size, self.output_tokens, self.checkpointing = (image_size, image_size), False, None
        self.conv1 = nn.Conv2d(3, width, patch_size, patch_size, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(width) * 0.02)
        self.transformer = _FakeTransformer(width, layers, width // head_width)
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Parameter(torch.randn(width, output_dim) * 0.02)

    def set_grad_checkpointing(self, enable=True):
        self.checkpointing = enable

    def forward(self, x):
        x = self.conv1(x).flatten(2).transpose(1, 2)  # [B, h*w, width], row-major patches as open_clip
        x = torch.cat([self.class_embedding.expand(len(x), 1, -1), x], dim=1)
        x = self.ln_post(self.transformer(x))
        pooled, tokens = x[:, 0] @ self.proj, x[:, 1:]
        return (pooled, tokens) if self.output_tokens else pooled


class _FakeCLIP(nn.Module):
    def __init__(self, embed_dim, vision_cfg, text_cfg):
        super().__init__()
        v, t = vision_cfg, text_cfg
        self.visual = _FakeVisionTransformer(v["image_size"], v["patch_size"], v["width"], v["layers"],
                                             v.get("head_width", 64), embed_dim)
        self.context_length = t["context_length"]
        self.token_embedding = nn.Embedding(t["vocab_size"], t["width"])
        self.positional_embedding = nn.Parameter(torch.randn(self.context_length, t["width"]) * 0.02)
        self.transformer = _FakeTransformer(t["width"], t["layers"], t["heads"])
        self.ln_final = nn.LayerNorm(t["width"])
        self.text_projection = nn.Parameter(torch.randn(t["width"], embed_dim) * 0.02)
        causal = torch.full((self.context_length,) * 2, float("-inf")).triu(1)
        self.register_buffer("attn_mask", causal, persistent=False)


TINY = {"embed_dim": 16,
        "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
        "text_cfg": {"context_length": 16, "vocab_size": 34, "width": 32, "heads": 2, "layers": 1}}


@pytest.fixture
def fake_open_clip(monkeypatch, tmp_path):
    """A module named open_clip with the calls the adapter makes; records what it was asked."""
    calls = []
    m = types.ModuleType("open_clip")
    m.CLIP = _FakeCLIP
    m.get_model_config = lambda name: copy.deepcopy(TINY) if name == "ViT-Tiny" else None

    def create_model(name, pretrained=None):
        calls.append(("create_model", name, pretrained))
        if name.startswith("local-dir:"):  # as open_clip: the folder's config, then its weights
            folder = Path(name[len("local-dir:"):])
            clip = _FakeCLIP(**json.loads((folder / "open_clip_config.json").read_text())["model_cfg"])
            clip.load_state_dict(torch.load(folder / "weights.pt"))
            return clip
        cfg = m.get_model_config(name)
        if cfg is None:
            raise RuntimeError(f"Model config for {name} not found")
        return _FakeCLIP(**cfg)

    def load_checkpoint(model, path):
        calls.append(("load_checkpoint", str(path)))
        model.load_state_dict(torch.load(path))

    m.create_model, m.load_checkpoint, m.calls = create_model, load_checkpoint, calls
    monkeypatch.setitem(sys.modules, "open_clip", m)
    return m


def test_adapter_image_tower_gives_the_patch_grid(fake_open_clip):
    from tokenspace.models.towers import build_image_tower

    torch.manual_seed(0)
    tower = build_image_tower({"type": "open-clip-vision", "config": TINY}).eval()
    assert tower.visual.output_tokens is True  # the adapter asked for the tokens
    assert (tower.image_size, tower.out_channels) == (32, 32)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        grid = tower(x)
        tokens = tower.visual(x)[1]  # [B, h*w, width]
    assert grid.shape == (2, 32, 4, 4)
    # cell (r, c) of the grid is patch r * 4 + c: row-major, as the image is cut
    torch.testing.assert_close(grid[:, :, 1, 2], tokens[:, 1 * 4 + 2])
    tower.set_grad_checkpointing(True)
    assert tower.visual.checkpointing is True
    assert tower.portable_spec() == {"model": None, "pretrained": None, "config": TINY}


def test_adapter_text_tower_is_the_causal_transformer(fake_open_clip):
    from tokenspace.models.towers import build_text_tower

    torch.manual_seed(0)
    tower = build_text_tower({"type": "open-clip-text", "config": TINY}).eval()
    assert (tower.hidden_size, tower.vocab_size, tower.context_length) == (32, 34, 16)
    assert tower.word_embeddings is tower.token_embedding.weight  # what STAIR's heads tie to
    ids = torch.randint(5, 34, (2, 6))
    with torch.no_grad():
        h = tower(ids, torch.ones_like(ids))
        x = tower.token_embedding(ids) + tower.positional_embedding[:6]
        ref = tower.ln_final(tower.transformer(x, attn_mask=tower.attn_mask[:6, :6]))
        torch.testing.assert_close(h, ref)
        # causal: a change at the last position leaves the earlier positions as they were
        later = ids.clone()
        later[:, -1] = 5 if int(ids[0, -1]) != 5 else 6
        torch.testing.assert_close(tower(later, torch.ones_like(ids))[:, :-1], h[:, :-1])
    with pytest.raises(ValueError, match="context length 16"):
        tower(torch.ones(1, 17, dtype=torch.long), torch.ones(1, 17, dtype=torch.long))
    tower.set_grad_checkpointing(True)
    assert tower.transformer.grad_checkpointing is True


def test_adapter_loads_by_name_local_dir_and_checkpoint(fake_open_clip, tmp_path):
    from tokenspace.models.towers import build_image_tower

    torch.manual_seed(0)
    clip = _FakeCLIP(**TINY).eval()
    folder = tmp_path / "tiny-openclip"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY}))
    torch.save(clip.state_dict(), folder / "weights.pt")
    x = torch.randn(1, 3, 32, 32)
    clip.visual.output_tokens = True
    with torch.no_grad():
        want = clip.visual(x)[1]
        for spec in ({"model": f"local-dir:{folder}"}, {"config": TINY, "pretrained": str(folder / "weights.pt")}):
            tower = build_image_tower({"type": "open-clip-vision", **spec}).eval()
            torch.testing.assert_close(tower(x).flatten(2).transpose(1, 2), want)
            assert tower.portable_spec()["config"] == TINY  # a saved folder rebuilds without the files
    assert ("load_checkpoint", str(folder / "weights.pt")) in fake_open_clip.calls
    by_name = build_image_tower({"type": "open-clip-vision", "model": "ViT-Tiny"})
    assert by_name.portable_spec()["config"] == TINY and ("create_model", "ViT-Tiny", None) in fake_open_clip.calls
    with pytest.raises(ValueError, match="needs `model`"):
        build_image_tower({"type": "open-clip-vision"})


def test_adapter_refuses_what_it_cannot_use(fake_open_clip, monkeypatch):
    from tokenspace.models.towers import build_image_tower, build_text_tower

    class NoTokens(_FakeCLIP):  # a ResNet visual in open_clip: no token grid
        def __init__(self, **cfg):
            super().__init__(**cfg)
            del self.visual.output_tokens

    class NoText(_FakeCLIP):  # a CoCa / HF-text model: no built-in text transformer
        def __init__(self, **cfg):
            super().__init__(**cfg)
            del self.token_embedding

    monkeypatch.setattr(fake_open_clip, "CLIP", NoTokens)
    with pytest.raises(TypeError, match="only open_clip ViT image towers"):
        build_image_tower({"type": "open-clip-vision", "config": TINY})
    monkeypatch.setattr(fake_open_clip, "CLIP", NoText)
    with pytest.raises(TypeError, match="built-in text transformer"):
        build_text_tower({"type": "open-clip-text", "config": TINY})


def test_stair_on_open_clip_towers_trains_and_round_trips(fake_open_clip, tmp_path, tiny_vocab):
    from tokenspace.models.config import ModelConfig
    from tokenspace.models.dual import DualEncoder
    from tokenspace.models.registry import build_model
    from tokenspace.models.shrink import shrink

    torch.manual_seed(0)
    spec = {"model": "ViT-Tiny"}  # by name: shrink asks open_clip for the config (get_model_config)
    config = shrink(ModelConfig(name="oc", family="stair", image_tower={"type": "open-clip-vision", **spec},
                                text_tower={"type": "open-clip-text", **spec}, max_text_len=16),
                    width=32, layers=1, vocab=len(tiny_vocab), image_size=32, patch=8)
    model = build_model(config, vocab=tiny_vocab)
    model.train()
    ids, mask = model.tokenize(["a red dog", "a blue cat"])
    x = torch.randn(2, 3, 32, 32)
    (model.image_embed(model.image_grid(x)) * model.text_embed(ids, mask)).sum().backward()
    assert model.image_tower.visual.conv1.weight.grad is not None
    assert model.text_tower.token_embedding.weight.grad is not None
    back = DualEncoder.from_pretrained(model.save_pretrained(tmp_path / "m"))
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(back.image_embed(back.image_grid(x)), model.image_embed(model.image_grid(x)))
        torch.testing.assert_close(back.text_embed(ids, mask), model.text_embed(ids, mask))
