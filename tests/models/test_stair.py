import numpy as np
import pytest
import torch

from tokenspace.models.pooling import log1p_relu, max_log1p_relu
from tokenspace.sparse import SparseBatch


def test_pooling_is_max_then_log1p_relu_and_ignores_padding():
    scores = torch.tensor([[[1.0, -2.0, 0.5], [3.0, -1.0, 9.0]]])  # [B=1, L=2, V=3]
    mask = torch.tensor([[1, 0]])  # the second position is padding: its 9.0 must not win
    out = max_log1p_relu(scores, mask)
    assert torch.allclose(out, torch.log1p(torch.tensor([[1.0, 0.0, 0.5]])))
    # permutation invariance over positions, non-negativity, zeros exactly where the max is <= 0
    perm = max_log1p_relu(scores.flip(1))
    assert torch.allclose(perm, max_log1p_relu(scores))
    assert (perm >= 0).all() and perm[0, 1] == 0


def test_revive_gradient_keeps_the_forward_and_only_raises_dead_units():
    x = torch.tensor([2.0, -1.0, -3.0, 0.5], requires_grad=True)
    upstream = torch.tensor([1.0, -2.0, 4.0, -1.0])  # the dead units: one pulled up (-2), one pushed down
    plain = torch.log1p(torch.relu(x))
    (g_plain,) = torch.autograd.grad((plain * upstream).sum(), x)
    out = log1p_relu(x, revive=0.5)
    assert torch.equal(out, plain)
    (g,) = torch.autograd.grad((out * upstream).sum(), x)
    alive = x.detach() > 0
    assert torch.allclose(g[alive], g_plain[alive])  # live units: the exact gradient
    assert g_plain[~alive].abs().sum() == 0  # what the plain ReLU gives dead units
    assert torch.allclose(g[~alive], torch.tensor([-1.0, 0.0]))  # 0.5 x the raising part only
    (g0,) = torch.autograd.grad((log1p_relu(x, revive=0.0) * upstream).sum(), x)
    assert torch.equal(g0, g_plain)


def test_image_pooling_invariant_to_cell_order(make_model):
    m = make_model().eval()
    grid = torch.randn(2, 16, 4, 4)
    shuffled = grid.flatten(2)[:, :, torch.randperm(16)].reshape(2, 16, 4, 4)
    assert torch.allclose(m.image_embed(grid), m.image_embed(shuffled), atol=1e-6)


def test_image_head_is_tied_to_word_embeddings(make_model):
    m = make_model().eval()
    grid = torch.randn(1, 16, 2, 2)
    before = m.image_embed(grid)
    with torch.no_grad():
        m.text_tower.word_embeddings.mul_(2.0)
    assert not torch.allclose(before, m.image_embed(grid))


def test_stage1_restricted_text_equals_masked_full_output(make_model):
    m = make_model().eval()
    ids, mask = m.tokenize(["a red dog", "the big blue cat with a hat", "dogs"])
    full = m.text_embed(ids, mask)
    restricted = m.text_embed(ids, mask, restrict_to_input=True)
    token_mask = m.token_mask(ids, mask)
    assert torch.allclose(restricted, full * token_mask, atol=1e-6)
    # only the text's own (non-special) tokens may be active
    for row, text_ids in zip(restricted, ids):
        allowed = set(text_ids.tolist()) - set(m.tokenizer.vocab.special_ids.tolist())
        assert set(torch.nonzero(row).flatten().tolist()) <= allowed


def test_encode_outputs_are_normalised_sparse_batches(make_model, tiny_pairs):
    m = make_model()
    paths, texts = tiny_pairs
    imgs, txts = m.encode_image(paths[:3]), m.encode_text(texts[:4])
    assert isinstance(imgs, SparseBatch) and len(imgs) == 3 and len(txts) == 4
    assert imgs.vocab is m.vocab and (imgs.values > 0).all()
    assert np.allclose(np.linalg.norm(imgs.to_dense(), axis=1), 1.0, atol=1e-5)
    # the dot product of encoded rows is the model's own similarity
    with torch.no_grad():
        ids, mask = m.tokenize(texts[:4])
        ref = m.score(m.image_embed(m.image_grid(m.preprocess(paths[:3]))), m.text_embed(ids, mask))
    assert np.allclose(imgs.to_dense() @ txts.to_dense().T, ref.numpy(), atol=1e-5)


def test_encode_text_rejects_empty_texts(make_model):
    m = make_model()
    with pytest.raises(ValueError, match="empty text"):
        m.encode_text(["a dog", "  "])
    with pytest.raises(ValueError, match="empty text"):
        m.encode_text("")


@pytest.mark.parametrize("family", ["stair", "dense", "sparse-clip"])
def test_save_load_round_trip(make_model, tmp_path, family):
    from tokenspace.models.dual import DualEncoder

    m = make_model(family, expansion=4) if family == "sparse-clip" else make_model(family)
    m.eval()
    texts = ["a red dog", "blue stars"]
    before = m.encode_text(texts)
    m.save_pretrained(tmp_path / "m")
    loaded = DualEncoder.from_pretrained(tmp_path / "m")
    assert type(loaded) is type(m) and loaded.config.name == m.config.name
    after = loaded.encode_text(texts)
    if m.sparse:
        np.testing.assert_allclose(before.to_dense(), after.to_dense(), atol=1e-6)
        assert loaded.vocab.tokens == m.vocab.tokens
    else:
        np.testing.assert_allclose(before, after, atol=1e-6)
    grid = torch.randn(2, 16, 2, 2)
    with torch.no_grad():
        torch.testing.assert_close(m.image_embed(grid), loaded.image_embed(grid))


def test_from_pretrained_rejects_a_non_model_folder(tmp_path):
    from tokenspace.models.dual import DualEncoder

    with pytest.raises(FileNotFoundError, match="not a tokenspace model folder"):
        DualEncoder.from_pretrained(tmp_path)


def test_logit_scale_is_capped(make_model):
    m = make_model("sparse-clip", logit_scale_init=10.0, logit_scale_max=20.0)
    with torch.no_grad():
        m.log_logit_scale.fill_(10.0)  # exp(10) >> cap
    assert m.logit_scale.item() == pytest.approx(20.0)


def test_fast_max_projection_equals_autograd_reference():
    from tokenspace.models.maxproj import max_projection

    torch.manual_seed(0)
    h = torch.randn(5, 7, 6, requires_grad=True)
    w = torch.randn(40, 6, requires_grad=True)
    b = torch.randn(40, requires_grad=True)
    valid = torch.rand(5, 7) > 0.3
    valid[:, 0] = True
    g = torch.randn(5, 40)
    ref = (h @ w.T + b).masked_fill(~valid[..., None], float("-inf")).amax(1)
    ref_grads = torch.autograd.grad((ref * g).sum(), (h, w, b))
    out = max_projection(h, w, b, valid)
    grads = torch.autograd.grad((out * g).sum(), (h, w, b))
    torch.testing.assert_close(out, ref)
    for a, r in zip(grads, ref_grads):
        torch.testing.assert_close(a, r)


def test_inference_max_projection_equals_the_training_path():
    """Without gradients max_projection takes a forward-only path (amax, no argmax): same values,
    masked rows included, in many slabs (B x L above the chunk size)."""
    from tokenspace.models.maxproj import max_projection

    torch.manual_seed(1)
    h, w, b = torch.randn(70, 9, 6), torch.randn(50, 6), torch.randn(50)
    valid = torch.rand(70, 9) > 0.4
    valid[3] = False  # every position masked: -inf + bias
    ref = (h @ w.T + b).masked_fill(~valid[..., None], float("-inf")).amax(1)
    with torch.no_grad():
        fast = max_projection(h, w, b, valid)
    train = max_projection(h, w.requires_grad_(), b, valid)
    assert train.requires_grad and not fast.requires_grad
    torch.testing.assert_close(fast, ref)
    torch.testing.assert_close(train.detach(), ref)
    torch.testing.assert_close(max_projection(h, w.detach(), b), (h @ w.detach().T + b).amax(1))


def test_image_embed_equals_pooled_cell_scores(make_model):
    m = make_model().eval()
    grid = torch.randn(3, 16, 3, 3)
    with torch.no_grad():
        torch.testing.assert_close(m.image_embed(grid), max_log1p_relu(m.image_scores(grid)) * m.output_mask)


def test_bracketed_vocabulary_entries_are_never_emitted(make_model):
    m = make_model().eval()
    special = [m.vocab.id(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]")]
    with torch.no_grad():
        m.image_bias[special] = 100.0  # even a huge prior cannot make them fire
        m.text_tower.mlm_bias[special] = 100.0
        ids, mask = m.tokenize(["a red dog"])
        assert (m.image_embed(torch.randn(2, 16, 2, 2))[:, special] == 0).all()
        assert (m.text_embed(ids, mask)[:, special] == 0).all()


def test_image_head_options_wider_transform_and_constant_bias(make_model, tmp_path):
    from tokenspace.models.registry import load

    base = make_model()
    assert torch.allclose(base.image_bias, base.text_tower.mlm_bias)  # default: the MLM prior
    m = make_model(extra={"image_head_mid": 24, "image_bias_init": 0.0}).eval()
    linears = [x for x in m.image_transform if isinstance(x, torch.nn.Linear)]
    assert [(x.in_features, x.out_features) for x in linears] == [(16, 24), (24, 16)]
    assert isinstance(m.image_transform[-1], torch.nn.LayerNorm)  # still ends in the tied width
    assert (m.image_bias == 0).all()
    grid = torch.randn(2, 16, 2, 2)
    out = m.image_embed(grid)
    assert out.shape == (2, len(m.vocab)) and (out >= 0).all()
    # the options travel with the saved config
    again = load(m.save_pretrained(tmp_path / "m"))
    assert torch.allclose(again.eval().image_embed(grid), out, atol=1e-6)


def test_image_revive_grad_changes_only_the_gradient_of_dead_tokens(make_model):
    plain, revive = make_model(), make_model(extra={"image_revive_grad": 0.5})  # same seed: same weights
    grid = torch.randn(2, 16, 2, 2)
    target = torch.ones(len(plain.vocab))  # a loss that wants every token raised
    grads = []
    for m in (plain, revive):
        with torch.no_grad():
            m.image_bias[::3] = -100.0  # a third of the tokens start dead
        out = m.image_embed(grid)
        (-(out * target).sum()).backward()
        grads.append((out.detach(), m.image_bias.grad.clone()))
    (out_p, g_p), (out_r, g_r) = grads
    assert torch.equal(out_p, out_r)  # the forward is the paper's log(1 + ReLU) either way
    dead = (out_p == 0).all(0) & (plain.output_mask > 0)  # dead for both images, and emittable
    assert dead.any() and (g_p[dead] == 0).all() and (g_r[dead] < 0).all()
    live = (out_p > 0).all(0)
    torch.testing.assert_close(g_p[live], g_r[live])
    with pytest.raises(ValueError, match="image_revive_grad"):
        make_model(extra={"image_revive_grad": -1.0})


def test_top_n_options_prune_encoded_rows_against_a_numpy_reference(make_model, tmp_path):
    """extra.image_top_n / text_top_n: each encoded row is the full vector cut to its n heaviest tokens,
    then L2-normalised (cosine of the pruned vectors); image_embed (training) is left whole."""
    from tokenspace.models.dual import DualEncoder

    full = make_model().eval()
    pruned = make_model(extra={"image_top_n": 3, "text_top_n": 2}).eval()  # same seed: same weights
    grids, texts = torch.randn(5, 16, 2, 2), ["a red dog", "blue stars and a cat", "tree"]
    with torch.no_grad():
        torch.testing.assert_close(pruned.image_embed(grids), full.image_embed(grids))
        raw_img = full.image_embed(grids).numpy()
        raw_txt = full.text_embed(*full.tokenize(texts)).numpy()
    for got, raw, n in ((pruned.encode_image_grids(grids), raw_img, 3), (pruned.encode_text(texts), raw_txt, 2)):
        ref = np.zeros_like(raw)
        for i, row in enumerate(raw):
            top = np.argsort(-row, kind="stable")[:n]
            ref[i, top] = row[top]
        ref /= np.maximum(np.linalg.norm(ref, axis=1, keepdims=True), 1e-12)
        assert (got.row_nnz() <= n).all() and (got.row_nnz() > 0).any()
        np.testing.assert_allclose(got.to_dense(), ref, atol=1e-6)
    # the options travel with a saved folder
    pruned.save_pretrained(tmp_path / "m")
    loaded = DualEncoder.from_pretrained(tmp_path / "m")
    assert (loaded.image_top_n, loaded.text_top_n) == (3, 2)
    assert (loaded.encode_image_grids(grids).row_nnz() <= 3).all()


@pytest.mark.parametrize("value", [0, -2, 2.5, "10", True])
def test_top_n_options_refuse_what_is_not_a_positive_int(make_model, value):
    with pytest.raises(ValueError, match="image_top_n"):
        make_model(extra={"image_top_n": value})


def test_a_bert_encoder_without_mlm_head_becomes_a_tied_text_tower(make_model, tmp_path, caplog, capfd):
    """all-MiniLM-L6-v2 ships a BertModel, no MLM head (the wider tied space): bert-mlm
    takes its encoder and word embeddings as they are, starts the head's TRANSFORM and bias fresh (one
    line of ours says so, instead of transformers' report of a "corrupted" checkpoint), and the image
    head ties to those embeddings; the trained head then saves and loads with the rest."""
    import logging

    from transformers import BertConfig, BertModel

    from tokenspace.models.dual import DualEncoder

    torch.manual_seed(1)
    enc = BertModel(BertConfig(vocab_size=34, hidden_size=24, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=32, max_position_embeddings=64), add_pooling_layer=False)
    enc.save_pretrained(tmp_path / "encoder")
    capfd.readouterr()
    with caplog.at_level(logging.INFO, logger="tokenspace"):
        m = make_model("stair", text_tower={"type": "bert-mlm", "weights": str(tmp_path / "encoder")})
    assert "without an MLM head" in caplog.text
    out = capfd.readouterr()
    assert "corrupted" not in out.out + out.err and "MISSING" not in out.out + out.err
    tower = m.text_tower
    torch.testing.assert_close(tower.word_embeddings, enc.embeddings.word_embeddings.weight)
    ids = torch.tensor([[2, 9, 10, 3]])
    enc.eval(), tower.eval()  # no dropout
    with torch.no_grad():
        torch.testing.assert_close(tower(ids, torch.ones_like(ids)), enc(input_ids=ids).last_hidden_state)
    tower.train()
    assert tower.hidden_size == 24 and torch.count_nonzero(tower.mlm_bias) == 0  # a fresh head
    assert m.image_transform[0].out_features == 24  # the image side projects into the 24-d tied space
    loss = m.image_embed(torch.randn(2, 16, 2, 2)).sum()
    loss.backward()
    assert tower.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0  # tied: image grads reach e
    m.eval()
    m.save_pretrained(tmp_path / "m")
    loaded = DualEncoder.from_pretrained(tmp_path / "m")
    assert loaded.config.text_tower["weights"] is None  # rebuilt from its own folder, not the encoder's
    np.testing.assert_allclose(m.encode_text(["a red dog"]).to_dense(),
                               loaded.encode_text(["a red dog"]).to_dense(), atol=1e-6)
