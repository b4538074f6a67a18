"""`tokenspace export-onnx` as a subprocess: the files it writes give the model's own vectors, and what it
must refuse (a user's folder, an untrained config) is one error line with nothing written."""
import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime")  # installed by the `onnx` extra (make install)
pytest.importorskip("onnx")


def test_export_onnx_writes_files_that_give_the_models_vectors(world, tmp_path):
    from tokenspace.models.onnx_export import session  # after the skips: it needs onnxruntime to run
    from tokenspace.models.registry import load

    r = world.run("export-onnx", world.model, tmp_path / "onnx", "--int8")
    assert r.code == 0, r.err
    assert r.out.startswith("wrote image_encoder.onnx, text_encoder.onnx, image_encoder.int8.onnx, "
                            "text_encoder.int8.onnx to") and "max |ONNX - PyTorch|: image " in r.out
    record = json.loads((tmp_path / "onnx" / "tokenspace_export.json").read_text())
    assert record["format"] == "onnx" and record["checked"]["max_abs_diff"]["text"] <= 1e-4
    model = load(world.model)
    ids, mask = model.tokenize(["a red dog", "a blue car and a green tree"])
    got = session(tmp_path / "onnx" / "text_encoder.onnx").run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    np.testing.assert_allclose(got, model.encode_texts(["a red dog", "a blue car and a green tree"]).to_dense(),
                               atol=1e-4, rtol=0)


def test_export_onnx_refusals_are_one_line(world, tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep")
    r = world.run("export-onnx", world.model, precious)
    assert r.code == 1 and "not a previous export-onnx export" in r.error_line()
    assert [p.name for p in precious.iterdir()] == ["notes.txt"]
    r = world.run("export-onnx", world.model_config, tmp_path / "o")  # a config: untrained heads, refused
    assert r.code == 1 and "pretrained=False" in r.error_line() and not (tmp_path / "o").exists()
    r = world.run("export-onnx", world.model, tmp_path / "o", "--tol", "0")
    assert r.code == 2 and "--tol: must be a positive finite number" in r.err
