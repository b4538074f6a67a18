"""Tagger: class -> token table from a tiny WordNet written in code, image vectors against a slow
reference, both text sides, save/load without the assets, and encode -> index -> search."""
import math

import numpy as np
import pytest
import torch

from tokenspace.models.classwords import NounGraph, class_words, read_lemma_file, read_wnids
from tokenspace.models.config import ModelConfig
from tokenspace.vocab import SPECIAL_TOKENS, Vocabulary

TOKENS = ["tab", "##by", "cat", "true", "domestic", "house", "animal", "beast", "entity", "dog", "a", "of",
          "photo", "-", ".", "red"]
# (offset, lemmas, pointers): a tiny noun graph in WordNet's data.noun format (wndb(5))
SYNSETS = [
    ("00000001", ["entity"], []),
    ("00000002", ["animal", "beast"], [("@", "00000001")]),
    ("00000003", ["cat", "true_cat"], [("@", "00000002"), ("~", "00000006")]),  # ~ = hyponym: ignored
    ("00000004", ["domestic_cat", "house_cat"], [("@", "00000003"), ("@", "00000005")]),
    ("00000005", ["domestic_animal"], [("@", "00000002")]),
    ("00000006", ["tabby", "tabby_cat"], [("@", "00000004")]),
    ("00000007", ["dog"], [("@", "00000005"), ("@", "00000002")]),
    ("00000008", ["Rex"], [("@i", "00000007")]),  # an instance hypernym is followed too
]
CLASSES = ["n00000006", "n00000007", "n00000003"]  # tabby, dog, cat: the "classifier order"


def data_noun_line(offset, lemmas, ptrs):
    words = " ".join(f"{w} 0" for w in lemmas)
    p = " ".join(f"{sym} {off} n 0000" for sym, off in ptrs)
    return f"{offset} 05 n {len(lemmas):02x} {words} {len(ptrs):03d} {p} | a gloss; with | bars\n"


@pytest.fixture
def assets_dir(tmp_path):
    wn = tmp_path / "wordnet"
    wn.mkdir()
    (wn / "data.noun").write_text("  1 This software and database is being provided\n"
                                  + "".join(data_noun_line(*s) for s in SYNSETS))
    cls = tmp_path / "classes"
    cls.mkdir()
    (cls / "imagenet_synsets.txt").write_text("\n".join(CLASSES) + "\n")
    (cls / "imagenet_synset_to_lemma.txt").write_text(
        "n00000006\ttabby, tabby cat\nn00000007\tdog\nn00000003\tcat, true cat\n")
    return tmp_path


@pytest.fixture
def vocab():
    return Vocabulary(list(SPECIAL_TOKENS) + TOKENS, name="tagger-tiny")


def config(assets_dir, text="bag", **extra):
    tower = ({"type": "bag-of-tokens", "vocab_size": len(SPECIAL_TOKENS) + len(TOKENS)} if text == "bag" else
             {"type": "bert-mlm", "config": {"vocab_size": len(SPECIAL_TOKENS) + len(TOKENS), "hidden_size": 16,
                                             "num_hidden_layers": 1, "num_attention_heads": 2,
                                             "intermediate_size": 32, "max_position_embeddings": 64}})
    ex = {"classes": str(assets_dir / "classes"), "wordnet": str(assets_dir / "wordnet"), "text": text,
          "hypernym_levels": 0, **extra}
    return ModelConfig(name="tagger-tiny", family="tagger",
                       image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
                       text_tower=tower, max_text_len=16, extra=ex)


def build(assets_dir, vocab, **kw):
    from tokenspace.models.registry import build_model

    torch.manual_seed(0)
    return build_model(config(assets_dir, **kw), vocab=vocab).eval()


def one_hot_classifier(m, strength=10.0):
    """Channel k of a cell votes for class k: grids below choose each cell's class exactly."""
    with torch.no_grad():
        m.classifier.weight.zero_()
        m.classifier.bias.zero_()
        for k in range(m.classifier.out_features):
            m.classifier.weight[k, k] = strength


# ------------------------------------------------------------------------------------- WordNet
def test_hypernym_expansion_by_level(assets_dir):
    g = NounGraph.from_dict_dir(assets_dir / "wordnet")
    assert g.words("n00000006", 0) == {"tabby": 0, "tabby cat": 0}
    assert g.words("n00000006", 2) == {"tabby": 0, "tabby cat": 0, "domestic cat": 1, "house cat": 1,
                                       "cat": 2, "true cat": 2, "domestic animal": 2}
    # two paths reach "animal"; it is kept at its nearest level, once
    four = g.words("n00000006", 4)
    assert four["animal"] == 3 and four["beast"] == 3 and four["entity"] == 4
    assert g.words("n00000003", 5) == {"cat": 0, "true cat": 0, "animal": 1, "beast": 1, "entity": 2}  # not tabby
    assert g.words("n00000008", 1) == {"Rex": 0, "dog": 1}
    with pytest.raises(KeyError, match="n99999999"):
        g.words("n99999999", 1)


def test_level_zero_needs_no_wordnet_but_hypernyms_do(assets_dir):
    wnids = read_wnids(assets_dir / "classes")
    lemmas = read_lemma_file(assets_dir / "classes")
    graph = NounGraph.from_dict_dir(assets_dir / "wordnet")
    assert class_words(wnids, 0, lemma_file=lemmas) == class_words(wnids, 0, graph)
    with pytest.raises(ValueError, match="install wordnet"):
        class_words(wnids, 1, lemma_file=lemmas)


# ------------------------------------------------------------------------------------- class table
def test_class_tokens_are_the_lemmas_wordpieces(assets_dir, vocab):
    m = build(assets_dir, vocab)
    # "tabby" is not in the vocabulary: its WordPieces tab + ##by are; "tabby cat" adds cat
    assert set(m.class_tokens_of(0)) == {"tab", "##by", "cat"}
    assert set(m.class_tokens_of(1)) == {"dog"}
    assert set(m.class_tokens_of(2)) == {"cat", "true"}
    assert m.class_tokens.max() == 1.0 and set(m.class_tokens.unique().tolist()) == {0.0, 1.0}


def test_hypernym_tokens_weighted_by_decay(assets_dir, vocab):
    m = build(assets_dir, vocab, hypernym_levels=2, hypernym_decay=0.5)
    row = {m.vocab.tokens[int(t)]: float(w) for t, w in zip(m.token_ids, m.class_tokens[0]) if w > 0}
    # "cat" is a level-0 word of tabby ("tabby cat") as well as a level-2 hypernym: the nearest wins
    assert row == {"tab": 1.0, "##by": 1.0, "cat": 1.0, "domestic": 0.5, "house": 0.5, "true": 0.25,
                   "animal": 0.25}
    dog = {m.vocab.tokens[int(t)] for t, w in zip(m.token_ids, m.class_tokens[1]) if w > 0}
    assert dog == {"dog", "domestic", "animal", "beast", "entity"}  # two direct hypernyms; animal's parent


def test_bad_options_are_rejected(assets_dir, vocab):
    with pytest.raises(ValueError, match="pool"):
        build(assets_dir, vocab, pool="mean")
    with pytest.raises(ValueError, match="text"):
        build(assets_dir, vocab, text="clip")
    with pytest.raises(ValueError, match="decay"):
        build(assets_dir, vocab, hypernym_levels=1, hypernym_decay=0.0)
    with pytest.raises(ValueError, match="hypernym_levels"):
        build(assets_dir, vocab, hypernym_levels=-1)
    with pytest.raises(ValueError, match="top_classes"):
        build(assets_dir, vocab, top_classes=0)
    with pytest.raises(ValueError, match="unknown option .hypernym_level. for family tagger .known: classes, wordnet, .*did you mean .hypernym_levels."):
        build(assets_dir, vocab, hypernym_level=3)


def test_classifier_head_read_from_a_checkpoint(assets_dir, vocab, tmp_path):
    w, b = torch.randn(3, 16), torch.randn(3)
    torch.save({"_fc.weight": w, "_fc.bias": b, "_conv_stem.weight": torch.zeros(1)}, tmp_path / "net.pth")
    m = build(assets_dir, vocab, classifier=str(tmp_path / "net.pth"))
    assert torch.equal(m.classifier.weight, w) and torch.equal(m.classifier.bias, b)
    torch.save({"_fc.weight": torch.randn(5, 16), "_fc.bias": torch.randn(5)}, tmp_path / "other.pth")
    with pytest.raises(ValueError, match="must match"):
        build(assets_dir, vocab, classifier=str(tmp_path / "other.pth"))


# ------------------------------------------------------------------------------------- image side
@torch.no_grad()
def reference_image_vector(m, grid):
    """The tagger's image vector computed cell by cell and class by class, in float64."""
    g = grid.double()
    B, C, h, w = g.shape
    W, b = m.classifier.weight.double(), m.classifier.bias.double()
    table, ids, k = m.class_tokens.double(), m.token_ids, m.top_classes

    def evidence(feat):  # [C] -> [U]
        p = torch.softmax(W @ feat + b, 0)
        keep = sorted(range(len(p)), key=lambda c: -float(p[c]))[:k]
        return sum(p[c] * table[c] for c in keep)

    out = torch.zeros(B, len(m.vocab), dtype=torch.float64)
    for i in range(B):
        cells = [evidence(g[i, :, y, x]) for y in range(h) for x in range(w)]
        per_cell = torch.stack(cells).amax(0)
        whole = evidence(g[i].mean(dim=(1, 2)))
        ev = {"cells": per_cell, "image": whole, "both": torch.maximum(per_cell, whole)}[m.pool]
        out[i, ids] = torch.log1p(m.scale * ev)
    return out


@pytest.mark.parametrize("pool", ["cells", "image", "both"])
@pytest.mark.parametrize("top", [1, 2, 3])
def test_image_vector_matches_the_reference(assets_dir, vocab, pool, top):
    m = build(assets_dir, vocab, hypernym_levels=3, hypernym_decay=0.7, pool=pool, top_classes=top, scale=3.0)
    torch.manual_seed(1)
    grid = torch.randn(4, 16, 2, 3)
    with torch.no_grad():
        fast = m.image_embed(grid)
    np.testing.assert_allclose(fast.numpy(), reference_image_vector(m, grid).numpy(), rtol=1e-5, atol=1e-6)
    # the heatmap scores give each cell's weight through log(1 + relu(.)), and their max is the vector
    if pool == "cells":
        cells = torch.log1p(torch.relu(m.image_scores(grid))).amax(1)
        np.testing.assert_allclose(cells.detach().numpy(), fast.numpy(), rtol=1e-5, atol=1e-6)


def test_one_class_per_cell_gives_its_tokens(assets_dir, vocab):
    m = build(assets_dir, vocab, top_classes=1)
    one_hot_classifier(m, strength=50.0)  # softmax ~ one-hot
    grid = torch.zeros(1, 16, 1, 2)
    grid[0, 1, 0, 0] = 1.0  # left cell: dog; right cell: cat
    grid[0, 2, 0, 1] = 1.0
    vec = m.encode_image_grids(grid)
    toks = {t for t, _ in m.decode(vec, top_k=None)[0]}
    assert toks == {"dog", "cat", "true"}
    weights = dict(m.decode(vec, top_k=None)[0])
    assert weights["dog"] == pytest.approx(weights["cat"]) and weights["dog"] == pytest.approx(1 / math.sqrt(3))


# ------------------------------------------------------------------------------------- text side
def test_bag_text_side_is_the_content_tokens_of_the_query(assets_dir, vocab):
    m = build(assets_dir, vocab)
    vec = m.encode_text(["a photo of a tabby.", "dog dog"])
    assert {t for t, _ in m.decode(vec, top_k=None)[0]} == {"photo", "tab", "##by"}  # no a/of/./specials
    assert m.decode(vec, top_k=None)[1] == [("dog", pytest.approx(1.0))]


def test_splade_text_side_is_a_sparse_mlm_expansion(assets_dir, vocab):
    m = build(assets_dir, vocab, text="splade")
    ids, mask = m.tokenize(["a red dog"])
    with torch.no_grad():
        t = m.text_tower
        logits = t.mlm_transform(t(ids, mask)) @ t.word_embeddings.T + t.mlm_bias  # [1, L, V]
        expected = torch.log1p(torch.relu(logits.amax(1))) * m.output_mask
        got = m.text_embed(ids, mask)
    torch.testing.assert_close(got, expected)
    specials = [vocab.id(s) for s in ("[CLS]", "[SEP]", "[PAD]")] + [vocab.id("a"), vocab.id(".")]
    assert (got[0, specials] == 0).all()


# ------------------------------------------------------------------------------------- persistence
@pytest.mark.parametrize("text", ["bag", "splade"])
def test_save_and_load_round_trip_without_the_assets(assets_dir, vocab, tmp_path, text):
    import shutil

    from tokenspace.models.dual import DualEncoder
    from tokenspace.models.registry import load

    m = build(assets_dir, vocab, text=text, hypernym_levels=2, top_classes=2)
    folder = m.save_pretrained(tmp_path / "model")
    shutil.rmtree(assets_dir / "classes")  # the folder must rebuild from its own files
    shutil.rmtree(assets_dir / "wordnet")
    back = load(folder)
    assert isinstance(back, DualEncoder) and back.family == "tagger"
    assert back.config.extra["classes"] is None and back.config.extra["table_tokens"] == m.token_ids.numel()
    torch.manual_seed(2)
    grid = torch.randn(3, 16, 2, 2)
    texts = ["a photo of a tabby.", "red dog", "cat"]
    a, b = m.encode_image_grids(grid), back.encode_image_grids(grid)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.values, b.values, rtol=1e-6)
    np.testing.assert_allclose(m.encode_text(texts).values, back.encode_text(texts).values, rtol=1e-6)
    assert back.class_tokens_of(0) == m.class_tokens_of(0)


def test_encode_index_search_finds_the_class(assets_dir, vocab):
    from tokenspace.index.inverted import InvertedIndex

    m = build(assets_dir, vocab, top_classes=1)
    one_hot_classifier(m)
    grids = torch.zeros(3, 16, 2, 2)
    for k in range(3):
        grids[k, k] = 1.0  # image k shows class k (tabby, dog, cat) in every cell
    index = InvertedIndex.build(m.encode_image_grids(grids), ["tabby.png", "dog.png", "cat.png"])
    hits = index.search(m.encode_text(["a photo of a tabby", "dog", "true cat"]), k=3)
    assert [h[0].id for h in hits] == ["tabby.png", "dog.png", "cat.png"]
    assert [h.id for h in hits[1]] == ["dog.png"]  # no other image carries "dog"


def test_shipped_config_on_the_real_assets():
    """The shipped config builds from the installed assets; a tabby's tokens include tab ##by and cat."""
    from tokenspace import assets

    for name in ("efficientnet-lite0", "imagenet-classes", "bert-base-uncased-vocab", "wordnet"):
        try:
            assets.path(name)
        except assets.AssetMissingError:
            pytest.skip(f"asset {name} not installed")
    from tokenspace.models.registry import build_model

    m = build_model("tagger-bag")
    tabby = read_wnids(assets.path("imagenet-classes")).index("n02123045")
    assert {"tab", "##by", "cat", "domestic", "house"} <= set(m.class_tokens_of(tabby))
    assert m.classifier.weight.shape == (1000, 1280)
