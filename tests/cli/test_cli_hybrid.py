"""Hybrid search from the command line: `index build` with a dense model writes a DenseIndex,
`search --dense-index DIR --fusion rrf|weighted` fuses it with the sparse index, checked against
index.hybrid.hybrid_search run in-process on the same indexes; misuse is one error line."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("faiss", reason="faiss-cpu is not installed (the 'dense' extra)")


@pytest.fixture(scope="module")
def dense(world):
    """A tiny dense model (the sparse model's towers) saved beside the world, and its index built by the
    real `tokenspace index build` command."""
    import torch

    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model
    from tokenspace.vocab import Vocabulary

    config = ModelConfig.load(world.model_config)
    config = ModelConfig(**{**config.to_dict(), "name": "tiny-dense", "family": "dense"})
    torch.manual_seed(1)
    model = build_model(config, vocab=Vocabulary.from_file(world.root / "vocab.txt", name="tiny"))
    model.save_pretrained(world.root / "dense-model")
    out = world.root / "dense-index"
    r = world.run("index", "build", "--model", world.root / "dense-model", "--data", f"{world.manifest}:train",
                  f"{world.manifest}:test", "--out", out)
    assert r.code == 0, r.err
    assert "indexed 12 images" in r.out and "dense" in r.out
    return out


def printed_hits(out: str) -> list[str]:
    """The hit ids a `search` printed, in order (lines '  1. SCORE  ID  (caption)')."""
    return re.findall(r"^\s+\d+\.\s+\S+\s+(\S+)", out, flags=re.M)


@pytest.mark.parametrize("fusion", ["rrf", "weighted"])
def test_search_fuses_as_the_library_does(world, dense, fusion):
    from tokenspace.index import InvertedIndex
    from tokenspace.index.dense import DenseIndex
    from tokenspace.index.hybrid import hybrid_search
    from tokenspace.models.registry import load

    r = world.run("search", "--index", world.index, "--dense-index", dense, "--fusion", fusion, "--weight", "0.3",
                  "-k", "4", "a red dog")
    assert r.code == 0, r.err
    assert f"hybrid, {fusion} fusion" in r.out
    sparse_model, dense_model = load(world.model), load(world.root / "dense-model")
    expect = hybrid_search(InvertedIndex.load(world.index), sparse_model.encode_text(["a red dog"]),
                           DenseIndex.load(dense), dense_model.encode_text(["a red dog"]), k=4, fusion=fusion,
                           weight=0.3)[0]
    assert printed_hits(r.out) == [h.id for h in expect]


@pytest.mark.parametrize("args,message", [
    (["--fusion", "rrf"], "--fusion: only with --dense-index"),
    (["--weight", "0.5"], "--weight: only with --dense-index"),
    (["--dense-index", "DENSE", "--where", "red"], "--where filters on the sparse index's tokens"),
    (["--dense-index", "INDEX"], "no dense index at"),
])
def test_misuse_is_one_line(world, dense, args, message):
    args = [{"DENSE": str(dense), "INDEX": str(world.index)}.get(a, a) for a in args]
    r = world.run("search", "--index", world.index, *args, "a red dog")
    assert r.code in (1, 2) and message in r.error_line(), r.err


@pytest.mark.parametrize("flag", [["--top-n", "3"], ["--reorder"], ["--no-impact-heads"]])
def test_dense_model_refuses_options_for_tokens(world, dense, tmp_path, flag):
    r = world.run("index", "build", "--model", world.root / "dense-model", "--data", f"{world.manifest}:test",
                  "--out", tmp_path / "d", *flag)
    assert r.code == 2 and f"{flag[0]}: a dense model's rows have no tokens" in r.error_line(), r.err
    assert not (tmp_path / "d").exists()


def test_weight_out_of_range_is_refused_by_the_parser(world, dense):
    r = world.run("search", "--index", world.index, "--dense-index", dense, "--weight", "1.5", "a red dog")
    assert r.code == 2 and "between 0 and 1" in r.err


@pytest.mark.parametrize("args,message", [
    (["--dense-model", "MODEL"], "--dense-model: only with --dense-index"),
    (["--dense-index", "INDEX"], "no dense index at"),
])
def test_serve_refuses_a_bad_dense_half_before_serving(world, args, message):
    args = [{"MODEL": str(world.model), "INDEX": str(world.index)}.get(a, a) for a in args]
    r = world.run("serve", "--index", world.index, "--port", "1", *args, timeout=120)
    assert r.code in (1, 2) and message in r.error_line(), r.err
