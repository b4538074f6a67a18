"""The command in a pipeline: the first line of a search is its best hit (no leading blank line), a reader
that stops early (`| head -1`) ends it quietly with exit 0 and nothing on stderr, --json gives one object per
query per line, and usage errors exit 2 with the nearest flag for a mistyped one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _command() -> list[str]:
    script = Path(sys.executable).with_name("tokenspace")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tokenspace"]


def test_one_query_prints_its_best_hit_first(world):
    r = world.run("search", "--index", world.index, "a red dog", "-k", "3")
    assert r.code == 0 and r.err == "", r.err
    lines = r.out.splitlines()
    assert lines[0].lstrip().startswith("1. "), r.out
    assert "query: a red dog" in r.out and "query tokens:" in r.out  # the query follows its hits


def test_several_queries_each_under_its_header_without_a_leading_blank_line(world):
    r = world.run("search", "--index", world.index, "a red dog", "a blue cat", "-k", "2")
    assert r.code == 0, r.err
    assert r.out.startswith("query: a red dog\n") and "\n\nquery: a blue cat\n" in r.out, r.out


def test_head_closes_the_pipe_and_the_search_ends_quietly(world):
    # enough queries for more output than a pipe holds (64 KiB): the writes after `head` left do fail
    queries = [f"a {c} {s}" for c in ("red", "blue", "green") for s in ("dog", "cat", "car", "tree")] * 20
    env = dict(os.environ, TOKENSPACE_HOME=str(world.home))
    search = subprocess.Popen([*_command(), "search", "--index", str(world.index), "-k", "5", *queries],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    head = subprocess.run(["head", "-1"], stdin=search.stdout, capture_output=True, text=True, timeout=300)
    search.stdout.close()
    err = search.stderr.read().decode()
    assert search.wait(timeout=300) == 0, err
    assert err == "", err
    assert head.stdout.startswith("query: a red dog") and head.stdout.count("\n") == 1, head.stdout


def test_json_lines_for_scripts(world):
    r = world.run("search", "--index", world.index, "a red dog", "a blue cat", "-k", "3", "--json")
    assert r.code == 0 and r.err == "", r.err
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert [row["query"] for row in rows] == ["a red dog", "a blue cat"]
    for row in rows:
        assert [h["rank"] for h in row["hits"]] == [1, 2, 3]
        hit = row["hits"][0]
        assert {"id", "score", "text", "tokens", "hub_penalty"} <= set(hit)
        # the contributions are the score: the explanation survives the format
        assert abs(sum(t["contribution"] for t in hit["tokens"]) - hit["hub_penalty"] - hit["score"]) < 1e-4
        assert row["query_tokens"] and row["notes"] == []


def test_a_mistyped_flag_gets_the_nearest_flag_and_exit_2(world):
    r = world.run("search", "--index", world.index, "--prior-wieght", "1", "cat")
    assert r.code == 2
    assert "did you mean --prior-weight?" in r.err and "usage: tokenspace search" in r.err, r.err
    r = world.run("index", "build", "--modle", world.model)
    assert r.code == 2 and "did you mean --model?" in r.err, r.err
    r = world.run("search", "--index", world.index, "--zzzzzz", "cat")
    assert r.code == 2 and "unrecognized arguments: --zzzzzz" in r.err and "did you mean" not in r.err


def test_an_empty_query_is_refused_before_anything_loads(world, tmp_path):
    # the model named does not exist: the refusal comes first, so no load is tried
    r = world.run("search", "--index", world.index, "--model", tmp_path / "no-model", "  ")
    assert r.code == 2 and "a query text is empty" in r.err and "no-model" not in r.err, r.err


def test_a_mistyped_command_gets_the_nearest_command(world):
    r = world.run("serach", "--index", world.index, "cat")
    assert r.code == 2 and "unknown command 'serach' (did you mean search?)" in r.err, r.err
    r = world.run("--log-level", "debug", "idnex", "stats", world.index)
    assert r.code == 2 and "did you mean index?" in r.err, r.err
