"""The at-scale entry: a shrunk paper config trained end to end from webdataset pixels, with the GPU
flags on (fp16 + GradScaler, channels-last, gradient checkpointing, LAMB), through the CLI parser."""
import io
import json

import numpy as np
import torch
import yaml
from PIL import Image

from tokenspace.data.webdataset import write_shards
from tokenspace.models.config import ModelConfig
from tokenspace.models.shrink import shrink
from tokenspace.train import distributed
from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.trainer import PairData, Trainer, set_grad_checkpointing


def _shards(tmp_path, n=24):
    colors = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 200, 30)}
    shapes = ["dog", "cat", "car", "tree"]

    def samples():
        for i in range(n):
            c, s = list(colors)[i % 3], shapes[i % 4]
            img = np.full((32, 32, 3), 255, np.uint8)
            q = (i % 4) * 8
            img[q:q + 8, q:q + 8] = colors[c]
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="PNG")
            yield f"k{i:04d}", buf.getvalue(), f"a {c} {s}"

    write_shards(samples(), str(tmp_path / "wds" / "shard-%03d.tar"), per_shard=10)
    return f"wds:{tmp_path}/wds/shard-{{000..002}}.tar"


def test_paper_recipe_trains_end_to_end_from_shards_with_gpu_flags(tmp_path, tiny_vocab):
    tiny_vocab.save(tmp_path / "vocab.txt")
    cfg = shrink(ModelConfig.load("stair-paper"), width=16, layers=1, vocab=len(tiny_vocab))
    cfg.vocab = str(tmp_path / "vocab.txt")
    cfg.max_text_len = 16
    cfg.save(tmp_path / "model.json")
    paper = yaml.safe_load(_recipe_path("stair-paper").read_text())
    paper.update(model=str(tmp_path / "model.json"), data={"train": [_shards(tmp_path)]}, batch_size=8,
                 precision="fp16", channels_last=True, gradient_checkpointing=True, checkpoint_every=1,
                 loss={"lambda": 1e-3, "flops_warmup": 2},
                 stages=[{**s, "steps": 1, "warmup_steps": 1} for s in paper["stages"]])
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(paper))
    out = tmp_path / "run"
    assert distributed.main(["--recipe", str(tmp_path / "r.yaml"), "--out", str(out)]) == 0
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [r["stage"] for r in rows] == ["masked-text", "frozen-image", "joint"]
    assert all(np.isfinite(r["loss"]) for r in rows)
    from tokenspace.models.dual import DualEncoder

    trained = DualEncoder.from_pretrained(out / "model")  # the ViT itself was trained and saved
    assert type(trained.image_tower).__name__ == "ViTTower"
    # resume after the end is a no-op that still loads (rank-0 checkpoint layout)
    assert distributed.main(["--recipe", str(tmp_path / "r.yaml"), "--out", str(out), "--resume"]) == 0


def _recipe_path(name):
    from tokenspace.train.recipe import RECIPE_DIR

    return RECIPE_DIR / f"{name}.yaml"


def test_flags_keep_the_numbers(make_model, tmp_path):
    """channels-last and gradient checkpointing change memory, not results."""
    rng = np.random.default_rng(0)
    px = rng.standard_normal((6, 3, 32, 32)).astype(np.float32)
    data = PairData.from_texts(px, [f"a {w}" for w in ["red dog", "blue cat", "green car"] * 2])

    def run(**flags):
        m = make_model(seed=3)
        r = Recipe(name="f", model="t", stages=[Stage("joint", steps=2, lr=1e-3)], batch_size=3,
                   train_image_tower=True, optimizer="lamb", **flags)
        for mod in m.modules():  # no dropout: checkpointing replays the forward
            if isinstance(mod, torch.nn.Dropout):
                mod.p = 0.0
        Trainer(m, r, data, tmp_path / str(sorted(flags.items())), progress=False).fit()
        return m.state_dict()

    base = run()
    for flags in ({"channels_last": True}, {"gradient_checkpointing": True}):
        other = run(**flags)
        for k in base:
            torch.testing.assert_close(other[k], base[k], rtol=1e-4, atol=1e-5, msg=f"{flags} {k}")


def test_fp16_uses_a_grad_scaler(make_model, tmp_path):
    m = make_model()
    r = Recipe(name="f", model="t", stages=[Stage("joint", steps=1)], batch_size=3, precision="fp16")
    t = Trainer(m, r, PairData.from_texts(np.zeros((3, 16, 2, 2), np.float32), ["a red dog", "a cat", "sun"]),
                tmp_path, progress=False)
    assert t.scaler.is_enabled()
    t.fit()
    assert torch.load(tmp_path / "checkpoint" / "optimizer.pt", weights_only=False)["scaler"] is not None
    set_grad_checkpointing(m, True)  # the bert-mlm tower's BERT supports it through transformers
    assert m.text_tower.bert.is_gradient_checkpointing
