"""One rank of the 2-process gloo run in test_distributed.py (started as torchrun would: env vars).

It writes (rank 0) the global-batch loss and parameter gradients of one step, and the weights after a
DDP fit, after a DDP fit interrupted and resumed: the test compares them with a single process.
"""
import sys
from pathlib import Path

import numpy as np
import torch

WORDS = ["a", "the", "red", "blue", "green", "dog", "cat", "car", "tree", "house", "sun", "moon"]


def tiny_model(family="stair", seed=0):
    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model
    from tokenspace.vocab import SPECIAL_TOKENS, Vocabulary

    vocab = Vocabulary(list(SPECIAL_TOKENS) + WORDS, name="tiny")
    cfg = ModelConfig(
        name="tiny", family=family, image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
        # no dropout: ranks draw their own dropout masks, which would differ from one process's.
        # The pure-torch tower keeps transformers out of the workers (its import costs seconds)
        text_tower={"type": "transformer-mlm", "vocab_size": len(vocab), "width": 16, "layers": 1, "heads": 2,
                    "max_len": 16, "dropout": 0.0},
        # (no extra: stair and sparse-clip have no dropout option; the typed options now refuse the
        # extra={"dropout": 0.0} that used to be silently ignored here)
        embed_dim=8, max_text_len=16)
    torch.manual_seed(seed)
    return build_model(cfg, vocab=vocab)


def tiny_data(n=24):
    from tokenspace.train.trainer import PairData

    rng = np.random.default_rng(0)
    texts = [f"a {WORDS[2 + i % 3]} {WORDS[5 + i % 7]}" for i in range(n)]
    return PairData(rng.standard_normal((n, 16, 2, 2)).astype(np.float32), texts, np.arange(n))


def recipe(stages, **kw):
    from tokenspace.train.recipe import Recipe

    return Recipe(name="ddp", model="tiny", stages=stages, batch_size=8, lambda_image=1e-2, lambda_text=1e-2,
                  flops_warmup=0, **kw)


def one_step_grads(family, ctx=None, sparse_loss=True):
    """Loss and gradients of one global batch (rows 0..7) through the Trainer's own step code
    (``sparse_loss``: the loss over the active columns, the default, or over all of them)."""
    from tokenspace.train import distributed
    from tokenspace.train.recipe import Stage
    from tokenspace.train.trainer import Trainer

    model = tiny_model(family)
    stage = Stage("joint", steps=1)
    trainer = Trainer(model, recipe([stage]), tiny_data(), "/nonexistent", progress=False)
    trainer.sparse_loss = sparse_loss
    trainer._trainable(stage)
    forward = distributed.wrap_ddp(trainer._embed, trainer.dist)
    trainer._forward = forward
    parts, _, _ = trainer.forward_loss(np.arange(8), stage, 0)
    parts["loss"].backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(parts["loss"]), float(parts["flops_image"]), grads


def fits(out: Path):
    """A 2-stage LAMB fit, and the same fit stopped after stage 1 then resumed."""
    from tokenspace.train.recipe import Stage
    from tokenspace.train.trainer import Trainer

    stages = [Stage("a", steps=2, lr=1e-2), Stage("b", steps=2, lr=5e-3)]
    full = tiny_model()
    Trainer(full, recipe(stages, optimizer="lamb"), tiny_data(), out / "full", progress=False).fit()
    part = tiny_model()
    Trainer(part, recipe(stages[:1], optimizer="lamb"), tiny_data(), out / "part", progress=False).fit()
    resumed = tiny_model()
    Trainer(resumed, recipe(stages, optimizer="lamb"), tiny_data(), out / "part", progress=False).fit(resume=True)
    return full.state_dict(), resumed.state_dict()


def main(out: Path):
    from tokenspace.train import distributed

    torch.set_num_threads(1)  # two ranks on two cores: more threads only contend
    ctx = distributed.init("gloo")
    assert ctx.world == 2, ctx
    results = {}
    for family in ("stair", "sparse-clip"):
        results[family] = one_step_grads(family)
    results["fit"] = fits(out)
    if ctx.is_main:
        torch.save(results, out / "ddp.pt")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
