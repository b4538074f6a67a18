"""`tokenspace train` ends with the held-out metrics its trainer computed (log.jsonl), as a table."""
from __future__ import annotations

import json

from tokenspace.cli.run.train import metrics_table


def test_train_ends_with_its_held_out_metrics(world, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    spec = json.loads(world.recipe.read_text())
    spec["data"]["eval"] = [f"{world.manifest}:test"]
    spec["eval_every"] = 1
    recipe.write_text(json.dumps(spec))
    r = world.run("train", "--recipe", recipe, "--out", tmp_path / "run")
    assert r.code == 0, r.err
    assert "held-out metrics at step 2 on " in r.out and "tiny.jsonl:test" in r.out
    assert "image retrieval" in r.out and "text retrieval" in r.out and "R@1" in r.out


def test_metrics_table_shapes():
    flat = {"image_retrieval_recall@1": 0.5, "text_retrieval_recall@1": 0.25, "image_retrieval_recall@5": 1.0,
            "mean_recall": 0.5, "n_images": 4.0, "n_texts": 4.0, "extra": 2}
    out = metrics_table(flat, 10, ["a:test"])
    assert out.splitlines()[0] == "held-out metrics at step 10 on a:test:"
    assert "0.500   1.000" in out and "0.250       -" in out and "4 images, 4 texts" in out and "extra 2" in out
    assert "spec:" in metrics_table({"spec": flat}, 1)  # one block per data spec
    assert "names no data.eval" in metrics_table(None, None)
    assert "holds no evaluation" in metrics_table({}, None, ["a:test"])
