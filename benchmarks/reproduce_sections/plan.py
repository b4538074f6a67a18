"""Which data spec each section evaluates on: the full run, --quick, or a test's tiny manifest."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EMOJI_TEMPLATES = ("an emoji of {c}", "a drawing of {c}", "{c}")
CLIPART_TEMPLATES = ("a clipart of {c}", "a drawing of {c}", "{c}")
# concepts shown in the decode table / heatmaps when present (held-out emoji:test concepts)
SHOWCASE = ("dog", "octopus", "kiwi fruit", "rocket", "baseball", "stop sign", "open book", "church")


@dataclass
class Plan:
    """Which data spec each section evaluates on (full run vs --quick, or a test's tiny manifest)."""

    retrieval: list[str]  # R@K + nnz, every main model
    flops: list[str]  # FLOPs ablation; the plot uses the first
    concept: list[str]  # specs whose text starts with "CONCEPT — ": token top-K accuracy of the concept
    zeroshot: dict[str, Sequence[str]]  # spec -> prompt templates; classes are Record.label
    probe: dict[str, str]  # test spec -> train spec for the linear probe
    textfree: list[str]
    localize: str  # spec of the heatmap images
    n_decode: int = 8
    n_heatmaps: int = 3
    probe_cs: Sequence[float] = (0.01, 0.1, 1.0, 10.0)  # the probe's C grid (LinearProbeEvaluator default)


FULL = Plan(
    retrieval=["emoji:test", "emoji:val", "openclipart:test:300"],
    flops=["emoji:test", "openclipart:test:300"],
    concept=["emoji:test", "emoji:val"],
    zeroshot={"emoji:test": EMOJI_TEMPLATES, "emoji:val": EMOJI_TEMPLATES, "openclipart:test:300": CLIPART_TEMPLATES},
    probe={"emoji:test": "emoji:train", "openclipart:test:300": "openclipart:train:2000"},
    textfree=["emoji:test", "emoji:val"],
    localize="emoji:test",
)
QUICK = Plan(
    retrieval=["emoji:test:64", "emoji:val:64", "openclipart:test:64"],
    flops=["emoji:test:64"],
    concept=["emoji:test:64"],
    zeroshot={"emoji:test:64": EMOJI_TEMPLATES, "openclipart:test:64": CLIPART_TEMPLATES},
    probe={"emoji:test:64": "emoji:train:128", "openclipart:test:64": "openclipart:train:128"},
    textfree=["emoji:test:64", "emoji:val:64"],
    localize="emoji:test:64",
    n_decode=4,
    n_heatmaps=1,
    probe_cs=(1.0,),  # one fit instead of five: --quick checks the plumbing, not the best C
)

