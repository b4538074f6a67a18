"""VisualSparta label fragments (eqs. 6-8) from a classifier: the token order, the shapes, scores that
still equal the indexed path, the paper configs untouched, and save/load without the class asset."""
import shutil

import numpy as np
import pytest
import torch

from tokenspace.models.label_fragments import label_token_table

CLASSES = {"n00000001": "dog", "n00000002": "red car, racer", "n00000003": "tree"}


@pytest.fixture
def classes_dir(tmp_path):
    d = tmp_path / "classes"
    d.mkdir()
    (d / "imagenet_synsets.txt").write_text("\n".join(CLASSES) + "\n")
    (d / "imagenet_synset_to_lemma.txt").write_text("".join(f"{w}\t{lemmas}\n" for w, lemmas in CLASSES.items()))
    return d


def labelled(make_model, classes_dir, k=3, **spec):
    m = make_model("visualsparta", extra={"layers": 1, "heads": 2, "label_fragments": {
        "classes": str(classes_dir), "k": k, "max_label_tokens": 4, **spec}}).eval()
    with torch.no_grad():  # channel c of a cell votes for class c
        m.labels.classifier.weight.zero_()
        m.labels.classifier.bias.zero_()
        for c in range(3):
            m.labels.classifier.weight[c, c] = 1.0
    return m


def test_label_table_is_the_first_lemma_wordpieces(tiny_vocab, classes_dir):
    from tokenspace.models.classwords import read_lemma_file, read_wnids
    from tokenspace.vocab import WordPieceTokenizer

    tok = WordPieceTokenizer(tiny_vocab)
    ids, lens = label_token_table(tok, read_wnids(classes_dir), read_lemma_file(classes_dir), 4)
    assert lens.tolist() == [1, 2, 1]
    words = [[tiny_vocab.tokens[int(i)] for i in ids[c, : lens[c]]] for c in range(3)]
    assert words == [["dog"], ["red", "car"], ["tree"]]  # "racer" is the second lemma: not used


def grid_showing(strengths):
    """[1, 16, 1, n] grid: cell j shows class c_j with the given strength."""
    g = torch.zeros(1, 16, 1, len(strengths))
    for j, (c, s) in enumerate(strengths):
        g[0, c, 0, j] = s
    return g


def test_labels_of_the_most_confident_classes_fill_exactly_k_tokens(make_model, classes_dir):
    m = labelled(make_model, classes_dir, k=3)
    v = m.vocab
    grid = grid_showing([(1, 8.0), (0, 4.0)])  # red car confident, dog less, tree only by softmax tail
    cells = grid.flatten(2).transpose(1, 2)
    ids = m.labels.label_tokens(cells)
    assert [v.tokens[int(i)] for i in ids[0]] == ["red", "car", "dog"]
    m4 = labelled(make_model, classes_dir, k=4)
    assert [v.tokens[int(i)] for i in m4.labels.label_tokens(cells)[0]] == ["red", "car", "dog", "tree"]
    m2 = labelled(make_model, classes_dir, k=2)  # the ranking is cut inside a class's tokens if need be
    assert [v.tokens[int(i)] for i in m2.labels.label_tokens(cells)[0]] == ["red", "car"]


def test_fragments_scores_and_index_agree(make_model, classes_dir):
    m = labelled(make_model, classes_dir, k=3)
    torch.manual_seed(0)
    grids = torch.randn(3, 16, 2, 2)
    with torch.no_grad():
        assert m.image_fragments(grids).shape == (3, 4 + 3, 16)  # 4 cells + 3 label tokens
        assert m.image_scores(grids).shape == (3, 4, len(m.vocab))  # heatmaps: grid cells only
        texts = ["a red dog", "green tree", "cat"]
        ids, mask = m.tokenize(texts)
        direct = m.direct_score(grids, ids, mask)
        cached = m.score(m.image_embed(grids), m.text_embed(ids, mask))
    torch.testing.assert_close(cached, direct, rtol=1e-5, atol=1e-5)
    # the labels change the fragments: the same model without them scores differently
    labels, m.labels = m.labels, None
    with torch.no_grad():
        assert not torch.allclose(m.direct_score(grids, ids, mask), direct)
    m.labels = labels
    # the classifier is a fixed "detector"; E_pos, E_seg and the norm learn
    assert not any(p.requires_grad for p in m.labels.classifier.parameters())
    assert m.labels.position.requires_grad and m.labels.segment.requires_grad


def test_off_unless_configured(make_model):
    m = make_model("visualsparta", extra={"layers": 1, "heads": 2})
    assert m.labels is None
    assert not any(k.startswith("labels.") for k in m.state_dict())


def test_round_trip_without_the_class_asset(make_model, classes_dir, tmp_path):
    from tokenspace.models.registry import load

    m = labelled(make_model, classes_dir, k=3)
    folder = m.save_pretrained(tmp_path / "vs")
    shutil.rmtree(classes_dir)
    back = load(folder)
    assert back.config.extra["label_fragments"]["classes"] is None
    torch.manual_seed(1)
    grids = torch.randn(2, 16, 2, 2)
    a, b = m.encode_image_grids(grids), back.encode_image_grids(grids)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.values, b.values, rtol=1e-5, atol=1e-6)


def test_bad_spec_is_rejected(make_model, classes_dir):
    with pytest.raises(ValueError, match="exceeds"):
        labelled(make_model, classes_dir, k=5)  # 4 label tokens in all
    with pytest.raises(ValueError, match="classes"):
        make_model("visualsparta", extra={"layers": 1, "heads": 2, "label_fragments": {"k": 2}})
    with pytest.raises(ValueError, match="unknown option .top. for visualsparta extra.label_fragments"):
        labelled(make_model, classes_dir, k=2, top=3)
