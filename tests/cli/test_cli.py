"""Every `tokenspace` subcommand as a subprocess on tiny data: exit 0 and the expected output; bad input
(missing file, malformed manifest or recipe, unknown model, empty or missing index, non-image, non-tar,
pathological --where) gives exit 1 and one error line; usage errors exit 2. `run_cli` asserts that no
"Traceback" reaches stdout or stderr in every call. (`demo` trains two models on the real emoji data,
minutes of work: only its argument checks run here; its steps are each covered by a command below.)
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from _cli_world import run_cli  # tests/cli/_cli_world.py (pytest puts tests/cli on sys.path)

from tokenspace.cli import COMMANDS, build_parser, main
from tokenspace.eval.retrieval import metric_label


# ------------------------------------------------------------------------------ parser (in process)
def _parsers(p: argparse.ArgumentParser):
    yield p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                yield from _parsers(sub)


def test_every_option_and_argument_has_help():
    missing = [f"{p.prog} {a.dest}" for p in _parsers(build_parser()) for a in p._actions
               if not isinstance(a, argparse._SubParsersAction) and not (a.help and a.help.strip())]
    assert not missing, missing


@pytest.mark.parametrize("argv", [
    ["encode", "--model", "m", "--shards", "s.tar", "--index", "i", "--part-size", "0"],
    ["encode", "--model", "m", "--shards", "s.tar", "--index", "i", "--part-size", "-1"],
    ["encode", "--model", "m", "--shards", "s.tar", "--index", "i", "--batch-size", "0"],
    ["serve", "--model", "m", "--index", "i", "--port", "99999"],
    ["serve", "--model", "m", "--index", "i", "--port", "http"],
    ["demo", "--port", "0"],
    ["index", "build", "--model", "m", "--data", "d", "--out", "o", "--top-n", "0"],
    ["index", "export", "i", "--out", "o", "--format", "parquet"],
    ["index", "export", "i", "--out", "o", "--format", "jsonl-int", "--scale", "nan"],
    ["search", "--index", "i", "a dog", "-k", "0"],
    ["search", "--index", "i"],  # no query
    ["decode", "--model", "m"],  # nothing to decode
    ["sparsify", "--dense", "d", "--data", "emoji:train", "--out", "o", "--steps", "0"],
    ["no-such-command"],
    [],
])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


# ------------------------------------------------------------------------------ subprocesses
def test_version_and_help(tmp_path):
    from tokenspace import __version__

    r = run_cli("--version", home=tmp_path)
    assert r.code == 0 and r.out.strip() == f"tokenspace {__version__}"
    r = run_cli("--help", home=tmp_path)
    assert r.code == 0 and "exit codes" in r.out
    for cmd in ("assets", "data", "train", "eval", "encode", "index", "search", "decode", "demo", "serve"):
        assert f"\n    {cmd}" in r.out or f" {cmd} " in r.out, cmd


def test_help_imports_only_the_chosen_command_module():
    """`tokenspace --help` lists every command without importing one (no torch, numba, fastapi); a command
    imports its own module (tokenspace/cli/<command>.py) and no other command's."""
    code = ("import sys\nfrom tokenspace.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('tokenspace.cli.') or m in ('torch', 'numba', "
            "'fastapi')))")

    def loaded(*argv):
        p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        return p.stdout.splitlines()[-1]

    assert loaded("--help") == "['tokenspace.cli.common']"
    assert loaded("data", "--help") == "['tokenspace.cli.common', 'tokenspace.cli.data']"
    # a command's --help imports its arguments module only: no torch (`search --help` once took 2 s)
    for cmd in COMMANDS:
        module = f"tokenspace.cli.{COMMANDS[cmd][0]}"
        assert loaded(cmd, "--help") == str(sorted(["tokenspace.cli.common", module])), cmd
    assert loaded("index", "export", "--help") == "['tokenspace.cli.common', 'tokenspace.cli.index']"
    # a usage error too is reported before any library loads
    assert loaded("search", "--index", "i", "-k", "0") == "['tokenspace.cli.common', 'tokenspace.cli.search']"


def test_python_m_tokenspace_is_the_command():
    from tokenspace import __version__

    for module in ("tokenspace", "tokenspace.cli"):
        p = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and p.stdout.strip() == f"tokenspace {__version__}", p.stderr


def test_index_build_stats_and_bad_inputs(world, tmp_path):
    out = tmp_path / "idx"
    r = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:test", "--out", out,
                  "--top-n", "3")
    assert r.code == 0, r.err
    assert r.out.startswith(f"indexed 3 images into {out}")
    from tokenspace.index import InvertedIndex

    index = InvertedIndex.load(out)
    assert len(index) == 3 and max(len(index.get([i]).row(0)[0]) for i in index.ids()) <= 3  # --top-n honoured
    r = world.run("index", "stats", out)
    assert r.code == 0 and json.loads(r.out)

    # every image unreadable: an empty index nobody asked for is an error, and none is written
    r = world.run("index", "build", "--model", world.model, "--data", f"{world.unreadable}:test", "--out",
                  tmp_path / "none")
    assert r.code == 1 and "no readable images" in r.error_line()
    assert not (tmp_path / "none" / "MANIFEST.json").exists()
    for data in (f"{world.malformed}:test", f"{tmp_path / 'missing.jsonl'}:test"):
        r = world.run("index", "build", "--model", world.model, "--data", data, "--out", tmp_path / "x")
        assert r.code == 1, r.err
        assert Path(data.split(":")[0]).name in r.error_line() or "manifest" in r.error_line(), r.err
    r = world.run("index", "build", "--model", "no-such-model", "--data", f"{world.manifest}:test",
                  "--out", tmp_path / "x")
    assert r.code == 1 and "no-such-model" in r.error_line()
    r = world.run("index", "build", "--model", tmp_path / "no" / "model", "--data", f"{world.manifest}:test",
                  "--out", tmp_path / "x")
    assert r.code == 1 and "no model at" in r.error_line()
    r = world.run("index", "stats", tmp_path / "nowhere")
    assert r.code == 1 and "no index at" in r.error_line()


def test_index_build_reorder_finds_the_same_hits(world, tmp_path):
    from tokenspace.index import InvertedIndex
    from tokenspace.index.reorder import cluster_order

    out = tmp_path / "reordered"
    data = [f"{world.manifest}:train", f"{world.manifest}:test"]
    r = world.run("index", "build", "--model", world.model, "--data", *data, "--out", out, "--reorder")
    assert r.code == 0, r.err
    plain, reordered = InvertedIndex.load(world.index), InvertedIndex.load(out)
    ids = plain.ids()
    assert reordered.ids() == [ids[i] for i in cluster_order(plain.get(ids))]  # the flag reached the library
    for q in ("a red dog", "a blue cat"):
        a, b = (world.run("search", "--index", i, q, "-k", "5") for i in (world.index, out))
        assert a.code == b.code == 0 and a.out.splitlines()[1:] == b.out.splitlines()[1:], (a.out, b.out)


def test_index_build_without_impact_heads_is_smaller_and_finds_the_same_hits(world, tmp_path):
    from tokenspace.index import InvertedIndex

    out = tmp_path / "bare"
    data = [f"{world.manifest}:train", f"{world.manifest}:test"]
    r = world.run("index", "build", "--model", world.model, "--data", *data, "--out", out, "--no-impact-heads")
    assert r.code == 0, r.err
    plain, bare = InvertedIndex.load(world.index).stats(), InvertedIndex.load(out).stats()
    assert plain["impact_heads"] and not bare["impact_heads"]  # the flag reached the library
    assert bare["index_bytes"] < plain["index_bytes"]
    for q in ("a red dog", "a blue cat"):
        a, b = (world.run("search", "--index", i, q, "-k", "5") for i in (world.index, out))
        assert a.code == b.code == 0 and a.out.splitlines()[1:] == b.out.splitlines()[1:], (a.out, b.out)


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl-int", "opensearch"])
def test_index_export_every_format(world, tmp_path, fmt):
    out = tmp_path / ("bulk" if fmt == "opensearch" else "docs.jsonl")
    r = world.run("index", "export", world.index, "--format", fmt, "--out", out)
    assert r.code == 0, r.err
    assert "wrote 12 documents" in r.out
    if fmt == "opensearch":
        assert (out / "mapping.json").exists()
        lines = [json.loads(x) for f in sorted(out.glob("bulk-*.ndjson")) for x in f.read_text().splitlines()]
        assert len(lines) == 24  # an action line and a source line per document
        return
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 12 and {r["id"] for r in rows} == {p.stem for p in world.images}
    weights = [w for r in rows for w in r["vector"].values()]
    assert weights and all(w > 0 for w in weights)
    if fmt == "jsonl-int":
        assert all(isinstance(w, int) and w >= 1 for w in weights)
    else:
        assert any(isinstance(w, float) for w in weights)


def test_index_export_of_an_empty_or_missing_index(world, tmp_path):
    r = world.run("index", "export", world.empty_index, "--out", tmp_path / "e.jsonl")
    assert r.code == 1 and "is empty" in r.error_line()
    r = world.run("index", "export", tmp_path / "nowhere", "--out", tmp_path / "e.jsonl")
    assert r.code == 1 and "no index at" in r.error_line()
    r = world.run("index", "stats", world.empty_index)  # stats of an empty index are fine
    assert r.code == 0


def test_search_and_its_bad_inputs(world, tmp_path):
    r = world.run("search", "--index", world.index, "a red dog", "-k", "3")
    assert r.code == 0, r.err
    assert "query: a red dog" in r.out and "query tokens:" in r.out
    r = world.run("search", "--index", world.index, "--image", world.images[0], "-k", "2")
    assert r.code == 0 and f"query: {world.images[0]}" in r.out, r.err

    not_image = tmp_path / "notes.png"
    not_image.write_text("not an image")
    bad = {
        "no index at": ["--index", tmp_path / "nonexistent", "a dog"],
        "is empty": ["--index", world.empty_index, "--model", world.model, "a dog"],
        "nested deeper": ["--index", world.index, "a dog", "--where", "(" * 10_000 + "dog" + ")" * 10_000],
        "position": ["--index", world.index, "a dog", "--where", "dog AND (cat"],
        "unknown token": ["--index", world.index, "a dog", "--where", "zebra"],
        "notes.png": ["--index", world.index, "--image", not_image],
        "missing.png": ["--index", world.index, "--image", tmp_path / "missing.png"],
    }
    for words, args in bad.items():
        r = world.run("search", *args)
        assert r.code == 1, (words, r.err)
        assert words in r.error_line(), (words, r.err)


def test_decode_texts_images_and_bad_inputs(world, tmp_path):
    r = world.run("decode", "--model", world.model, "--text", "a red dog", "a blue car", "-k", "4")
    assert r.code == 0, r.err
    assert "a red dog:" in r.out and "a blue car:" in r.out
    r = world.run("decode", "--model", world.model, "--image", *world.images[:2], "-k", "4")
    assert r.code == 0 and f"{world.images[1]}:" in r.out, r.err
    not_image = tmp_path / "notes.txt"
    not_image.write_text("not an image")
    for path in (not_image, tmp_path / "missing.png"):
        r = world.run("decode", "--model", world.model, "--image", path)
        assert r.code == 1 and path.name in r.error_line(), r.err
    r = world.run("decode", "--model", "no-such-model", "--text", "a dog")
    assert r.code == 1 and "no-such-model" in r.error_line()


def test_encode_resumes_and_refuses_bad_shards(world, tmp_path):
    index = tmp_path / "big"
    args = ("encode", "--model", world.model, "--shards", world.shards, "--index", index, "--part-size", "5")
    r = world.run(*args)
    assert r.code == 0, r.err
    assert "indexed 12 of 12 samples" in r.out
    assert len(list((tmp_path / "big.parts").glob("part-*.npz"))) == 3
    r = world.run(*args)  # a rerun finds every part in the index: nothing doubled
    assert r.code == 0 and "indexed 12 of 12 samples" in r.out, r.err
    # the default tower (auto: ONNX Runtime where installed) and PyTorch's encode the same rows
    r = world.run("encode", "--model", world.model, "--shards", world.shards, "--index", tmp_path / "t",
                  "--part-size", "5", "--tower", "torch", "--workers", "0")
    assert r.code == 0 and "indexed 12 of 12 samples" in r.out, r.err
    for k in range(3):
        auto, torch_ = (np.load(tmp_path / f"{d}.parts" / f"part-{k:06d}.npz") for d in ("big", "t"))
        np.testing.assert_array_equal(auto["indices"], torch_["indices"])
        np.testing.assert_allclose(auto["values"], torch_["values"], atol=1e-4)
    r = world.run(*args, "--workers", "-1")
    assert r.code == 2 and "must be 0 or more" in r.err
    r = world.run("encode", "--model", world.model, "--shards", world.not_a_tar, "--index", tmp_path / "x")
    assert r.code == 1 and "tar" in r.error_line()
    r = world.run("encode", "--model", world.model, "--shards", tmp_path / "missing.tar", "--index", tmp_path / "x")
    assert r.code == 1 and "not found" in r.error_line()


def test_eval_prints_and_writes_metrics(world, tmp_path):
    r = world.run("eval", "--model", world.model, "--data", f"{world.manifest}:test", "--json", tmp_path / "m.json")
    assert r.code == 0, r.err
    metrics = json.loads((tmp_path / "m.json").read_text())
    (spec, values), = metrics.items()
    assert spec in r.out and values and all(f"{metric_label(k):24s}" in r.out for k in values)
    r = world.run("eval", "--model", world.model, "--data", f"{world.malformed}:test")
    assert r.code == 1
    r.error_line()


def test_train_and_bad_recipes(world, tmp_path):
    r = world.run("train", "--recipe", world.recipe, "--out", tmp_path / "run")
    assert r.code == 0, r.err
    assert (tmp_path / "run" / "model" / "model.safetensors").exists() and "trained" in r.out
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("name: [unclosed\nmodel: x\n")
    cases = {
        "--set batch_size=[unclosed": ["--recipe", world.recipe, "--set", "batch_size=[unclosed"],
        "KEY=VALUE": ["--recipe", world.recipe, "--set", "batch_size"],
        "bad.yaml": ["--recipe", bad_yaml],
        "no-such-recipe": ["--recipe", "no-such-recipe"],
    }
    for words, args in cases.items():
        r = world.run("train", *args, "--out", tmp_path / "bad-run")
        assert r.code == 1, (words, r.err)
        assert words in r.error_line(), (words, r.err)



def test_sparsify_a_dense_model_and_bad_inputs(world, tmp_path):
    import torch

    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model, load

    config = ModelConfig.load(world.model_config)
    config.family, config.extra = "dense", {}
    torch.manual_seed(0)
    build_model(config).save_pretrained(tmp_path / "dense")
    r = world.run("sparsify", "--dense", tmp_path / "dense", "--data", f"{world.manifest}:train",
                  "--out", tmp_path / "run", "--steps", "2", "--set", "batch_size=4")
    assert r.code == 0, r.err
    model = load(tmp_path / "run" / "model")
    assert model.family == "sparsified" and model.sparse and "sparsified" in r.out
    cases = {
        "no trained model folder": ["--dense", tmp_path / "nowhere"],
        "already sparse": ["--dense", world.model],  # the world's model is STAIR
        "unknown dataset 'nonsense'": ["--dense", tmp_path / "dense", "--data", "nonsense:train"],
        "malformed.jsonl": ["--dense", tmp_path / "dense", "--data", f"{world.malformed}:train"],
    }
    for words, args in cases.items():
        args = args if "--data" in args else [*args, "--data", f"{world.manifest}:train"]
        r = world.run("sparsify", *args, "--out", tmp_path / "bad-run")
        assert r.code == 1, (words, r.err)
        assert words in r.error_line(), (words, r.err)

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_and_refuses_a_missing_index(world, tmp_path):
    r = world.run("serve", "--model", world.model, "--index", tmp_path / "nowhere")
    assert r.code == 1 and "nowhere" in r.error_line()
    _serve_answers(world)


def test_serve_from_two_processes_answers_and_stops(world):
    r = world.run("serve", "--index", world.index, "--processes", "0")
    assert r.code == 2 and "--processes" in r.err
    _serve_answers(world, "--processes", "2")


def _serve_answers(world, *extra):
    """`tokenspace serve` on the world's index answers /stats, then stops on SIGTERM without a traceback."""
    port = _free_port()
    script = Path(sys.executable).with_name("tokenspace")
    env = dict(os.environ, TOKENSPACE_HOME=str(world.home))
    # no --model: serve loads the model the index names (collection.json)
    proc = subprocess.Popen([str(script), "serve", "--index", str(world.index), "--port", str(port), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline, body = time.monotonic() + 120, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as resp:
                    body = json.loads(resp.read())
                break
            except OSError:
                time.sleep(0.5)
        assert body is not None and body["size"] == 12, proc.stderr.read() if proc.poll() is not None else "timeout"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err


def test_assets_status_and_data_build_on_an_empty_home(tmp_path):
    r = run_cli("assets", "status", "--fast", home=tmp_path / "home")
    assert r.code == 1 and r.out  # required assets missing: listed, exit 1
    r = run_cli("data", "build", "--out", tmp_path / "manifests", home=tmp_path / "home")
    assert r.code in (0, 1)
    if r.code == 1:
        r.error_line()

