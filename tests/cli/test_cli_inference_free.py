"""`tokenspace sparsify --inference-free MODEL`: writes a model folder whose queries are the stored token
weights (each source), which `tokenspace search` uses on an index of the base model; bad combinations are
one error line with nothing written."""
import numpy as np

from tokenspace.models.inference_free import InferenceFreeModel
from tokenspace.models.registry import load


def test_sparsify_inference_free_writes_a_model_that_search_uses(world, tmp_path):
    for weights, source in (("idf", ["--data", f"{world.manifest}:train"]),
                            ("model", ["--data", f"{world.manifest}:train"]),
                            ("index-idf", ["--index", world.index])):
        out = tmp_path / weights
        r = world.run("sparsify", "--inference-free", world.model, *source, "--weights", weights, "--out", out,
                      "--text-top-n", "3")
        assert r.code == 0, r.err
        assert f"inference-free {world.model} ({weights} weights" in r.out
        model = load(out)
        assert isinstance(model, InferenceFreeModel) and model.config.options.weights == weights
        q = model.encode_query(["a red dog and a blue car"]).to_dense()
        assert 0 < (q > 0).sum() <= 3 and np.isclose(np.linalg.norm(q), 1.0)
    r = world.run("search", "--index", world.index, "--model", tmp_path / "idf", "a red dog", "-k", "2")
    assert r.code == 0, r.err


def test_sparsify_inference_free_refusals_are_one_line(world, tmp_path):
    cases = {
        "--steps: not with --inference-free": ["--data", f"{world.manifest}:train", "--steps", "3"],
        "--weights model: give --data": ["--index", world.index],  # the default weights
        "--weights index-idf: give --index DIR": ["--weights", "index-idf", "--data", f"{world.manifest}:train"],
        "unknown dataset 'nonsense'": ["--data", "nonsense:train"],
    }
    for words, args in cases.items():
        r = world.run("sparsify", "--inference-free", world.model, *args, "--out", tmp_path / "o")
        assert r.code == 1 and words in r.error_line(), (words, r.err)
    r = world.run("sparsify", "--dense", world.model, "--data", f"{world.manifest}:train", "--weights", "idf",
                  "--out", tmp_path / "o")
    assert r.code == 1 and "--weights: only with --inference-free" in r.error_line()
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep")
    r = world.run("sparsify", "--inference-free", world.model, "--data", f"{world.manifest}:train", "--out", precious)
    assert r.code == 1 and "not an empty folder" in r.error_line()
    assert [p.name for p in precious.iterdir()] == ["notes.txt"] and not (tmp_path / "o").exists()
