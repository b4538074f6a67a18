"""Load test of the HTTP service on loopback: N keep-alive connections for D seconds, 0 errors expected, and
where the server's CPU goes (encode, search, explain, HTTP).

    python -m benchmarks.serve_load                       # the release model over runs/demo/index
    python -m benchmarks.serve_load --model runs/if-model --name inference-free   # another model, same index
    python -m benchmarks.serve_load --tiny                # the tiny world (a tiny STAIR model built in code)
    python -m benchmarks.serve_load --queries distinct --text-side model --no-batch --before response,blas  # as before
    python -m benchmarks.serve_load --model runs/serve-load/if-model --before loop,h11  # searches in the thread pool, h11
    python -m benchmarks.serve_load --processes 2         # two server processes on the port (serve/processes.py)
    python -m benchmarks.serve_load --json benchmarks/results/serve_load.json --write benchmarks/results/serve_load.md

The server runs in its own process, as `tokenspace serve` runs it (``Searcher.open`` then
``tokenspace.serve.app.run``: uvicorn), so that the client does not share its interpreter; with
``--processes N``, N of them on the one port (``serve/processes.py: run_processes``), each counted. The default
index is the demo's (`make demo` writes runs/demo/index; built here with `tokenspace index build` when
absent). Three loads, one after the other, each after an untimed warm-up:

* ``distinct``: POST /search, text only, every text distinct (three vocabulary words and a serial number):
  each request encodes its query, as users' queries do (nothing is cached);
* ``repeat``: POST /search, text only, the same 12 texts over and over: after the first of each, the query
  cache answers and only search, explanation and HTTP remain;
* ``mix``: 80% POST /search (mostly distinct texts; 20% with a must_not filter, 10% with a boolean
  ``where``), 10% GET /explain/{id}, 10% GET /image/{id}.

Every hit is explained token by token in each response. Any non-200 answer or transport error counts as
an error. The client is asyncio over raw sockets (``--client raw``: a request written as bytes, the
status line and Content-Length read back, the body read whole and not parsed, as wrk or hey do), so that
as much of the 2 cores as possible is the server's; ``--client httpx`` is the client this benchmark
used before (httpx's AsyncClient: about 1 ms of CPU per request on this machine). Latency percentiles
are over the requests of each load; the client's own CPU is reported too.

Where the server's CPU goes: the server process counts the CPU time (``time.thread_time``) of each
stage in the thread that runs it: ``encode`` (the text encoder's calls, one per batch of texts),
``search`` (the index's top-k), ``explain`` (the hits' rows, hub penalties and per-token contributions),
and the whole process's CPU (``os.times``) over the timed window; ``HTTP`` is the rest (uvicorn, FastAPI,
request and response models, JSON, threads). Threads that are not Python threads (OpenBLAS, torch's
OpenMP pool) are counted apart as ``pools``: their CPU belongs to the encoder and the kernels.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.common import run_record, write_json

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["red", "blue", "green", "dog", "cat", "car", "tree", "house", "sun", "moon", "star", "face", "smile",
         "heart", "fish", "bird", "ball", "hat", "big", "small"]
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "the", "with", "on", "and"] + WORDS
RELEASE = "tokenspace-stair-drawings"
DEMO_INDEX = ROOT / "runs" / "demo" / "index"
LOADS = ("distinct", "repeat", "mix")


# ---------------------------------------------------------------------------------------------- the world
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


def demo_index(path: Path = DEMO_INDEX) -> Path:
    """The demo's index (the release model over the demo's drawings, as `make demo` builds it), built with
    `tokenspace index build` when absent."""
    if not (path / "MANIFEST.json").exists():
        from tokenspace.demo import INDEX_SPECS  # the demo's own data specs

        subprocess.run([sys.executable, "-m", "tokenspace", "index", "build", "--model", RELEASE,
                        "--data", *INDEX_SPECS, "--out", str(path)], check=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------- server side
class StageClock:
    """CPU seconds of each stage of the server's work, counted in the thread that runs it, and of the
    process and its threads between ``start`` and ``stop`` (signals from the client: the warm-up is not
    counted)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.cpu: dict[str, float] = {}
        self.batches = self.texts = 0
        self.t0 = None

    def wrap(self, stage: str, fn):
        def timed(*args, **kwargs):
            t = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.thread_time() - t
                with self.lock:
                    self.cpu[stage] = self.cpu.get(stage, 0.0) + dt
        return timed

    @staticmethod
    def threads() -> dict[int, float]:
        """CPU seconds of each thread of this process, by native id (/proc: Linux)."""
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for task in Path("/proc/self/task").iterdir():
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
            except (OSError, IndexError, ValueError):
                pass
        return out

    def start(self) -> None:
        with self.lock:
            self.cpu, self.batches, self.texts = {}, 0, 0
        t = os.times()
        self.t0 = (t.user + t.system, self.threads(), time.perf_counter())

    def stop(self) -> dict:
        t = os.times()
        cpu0, threads0, wall0 = self.t0
        threads1 = self.threads()
        python = {th.native_id for th in threading.enumerate()}
        delta = {tid: threads1[tid] - threads0.get(tid, 0.0) for tid in threads1}
        return {"wall_s": time.perf_counter() - wall0, "process_cpu_s": t.user + t.system - cpu0,
                "stages_cpu_s": dict(self.cpu),
                "event_loop_cpu_s": delta.get(os.getpid(), 0.0),
                "python_threads_cpu_s": sum(v for k, v in delta.items() if k in python and k != os.getpid()),
                "pools_cpu_s": sum(v for k, v in delta.items() if k not in python),
                "encode_calls": self.batches, "encoded_texts": self.texts}


def open_measured(model: str, index: str, split_dir: str, text_side: str = "auto", batch: bool = True,
                  before: str = ""):
    """In a server process: ``tokenspace serve``'s session, each stage's CPU counted (StageClock).
    ``text_side="model"``: text queries through the model itself (torch), not its numpy copy;
    ``batch=False``: one text per encoder call; ``before``: comma-separated service changes undone, to
    measure what each did ("route": /search's body read and checked by FastAPI's body parameter, not
    serve/app.py's SearchRoute; "response": /search's dict validated and written by FastAPI's
    response_model, as before (with "route"); "blas": numpy's BLAS pool as numpy starts it; "loop": every
    search in the thread pool, none on the event loop (SearchService.quick_text); "h11": uvicorn's h11
    parser, not httptools). SIGUSR1 starts the count, SIGUSR2 writes it to ``split_dir``/split-PID.json."""
    from tokenspace.explain import search as explain_search
    from tokenspace.searcher import Searcher
    from tokenspace.serve import app, processes

    searcher = Searcher.open(index, model)
    clock = StageClock()
    if text_side == "model":
        searcher.fast_text = lambda: False  # the service keeps the model's own text side
    else:
        searcher.fast_text()  # what the service does when it starts (here first, to report which)
    if not batch:
        searcher._batches.max_batch = 1
    encode = clock.wrap("encode", searcher._encode_texts)

    def counted(texts, ranking):
        with clock.lock:
            clock.batches += 1
            clock.texts += len(texts)
        return encode(texts, ranking)

    searcher._batches.encode_many = counted
    index_ = searcher.index
    index_.search = clock.wrap("search", index_.search)
    for name in ("get", "hubness"):
        setattr(index_, name, clock.wrap("explain", getattr(index_, name)))
    explain_search.contributions = clock.wrap("explain", explain_search.contributions)
    split_file = Path(split_dir) / f"split-{os.getpid()}.json"

    def dump(*_):  # whole or absent: the client reads the file as soon as it appears
        tmp = split_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(clock.stop()))
        os.replace(tmp, split_file)

    signal.signal(signal.SIGUSR1, lambda *_: clock.start())
    signal.signal(signal.SIGUSR2, dump)
    undone = {x for x in before.split(",") if x}
    if undone & {"route", "response"}:  # FastAPI's own handling of /search's body (a dict needs it too)
        from fastapi.routing import APIRoute

        app.SearchRoute.get_route_handler = APIRoute.get_route_handler
    if "response" in undone:
        app._search_json = lambda content: content  # FastAPI then validates and writes it (response_model)
    if "blas" in undone:
        app.one_blas_thread = processes.one_blas_thread = lambda: None
    if "loop" in undone:
        from tokenspace.serve.service import SearchService

        SearchService.quick_text = lambda self, fusion=None: False
    if "h11" in undone:  # the server's settings are read after this session opens (app.run, serve_one)
        import functools

        app.server_settings = processes.server_settings = functools.partial(app.server_settings, parser="h11")
    from tokenspace.serve.header_timeout import PARSERS

    print(json.dumps({"text_encoder": type(searcher.queries).__name__, "model": type(searcher.model).__name__,
                      "http_parser": "h11" if "h11" in undone else PARSERS[-1]}), flush=True)
    return searcher


def serve(model: str, index: str, port: int, split_dir: str, text_side: str = "auto", batch: bool = True,
          before: str = "", processes: int = 1) -> None:
    """The server: ``app.run`` over one measured session, or ``processes`` of them on the port
    (serve/processes.py), as a user would start them."""
    if processes > 1:
        import functools

        from tokenspace.serve.processes import run_processes

        run_processes(functools.partial(open_measured, model, index, split_dir, text_side, batch, before),
                      processes, "127.0.0.1", port)
    else:
        from tokenspace.serve import app

        app.run(open_measured(model, index, split_dir, text_side, batch, before), host="127.0.0.1", port=port)


def server_pids(proc: subprocess.Popen, processes: int) -> list[int]:
    """The processes that answer: the server itself, or the ones run_processes started."""
    if processes == 1:
        return [proc.pid]
    kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return [int(k) for k in kids if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes()]


def start_server(model: str, index: Path, port: int, split_dir: Path, text_side: str, batch: bool, before: str = "",
                 processes: int = 1):
    code = ("import sys; from benchmarks.serve_load import serve; serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), "
            "sys.argv[4], sys.argv[5], sys.argv[6] == '1', sys.argv[7], int(sys.argv[8]))")
    cmd = [sys.executable, "-c", code, str(model), str(index), str(port), str(split_dir), text_side,
           "1" if batch else "0", before, str(processes)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = [json.loads(proc.stdout.readline() or "null") for _ in range(processes)]  # each opened its session
    if None in started:
        raise RuntimeError(f"the server exited: {proc.stderr.read()[-2000:]}")
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    time.sleep(1.0)  # the other processes' sockets: each listens once its session is open
                    return proc, started[0]
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("the server did not answer /healthz within 300 s")


# ---------------------------------------------------------------------------------------------- client side
class Requests:
    """The requests of one load: (endpoint label, method, path, JSON body)."""

    def __init__(self, load: str, ids: list[str], words: list[str], seed: int = 0):
        self.load, self.ids, self.words = load, ids, words
        self.serial = 0
        rng = random.Random(seed)
        self.fixed = ["a " + " ".join(rng.sample(words, 3)) for _ in range(12)]

    def text(self, rng: random.Random) -> str:
        self.serial += 1  # a serial number makes every text distinct
        return "a " + " ".join(rng.sample(self.words, 3)) + f" {self.serial}"

    def next(self, rng: random.Random):
        if self.load == "distinct":
            return "POST /search", "POST", "/search", {"text": self.text(rng), "k": 10}
        if self.load == "repeat":
            return "POST /search", "POST", "/search", {"text": rng.choice(self.fixed), "k": 10}
        x = rng.random()
        if x < 0.8:
            words = rng.sample(self.words, k=3)
            body = {"text": self.text(rng), "k": 10}
            if x < 0.2:
                body["must_not"] = [words[0]]
            elif x < 0.3:
                body["where"] = f"{words[1]} OR {words[2]}"
            return "POST /search", "POST", "/search", body
        doc = rng.choice(self.ids)
        if x < 0.9:
            return "GET /explain", "GET", f"/explain/{doc}", None
        return "GET /image", "GET", f"/image/{doc}", None


class RawConnection:
    """One keep-alive HTTP/1.1 connection over asyncio streams: a request out, its status and body in."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def request(self, method: str, path: str, body) -> int:
        from urllib.parse import quote

        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {quote(path, safe='/')} HTTP/1.1\r\nHost: {self.host}\r\n"
                + ("Content-Type: application/json\r\n" if body is not None else "")
                + f"Content-Length: {len(data)}\r\n\r\n")
        self.writer.write(head.encode() + data)
        try:
            header = await self.reader.readuntil(b"\r\n\r\n")
            lines = header.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            fields = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
            if "content-length" in fields:
                await self.reader.readexactly(int(fields["content-length"]))
            elif fields.get("transfer-encoding") == "chunked":
                while True:
                    size = int((await self.reader.readline()).split(b";")[0], 16)
                    await self.reader.readexactly(size + 2)
                    if size == 0:
                        break
            if fields.get("connection") == "close":
                self.close()
            return status
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            raise

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def run_load(port: int, connections: int, duration: float, requests: Requests, client: str = "raw",
                   warmup: int = 40, on_start=None, on_stop=None, seed: int = 0):
    """(results [(label, seconds, ok)], errors {kind: n}, elapsed s, client CPU s) of one load."""
    results: list[tuple[str, float, bool]] = []
    errors: dict[str, int] = {}
    if client == "httpx":
        import httpx

        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        shared = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30)

        async def send(conn, method, path, body):
            return (await shared.request(method, path, json=body)).status_code
        conns = [None] * connections
    else:
        shared = None
        conns = [RawConnection("127.0.0.1", port) for _ in range(connections)]

        async def send(conn, method, path, body):
            return await asyncio.wait_for(conn.request(method, path, body), 30)

    async def worker(w: int, stop: float):
        rng = random.Random(seed * 1000 + w)
        while time.perf_counter() < stop:
            label, method, path, body = requests.next(rng)
            t0 = time.perf_counter()
            try:
                status = await send(conns[w], method, path, body)
                ok = status == 200
                kind = f"{label} {status}"
            except Exception as e:  # noqa: BLE001 - a transport error is an error of the run, counted
                ok, kind = False, f"{label} {type(e).__name__}"
                if conns[w] is not None:
                    conns[w].close()
            if not ok:
                errors[kind] = errors.get(kind, 0) + 1
            results.append((label, time.perf_counter() - t0, ok))

    try:
        # warm-up, untimed: numba kernels compile and the first texts meet a cold cache (start-up cost,
        # not steady state); every connection opens
        await asyncio.gather(*(worker(w, time.perf_counter() + 2.0) for w in range(connections)))
        rng = random.Random(-1)
        for _ in range(warmup):
            _, method, path, body = requests.next(rng)
            await send(conns[0], method, path, body)
        results.clear()
        errors.clear()
        if on_start:
            on_start()
        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(w, t0 + duration) for w in range(connections)))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        if on_stop:
            on_stop()
    finally:
        if shared is not None:
            await shared.aclose()
        for c in conns:
            if c is not None:
                c.close()
    return results, errors, elapsed, cpu


def summarise(results, errors, elapsed, client_cpu, split: dict | None = None) -> dict:
    def pct(lat):
        lat = np.asarray(lat) * 1000
        return {"n": len(lat), "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99))}

    n = len(results)
    out = {"requests": n, "errors": int(sum(errors.values())), "error_kinds": errors, "elapsed_s": elapsed,
           "rps": n / elapsed, **pct([r[1] for r in results]), "client_cpu_ms_per_request": 1000 * client_cpu / max(n, 1)}
    out["by_endpoint"] = {lab: pct([r[1] for r in results if r[0] == lab]) for lab in sorted({r[0] for r in results})}
    if split:
        out["server"] = split
        out["server_cpu_ms_per_request"] = cpu_split(split, n)
    return out


def added(splits: list[dict]) -> dict:
    """The servers' splits summed (wall time: the longest)."""
    out = {}
    for k, v in splits[0].items():
        if isinstance(v, dict):
            out[k] = {s: sum(x[k].get(s, 0.0) for x in splits) for s in set().union(*(x[k] for x in splits))}
        else:
            out[k] = max(x[k] for x in splits) if k == "wall_s" else sum(x[k] for x in splits)
    return out


def cpu_split(split: dict, n: int) -> dict:
    """The server's CPU per request (ms): encode, search, explain, pools, HTTP (the rest) and the total."""
    per = lambda s: 1000.0 * s / max(n, 1)  # noqa: E731
    stages = split["stages_cpu_s"]
    named = {k: per(stages.get(k, 0.0)) for k in ("encode", "search", "explain")}
    pools = per(split["pools_cpu_s"])
    total = per(split["process_cpu_s"])
    return {**named, "pools": pools, "http": total - sum(named.values()) - pools, "total": total,
            "texts_per_encode_call": split["encoded_texts"] / max(split["encode_calls"], 1)}


# ---------------------------------------------------------------------------------------------- report
COLUMNS = "| model, text side | load | requests/s | p50 ms | p99 ms | errors | server CPU ms/request: encode / search / explain / pools / HTTP = total | texts per encode call | client CPU ms/request |"


def rows(summary: dict) -> list[str]:
    out = []
    for load, s in summary["loads"].items():
        c = s.get("server_cpu_ms_per_request") or {}
        split = (f"{c['encode']:.2f} / {c['search']:.2f} / {c['explain']:.2f} / {c['pools']:.2f} / "
                 f"{c['http']:.2f} = {c['total']:.2f}") if c else "-"
        batch = f"{c['texts_per_encode_call']:.1f}" if c and c.get("texts_per_encode_call") else "-"
        out.append(f"| {summary['name']} | {load} | {s['rps']:.0f} | {s['p50_ms']:.0f} | {s['p99_ms']:.0f} | "
                   f"{s['errors']} | {split} | {batch} | {s['client_cpu_ms_per_request']:.2f} |")
    return out


def markdown(summary: dict, args) -> str:
    return (f"Load test of `tokenspace serve` on loopback: {args.connections} keep-alive connections for "
            f"{args.duration:g} s per load; {summary['world']}; the client ({args.client}) and the server share "
            f"the machine's {os.cpu_count()} cores with whatever else runs there.\n\n"
            + "\n".join([COLUMNS, "|" + "---|" * 9] + rows(summary)) + "\n\n"
            "Loads: distinct = POST /search, text only, every text distinct; repeat = the same 12 texts (the "
            "query cache answers); mix = 80% POST /search (20% with must_not, 10% with where), 10% GET "
            "/explain/{id}, 10% GET /image/{id}. Every hit explained token by token in the response.\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=RELEASE, help=f"model folder or release name (default: {RELEASE})")
    p.add_argument("--index", help="index folder (default: the demo's, runs/demo/index, built when absent)")
    p.add_argument("--tiny", action="store_true", help="the tiny world instead: a tiny STAIR model built in code")
    p.add_argument("--name", help="the row's name in the table (default: the model)")
    p.add_argument("--queries", default=",".join(LOADS), help=f"loads to run, in order (of {', '.join(LOADS)})")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--duration", type=float, default=20.0, help="seconds per load")
    p.add_argument("--client", choices=("raw", "httpx"), default="raw")
    p.add_argument("--text-side", choices=("auto", "model"), default="auto",
                   help="auto: the session's choice (numpy where it equals the model); model: the model itself")
    p.add_argument("--no-batch", action="store_true", help="one text per encoder call (no micro-batches)")
    p.add_argument("--before", default="", help="service changes undone, comma-separated: route (FastAPI "
                   "reads and checks /search's body), response (FastAPI validates and writes /search's dict; "
                   "implies route), blas (numpy's BLAS pool as numpy starts it), loop (every search in the "
                   "thread pool), h11 (uvicorn's h11 parser instead of httptools)")
    p.add_argument("--processes", type=int, default=1, help="server processes on the port (serve/processes.py: "
                   "the Python side of a search runs on one core at a time in one process)")
    p.add_argument("--tiny-images", type=int, default=200)
    p.add_argument("--write", help="markdown file whose 'serve' section gets the figures")
    p.add_argument("--json", help="also write the summary as JSON here")
    args = p.parse_args(argv)
    loads = [x.strip() for x in args.queries.split(",") if x.strip()]
    if not loads or set(loads) - set(LOADS):
        p.error(f"--queries: a comma-separated list of {', '.join(LOADS)}")

    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        if args.tiny:
            model, index = build_tiny_world(Path(tmp), args.tiny_images)
            world = f"tiny world: {args.tiny_images} drawn images, a tiny STAIR model built in code"
        else:
            model, index = args.model, Path(args.index) if args.index else demo_index()
            world = f"model {args.model}, index {index}"
        from tokenspace.index import InvertedIndex
        from tokenspace.models.fused_queries import FusedQueries, Unsupported
        from tokenspace.models.releases import release_path

        opened = InvertedIndex.load(index)
        ids = opened.ids()
        folder = release_path(str(model)) or Path(model)
        try:
            vocab = FusedQueries.from_folder(folder).vocab
        except Unsupported:
            from tokenspace.vocab import Vocabulary

            vocab = Vocabulary.from_file(folder / "vocab.txt")
        words = [t for t in vocab.tokens if t.isalpha() and t.islower() and len(t) > 2][:5000] or WORDS
        split_dir = Path(tmp) / "splits"
        split_dir.mkdir()
        port = free_port()
        server = None
        try:
            server, started = start_server(model, index, port, split_dir, args.text_side, not args.no_batch,
                                           args.before, args.processes)
            pids = server_pids(server, args.processes)
            name = (f"{Path(str(model)).name}: {started['text_encoder']}" + ("" if args.no_batch else ", batched")
                    + (f", before: {args.before}" if args.before else "")
                    + (f", {args.processes} processes" if args.processes > 1 else ""))
            summary = {"name": args.name or name, "world": world, "model": str(model), "index": str(index),
                       "text_encoder": started["text_encoder"], "http_parser": started["http_parser"],
                       "batch": not args.no_batch, "before": args.before,
                       "processes": args.processes, "client": args.client, "connections": args.connections,
                       "duration_s": args.duration, "loads": {}}
            for i, load in enumerate(loads):
                for f in split_dir.glob("*.json"):
                    f.unlink()

                def signal_all(sig):
                    for pid in pids:
                        os.kill(pid, sig)
                results, errors, elapsed, cpu = asyncio.run(run_load(
                    port, args.connections, args.duration, Requests(load, ids, words, seed=i), args.client,
                    on_start=lambda: signal_all(signal.SIGUSR1), on_stop=lambda: signal_all(signal.SIGUSR2)))
                for _ in range(100):
                    if len(list(split_dir.glob("*.json"))) == len(pids):
                        break
                    time.sleep(0.1)
                found = [json.loads(f.read_text()) for f in split_dir.glob("*.json")]
                split = added(found) if len(found) == len(pids) else None
                summary["loads"][load] = summarise(results, errors, elapsed, cpu, split)
                print(rows({**summary, "loads": {load: summary["loads"][load]}})[0], flush=True)
        finally:
            if server is not None:
                server.terminate()
                server.wait(30)
    print(json.dumps(summary, indent=2))
    record = run_record(__file__, argv)
    if args.json:
        write_json(args.json, summary, record)
    if args.write:
        from tokenspace.eval import ResultsDoc

        ResultsDoc(args.write).update("serve", markdown(summary, args), record["command"],
                                      heading="HTTP service under load")
    return 0 if all(s["errors"] == 0 for s in summary["loads"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
