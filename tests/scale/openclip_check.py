"""Run by test_openclip_towers.py in a subprocess: open_clip towers on a tiny random model, saved the
way open_clip saves models (local-dir: open_clip_config.json + weights) and loaded back by path.

This machine has CPU torch but PyPI's only torchvision wheels are CUDA builds that fail to import
against it; open_clip imports torchvision at import time for its image transforms, which the towers
never use. So, only when torchvision is missing, a stub with the names open_clip imports is installed
in this child process (after transformers and torch.distributed are fully imported, so nothing else
ever sees it).
"""
import importlib.machinery
import importlib.util
import json
import sys
import types
from pathlib import Path

import torch


def stub_torchvision():
    import torch.distributed.tensor
    import transformers  # noqa: F401

    class _Any:
        def __init__(self, *a, **k):
            pass

        def __call__(self, *a, **k):
            return _Any()

    class InterpolationMode:
        BICUBIC = BILINEAR = NEAREST = "stub"

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        m.__path__ = []
        m.__dict__.update(attrs)
        return m

    def lazy(name):  # unknown public names are inert classes; dunders stay missing
        def getattr_(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return type(attr, (_Any,), {})
        m = module(name)
        m.__getattr__ = getattr_
        return m

    class FrozenBatchNorm2d(torch.nn.Module):
        pass

    mods = [module("torchvision"), module("torchvision.ops"),
            module("torchvision.ops.misc", FrozenBatchNorm2d=FrozenBatchNorm2d),
            lazy("torchvision.transforms"), lazy("torchvision.transforms.functional")]
    mods[3].InterpolationMode = InterpolationMode
    for m in mods:
        sys.modules[m.__name__] = m


def main(tmp: Path):
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - a CUDA-only wheel fails with RuntimeError, not ImportError
        for k in [k for k in sys.modules if k.startswith("torchvision")]:
            del sys.modules[k]
        stub_torchvision()
    import open_clip
    from safetensors.torch import save_file

    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model
    from tokenspace.models.towers import build_image_tower, build_text_tower
    from tokenspace.vocab import SPECIAL_TOKENS, Vocabulary

    vocab = Vocabulary(list(SPECIAL_TOKENS) + ["a", "red", "dog", "blue", "cat", "green", "car"], name="t")
    cfg = {"embed_dim": 16,
           "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
           "text_cfg": {"context_length": 16, "vocab_size": len(vocab), "width": 32, "heads": 2, "layers": 1}}
    torch.manual_seed(0)
    clip = open_clip.CLIP(**cfg).eval()
    folder = tmp / "tiny-openclip"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
    save_file({k: v.contiguous() for k, v in clip.state_dict().items()}, str(folder / "open_clip_model.safetensors"))

    vis = build_image_tower({"type": "open-clip-vision", "model": f"local-dir:{folder}"}).eval()
    txt = build_text_tower({"type": "open-clip-text", "model": f"local-dir:{folder}"}).eval()
    x = torch.randn(2, 3, 32, 32)
    ids = torch.randint(5, len(vocab), (2, 16))
    with torch.no_grad():
        grid = vis(x)
        assert grid.shape == (2, 32, 4, 4), grid.shape
        clip.visual.output_tokens = True
        torch.testing.assert_close(grid.flatten(2).transpose(1, 2), clip.visual(x)[1])
        # the text tokens, pooled at the last position and projected, are open_clip's text embedding
        h = txt(ids, torch.ones_like(ids))
        pooled = h[torch.arange(2), ids.argmax(-1)] @ clip.text_projection
        torch.testing.assert_close(pooled, clip.encode_text(ids))
    # a pretrained checkpoint file by path, with an explicit config
    ckpt = folder / "open_clip_model.safetensors"
    again = build_image_tower({"type": "open-clip-vision", "config": cfg, "pretrained": str(ckpt)}).eval()
    with torch.no_grad():
        torch.testing.assert_close(again(x), grid)
    # both towers in a STAIR model: one training step
    model = build_model(ModelConfig(
        name="oc", family="stair", image_tower={"type": "open-clip-vision", "model": f"local-dir:{folder}"},
        text_tower={"type": "open-clip-text", "model": f"local-dir:{folder}"}, max_text_len=16), vocab=vocab)
    model.train()
    ids, mask = model.tokenize(["a red dog", "a blue cat"])
    loss = (model.image_embed(model.image_grid(x)) * model.text_embed(ids, mask)).sum()
    loss.backward()
    assert model.image_tower.visual.conv1.weight.grad is not None
    rebuilt = build_image_tower({"type": "open-clip-vision", **vis.portable_spec()})
    assert rebuilt.state_dict().keys() == vis.state_dict().keys()
    print("OPENCLIP-OK")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
