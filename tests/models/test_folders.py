"""Model folders the ecosystem opens, and loading by name.

* A saved folder's config.json says what it holds (``architectures``; no ``model_type``, which made
  AutoTokenizer warn), transformers' AutoTokenizer loads its tokenizer files silently and gives the
  model's ids, and README.md is a model card.
* ``export_sentence_transformers`` writes the STAIR text side as a SparseEncoder folder that
  sentence-transformers loads and encodes to ``encode_text``'s vectors (1e-5).
* ``tokenspace.load(name)`` never returns untrained heads silently.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging

import numpy as np
import pytest
import torch

import tokenspace
from tokenspace.models import registry, releases
from tokenspace.models.card import render_card, run_info

TEXTS = ["a red dog", "the blue cat on a car with a big hat and a small ball", "Dogs!", "sun moon star"]


def _same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@contextlib.contextmanager
def _transformers_log():
    """What transformers logs (warnings and above) inside the block, as text."""
    from transformers.utils import logging as hf_logging

    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    root = hf_logging.get_logger()  # the "transformers" logger its modules log under
    root.addHandler(handler)
    try:
        yield buf
    finally:
        root.removeHandler(handler)


def test_folder_written_before_with_model_type_still_loads_its_tokenizer(make_model, tmp_path):
    from transformers import AutoTokenizer

    folder = make_model("stair").save_pretrained(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({"model_type": "tokenspace", **config}))
    assert tokenspace.load(folder).config.family == "stair"  # the key is read back and ignored
    assert AutoTokenizer.from_pretrained(str(folder), local_files_only=True)("a dog")["input_ids"]


# ------------------------------------------------------------------------------- saved folders
def test_saved_folder_says_what_it_holds_and_round_trips(make_model, tmp_path):
    model = make_model("stair", seed=3)
    folder = model.save_pretrained(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["StairModel"] and "model_type" not in config
    assert config["family"] == "stair"
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "README.md"} <= names
    back = tokenspace.load(folder)
    assert _same_weights(back, model)
    assert back.vocab.tokenizer_file == folder / "tokenizer.json"  # read with Tokenizer.from_file
    np.testing.assert_array_equal(back.encode_text(TEXTS).to_dense(), model.encode_text(TEXTS).to_dense())


@pytest.mark.parametrize("family", ["stair", "sparse-clip", "visualsparta"])
def test_auto_tokenizer_loads_the_folder_with_the_model_ids(make_model, tmp_path, family):
    from transformers import AutoTokenizer

    model = make_model(family)
    folder = model.save_pretrained(tmp_path / "m")
    with _transformers_log() as log:
        hf = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert not log.getvalue(), log.getvalue()  # "You are using a model of type `tokenspace` ..." is gone
    ours, mask = model.tokenizer.encode(TEXTS + ["word " * 40])  # the last one is truncated
    theirs = hf(TEXTS + ["word " * 40], padding=True, truncation=True, max_length=model.config.max_text_len,
                return_tensors="np")
    np.testing.assert_array_equal(theirs["input_ids"], ours)
    np.testing.assert_array_equal(theirs["attention_mask"], mask)
    assert hf.model_max_length == model.config.max_text_len


def test_model_card_has_data_recipe_metrics_and_licence(make_model, tmp_path):
    model = make_model("stair")
    card = (model.save_pretrained(tmp_path / "plain") / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: tokenspace\n")
    for section in ("## Architecture", "## Training data", "## Recipe", "## Metrics", "## Licence"):
        assert section in card
    assert "Not recorded" in card and "Not measured" in card  # honest when nothing is known
    # a training run's folder: recipe.json and log.jsonl feed the card
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.json").write_text(json.dumps({"model": "stair-emoji", "data": {"train": ["emoji:train"]}}))
    (run / "log.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"step": 10, "loss": 1.0}, {"step": 20, "stage": "joint", "eval": {"emoji:val": {"image_retrieval_recall@1": 0.25}}},
        {"step": 30, "loss": 0.5}]) + "\n{cut by a cra")
    info = run_info(run)
    assert info["steps"] == 30 and info["metrics_step"] == 20
    card = render_card(model, info)
    assert '"emoji:train"' in card and "| emoji:val image_retrieval_recall@1 | 0.2500 |" in card
    assert "evaluation at step 20" in card


def test_save_pretrained_signature(make_model, tmp_path):
    model = make_model("stair")
    with pytest.raises(ValueError, match="does not upload"):
        model.save_pretrained(tmp_path / "m", push_to_hub=True)
    assert not (tmp_path / "m").exists()
    assert model.save_pretrained(save_directory=tmp_path / "m", push_to_hub=False).is_dir()


# ------------------------------------------------------------------------------- sentence-transformers
def test_export_st_loads_in_sentence_transformers_with_the_same_vectors(make_model, tmp_path):
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers is in the dev extra")
    from tokenspace.models.export_st import export_sentence_transformers

    model = make_model("stair", seed=1).eval()
    with torch.no_grad():  # a trained-looking MLM bias: some bracketed entries would win without the mask
        model.text_tower.mlm_bias.add_(torch.linspace(0.5, 2.0, len(model.vocab)))
    out = export_sentence_transformers(model, tmp_path / "st")
    encoder = st.SparseEncoder(str(out), device="cpu")
    theirs = encoder.encode(TEXTS, convert_to_tensor=True).to_dense().numpy()
    ours = model.encode_text(TEXTS).to_dense()
    assert theirs.shape == ours.shape and (ours > 0).any()
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    bracketed = [i for i, t in enumerate(model.vocab.tokens) if t.startswith("[") and t.endswith("]")]
    assert (theirs[:, bracketed] == 0).all()


def test_export_st_refuses_other_families(make_model, tmp_path):
    from tokenspace.models.export_st import export_sentence_transformers

    with pytest.raises(ValueError, match="STAIR"):
        export_sentence_transformers(make_model("dense"), tmp_path / "st")


# ------------------------------------------------------------------------------- loading by name
def test_config_name_is_not_silently_untrained():
    with pytest.raises(ValueError, match="pretrained=False") as e:
        tokenspace.load("stair-emoji")
    assert "untrained" in str(e.value)
    with pytest.raises(ValueError, match="untrained"):
        tokenspace.load("stair-emoji", pretrained=True)
    with pytest.raises(KeyError, match="unknown model config"):
        tokenspace.load("no-such-model")
    with pytest.raises(FileNotFoundError, match="no model folder"):
        tokenspace.load("runs/nothing/model")


def test_pretrained_false_builds_the_architecture(make_config, tiny_vocab, tmp_path):
    tiny_vocab.save(tmp_path / "vocab.txt")
    cfg = make_config("stair", len(tiny_vocab), vocab=str(tmp_path / "vocab.txt"))
    cfg.save(tmp_path / "tiny.json")
    with pytest.raises(ValueError, match="pretrained=False"):
        tokenspace.load(tmp_path / "tiny.json")
    model = tokenspace.load(tmp_path / "tiny.json", pretrained=False)
    assert model.family == "stair" and len(model.vocab) == len(tiny_vocab)


def test_release_name_loads_trained_weights(make_model, tmp_path, monkeypatch):
    trained = make_model("stair", seed=7)
    trained.save_pretrained(tmp_path / "models" / "tiny-release")
    monkeypatch.setattr(releases, "release_dirs", lambda: [tmp_path / "models"])  # where registry looks too
    assert registry.list_releases() == ["tiny-release"]
    loaded = tokenspace.load("tiny-release")
    assert _same_weights(loaded, trained)
    fresh = tokenspace.load("tiny-release", pretrained=False)  # its architecture, untrained
    assert not _same_weights(fresh, trained)
    with pytest.raises(ValueError, match="tiny-release"):  # the error names the releases there are
        tokenspace.load("stair-emoji")
    with pytest.raises(ValueError, match="trained model folder"):
        tokenspace.load(tmp_path / "models" / "tiny-release", pretrained=False)


def test_half_precision_folder_loads_back_as_float32(make_model, tmp_path):
    """The release folder is stored in float16 (half the bytes in git); loading casts it back."""
    model = make_model("stair", seed=5)
    ref = {k: v.clone() for k, v in model.state_dict().items()}
    folder = model.save_pretrained(tmp_path / "m16", dtype=torch.float16)
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        stored = {f.get_tensor(k).dtype for k in f.keys()}
    assert torch.float16 in stored and torch.float32 not in stored
    assert all(torch.equal(v, ref[k]) for k, v in model.state_dict().items())  # the model itself unchanged
    back = tokenspace.load(folder)
    assert all(p.dtype == torch.float32 for p in back.parameters())
    for k, v in back.state_dict().items():
        if v.is_floating_point():
            torch.testing.assert_close(v, ref[k].half().float())  # exactly the rounded weights
    a, b = back.encode_text(TEXTS).to_dense(), model.encode_text(TEXTS).to_dense()
    np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2)


def test_the_shipped_release_model_loads_by_name_offline():
    """models/tokenspace-stair-drawings is committed (benchmarks/release_model.py writes it): it loads by
    name from its own files (no asset cache, no hub), as release v2 (a fused model: the float32 STAIR
    part and the tagger over the 30,522 tokens), and writes a readable sparse vector for a query."""
    assert registry.DEFAULT_RELEASE in registry.list_releases()
    model = tokenspace.load(registry.DEFAULT_RELEASE)
    assert model.family == "fused" and len(model.vocab) == 30522
    assert [p.family for p in model.parts] == ["stair", "tagger"] and model.part(0).family == "stair"
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.is_floating_point())
    vec = model.encode_text(["a red heart"])
    tokens = [t for t, _ in model.decode(vec, top_k=40)[0]]
    assert 0 < vec.nnz <= 40 and tokens[:2] == ["heart", "red"], tokens  # the query's own words first


def test_saved_folder_and_weights_honour_the_umask(make_model, tmp_path):
    """mkdtemp (0700) and safetensors (0600) made every saved model private to its owner."""
    import os

    old = os.umask(0o022)
    try:
        folder = make_model("stair").save_pretrained(tmp_path / "m")
    finally:
        os.umask(old)
    assert folder.stat().st_mode & 0o777 == 0o755
    assert {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}["model.safetensors"] == 0o644
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in folder.iterdir())


def test_exported_sentence_transformers_folder_honours_the_umask(make_model, tmp_path):
    """export-st built its folder with mkdtemp (0700), so the export was private to its owner."""
    import os

    from tokenspace.models.export_st import export_sentence_transformers

    old = os.umask(0o022)
    try:
        out = export_sentence_transformers(make_model("stair"), tmp_path / "st")
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o755
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.suffix == ".safetensors" for p in files)
    assert {p.relative_to(out).as_posix(): p.stat().st_mode & 0o777 for p in files} == \
        {p.relative_to(out).as_posix(): 0o644 for p in files}
