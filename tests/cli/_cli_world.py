"""A tiny world on disk for running the `tokenspace` command: a saved tiny STAIR model, 12 coloured-square
PNGs with captions in a manifest, an index of them, webdataset shards, a recipe.

Built once per module; the fixtures of tests/conftest.py are per test, so the few lines that make the tiny
model are repeated here. Commands run in this process by default (``cli.main`` with the streams, file
descriptors, warnings, logging and $TOKENSPACE_HOME of a fresh process): a fresh interpreter costs seconds
of imports per call and checks nothing more. ``fresh=True`` runs the installed console script in a
subprocess, for what only a process shows (signals, exit on kill, the console script itself).
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

# "broken": the README's `--where "heart AND NOT broken"` (tests/cli/test_readme.py)
WORDS = ["a", "red", "blue", "green", "dog", "cat", "car", "tree", "heart", "and", "broken"]
COLORS = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 200, 30)}
SHAPES = ["dog", "cat", "car", "tree"]


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def error_line(self) -> str:
        """The one error line (log lines may precede it); fails unless there is exactly one."""
        lines = [ln for ln in self.err.splitlines() if ln.startswith("tokenspace") and "error" in ln]
        assert len(lines) == 1, self.err
        return lines[0]


def run_cli(*args: str, home: Path, timeout: float = 600, fresh: bool = False) -> Ran:
    """`tokenspace ARGS` (in this process, or with ``fresh`` the installed console script in a new one);
    never a traceback."""
    if fresh:
        script = Path(sys.executable).with_name("tokenspace")
        cmd = [str(script)] if script.exists() else [sys.executable, "-m", "tokenspace.cli"]
        env = dict(os.environ, TOKENSPACE_HOME=str(home), PYTHONUNBUFFERED="1")
        p = subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)
        ran = Ran(p.returncode, p.stdout, p.stderr)
    else:
        ran = _in_process([str(a) for a in args], home)
    assert "Traceback" not in ran.err and "Traceback" not in ran.out, ran.err
    return ran


# what a fresh interpreter shows: each warning once per place, deprecations outside __main__ hidden
_DEFAULT_FILTERS = (("ignore", DeprecationWarning), ("ignore", PendingDeprecationWarning),
                    ("ignore", ImportWarning), ("ignore", ResourceWarning))


def _in_process(argv: list[str], home: Path) -> Ran:
    """``main(argv)`` with what a subprocess would give it and show of it: $TOKENSPACE_HOME, stdout and
    stderr (Python's streams and the file descriptors, so C libraries' messages count too), warnings as
    printed lines, and a logging setup that does not outlive the call."""
    from tokenspace.cli import main

    logger = logging.getLogger("tokenspace")
    saved_log = logger.handlers[:], logger.level, logger.propagate
    saved_home = os.environ.get("TOKENSPACE_HOME")
    os.environ["TOKENSPACE_HOME"] = str(home)
    out, err = io.StringIO(), io.StringIO()
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as fd_out, tempfile.TemporaryFile() as fd_err:
        os.dup2(fd_out.fileno(), 1)
        os.dup2(fd_err.fileno(), 2)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                    warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")
                for action, category in _DEFAULT_FILTERS:
                    warnings.filterwarnings(action, category=category)
                try:
                    code = main(argv)
                except SystemExit as e:  # argparse's usage errors and --help
                    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
            logger.handlers[:], logger.level, logger.propagate = saved_log
            if saved_home is None:
                os.environ.pop("TOKENSPACE_HOME", None)
            else:
                os.environ["TOKENSPACE_HOME"] = saved_home
        fd_out.seek(0)
        fd_err.seek(0)
        shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught)
        return Ran(code, out.getvalue() + fd_out.read().decode(errors="replace"),
                   err.getvalue() + fd_err.read().decode(errors="replace") + shown)


def draw(color: str, shape: int, size: int = 32) -> Image.Image:
    img = np.full((size, size, 3), 255, np.uint8)
    q = size // 2
    r, c = divmod(shape, 2)
    img[r * q:(r + 1) * q, c * q:(c + 1) * q] = COLORS[color]
    return Image.fromarray(img)


@dataclass
class World:
    root: Path
    home: Path
    model: Path
    model_config: Path
    manifest: Path
    unreadable: Path  # a manifest whose images are all unreadable
    malformed: Path  # a manifest that is not JSONL records
    images: list[Path]
    index: Path
    empty_index: Path
    shards: Path
    not_a_tar: Path
    recipe: Path

    def run(self, *args, **kw) -> Ran:
        return run_cli(*args, home=self.home, **kw)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    import torch

    from tokenspace import pipeline
    from tokenspace.data.manifest import Record, write_manifest
    from tokenspace.index import InvertedIndex
    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model
    from tokenspace.vocab import SPECIAL_TOKENS, Vocabulary

    root = tmp_path_factory.mktemp("cli")
    home = root / "home"
    vocab = Vocabulary(list(SPECIAL_TOKENS) + WORDS, name="tiny")
    vocab.save(root / "vocab.txt")
    config = ModelConfig(
        name="tiny-stair", family="stair", vocab=str(root / "vocab.txt"),
        image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
        text_tower={"type": "bert-mlm", "config": {
            "vocab_size": len(vocab), "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 32, "max_position_embeddings": 64}},
        embed_dim=8, max_text_len=16)
    config.save(root / "model.json")
    torch.manual_seed(0)
    model = build_model(config, vocab=vocab)
    model.save_pretrained(root / "model")

    images, records, bad = [], [], []
    (root / "img").mkdir()
    for color in COLORS:
        for s, shape in enumerate(SHAPES):
            p = root / "img" / f"{color}-{shape}.png"
            draw(color, s).save(p)
            images.append(p)
            split = "train" if s < 3 else "test"
            records.append(Record(f"{color}-{shape}", str(p), f"a {color} {shape}", split))
            broken = root / "img" / f"broken-{color}-{shape}.png"
            broken.write_bytes(b"\x89PNG\r\n\x1a\n not a png")
            bad.append(Record(f"broken-{color}-{shape}", str(broken), f"a {color} {shape}", "test"))
    manifest = write_manifest(records, root / "tiny.jsonl")
    unreadable = write_manifest(bad, root / "unreadable.jsonl")
    malformed = root / "malformed.jsonl"
    malformed.write_text('{"id": "x", "image": \n[1, 2\nnot json at all\n')

    # the index `tokenspace index build` would write, built in-process (its own test runs the command)
    vectors, ids, recs = pipeline.encode_collection(model, [f"{manifest}:train", f"{manifest}:test"],
                                                    home=home, progress=False)
    InvertedIndex.build(vectors, ids).save(root / "index")
    pipeline.write_collection_meta(root / "index", recs, root / "model")
    InvertedIndex(len(vocab), vocab).save(root / "empty-index")

    shards = root / "shard-000000.tar"
    with tarfile.open(shards, "w") as tar:
        for p, r in zip(images, records):
            for name, data in ((f"{r.id}.png", p.read_bytes()), (f"{r.id}.txt", r.text.encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    not_a_tar = root / "notatar.tar"
    not_a_tar.write_bytes(b"this is not a tar file" * 50)

    recipe = root / "recipe.yaml"
    recipe.write_text(json.dumps({  # JSON is YAML
        "name": "tiny", "model": str(root / "model.json"), "batch_size": 4,
        "data": {"train": [f"{manifest}:train"]}, "stages": [{"name": "c", "steps": 2}]}))
    return World(root, home, root / "model", root / "model.json", manifest, unreadable, malformed, images,
                 root / "index", root / "empty-index", shards, not_a_tar, recipe)
