"""Image vectors in words and expansion on topic: the tagger's class table rules (word pieces, words
many classes share) on a tiny WordNet written here, and the fused model's query filter (hubs dropped,
expansion related to the query's words, the query's own words kept) on a tiny model built here."""
import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from tokenspace.index.query_hubs import query_hubs
from tokenspace.models.classwords import NounGraph, class_words, token_table, word_groups
from tokenspace.models.query_filter import fit_query_filter
from tokenspace.vocab import SPECIAL_TOKENS, Vocabulary, WordPieceTokenizer

TOKENS = ["cy", "##pr", "##ini", "fish", "ten", "##ch", "carp", "animal", "dog", "bird", "a", "of", "photo"]
# offset, lemmas, hypernym offsets: tench -> cyprini (a rare order, only in pieces) -> fish
SYNSETS = [("00000001", ["animal"], []), ("00000002", ["fish"], ["00000001"]),
           ("00000003", ["cyprini"], ["00000002"]), ("00000004", ["tench"], ["00000003"]),
           ("00000005", ["carp"], ["00000003"]), ("00000006", ["dog"], ["00000001"]),
           ("00000007", ["bird"], ["00000001"])]
CLASSES = ["n00000004", "n00000005", "n00000006", "n00000007"]  # tench, carp, dog, bird


@pytest.fixture
def graph(tmp_path):
    lines = []
    for off, lemmas, hyper in SYNSETS:
        words = " ".join(f"{w} 0" for w in lemmas)
        ptrs = " ".join(f"@ {h} n 0000" for h in hyper)
        lines.append(f"{off} 05 n {len(lemmas):02x} {words} {len(hyper):03d} {ptrs} | gloss\n")
    (tmp_path / "data.noun").write_text("".join(lines))
    return NounGraph.from_dict_dir(tmp_path)


@pytest.fixture
def tok():
    return WordPieceTokenizer(Vocabulary(list(SPECIAL_TOKENS) + TOKENS, name="words-tiny"))


def unit(x):
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def row(tok, ids, table, c):
    names = {tid: tok.vocab.tokens[tid] for tid in ids}
    return {names[t]: round(float(w), 3) for t, w in zip(ids, table[c]) if w > 0}


def test_word_groups_split_words_from_pieces():
    groups = word_groups(["great", "cy", "##pr", "##ini", "-", "fish"], [1, 2, 3, 4, 5, 6])
    assert [[t for t, _ in g] for g in groups] == [["great"], ["cy", "##pr", "##ini"], ["-"], ["fish"]]


def test_keep_rule_is_the_first_taggers(graph, tok):
    ids, table = token_table(class_words(CLASSES, 2, graph), tok)
    # tench carries the rare order's pieces, and so does carp: they match each other through them
    assert row(tok, ids, table, 0) == {"cy": 1, "##pr": 1, "##ini": 1, "fish": 1, "ten": 1, "##ch": 1}
    assert {"cy", "##pr", "##ini"} <= set(row(tok, ids, table, 1))


def test_a_class_name_in_pieces_stays_and_a_hypernyms_pieces_are_weighed_apart(graph, tok):
    ids, table = token_table(class_words(CLASSES, 2, graph), tok, name_pieces=0.5, hypernym_pieces=0.0)
    assert row(tok, ids, table, 0) == {"ten": 0.5, "##ch": 0.5, "fish": 1}  # tench's own name stays, halved
    assert row(tok, ids, table, 1) == {"carp": 1, "fish": 1}
    assert "cy" not in {tok.vocab.tokens[i] for i in ids}  # no class uses the order's pieces any more
    ids, table = token_table(class_words(CLASSES, 2, graph), tok, name_pieces=0.0, hypernym_pieces=0.0)
    assert row(tok, ids, table, 0) == {"fish": 1}
    ids, table = token_table(class_words(CLASSES, 2, graph), tok, hypernym_pieces=0.25)  # kept, down-weighted
    assert row(tok, ids, table, 0) == {"cy": 0.25, "##pr": 0.25, "##ini": 0.25, "fish": 1, "ten": 1, "##ch": 1}


def test_specificity_weighs_a_shared_word_by_how_few_classes_hold_it(graph, tok):
    ids, table = token_table(class_words(CLASSES, 2, graph), tok, hypernym_pieces=0.0, specificity=1.0)
    n = len(CLASSES)
    shared = math.log(n / 2) / math.log(n)  # fish (tench, carp) and animal (dog, bird): 2 of 4 classes
    assert row(tok, ids, table, 0) == pytest.approx({"ten": 1, "##ch": 1, "fish": shared}, abs=1e-3)
    assert row(tok, ids, table, 2) == pytest.approx({"dog": 1, "animal": shared}, abs=1e-3)
    squared = token_table(class_words(CLASSES, 2, graph), tok, hypernym_pieces=0.0, specificity=2.0)[1]
    assert squared[2].max() == 1 and sorted(squared[2][squared[2] > 0])[0] == pytest.approx(shared ** 2, abs=1e-3)


def test_a_word_every_class_holds_is_no_column(graph, tok):
    words = [dict(w, animal=3) for w in class_words(CLASSES, 0, graph)]  # every class: "animal"
    ids, table = token_table(words, tok, specificity=1.0)
    assert "animal" not in {tok.vocab.tokens[i] for i in ids} and (table.sum(0) > 0).all()


def test_bad_rules_are_refused(graph, tok):
    words = class_words(CLASSES, 0, graph)
    for kw in ({"name_pieces": -0.1}, {"hypernym_pieces": 2.0}, {"specificity": -1.0}):
        with pytest.raises(ValueError):
            token_table(words, tok, **kw)


# ------------------------------------------------------------------------------------- query hubs
def test_query_hubs_against_a_count_by_hand():
    # 5 queries over 6 tokens; token 5 is in the top 2 of three of them (rows 1 and 2 put token 4 first)
    dense = np.array([[3, 0, 0, 0, 0, 1], [0, 3, 0, 0, 2, 1], [0, 0, 3, 0, 2, 1],
                      [0, 0, 0, 3, 0, 1], [3, 0, 0, 0, 0, 1]], dtype=np.float32)
    rep = query_hubs(sp.csr_matrix(dense), top=2, min_share=0.5)
    assert rep.hubs == {5: 0.6}
    assert rep.weight_share == pytest.approx(3 / 22)  # 3 x weight 1 of the top-2 weight 4 + 5 + 5 + 4 + 4
    rep = query_hubs(sp.csr_matrix(dense), top=3, min_share=0.4)
    assert set(rep.hubs) == {0, 4, 5}
    with pytest.raises(ValueError):
        query_hubs(sp.csr_matrix(dense), min_share=0)


# ------------------------------------------------------------------------------------- fused query filter
@pytest.fixture
def filtered(tiny_vocab, make_model, tmp_path):
    """A tiny fused model (one STAIR part, the anchor) with the query filter, and token vectors where
    dog ~ cat ~ ball and sun ~ moon ~ star, every other token unrelated to all."""
    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model

    part = make_model("stair", seed=0).save_pretrained(tmp_path / "part")
    cfg = ModelConfig(name="tiny-filtered", family="fused",
                      image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
                      text_tower={"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)}, max_text_len=16,
                      extra={"parts": [{"model": str(part), "image": 1.0, "text": 1.0}], "anchor": 1.0,
                             "related_min": 0.5, "related_dim": 4})
    m = build_model(cfg, vocab=tiny_vocab).eval()
    vec = np.zeros((len(tiny_vocab), 4), np.float32)
    for group, axis in ((("dog", "cat", "ball"), 0), (("sun", "moon", "star"), 1)):
        for w in group:
            vec[tiny_vocab.id(w), axis] = 1.0
    for i in range(len(tiny_vocab)):
        if not vec[i].any():
            vec[i, 2 + i % 2] = 1.0 if i % 4 < 2 else -1.0  # related to nothing above 0.5 but itself
    return m, vec


def test_expansion_keeps_the_querys_words_and_related_tokens_only(filtered, tiny_vocab):
    m, vec = filtered
    bank = ["a red dog", "a blue cat", "the sun and a star", "a big tree", "green house"]
    fitted = fit_query_filter(m, bank, vec, related_min=0.5, top=3, min_share=0.6)
    texts = ["a dog", "the moon", "red hat with a ball"]
    with torch.no_grad():
        ids, mask = m.tokenize(texts)
        raw = sum(w * unit(p.text_embed(ids, mask)) for w, p in zip(m.text_weights, m.parts))
        got = m.text_embed(ids, mask)
    hubs = {tiny_vocab.id(t) for t in fitted["hubs"]} | {i for i, t in enumerate(tiny_vocab.tokens) if t.startswith("##")}
    groups = {w: g for g in (("dog", "cat", "ball"), ("sun", "moon", "star")) for w in g}
    for row, text in enumerate(texts):
        own = {tiny_vocab.id(w) for w in text.split() if w not in ("a", "the", "with")}
        # the slow reference: every token the parts add, kept iff own, or no hub and related to an own word
        related = {tiny_vocab.id(x) for w in own for x in groups.get(tiny_vocab.tokens[w], ())}
        for t in range(len(tiny_vocab)):
            keep = t in own or (t not in hubs and (t in related or any(vec[t] @ vec[w] >= 0.5 for w in own)))
            want = (1.0 if t in own else 0.0) / math.sqrt(len(own)) + (raw[row, t] if keep else 0.0)
            assert float(got[row, t]) == pytest.approx(float(want), abs=1e-5), (text, tiny_vocab.tokens[t])
    assert fitted["bank"] == len(bank) and fitted["related_dim"] == 4


def test_topic_mask_is_what_the_filter_keeps(filtered, tiny_vocab):
    """The mask a part is fine-tuned under is the one its queries are filtered with: 1 exactly where
    text_embed keeps a part's expansion (own words, related non-hubs), and None without a filter."""
    m, vec = filtered
    fit_query_filter(m, ["a red dog", "a blue cat", "the sun and a star"], vec, related_min=0.5, top=3, min_share=0.6)
    with torch.no_grad():
        ids, mask = m.tokenize(["a dog", "red hat with a ball"])
        keep = m.topic_mask(ids, mask)
        raw = sum(w * unit(p.text_embed(ids, mask)) for w, p in zip(m.text_weights, m.parts))
        got = m.text_embed(ids, mask) - m.anchor * unit(m.bag(ids, mask))
    assert set(keep.unique().tolist()) <= {0.0, 1.0} and 0 < keep.sum() < keep.numel()
    torch.testing.assert_close(got, raw * keep, atol=1e-6, rtol=0)
    assert keep[0, tiny_vocab.id("dog")] == 1 and keep[0, tiny_vocab.id("cat")] == 1 and keep[0, tiny_vocab.id("moon")] == 0
    m.related_min = None
    assert m.topic_mask(ids, mask) is None


def test_the_filter_is_stored_with_the_weights(filtered, tmp_path):
    from tokenspace.models.registry import from_pretrained

    m, vec = filtered
    fit_query_filter(m, ["a red dog", "a blue cat", "the sun"], vec, related_min=0.5, top=3, min_share=0.5)
    back = from_pretrained(m.save_pretrained(tmp_path / "saved"))
    assert back.related_min == 0.5
    texts = ["a dog and a moon", "red star"]
    np.testing.assert_allclose(back.encode_text(texts).to_dense(), m.encode_text(texts).to_dense(), atol=2e-3)
    torch.testing.assert_close(back.expansion_drop, m.expansion_drop)


def test_a_model_without_the_filter_refuses_to_fit(tiny_vocab, make_model, tmp_path):
    from tokenspace.models.fused import fused_config
    from tokenspace.models.registry import build_model

    part = make_model("stair", seed=0).save_pretrained(tmp_path / "p")
    cfg = fused_config([(part, 1.0, 1.0)], image_size=32, image_tower="tiny-cnn")
    cfg.image_tower = {"type": "tiny-cnn", "channels": 16, "image_size": 32}
    m = build_model(cfg, vocab=tiny_vocab)
    with pytest.raises(ValueError, match="no query filter"):
        fit_query_filter(m, ["a dog"], np.zeros((len(tiny_vocab), 64), np.float32), 0.5)


# ------------------------------------------------------------------------------------- fused image gate
def test_the_gate_hands_a_confident_picture_to_the_judging_part(tiny_vocab, make_model, tmp_path):
    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model

    a, b = make_model("stair", seed=0), make_model("stair", seed=1)
    b.image_tower.load_state_dict(a.image_tower.state_dict())
    parts = a.save_pretrained(tmp_path / "a"), b.save_pretrained(tmp_path / "b")
    cfg = ModelConfig(name="gated", family="fused", image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
                      text_tower={"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)}, max_text_len=16,
                      extra={"parts": [{"model": str(p), "image": w, "text": 1.0} for p, w in zip(parts, (1.0, 2.0))]})
    m = build_model(cfg, vocab=tiny_vocab).eval()
    conf = torch.tensor([0.1, 0.4, 0.9])  # below, inside and above the gate [0.2, 0.6]
    object.__setattr__(m.parts[1], "confidence", lambda grid: conf[: len(grid)])
    m.gate = (0.2, 0.6)
    grid = m.image_grid(torch.rand(3, 3, 32, 32))
    with torch.no_grad():
        p0, p1 = unit(m.parts[0].image_embed(grid)), unit(m.parts[1].image_embed(grid))
        take = torch.tensor([0.0, 0.5, 1.0])[:, None]
        torch.testing.assert_close(m.image_embed(grid), (1 - take) * 1.0 * p0 + 2.0 * p1)
    m.gate = None
    with torch.no_grad():
        torch.testing.assert_close(m.image_embed(grid), p0 + 2.0 * p1)
    cfg.extra["gate"] = [0.2, 0.6]  # no part of two STAIR models reports a confidence
    with pytest.raises(ValueError, match="confidence"):
        build_model(cfg, vocab=tiny_vocab)
    for bad in ([0.6, 0.2], [0.1], "high"):
        cfg.extra["gate"] = bad
        with pytest.raises(ValueError, match="gate"):
            build_model(cfg, vocab=tiny_vocab)


def test_token_vectors_of_a_tiny_bert_built_here():
    from transformers import BertConfig, BertModel

    from tokenspace.models.query_filter import token_vectors

    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=200, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=8))
    with torch.no_grad():  # tokens 7 and 9 read the same: their vectors must be the same
        bert.embeddings.word_embeddings.weight[9] = bert.embeddings.word_embeddings.weight[7]
    vec = token_vectors(bert, 200, dim=4, batch_size=64)
    assert vec.shape == (200, 4) and np.allclose(np.linalg.norm(vec, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(vec[7], vec[9], atol=1e-5)
    # the slow reference: each token alone ([CLS] t [SEP], mean-pooled, unit), centred, its top-4 components
    with torch.no_grad():
        ids = torch.tensor([[101, t, 102] for t in range(200)])
        h = torch.nn.functional.normalize(bert(input_ids=ids).last_hidden_state.mean(1), dim=-1).double().numpy()
    h -= h.mean(axis=0)
    ref = h @ np.linalg.svd(h, full_matrices=False)[2][:4].T
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(vec, ref, atol=1e-4)


def test_a_part_s_image_rows_without_word_pieces(tiny_vocab, make_model, tmp_path):
    """``image_pieces: false`` on a part: its image row loses its lone word pieces before it is normalised
    and summed (the slow reference: the part's own row, ## entries zeroed, L2-normalised); the other part's
    row keeps them; the option is stored with the config."""
    import torch.nn.functional as F

    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model, from_pretrained

    a = make_model("stair", seed=0).save_pretrained(tmp_path / "a")
    cfg = ModelConfig(name="tiny-pieces", family="fused", image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
                      text_tower={"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)}, max_text_len=16,
                      extra={"parts": [{"model": str(a), "image": 1.0, "text": 1.0, "image_pieces": False},
                                       {"model": str(a), "image": 0.5, "text": 0.0}]})  # one backbone
    m = build_model(cfg, vocab=tiny_vocab).eval()
    pieces = torch.tensor([t.startswith("##") for t in tiny_vocab.tokens])
    with torch.no_grad():
        grid = m.image_grid(torch.rand(3, 3, 32, 32))
        rows = [p.image_embed(m.part_grid(grid, i)) for i, p in enumerate(m.parts)]
        assert rows[0][:, pieces].abs().sum() > 0 and rows[1][:, pieces].abs().sum() > 0  # both parts emit some
        want = F.normalize(rows[0].masked_fill(pieces, 0.0), dim=-1) + 0.5 * F.normalize(rows[1], dim=-1)
        torch.testing.assert_close(m.image_embed(grid), want, atol=1e-6, rtol=0)
    m.save_pretrained(tmp_path / "fused")
    assert from_pretrained(tmp_path / "fused").image_pieces == [False, True]
    with pytest.raises(ValueError, match="image_pieces must be true or false"):
        ModelConfig(name="x", family="fused", image_tower=cfg.image_tower, text_tower=cfg.text_tower,
                    extra={"parts": [{"model": str(a), "image": 1.0, "text": 1.0, "image_pieces": "no"}]})
