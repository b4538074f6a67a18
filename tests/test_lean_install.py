"""The lean install: `pip install tokenspace` (no extra) indexes nothing itself but searches, exports and serves
an index built elsewhere, with text queries from an inference-free model's stored table, and no torch.

The package is built as a wheel from this tree and installed with --no-deps into a fresh venv (no
network); its core dependencies, and only those (the wheel's Requires-Dist without extras, followed
through their own requirements), are the ones this venv has installed, linked into a folder the fresh
venv reads through a .pth file (benchmarks/lean_search.py: make_lean_venv, which its timing shares). So
an import of anything else (torch, transformers) fails there as it would on a user's machine, and a core
dependency missing from pyproject.toml fails the test."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest

from benchmarks.lean_search import make_lean_venv
from tokenspace.cli import main

pytestmark = pytest.mark.slow  # a wheel build, a venv and three fresh processes: about a minute


@pytest.fixture
def lean(make_model, tiny_manifest, tmp_path, monkeypatch, restore_cli_logging):
    """(the fresh venv's bin folder, an index built with an inference-free model, its environment)."""
    home = tmp_path / "home"
    monkeypatch.setenv("TOKENSPACE_HOME", str(home))
    make_model("stair").save_pretrained(tmp_path / "model")
    assert main(["sparsify", "--inference-free", str(tmp_path / "model"), "--data", f"{tiny_manifest}:train",
                 "--weights", "idf", "--out", str(tmp_path / "if-model")]) == 0
    assert main(["index", "build", "--model", str(tmp_path / "if-model"), "--data", f"{tiny_manifest}:train",
                 "--out", str(tmp_path / "idx"), "--tower", "torch", "--workers", "0"]) == 0

    bin_ = make_lean_venv(tmp_path / "lean")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(TOKENSPACE_HOME=str(home), NUMBA_CACHE_DIR=str(tmp_path / "numba"), PATH=str(bin_))
    return bin_, tmp_path / "idx", env


def _run(env, *argv, timeout=300) -> subprocess.CompletedProcess:
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, timeout=timeout)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_lean_package_searches_exports_and_serves_without_torch(lean, tmp_path, capsys):
    bin_, idx, env = lean
    py = bin_ / "python"
    p = _run(env, py, "-c", "import importlib.util as u, tokenspace.searcher, tokenspace.serve.app, sys; "
                            "print(u.find_spec('torch'), u.find_spec('transformers'), 'torch' in sys.modules)")
    assert p.returncode == 0 and p.stdout.split() == ["None", "None", "False"], p.stderr

    # the same hits and scores as the full install's search with the full model
    capsys.readouterr()
    assert main(["search", "--index", str(idx), "a red dog", "a blue car", "-k", "4", "--json"]) == 0
    want = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    p = _run(env, bin_ / "tokenspace", "search", "--index", idx, "a red dog", "a blue car", "-k", "4", "--json")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    got = [json.loads(line) for line in p.stdout.splitlines()]
    for g, w in zip(got, want, strict=True):
        assert [h["id"] for h in g["hits"]] == [h["id"] for h in w["hits"]]
        assert all(abs(a["score"] - b["score"]) < 1e-5 for a, b in zip(g["hits"], w["hits"]))

    p = _run(env, bin_ / "tokenspace", "search", "--index", idx, "--image", tmp_path / "red-dog.png")
    assert p.returncode == 1 and "needs torch" in p.stderr and "tokenspace[models]" in p.stderr, p.stderr
    p = _run(env, bin_ / "tokenspace", "index", "export", idx, "--out", tmp_path / "docs.jsonl")
    assert p.returncode == 0 and len((tmp_path / "docs.jsonl").read_text().splitlines()) == 12, p.stderr

    port = _free_port()
    server = subprocess.Popen([str(bin_ / "tokenspace"), "serve", "--index", str(idx), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        body = None
        for _ in range(600):
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/search", method="POST",
                                             data=json.dumps({"text": "a red dog", "k": 4}).encode(),
                                             headers={"Content-Type": "application/json"})
                body = json.loads(urllib.request.urlopen(req, timeout=5).read())
                break
            except OSError:
                assert server.poll() is None, server.communicate()[1]
                time.sleep(0.2)
        assert body is not None and [h["id"] for h in body["hits"]] == [h["id"] for h in want[0]["hits"]]
    finally:
        server.terminate()
        server.wait(timeout=60)
