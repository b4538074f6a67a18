"""VisualSparta: the score against a hand computation, indexed == direct scores, top-n pruning, training."""
import json
import math

import numpy as np
import pytest
import torch

from tokenspace.sparse import SparseBatch


def vs_model(make_model, **extra):
    return make_model("visualsparta", extra={"layers": 1, "heads": 2, **extra}).eval()


def test_score_matches_a_hand_computation(make_model, monkeypatch):
    m = vs_model(make_model)
    vocab = m.vocab
    red, dog = vocab.id("red"), vocab.id("dog")
    # two fragments and two word embeddings in the first two of the 16 dims: easy dot products
    frags = torch.zeros(1, 2, 16)
    frags[0, 0, :2] = torch.tensor([1.0, 0.0])
    frags[0, 1, :2] = torch.tensor([0.0, 2.0])
    monkeypatch.setattr(m, "image_fragments", lambda grid: frags.expand(grid.shape[0], -1, -1))
    with torch.no_grad():
        e = m.text_tower.word_embeddings
        e.zero_()
        e[red, :2] = torch.tensor([3.0, 1.0])  # . H1 = 3, . H2 = 2 -> y = 3
        e[dog, :2] = torch.tensor([-1.0, 0.25])  # . H1 = -1, . H2 = 0.5 -> y = 0.5
        m.term_bias.fill_(-1.0)
    # eq. 10-12 by hand for "red dog dog": log(1 + relu(3 - 1)) + 2 * log(1 + relu(0.5 - 1))
    expected = math.log(3.0) + 2 * math.log(1.0)
    ids, mask = m.tokenize(["red dog dog"])
    grid = torch.zeros(1, 16, 1, 1)
    with torch.no_grad():
        direct = m.direct_score(grid, ids, mask)
        cached = m.score(m.image_embed(grid), m.text_embed(ids, mask))
    assert direct.item() == pytest.approx(expected, abs=1e-6)
    assert cached.item() == pytest.approx(expected, abs=1e-6)
    # and a query whose token clears the bias twice: "red red" = 2 log 3
    ids, mask = m.tokenize(["red red"])
    with torch.no_grad():
        assert m.direct_score(grid, ids, mask).item() == pytest.approx(2 * math.log(3.0), abs=1e-6)


def test_query_is_a_bag_of_token_counts_without_specials(make_model):
    m = vs_model(make_model)
    ids, mask = m.tokenize(["dog dog cat", "a"])
    bag = m.text_embed(ids, mask)
    v = m.vocab
    assert bag[0, v.id("dog")] == 2 and bag[0, v.id("cat")] == 1 and bag[0].sum() == 3
    assert bag[1].sum() == 1
    assert (bag[:, m.tokenizer.vocab.special_ids] == 0).all()  # [CLS]/[SEP]/[PAD] carry nothing


def test_indexed_term_cache_equals_direct_scores(make_model):
    m = vs_model(make_model, bias_init=-0.2)
    torch.manual_seed(1)
    grids = torch.randn(5, 16, 3, 3)
    texts = ["a red dog", "the big blue cat with a hat", "dogs", "sun moon star star", "green tree"]
    imgs = m.encode_image_grids(grids)
    txts = m.encode_text(texts)
    assert isinstance(imgs, SparseBatch) and imgs.vocab is m.vocab
    ids, mask = m.tokenize(texts)
    with torch.no_grad():
        direct = m.direct_score(grids, ids, mask).numpy()  # [images, texts]
    # dot products of the cached rows (what any inverted index computes) ...
    np.testing.assert_allclose(imgs.to_dense() @ txts.to_dense().T, direct, rtol=1e-5, atol=1e-5)
    # ... and the project's engine returns exactly those scores
    from tokenspace.index import InvertedIndex

    index = InvertedIndex.build(imgs, [f"img{i}" for i in range(len(imgs))])
    for q, hits in enumerate(index.search(txts, k=5)):
        for h in hits:
            assert h.score == pytest.approx(direct[int(h.id[3:]), q], rel=1e-4, abs=1e-4)


def test_top_n_pruning_keeps_the_heaviest_terms(make_model):
    m = vs_model(make_model)
    grids = torch.randn(4, 16, 2, 2)
    full = m.encode_image_grids(grids).to_dense()
    m.image_top_n = 5  # what extra.top_n sets
    pruned = m.encode_image_grids(grids)
    assert (pruned.row_nnz() <= 5).all()
    dense = pruned.to_dense()
    for row_full, row_kept in zip(full, dense):
        kept = np.flatnonzero(row_kept)
        np.testing.assert_array_equal(row_kept[kept], row_full[kept])  # values are untouched
        fifth = np.sort(row_full)[::-1][min(5, np.count_nonzero(row_full)) - 1]
        assert (row_full[kept] >= fifth).all()  # nothing lighter than the 5th heaviest survives


@pytest.mark.parametrize("value", [0, -1, 2.5])
def test_top_n_refuses_what_is_not_a_positive_int(make_model, value):
    """0 used to keep every term; it reads as "keep none", so it is refused like STAIR's top-n options."""
    with pytest.raises(ValueError, match="top_n"):
        vs_model(make_model, top_n=value)


def test_encode_returns_unnormalised_rows(make_model):
    m = vs_model(make_model)
    txts = m.encode_text(["dog dog"])
    assert txts.values.tolist() == [2.0]  # the raw count, not a unit vector


def test_loss_is_eq13_text_to_image_without_temperature(make_model):
    from tokenspace.models.visualsparta import text_to_image_loss
    from tokenspace.train.losses import SparseContrastiveLoss

    m = vs_model(make_model)
    grids = torch.randn(3, 16, 2, 2)
    ids, mask = m.tokenize(["red dog", "blue cat", "green car"])
    img, txt = m.image_embed(grids), m.text_embed(ids, mask)
    parts = SparseContrastiveLoss()(img, txt, m, step=0)
    f = m.score(img, txt)  # [images, texts] = f(q, v)
    manual = -(f.T.diagonal() - torch.logsumexp(f.T, dim=1)).mean()  # -J averaged over queries
    torch.testing.assert_close(parts["contrastive"], manual)
    torch.testing.assert_close(parts["contrastive"], text_to_image_loss(f))
    assert parts["logit_scale"].item() == 1.0


def test_trains_with_the_shared_trainer_and_round_trips(make_model, tmp_path):
    from tokenspace.models.dual import DualEncoder
    from tokenspace.train.recipe import Recipe, Stage
    from tokenspace.train.trainer import PairData, Trainer

    m = vs_model(make_model)
    rng = np.random.default_rng(0)
    texts = ["a red dog", "a blue cat", "a green car", "a red tree", "a blue house", "a green sun"] * 2
    data = PairData.from_texts(rng.standard_normal((12, 16, 2, 2)).astype(np.float16), texts)
    recipe = Recipe(name="t", model="tiny", stages=[Stage("joint", steps=3, lr=1e-2)], batch_size=4)
    before = m.term_bias.item()
    Trainer(m, recipe, data, tmp_path, progress=False).fit()
    rows = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(np.isfinite(r["loss"]) for r in rows)
    assert m.term_bias.item() != before  # b is learned (eq. 11)
    loaded = DualEncoder.from_pretrained(tmp_path / "model")
    assert loaded.family == "visualsparta"
    grid = torch.randn(2, 16, 2, 2)
    with torch.no_grad():
        torch.testing.assert_close(loaded.image_embed(grid), m.image_embed(grid))


def test_too_many_cells_is_a_clear_error(make_model):
    m = vs_model(make_model, max_cells=4)
    with pytest.raises(ValueError, match="max_cells"):
        m.image_embed(torch.randn(1, 16, 3, 3))
