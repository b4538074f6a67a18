"""`index build` records a ranking and a hub prior; `search` uses them, and its flags change them."""
from __future__ import annotations

from tokenspace.index import InvertedIndex


def test_build_with_a_hub_bank_then_search_shows_the_penalty(world, tmp_path):
    out = tmp_path / "idx"
    ran = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:test", "--out", out,
                    "--hub-bank", f"{world.manifest}:train", "--hub-k", "2", "--prior-weight", "0.5", "--idf", "0.5")
    assert ran.code == 0, ran.err
    meta = InvertedIndex.load(out).info  # the index records its ranking (manifest info)
    assert meta["ranking"]["idf"] == 0.5 and meta["ranking"]["prior_weight"] == 0.5
    assert InvertedIndex.load(out).hub_prior == {"k": 2, "weight": 0.5, "bank_size": 9, "ordered": True}  # 9 train captions
    ran = world.run("search", "--index", out, "a red dog", "-k", "3")
    assert ran.code == 0 and "hub penalty -" in ran.out, ran.err
    ran = world.run("search", "--index", out, "a red dog", "-k", "3", "--prior-weight", "0", "--idf", "0")
    assert ran.code == 0 and "hub penalty" not in ran.out, ran.err


def test_ranking_flags_are_checked_before_any_work(world, tmp_path):
    ran = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:test",
                    "--out", tmp_path / "a", "--prior-weight", "0.5")
    assert ran.code != 0 and "--hub-bank" in ran.error_line()
    ran = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:test",
                    "--out", tmp_path / "b", "--hub-bank", "nosuchset:train")
    assert ran.code != 0 and "nosuchset" in ran.error_line() and not (tmp_path / "b").exists()
    ran = world.run("search", "--index", world.index, "a red dog", "--prior-weight", "1")
    assert ran.code != 0 and "no hub prior" in ran.error_line()
    ran = world.run("search", "--index", world.index, "a red dog", "--idf", "-1")
    assert ran.code != 0 and "--idf" in ran.err


def test_build_down_weights_generic_tokens(world, tmp_path):
    out = tmp_path / "g"
    ran = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:test", "--out", out,
                    "--generic-share", "0.5")
    assert ran.code == 0, ran.err
    assert InvertedIndex.load(out).token_filter.renormalize
    ran = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:test",
                    "--out", tmp_path / "h", "--generic-share", "2")
    assert ran.code != 0 and "--generic-share" in ran.error_line()
