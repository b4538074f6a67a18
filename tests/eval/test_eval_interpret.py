"""STAIR top-K token accuracy (best sub-word, all-vocabulary candidates) and decode tables, by hand."""
import numpy as np
import pytest

from tokenspace.eval.interpret import InterpretabilityEvaluator, decode_table, token_label_ranks
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

VOCAB = Vocabulary(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                    "golden", "##fish", "retriever", "dog", "cat", "fish"])  # ids 0..10, specials 0..4
PIECES = {"goldfish": [5, 6], "dog": [8], "zebra": [1]}  # zebra is out of vocabulary: [UNK]
CLASSES = ["goldfish", "dog", "zebra"]


def token_ids(text):
    return PIECES[text]


IMAGES = SparseBatch.from_dicts([
    # goldfish: label score = max(golden 0, ##fish 0.8) = 0.8; "fish" 0.9 is ahead; [CLS] 5.0 is special
    {"##fish": 0.8, "fish": 0.9, "cat": 0.1, "[CLS]": 5.0},   # rank 1
    {"dog": 0.7, "retriever": 0.3},                           # dog: rank 0
    {"cat": 0.5},                                             # dog scores 0: ties with every candidate -> miss
    {"cat": 0.5},                                             # zebra: only [UNK], excluded -> unscorable, miss
], vocab=VOCAB)
LABELS = [0, 1, 1, 2]


def test_ranks_by_hand():
    ranks = token_label_ranks(IMAGES, LABELS, CLASSES, token_ids)
    # image 2: 6 non-special tokens minus the label's 1 sub-word = 5 candidates, all tie at 0
    # image 3: no scorable sub-word -> the candidate count, 6
    np.testing.assert_array_equal(ranks, [1, 0, 5, 6])


def test_dense_scores_give_the_same_ranks():
    dense = IMAGES.to_dense()  # e.g. a dense model's similarity to every token; no vocab attached
    ranks = token_label_ranks(dense, LABELS, CLASSES, token_ids, exclude_ids=VOCAB.special_ids)
    np.testing.assert_array_equal(ranks, [1, 0, 5, 6])


def test_evaluator_reports_topk_and_feature_metrics():
    ev = InterpretabilityEvaluator(CLASSES, LABELS, token_ids, ks=(1, 2, 5))
    out = ev(IMAGES, text_emb=IMAGES)
    assert out["token_acc1"] == pytest.approx(1 / 4)
    assert out["token_acc2"] == pytest.approx(2 / 4)
    assert out["token_acc5"] == pytest.approx(2 / 4)
    assert out["l0_image"] == pytest.approx((4 + 2 + 1 + 1) / 4)
    assert out["active_feature_frac_image"] == pytest.approx(6 / 11)  # ##fish fish cat [CLS] dog retriever
    assert "clarity" in out and "modality_bimodal_frac" in out
    assert ev.primary_metric == "token_acc1"


def test_decode_table():
    table = decode_table(IMAGES, rows=[0, 1], top_k=2, names=["fish.png", "a|b.png"])
    assert table.splitlines() == [
        "| item | top tokens |",
        "|---|---|",
        "| fish.png | [CLS] (5.00), fish (0.90) |",
        "| a\\|b.png | dog (0.70), retriever (0.30) |",  # pipes escaped so the table stays a table
    ]
    with pytest.raises(ValueError, match="vocabulary"):
        decode_table(IMAGES.to_dense())


def test_dense_model_arm_scores_tokens_by_cosine_with_their_text_embeddings(monkeypatch):
    """The CLIP arm of STAIR Table 5: Sim(image, c) = cos(image embedding, text embedding of token c)."""
    import tokenspace.eval.scoring as scoring

    rng = np.random.default_rng(0)
    token_emb = rng.standard_normal((len(VOCAB), 6)).astype(np.float32)  # one text embedding per token
    images = np.stack([token_emb[6] + 0.1 * rng.standard_normal(6),    # near ##fish: goldfish at rank 0
                       token_emb[9] + 0.1 * rng.standard_normal(6),    # near cat, label dog: a miss
                       rng.standard_normal(6), rng.standard_normal(6)]).astype(np.float32)
    # slow reference: the full cosine matrix, then the ranks of a dense score array
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    sims = unit(images) @ unit(token_emb).T
    expect = token_label_ranks(sims, LABELS, CLASSES, token_ids, exclude_ids=VOCAB.special_ids)
    monkeypatch.setattr(scoring, "DEFAULT_BLOCK_BYTES", 4 * len(VOCAB))  # one image per block
    got = token_label_ranks(images, LABELS, CLASSES, token_ids, exclude_ids=VOCAB.special_ids, token_emb=token_emb)
    np.testing.assert_array_equal(got, expect)
    assert got[0] == 0 and got[1] > 0
    out = InterpretabilityEvaluator(CLASSES, LABELS, token_ids, ks=(1, 5), exclude_ids=VOCAB.special_ids)(
        images, token_emb=token_emb)
    assert out["token_acc1"] == pytest.approx(np.mean(expect < 1))
    assert np.isnan(out["clarity"]) and np.isnan(out["l0_image"])  # no named dimensions in a dense model


def test_word_coverage_counts_texts_whose_content_pieces_are_all_encoded(tiny_vocab):
    from tokenspace.eval.interpret import word_coverage
    from tokenspace.vocab import WordPieceTokenizer

    tok = WordPieceTokenizer(tiny_vocab, max_length=16)
    texts = ["a red dog", "the big cat", "a"]  # "a" / "the" are stop words: not content
    rows = [{tiny_vocab.id("red"): 1.0, tiny_vocab.id("dog"): 0.5},  # every content piece: covered
            {tiny_vocab.id("cat"): 1.0},  # "big" missing: not covered
            {}]  # no content word at all: covered
    encoded = SparseBatch.from_dicts(rows, dim=len(tiny_vocab), vocab=tiny_vocab)
    assert word_coverage(texts, encoded, tok) == pytest.approx(2 / 3)
