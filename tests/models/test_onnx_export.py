"""export-onnx (models/onnx_export.py): every family's image and text encoders as ONNX files whose outputs,
run by ONNX Runtime on images and texts the export never saw (other batch sizes and text lengths), equal
encode_image / encode_text to 1e-4, top-n and normalisation included; clear errors otherwise."""
import json

import numpy as np
import pytest
import torch
from PIL import Image

from tokenspace.models.config import ModelConfig
from tokenspace.models.export_st import MARKER, export_sentence_transformers
from tokenspace.models.pooling import keep_top
from tokenspace.models.registry import build_model
from tokenspace.models.sparsified import FROM_DENSE

pytest.importorskip("onnxruntime")  # installed by the `onnx` extra (make install)
pytest.importorskip("onnx")

from tokenspace.models.onnx_export import (  # noqa: E402 - after the skips: the module needs onnxruntime to run
    IMAGE_FILE,
    TEXT_FILE,
    OnnxExportError,
    export_module,
    export_onnx,
    session,
)

TEXTS = ["a red dog", "dogs", "the big blue cat with a hat on a small green ball and a tree", "sun", "heart",
         "a fish", "moon and star"]


def images(n=6, seed=3):
    rng = np.random.default_rng(seed)
    sizes = [(32, 32), (20, 40), (50, 31), (9, 9), (64, 32), (33, 33)]
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes[:n]]


def onnx_rows(out, model, imgs, texts):
    """(image rows, text rows) as ONNX Runtime computes them from the folder's files."""
    image = session(out / IMAGE_FILE).run(None, {"pixels": model.preprocess(imgs).numpy()})[0]
    ids, mask = model.tokenize(texts)
    text = session(out / TEXT_FILE).run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    return image, text


def dense(rows):
    return rows.to_dense() if hasattr(rows, "to_dense") else np.asarray(rows)


def assert_same_as_pytorch(model, out, top_n=(None, None)):
    imgs = images()
    for texts in (TEXTS, TEXTS[1:2], TEXTS[:3]):  # three batch sizes and lengths
        image, text = onnx_rows(out, model, imgs, texts)
        np.testing.assert_allclose(text, dense(model.encode_text(texts)), atol=1e-4, rtol=0)
    np.testing.assert_allclose(image, dense(model.encode_image(imgs)), atol=1e-4, rtol=0)
    if model.sparse:  # top-n is in the graph: no row has more active terms than the model keeps
        for rows, n in ((image, top_n[0]), (text, top_n[1])):
            assert rows.shape[1] == len(model.vocab) and (rows >= 0).all()
            if n:
                assert ((rows > 0).sum(1) <= n).all() and ((rows > 0).sum(1) == n).any()
    assert (image != 0).any(1).all() and (text != 0).any(1).all()  # no empty row: the comparison means something
    if model.similarity_fn_name == "cosine":
        np.testing.assert_allclose(np.linalg.norm(image, axis=1), 1.0, atol=1e-5)


def tagger_model(tiny_vocab, text="bag"):
    """A tagger over the tiny vocabulary without the WordNet assets: the table a saved folder would load,
    filled with random evidence (3 classes over 6 tokens)."""
    tower = ({"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)} if text == "bag" else
             {"type": "bert-mlm", "config": {"vocab_size": len(tiny_vocab), "hidden_size": 16, "num_hidden_layers": 1,
                                             "num_attention_heads": 2, "intermediate_size": 32,
                                             "max_position_embeddings": 64}})
    cfg = ModelConfig(name="tagger-tiny", family="tagger", image_tower={"type": "tiny-cnn", "channels": 16,
                                                                         "image_size": 32},
                      text_tower=tower, max_text_len=16,
                      extra={"text": text, "table_tokens": 6, "n_classes": 3, "top_classes": 2})
    torch.manual_seed(0)
    m = build_model(cfg, vocab=tiny_vocab).eval()
    with torch.no_grad():
        m.token_ids.copy_(torch.tensor([5, 7, 9, 10, 14, 20]))
        m.class_tokens.copy_(torch.rand(3, 6))
    return m


@pytest.mark.parametrize("family, extra, top_n", [
    ("stair", {"image_top_n": 5, "text_top_n": 4}, (5, 4)),
    ("stair", {}, (None, None)),
    ("dense", {}, (None, None)),
    ("sparse-clip", {"topk": 6}, (None, None)),
    ("visualsparta", {"top_n": 6}, (6, None)),
])
def test_trained_families_export_equal_to_pytorch(make_model, tmp_path, family, extra, top_n):
    model = make_model(family, extra=extra)
    done = export_onnx(model, tmp_path / "onnx")
    assert max(done.max_diff.values()) <= 1e-4
    assert_same_as_pytorch(model, tmp_path / "onnx", top_n)
    record = json.loads((tmp_path / "onnx" / MARKER).read_text())
    assert record["format"] == "onnx" and record["family"] == family and record["dim"] == len(model.vocab)
    assert record["image"]["image_size"] == model.image_tower.image_size
    assert (tmp_path / "onnx" / "dimensions.txt").read_text().split("\n")[:-1] == list(model.vocab.tokens)
    assert {IMAGE_FILE, TEXT_FILE, "tokenizer.json", "vocab.txt"} <= {p.name for p in done.files}


@pytest.mark.parametrize("text", ["bag", "splade"])
def test_the_training_free_tagger_exports(tiny_vocab, tmp_path, text):
    model = tagger_model(tiny_vocab, text)
    export_onnx(model, tmp_path / "onnx")
    assert_same_as_pytorch(model, tmp_path / "onnx")


@pytest.mark.parametrize("packed", [False, True])
def test_a_fused_model_exports_with_its_anchor_top_n_and_packed_sizes(make_model, tiny_vocab, tmp_path, packed):
    """The release model's shape: a STAIR part and a tagger part over one tower, the tagger reading the
    images at the tower's size and STAIR at a smaller one (antialiased resizing inside the graph)."""
    stair = make_model("stair", extra={"image_top_n": 8})
    tagger = tagger_model(tiny_vocab)
    tagger.image_tower.load_state_dict(stair.image_tower.state_dict())
    parts = [stair.save_pretrained(tmp_path / "stair"), tagger.save_pretrained(tmp_path / "tagger")]
    cfg = ModelConfig(
        name="tiny-fused", family="fused", image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
        text_tower={"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)}, max_text_len=16,
        extra={"parts": [{"model": str(parts[0]), "image": 1.0, "text": 1.0, "image_size": 16 if packed else None},
                         {"model": str(parts[1]), "image": 1.0, "text": 0.0}],
               "anchor": 1.0, "image_top_n": 7, "text_top_n": 5})
    model = build_model(cfg, vocab=tiny_vocab).eval()
    assert bool(model.packed_sizes) == packed
    export_onnx(model, tmp_path / "onnx")
    assert_same_as_pytorch(model, tmp_path / "onnx", top_n=(7, 5))


def test_a_sparsified_model_exports(make_model, tiny_vocab, tmp_path):
    dense_dir = make_model("dense").save_pretrained(tmp_path / "dense")
    cfg = ModelConfig(name="tiny-sparsified", family="sparsified", image_tower=dict(FROM_DENSE),
                      text_tower=dict(FROM_DENSE), extra={"dense": str(dense_dir), "text_top_n": 3})
    model = build_model(cfg, vocab=tiny_vocab).eval()
    with torch.no_grad():  # as a calibrated head: a few tokens active per row (uncalibrated, none are)
        for side in ("image", "text"):
            getattr(model, f"{side}_scale").fill_(5.0)
            getattr(model, f"{side}_bias").fill_(3.0)
    export_onnx(model, tmp_path / "onnx")
    assert_same_as_pytorch(model, tmp_path / "onnx", top_n=(None, 3))


def test_int8_files_are_written_beside_the_float_ones(make_model, tmp_path):
    model = make_model("stair", extra={"text_top_n": 4})
    done = export_onnx(model, tmp_path / "onnx", int8=True)
    names = {p.name for p in done.files}
    assert {"image_encoder.int8.onnx", "text_encoder.int8.onnx"} <= names
    ids, mask = model.tokenize(TEXTS)
    q = session(tmp_path / "onnx" / "text_encoder.int8.onnx").run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    assert q.shape == (len(TEXTS), len(model.vocab)) and ((q > 0).sum(1) <= 4).all()
    assert json.loads((tmp_path / "onnx" / MARKER).read_text())["files"] == [
        IMAGE_FILE, TEXT_FILE, "image_encoder.int8.onnx", "text_encoder.int8.onnx"]


def test_an_operator_without_onnx_form_is_a_clear_error_and_writes_nothing(make_model, tmp_path, monkeypatch):
    model = make_model("dense")
    embed = model.image_embed
    special = torch.tensor([0, 1])
    # torch.isin has no ONNX symbolic (opset 18): the exporter's refusal, named, in one line
    monkeypatch.setattr(model, "image_embed", lambda grid: embed(grid) * (
        1 + torch.isin(grid.flatten(1).argmax(1), special).float())[:, None])
    with pytest.raises(OnnxExportError) as e:
        export_onnx(model, tmp_path / "onnx")
    msg = str(e.value)
    assert msg.startswith("the image encoder of this dense model cannot be exported to ONNX") and "isin" in msg
    assert "\n" not in msg and not (tmp_path / "onnx").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_mismatch_beyond_tol_is_refused(make_model, tmp_path):
    model = make_model("stair")
    with pytest.raises(OnnxExportError, match=r"the ONNX \w+ encoder differs from PyTorch by .* > 1e-12"):
        export_onnx(model, tmp_path / "onnx", tol=1e-12)
    assert not (tmp_path / "onnx").exists()


def test_a_users_folder_and_the_models_own_are_refused(make_model, tmp_path):
    model = make_model("stair")
    src = model.save_pretrained(tmp_path / "model")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="not a previous export-onnx export"):
        export_onnx(model, precious)
    assert [p.name for p in precious.iterdir()] == ["notes.txt"]
    with pytest.raises(ValueError, match="lies inside the model folder"):
        export_onnx(model, src / "onnx", source=src)
    st = tmp_path / "st"  # an export-st folder is not an export-onnx one: kept
    export_sentence_transformers(model, st)
    with pytest.raises(ValueError, match="not a previous export-onnx export"):
        export_onnx(model, st)
    out = export_onnx(model, tmp_path / "onnx").out
    (out / "stale.txt").write_text("old")
    export_onnx(model, out)  # a previous export is replaced whole
    assert not (out / "stale.txt").exists()


class _Cut(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return keep_top(x, self.k)


def test_tied_weights_at_the_top_n_cut_keep_the_same_tokens_in_onnx(tmp_path):
    """The release model's tagger gives many tokens one weight, so its top-100 cut often falls among equal
    weights (a quarter of its emoji:test image rows): keep_top keeps the lower indices, as ONNX's TopK does,
    so the exported graph keeps the same tokens (torch.topk chose others: 87 rows 0.04-0.07 apart)."""
    x = torch.tensor([[0.5, 0.2, 0.2, 0.2, 0.2, 0.1, 0.2, 0.2],
                      [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.3]])
    assert keep_top(x, 3).nonzero()[:, 1].tolist() == [0, 1, 2, 0, 1, 7]
    path = export_module(_Cut(3), (x[:1],), tmp_path / "cut.onnx", ["x"], ["y"], {"x": {0: "b"}, "y": {0: "b"}})
    got = session(path).run(None, {"x": x.numpy()})[0]
    np.testing.assert_array_equal(got, keep_top(x, 3).numpy())
    wide = torch.zeros(4, 500)
    wide[:, 50:300] = 0.25  # 250 tied weights, 100 kept
    wide[:, 7] = 1.0
    got = session(export_module(_Cut(100), (wide[:1],), tmp_path / "w.onnx", ["x"], ["y"],
                                {"x": {0: "b"}, "y": {0: "b"}})).run(None, {"x": wide.numpy()})[0]
    np.testing.assert_array_equal(got, keep_top(wide, 100).numpy())
    assert (got[:, 50:149] == 0.25).all() and (got[:, 149:] == 0).all()


def test_a_users_own_session_on_the_text_graph_prints_no_shape_warning(make_model, tiny_vocab, tmp_path, capfd):
    """The fused text side scatters into [B, V]: the exporter declared its If branches' outputs {-1} and
    every run in a plain onnxruntime session warned VerifyOutputSizes. The exported file declares no
    wrong shape now: a session with onnxruntime's default log level runs it silently."""
    import onnxruntime as ort

    stair = make_model("stair")
    cfg = ModelConfig(
        name="tiny-fused", family="fused", image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
        text_tower={"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)}, max_text_len=16,
        extra={"parts": [{"model": str(stair.save_pretrained(tmp_path / "stair")), "image": 1.0, "text": 1.0}],
               "anchor": 1.0, "text_top_n": 5})
    model = build_model(cfg, vocab=tiny_vocab).eval()
    out = export_onnx(model, tmp_path / "onnx")
    capfd.readouterr()
    session = ort.InferenceSession(str(out.out / "text_encoder.onnx"), providers=["CPUExecutionProvider"])
    for texts in (["a red dog", "the blue cat on a car"], ["dog"]):
        ids, mask = model.tokenize(texts)
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
        np.testing.assert_allclose(got, dense(model.encode_text(texts)), atol=1e-4)
    err = capfd.readouterr().err
    assert "VerifyOutputSizes" not in err and "Expected shape" not in err, err
