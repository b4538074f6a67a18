"""Load test of the HTTP service on loopback: N keep-alive connections for D seconds, 0 errors expected.

    python -m benchmarks.serve_load                                  # the tiny world (model built in code)
    python -m benchmarks.serve_load --model runs/demo/stair-emoji/model --index runs/demo/index
    python -m benchmarks.serve_load --connections 32 --duration 30 --write docs/benchmarks.md

The server runs in its own process (uvicorn, as `tokenspace serve` runs it) so that the client's event
loop does not share its interpreter. The client is asyncio + httpx: each connection loops over a mix of
requests (80% POST /search with mostly distinct texts, so the query cache rarely helps, some with
filters; 10% GET /explain/{id}; 10% GET /image/{id}). Any non-200 answer or transport error counts as
an error. Latency percentiles are over all requests and per endpoint.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import run_record, write_json

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["red", "blue", "green", "dog", "cat", "car", "tree", "house", "sun", "moon", "star", "face", "smile",
         "heart", "fish", "bird", "ball", "hat", "big", "small"]
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "the", "with", "on", "and"] + WORDS


# ---------------------------------------------------------------------------------------------- server side
def build_tiny_world(out: Path, n_images: int = 200, seed: int = 0) -> tuple[Path, Path]:
    """A tiny STAIR model saved to out/model and an index of n drawn images in out/index."""
    import torch
    from PIL import Image

    from tokenspace.data.manifest import Record
    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model
    from tokenspace.pipeline import write_collection_meta
    from tokenspace.vocab import Vocabulary

    vocab = Vocabulary(TINY_VOCAB, name="tiny")
    torch.manual_seed(seed)
    config = ModelConfig(
        name="tiny-stair", family="stair", image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
        text_tower={"type": "bert-mlm", "config": {
            "vocab_size": len(vocab), "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 32, "max_position_embeddings": 64}},
        embed_dim=8, max_text_len=16)
    model = build_model(config, vocab=vocab)
    model.save_pretrained(out / "model")
    rng = np.random.default_rng(seed)
    (out / "images").mkdir(parents=True, exist_ok=True)
    records = []
    for i in range(n_images):
        arr = np.full((32, 32, 3), 255, np.uint8)
        r, c = rng.integers(0, 24, 2)
        arr[r : r + 8, c : c + 8] = rng.integers(0, 255, 3)
        path = out / "images" / f"img{i:04d}.png"
        Image.fromarray(arr).save(path)
        records.append(Record(id=f"img{i:04d}", image=str(path), text=f"a {' '.join(rng.choice(WORDS, 2))}",
                              split="test"))
    vectors = model.encode_image([r.image for r in records])
    from tokenspace.index import InvertedIndex

    InvertedIndex.build(vectors, [r.id for r in records]).save(out / "index")
    write_collection_meta(out / "index", records, out / "model")
    return out / "model", out / "index"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, index: Path, port: int) -> subprocess.Popen:
    # exactly what `tokenspace serve` runs
    code = ("from tokenspace.serve.app import run; import sys; "
            "run(model=sys.argv[1], index=sys.argv[2], host='127.0.0.1', port=int(sys.argv[3]))")
    cmd = [sys.executable, "-c", code, str(model), str(index), str(port)]
    proc = subprocess.Popen(cmd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    import httpx

    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not answer /healthz within 120 s")


# ---------------------------------------------------------------------------------------------- client side
def make_request(rng: random.Random, ids: list[str], vocab_words: list[str]):
    """(endpoint label, method, path, json body) drawn from the mix."""
    x = rng.random()
    if x < 0.8:
        words = rng.sample(vocab_words, k=min(3, len(vocab_words)))
        body = {"text": "a " + " ".join(words) + f" {rng.randrange(10_000)}", "k": 10}
        if x < 0.2:
            body["must_not"] = [words[0]]
        elif x < 0.3:
            body["where"] = f"{words[1]} OR {words[2]}"
        return "POST /search", "POST", "/search", body
    doc = rng.choice(ids)
    if x < 0.9:
        return "GET /explain", "GET", f"/explain/{doc}", None
    return "GET /image", "GET", f"/image/{doc}", None


async def run_load(base: str, connections: int, duration: float, ids: list[str], words: list[str], seed: int = 0):
    import httpx

    results: list[tuple[str, float, bool]] = []
    errors: dict[str, int] = {}
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:
        stop = time.perf_counter() + duration

        async def worker(w: int):
            rng = random.Random(seed * 1000 + w)
            while time.perf_counter() < stop:
                label, method, path, body = make_request(rng, ids, words)
                t0 = time.perf_counter()
                try:
                    r = await client.request(method, path, json=body)
                    ok = r.status_code == 200
                    if not ok:
                        errors[f"{label} {r.status_code}"] = errors.get(f"{label} {r.status_code}", 0) + 1
                except httpx.HTTPError as e:
                    ok = False
                    errors[f"{label} {type(e).__name__}"] = errors.get(f"{label} {type(e).__name__}", 0) + 1
                results.append((label, time.perf_counter() - t0, ok))

        # warm-up, untimed: the index's numba kernels compile on their first calls (seconds), which is
        # start-up cost, not steady-state latency
        rng = random.Random(-1)
        for _ in range(20):
            _, method, path, body = make_request(rng, ids, words)
            await client.request(method, path, json=body)
        stop = time.perf_counter() + duration
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(connections)))
        elapsed = time.perf_counter() - t0
    return results, errors, elapsed


def summarise(results, errors, elapsed) -> dict:
    def pct(lat):
        lat = np.asarray(lat) * 1000
        return {"n": len(lat), "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99))}

    out = {"requests": len(results), "errors": int(sum(errors.values())), "error_kinds": errors,
           "elapsed_s": elapsed, "rps": len(results) / elapsed, **pct([r[1] for r in results])}
    out["by_endpoint"] = {lab: pct([r[1] for r in results if r[0] == lab]) for lab in sorted({r[0] for r in results})}
    return out


def markdown(s: dict, args, world: str) -> str:
    rows = ["| endpoint | requests | p50 (ms) | p99 (ms) |", "| --- | ---: | ---: | ---: |",
            f"| all | {s['requests']:,} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} |"]
    rows += [f"| {k} | {v['n']:,} | {v['p50_ms']:.1f} | {v['p99_ms']:.1f} |" for k, v in s["by_endpoint"].items()]
    return (f"Load test of `tokenspace serve` on loopback: {args.connections} keep-alive connections for "
            f"{args.duration:g} s ({world}); the client (asyncio + httpx) and the server (one uvicorn process) "
            f"share the machine's {os.cpu_count()} cores with whatever else runs there.\n\n"
            f"**{s['requests']:,} requests, {s['errors']} errors, {s['rps']:.0f} requests/s.**\n\n" + "\n".join(rows)
            + "\n\nMix: 80% POST /search (mostly distinct texts, so most queries go through the text tower; 20% "
              "with a must_not filter, 10% with a boolean `where`), 10% GET /explain/{id}, 10% GET /image/{id}. "
              "Every hit is explained token by token in the response.\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", help="model folder (default: a tiny STAIR model built in code)")
    p.add_argument("--index", help="index folder with collection.json (default: the tiny world)")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--tiny-images", type=int, default=200)
    p.add_argument("--write", help="markdown file whose 'serve' section gets the figures (e.g. docs/benchmarks.md)")
    p.add_argument("--json", help="also write the summary as JSON here")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        if args.index:
            model, index, world = Path(args.model), Path(args.index), f"index {args.index}"
        else:
            model, index = build_tiny_world(Path(tmp), args.tiny_images)
            world = f"tiny world: {args.tiny_images} drawn images, a tiny STAIR model built in code"
        from tokenspace.pipeline import read_collection_meta

        ids = list(read_collection_meta(index)["items"])
        port = free_port()
        server = start_server(model, index, port)
        try:
            from tokenspace.models.registry import load

            vocab = load(model).vocab  # query words: plain tokens of the model's vocabulary
            words = [t for t in vocab.tokens if t.isalpha() and t.islower() and len(t) > 2][:5000] or WORDS
            results, errors, elapsed = asyncio.run(
                run_load(f"http://127.0.0.1:{port}", args.connections, args.duration, ids, words))
        finally:
            server.terminate()
            server.wait(10)
    s = summarise(results, errors, elapsed)
    print(json.dumps({k: v for k, v in s.items()}, indent=2))
    record = run_record(__file__, argv)
    if args.json:
        write_json(args.json, s, record)
    if args.write:
        from tokenspace.eval import ResultsDoc

        ResultsDoc(args.write).update("serve", markdown(s, args, world), record["command"],
                                      heading="HTTP service under load")
    return 0 if s["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
