"""Shared fixtures: tiny vocabularies, tiny models and tiny image-text data, all built in code."""
from __future__ import annotations

import gzip
import importlib
import importlib.util
import logging

import numpy as np
import pytest
from PIL import Image

from tokenspace.vocab import SPECIAL_TOKENS, Vocabulary

WORDS = ["a", "the", "red", "blue", "green", "dog", "cat", "car", "tree", "house", "sun", "moon", "star",
         "face", "smile", "heart", "fish", "bird", "ball", "hat", "big", "small", "on", "with", "and"]


@pytest.fixture
def write_idx():
    """write_idx(path, array): the array as a gzipped IDX file (the MNIST / Fashion-MNIST format), uint8."""
    def write(path, arr):
        arr = np.asarray(arr, dtype=np.uint8)
        head = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
        with gzip.open(path, "wb") as f:
            f.write(head + arr.tobytes())
    return write


@pytest.fixture
def tiny_vocab() -> Vocabulary:
    return Vocabulary(list(SPECIAL_TOKENS) + WORDS + ["##s", "##y", "do", "##g"], name="tiny")


def tiny_config(family: str = "stair", vocab_size: int = 34, **over):
    from tokenspace.models.config import ModelConfig

    base = dict(
        name=f"tiny-{family}",
        family=family,
        image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
        text_tower={"type": "bert-mlm", "config": {
            "vocab_size": vocab_size, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 32, "max_position_embeddings": 64}},
        embed_dim=8,
        max_text_len=16,
    )
    base.update(over)
    return ModelConfig(**base)


@pytest.fixture(scope="module")
def load_benchmark():
    """``load_benchmark("release_model")`` -> the module ``benchmarks.release_model``, imported as
    ``python -m benchmarks.release_model`` imports it; an ablation moved to experiments/ is found there
    (``prune_sweep`` -> ``experiments.prune_sweep``). Both folders are packages of the repository root."""
    def load(name: str):
        for package in ("benchmarks", "experiments"):
            if importlib.util.find_spec(f"{package}.{name}") is not None:
                return importlib.import_module(f"{package}.{name}")
        raise ModuleNotFoundError(f"no benchmarks.{name} or experiments.{name}")

    return load


@pytest.fixture
def make_config():
    """tiny_config for tests that write a config file (conftest is not importable as a module)."""
    return tiny_config


@pytest.fixture
def make_model(tiny_vocab):
    import torch

    from tokenspace.models.registry import build_model

    def make(family="stair", seed=0, **over):
        torch.manual_seed(seed)
        return build_model(tiny_config(family, len(tiny_vocab), **over), vocab=tiny_vocab)

    return make


COLORS = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 200, 30)}
SHAPES = ["dog", "cat", "car", "tree"]


def draw(color: str, shape: int, size: int = 32) -> Image.Image:
    """A coloured square at a shape-specific position: tiny learnable image-text pairs."""
    img = np.full((size, size, 3), 255, np.uint8)
    q = size // 2
    r, c = divmod(shape, 2)
    img[r * q : (r + 1) * q, c * q : (c + 1) * q] = COLORS[color]
    return Image.fromarray(img)


@pytest.fixture
def tiny_pairs(tmp_path):
    """(image paths, captions) for 12 colour/shape combinations, written as PNG files."""
    paths, texts = [], []
    for color in COLORS:
        for s, shape in enumerate(SHAPES):
            p = tmp_path / f"{color}-{shape}.png"
            draw(color, s).save(p)
            paths.append(p)
            texts.append(f"a {color} {shape}")
    return paths, texts


@pytest.fixture
def tiny_manifest(tiny_pairs, tmp_path):
    """tiny_pairs as a JSONL manifest of the "train" split (the path; ``--data PATH:train`` reads it)."""
    from tokenspace.data.manifest import Record, write_manifest

    paths, texts = tiny_pairs
    return write_manifest([Record(p.stem, str(p), t, "train") for p, t in zip(paths, texts)], tmp_path / "tiny.jsonl")


@pytest.fixture
def index_tiny_pairs(tiny_pairs):
    """index(model, folder) -> folder: tiny_pairs indexed by ``model`` (their "test" split), saved with the
    collection record that `tokenspace search` and `serve` read."""
    def index(model, index_dir):
        from tokenspace.data.manifest import Record
        from tokenspace.index import InvertedIndex
        from tokenspace.pipeline import write_collection_meta

        paths, texts = tiny_pairs
        records = [Record(id=p.stem, image=str(p), text=t, split="test") for p, t in zip(paths, texts)]
        InvertedIndex.build(model.encode_image(paths), [r.id for r in records]).save(index_dir)
        write_collection_meta(index_dir, records)
        return index_dir

    return index


@pytest.fixture
def tiny_fused_index(tiny_vocab, make_model, tiny_pairs, index_tiny_pairs, tmp_path):
    """(a tiny fused model as the release model is made: a STAIR part with strong expansion tokens, the
    lexical anchor and a fitted query filter; its saved folder; an index of tiny_pairs by it, with its
    collection record; the image paths)."""
    import torch

    from tokenspace.models.config import ModelConfig
    from tokenspace.models.query_filter import fit_query_filter
    from tokenspace.models.registry import build_model

    part = make_model("stair", seed=0).save_pretrained(tmp_path / "part")
    cfg = ModelConfig(name="tiny-fused", family="fused", image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
                      text_tower={"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)}, max_text_len=16,
                      extra={"parts": [{"model": str(part), "image": 1.0, "text": 1.0}], "anchor": 1.0,
                             "text_top_n": 8, "related_min": 0.3, "related_dim": 4})
    model = build_model(cfg, vocab=tiny_vocab).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        model.parts[0].text_tower.mlm_bias.normal_(0, 2.0)  # an expansion with strong tokens
    vec = np.random.default_rng(0).normal(size=(len(tiny_vocab), 4)).astype(np.float32)
    fit_query_filter(model, ["a red dog", "a blue cat"], vec / np.linalg.norm(vec, axis=1, keepdims=True), 0.3,
                     top=3, min_share=0.6)
    folder = model.save_pretrained(tmp_path / "fused")
    return model, folder, index_tiny_pairs(model, tmp_path / "index"), tiny_pairs[0]


@pytest.fixture
def restore_cli_logging():
    """cli.main installs its stderr handler on "tokenspace" for the whole process: put it back after."""
    logger = logging.getLogger("tokenspace")
    saved = logger.handlers[:], logger.level, logger.propagate
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


@pytest.fixture
def ctrl_c(monkeypatch):
    """A Ctrl-C while encode.py encodes its ``ctrl_c.at``-th batch (0: never, the start); ``ctrl_c.calls``
    counts the batches encoded (set it to 0 between runs). For the kill-and-resume tests of ingestion."""
    from types import SimpleNamespace

    from tokenspace import encode  # here, not at the top: torch loads with it

    state = SimpleNamespace(at=0, calls=0)
    real = encode.encode_pixels

    def encode_pixels(*args, **kwargs):
        state.calls += 1
        if state.calls == state.at:
            raise KeyboardInterrupt  # Ctrl-C while this batch encodes
        return real(*args, **kwargs)

    monkeypatch.setattr(encode, "encode_pixels", encode_pixels)
    return state
