"""What a new user trips on at the command line (issue 32 items 1-8, issue 34 items 3-6): each test runs
the real `tokenspace` command on the tiny world of tests/cli/_cli_world.py and failed before its fix."""
from __future__ import annotations

import json
import shutil

from tokenspace.explain.hits import caption


def test_index_build_records_a_release_name_as_a_name(world, tmp_path):
    """32.1: `--model NAME` was recorded as <cwd>/NAME, so search without --model failed ("no model at")."""
    shutil.copytree(world.model, world.home / "models" / "tiny-release")  # a release model, by name
    out = tmp_path / "idx"
    r = world.run("index", "build", "--model", "tiny-release", "--data", f"{world.manifest}:test", "--out", out)
    assert r.code == 0, r.err
    assert json.loads((out / "collection.json").read_text())["model"] == "tiny-release"
    r = world.run("search", "--index", out, "a red dog", "-k", "2")  # no --model: the recorded name loads
    assert r.code == 0 and "query: a red dog" in r.out, r.err
    r = world.run("index", "export", out, "--out", tmp_path / "docs.jsonl", "--queries", _queries(tmp_path))
    assert r.code == 0, r.err
    # a model folder given by a relative path is recorded as its absolute path
    r = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:test",
                  "--out", tmp_path / "idx2")
    assert json.loads((tmp_path / "idx2" / "collection.json").read_text())["model"] == str(world.model.resolve())


def _queries(tmp_path):
    q = tmp_path / "queries.txt"
    q.write_text("a red dog\na blue car\n")
    return q


def test_index_build_says_how_many_images_it_indexed(world, tmp_path):
    """32.8: it printed the index's statistics as a JSON blob and no "indexed N images" line."""
    r = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:test", "--out",
                  tmp_path / "idx")
    assert r.code == 0, r.err
    assert r.out.strip() == f"indexed 3 images into {tmp_path / 'idx'} " \
                            f"(`tokenspace index stats {tmp_path / 'idx'}` for its statistics)"


def test_eval_says_the_direction_of_each_metric(world, tmp_path):
    """32.8: `eval` printed clip_benchmark's bare keys (image_retrieval_recall@1: which way?)."""
    r = world.run("eval", "--model", world.model, "--data", f"{world.manifest}:test", "--json", tmp_path / "m.json")
    assert r.code == 0, r.err
    assert "text→image recall@1" in r.out and "image→text recall@10" in r.out
    assert "image_retrieval" not in r.out
    (metrics,) = json.loads((tmp_path / "m.json").read_text()).values()
    assert "image_retrieval_recall@1" in metrics  # the file keeps the names other tools read


def test_captions_are_cut_at_a_word_with_an_ellipsis():
    """32.8: a hit's caption was cut at 60 characters, mid-word, with nothing saying so."""
    long = "a red dog sitting on the beach beside a blue car under a green tree at noon"
    assert caption(long) == "a red dog sitting on the beach beside a blue car under a …"
    assert caption("a red dog") == "a red dog"
    assert caption("x" * 80) == "x" * 59 + "…"
