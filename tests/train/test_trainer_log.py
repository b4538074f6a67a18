"""log.jsonl stays true across kills: each step logged exactly once after any number of SIGKILLs and
--resume (rows are synced with every checkpoint; a resume truncates the log to its checkpoint's step).

The run is a real process killed with SIGKILL inside a training step (no buffered row is flushed, no
finally runs), as a crash or an OOM kill would; the tiny model is built in the child.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = r"""
import os, signal, sys
import numpy as np
import torch
from tokenspace.models.config import ModelConfig
from tokenspace.models.registry import build_model
from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.trainer import PairData, Trainer
from tokenspace.vocab import SPECIAL_TOKENS, Vocabulary

out, kill_at, resume = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
vocab = Vocabulary(list(SPECIAL_TOKENS) + ["a", "red", "blue", "green", "dog", "cat", "car"], name="tiny")
config = ModelConfig(name="tiny-stair", family="stair",
                     image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
                     text_tower={"type": "bert-mlm", "config": {
                         "vocab_size": len(vocab), "hidden_size": 16, "num_hidden_layers": 1,
                         "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 64}},
                     embed_dim=8, max_text_len=16)
torch.manual_seed(0)
model = build_model(config, vocab=vocab)
rng = np.random.default_rng(0)
texts = [f"a {c} {s}" for c in ("red", "blue", "green") for s in ("dog", "cat", "car")]
data = PairData.from_texts(rng.standard_normal((len(texts), 16, 2, 2)).astype(np.float16), texts)
recipe = Recipe(name="t", model="tiny", batch_size=4, checkpoint_every=3,
                stages=[Stage("a", steps=7), Stage("b", steps=6, lr=5e-4)])
step, calls = Trainer.step, [0]

def killing_step(self, *args, **kwargs):
    calls[0] += 1
    if calls[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return step(self, *args, **kwargs)

Trainer.step = killing_step
Trainer(model, recipe, data, out, progress=False).fit(resume=resume)
"""


def _run(out, kill_at: int, resume: bool) -> int:
    p = subprocess.run([sys.executable, "-c", CHILD, str(out), str(kill_at), "1" if resume else "0"],
                       capture_output=True, text=True, timeout=600)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode


@pytest.mark.parametrize("kills", [[5, 2], [8, 1, 5]])
def test_log_has_every_step_once_after_kills_and_resumes(tmp_path, kills):
    out = tmp_path / "run"
    for i, kill_at in enumerate(kills):  # kill_at counts the steps of that process
        assert _run(out, kill_at, resume=i > 0) == -9
    assert _run(out, 0, resume=True) == 0  # finishes
    steps = [json.loads(x)["step"] for x in (out / "log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 14))
