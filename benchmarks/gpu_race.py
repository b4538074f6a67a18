"""The engine race on the full real-text corpus, run on a GPU machine without network: pack here, run there.

Encoding real-text's 966,836 passages with SPLADE-tiny takes 30-64 minutes on 2 CPU cores with bfloat16
logits (over two hours in float32) and 62 s on one H200 in float32, so the races on the full corpus and
on its 200K uniform prefix (the passages are shuffled) run where a GPU is. ``pack`` gathers here what such
a machine lacks: the texts (xz), SPLADE-tiny's files, and the peers' wheels for its Python, unpacked and
repacked as one tar.xz (half the wheels' size). ``run``, there, encodes on the GPU (benchmarks/real_corpus.py's
resumable parts), writes both corpora and their exact top-10 (scipy, on every core), then races the
engines of benchmarks/peers/race_lsr.json on both corpora at once: each race is benchmarks/head_to_head.py
in its own process, building on half of the cores and timing one query at a time on one core of that
half. A deadline stops starting timed passes in time to write what was measured, and ``run`` rewrites its
record (machine, stages, corpus statistics) after each stage, so a run cut short says how far it got.

    python -m benchmarks.gpu_race pack --corpus-dir bench-data/real-text --out gpu-race-pack     # here
    PYTHONPATH=src python -m benchmarks.gpu_race run --pack gpu-race-pack --out OUT --budget 500   # there

``run`` is ``encode`` then ``race``. Where a transfer is capped below the pack and the repository together
(the texts are 50 MiB, the wheels 7 MiB), ``encode`` (with gpu-race-pack/texts) and ``race`` (with
gpu-race-pack/peers) can go in two calls: the corpora and the record are written inside the repository
(bench-data/gpu-race, git-ignored), where a machine kept between calls still has them, and a rerun of
``encode`` resumes its parts.

Engines whose library is missing there are left out and named in the record (pyseismic-lsr publishes no
wheel for Python 3.12). kANNolo's HNSW build (83 s for 200K documents on 8 cores) and the builds that
never win are left out of the full corpus's race by default (--skip-full) to fit the time.
"""
from __future__ import annotations

import argparse
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, corpus_size, ground_truth, run_record, write_json
from benchmarks.peers.worker import peer_class
from benchmarks.real_corpus import Splade, build, prepare_texts

PEERS_FILE = ROOT / "benchmarks/peers/race_lsr.json"
PEER_PACKAGES = ("pyvsag", "bmp", "kannolo", "pyseismic-lsr")
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64",
             "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64")
SKIP_FULL = ("kannolo-m32", "bmp-b32", "tokenspace-mass80", "tokenspace-mass90-arrays")


# ----------------------------------------------------------------------------- here
def pack_wheels(out: Path, python: str) -> tuple[Path, list[str]]:
    """The peers' wheels for ``python`` (the versions installed here), unpacked into one tar.xz."""
    have, missing = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in PEER_PACKAGES:
            try:
                version = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                missing.append(f"{name} (not installed here)")
                continue
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                   "--python-version", python, "--implementation", "cp", "-d", tmp, f"{name}=={version}"]
            for p in PLATFORMS:
                cmd += ["--platform", p]
            if subprocess.run(cmd, capture_output=True, text=True).returncode:
                missing.append(f"{name}=={version} (no wheel for Python {python})")
            else:
                have.append(f"{name}=={version}")
        site = Path(tmp) / "site"
        for whl in Path(tmp).glob("*.whl"):
            with zipfile.ZipFile(whl) as z:
                z.extractall(site)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"peers-cp{python.replace('.', '')}.tar.xz"
        with tarfile.open(path, "w:xz", preset=9) as tar:
            tar.add(site, arcname="site")
    return path, have + [f"missing: {m}" for m in missing]


def xz(src: Path, dst: Path) -> None:
    if shutil.which("xz"):  # multi-threaded, and -9e reads the man pages' repeats across 64 MB
        with open(dst, "wb") as f:
            subprocess.run(["xz", "-9e", "-T0", "-c", str(src)], stdout=f, check=True)
    else:
        with open(src, "rb") as f, lzma.open(dst, "wb", preset=9 | lzma.PRESET_EXTREME) as g:
            shutil.copyfileobj(f, g, 1 << 24)


def pack(a) -> int:
    from tokenspace.models.towers import resolve_weights

    texts = a.out / "texts"
    texts.mkdir(parents=True, exist_ok=True)
    prepare_texts(a.corpus_dir, a.n)  # reads them back when the corpus's text stage ran already
    t0 = time.perf_counter()
    xz(a.corpus_dir / "passages.txt", texts / "passages.txt.xz")
    for name in ("queries.txt", "sources.json"):
        shutil.copy(a.corpus_dir / name, texts / name)
    shutil.copytree(Path(resolve_weights("asset:splade-tiny")), texts / "splade-tiny", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".*"))
    _, wheels = pack_wheels(a.out / "peers", a.python)
    for part in ("texts", "peers"):
        size = sum(f.stat().st_size for f in (a.out / part).rglob("*") if f.is_file())
        print(f"{a.out / part}: {size / 2**20:.1f} MiB")
    print(f"packed in {time.perf_counter() - t0:.0f} s; peers: {', '.join(wheels)}")
    return 0


# ----------------------------------------------------------------------------- there
def hardware() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    out = {"cpu": cpu, "cores": os.cpu_count()}
    try:
        import torch  # start-up: only the machine's line needs it here

        out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        out["gpu"] = None
    return out


def prefix_corpus(src: Path, dst: Path, n: int) -> None:
    """The first ``n`` documents of ``src`` (a uniform sample: the passages are shuffled), same queries."""
    dst.mkdir(parents=True, exist_ok=True)
    indptr = np.load(src / "d_indptr.npy")[: n + 1]
    end = int(indptr[-1])
    np.save(dst / "d_indptr.npy", indptr)
    for name in ("d_indices", "d_data"):
        np.save(dst / f"{name}.npy", np.load(src / f"{name}.npy", mmap_mode="r")[:end])
    for name in ("q_indptr", "q_indices", "q_data"):
        shutil.copy(src / f"{name}.npy", dst / f"{name}.npy")


def peers_file(path: Path, skip: set[str], site: Path | None = None) -> tuple[Path, list[str]]:
    """race_lsr.json less the builds in ``skip`` and the engines whose library is not installed (here, or
    in ``site``: the unpacked wheels the races get on their PYTHONPATH; looked up there, not imported)."""
    def installed(module: str) -> bool:
        return importlib.util.find_spec(module) is not None or (
            site is not None and importlib.machinery.PathFinder.find_spec(module, [str(site)]) is not None)

    kept, left = [], []
    for engine, opts in json.loads(PEERS_FILE.read_text()):
        label = opts.get("label", engine)
        absent = [m for m in peer_class(engine).requires if not installed(m)]
        if label in skip or absent:
            left.append(f"{label} ({'not installed: ' + ', '.join(absent) if absent else 'skipped'})")
        else:
            kept.append([engine, opts])
    path.write_text(json.dumps(kept))
    return path, left


class Record:
    """gpu_race.json in --out, rewritten after each stage: a run cut short still says how far it got."""

    def __init__(self, work: Path, out: Path, argv):
        # kept beside the corpora, which outlive a call on a warm machine ($OUT is emptied), and copied out
        self.path, self.out, self.run = work / "gpu_race.json", out / "gpu_race.json", run_record(__file__, argv)
        self.report = {"hardware": hardware(), "stages": {}}
        if self.path.exists():  # an earlier call on the same machine (encode, then race): its record stays
            self.report = json.loads(self.path.read_text())
            earlier = {key: self.report.pop(key) for key in list(self.run) if key in self.report}
            self.report.setdefault("earlier_calls", []).append(earlier)

    def stage(self, name: str, t0: float, **extra) -> None:
        self.report["stages"][name] = {"seconds": round(time.monotonic() - t0, 1), **extra}
        self.save()
        print(f"{name}: {time.monotonic() - t0:.0f} s", flush=True)

    def save(self) -> None:
        write_json(self.path, self.report, self.run)
        shutil.copy(self.path, self.out)


def encode_stage(a, rec: Record) -> None:
    """Unpack the texts, encode them on the GPU, write the full corpus, its prefix and their exact top-10."""
    full = a.work / "real-text"
    full.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    texts = a.pack / "texts"
    if not (full / "passages.txt").exists():
        with lzma.open(texts / "passages.txt.xz") as f, open(full / "passages.txt.part", "wb") as g:
            shutil.copyfileobj(f, g, 1 << 24)
        os.replace(full / "passages.txt.part", full / "passages.txt")
    for name in ("queries.txt", "sources.json"):
        shutil.copy(texts / name, full / name)
    rec.stage("unpack", t0)
    t0 = time.monotonic()
    os.environ["TOKENIZERS_PARALLELISM"] = "true"  # the tokenizer's threads feed the GPU
    encode = Splade(weights=str(texts / "splade-tiny"), threads=8, device=a.device, batch=a.batch)
    stats = build(full, 10**8, encode=encode)  # resumable parts; the texts are read back, not rebuilt
    rec.stage("encode", t0, corpus=stats)
    t0 = time.monotonic()
    prefix_corpus(full, a.work / f"real-text-{a.prefix // 1000}K", a.prefix)
    for d in (a.work / f"real-text-{a.prefix // 1000}K", full):
        ground_truth(d, corpus_size(d), 10, workers=max(1, (os.cpu_count() or 2) - 1))
    rec.stage("ground_truth", t0, docs=[a.prefix, corpus_size(full)])


def race_stage(a, rec: Record, t_start: float) -> None:
    """Both races at once, each building on half of the cores and timing on one core of its half."""
    site = a.work / "site"
    tars = sorted((a.pack / "peers").glob("peers-cp*.tar.xz"))
    for tar in tars:
        with tarfile.open(tar) as t:
            t.extractall(a.work, filter="data")
    importlib.invalidate_caches()
    cores = sorted(os.sched_getaffinity(0))
    halves = [cores[: len(cores) // 2], cores[len(cores) // 2:]] if len(cores) > 1 else [cores, cores]
    deadline = a.budget - (time.monotonic() - t_start) - a.pass_room  # no timed pass starts after this
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    t0, procs = time.monotonic(), []
    small, full = a.work / f"real-text-{a.prefix // 1000}K", a.work / "real-text"
    for d, half, skip in ((small, halves[0], set()), (full, halves[1], set(a.skip_full))):
        name = f"real-text-{round(corpus_size(d) / 1000)}K-gpu-machine"
        pf, left = peers_file(a.work / f"peers-{d.name}.json", skip, site)
        cmd = [sys.executable, "-m", "benchmarks.head_to_head", "--corpus-dir", str(d), "--name", name,
               "--peers-file", str(pf), "--screen", str(a.screen), "--passes", str(a.passes),
               "--single", str(a.single), "--pin-core", str(half[-1]), "--deadline", f"{deadline:.0f}"]
        rec.report.setdefault("races", {})[name] = {"command": " ".join(cmd), "build_cores": half, "left_out": left}
        log = open(a.out / f"{name}.log", "w")
        procs.append((name, log, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                  preexec_fn=lambda h=half: os.sched_setaffinity(0, set(h)))))
    rec.save()
    for name, log, p in procs:
        try:
            rc = p.wait(timeout=max(1.0, t_start + a.budget - 5 - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "killed at the budget"
        log.close()
        rec.report["races"][name]["exit"] = rc
        for ext in (".json", ".png"):
            res = ROOT / "benchmarks/results" / f"head_to_head-{name}{ext}"
            if res.exists():
                shutil.copy(res, a.out / res.name)
    rec.stage("races", t0)


def run(a, argv) -> int:
    t_start = time.monotonic()
    a.out.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    rec = Record(a.work, a.out, argv)
    if a.cmd in ("encode", "run"):
        encode_stage(a, rec)
    if a.cmd in ("race", "run"):
        race_stage(a, rec, t_start)
    print(f"done in {time.monotonic() - t_start:.0f} s", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="here: gather what the GPU machine lacks (OUT/texts, OUT/peers)")
    p.add_argument("--corpus-dir", type=Path, default=ROOT / "bench-data/real-text",
                   help="benchmarks/real_corpus.py's --out (its texts are written first when missing)")
    p.add_argument("--n", type=int, default=1_000_000, help="passages, when the texts are not written yet")
    p.add_argument("--out", type=Path, default=ROOT / "gpu-race-pack")
    p.add_argument("--python", default="3.12", help="the GPU machine's Python (its wheels are fetched here)")
    for cmd, text in (("encode", "there: encode the texts, write both corpora and their exact top-10"),
                      ("race", "there: race the engines on both corpora"), ("run", "there: encode, then race")):
        r = sub.add_parser(cmd, help=text)
        r.add_argument("--pack", type=Path, default=ROOT / "gpu-race-pack")
        r.add_argument("--out", type=Path, required=True, help="gpu_race.json, the races' logs, JSON and plots")
        r.add_argument("--work", type=Path, default=ROOT / "bench-data/gpu-race",
                       help="the corpora (inside the repository: they outlive a call on a machine kept warm)")
        r.add_argument("--budget", type=float, default=500.0, help="seconds for this command")
        r.add_argument("--pass-room", type=float, default=150.0,
                       help="seconds kept after the last timed pass starts (one pass at full size, and the writes)")
        r.add_argument("--device", default="cuda")
        r.add_argument("--batch", type=int, default=512)
        r.add_argument("--prefix", type=int, default=200_000)
        r.add_argument("--screen", type=int, default=300)
        r.add_argument("--passes", type=int, default=3)
        r.add_argument("--single", type=int, default=1000)
        r.add_argument("--skip-full", nargs="*", default=list(SKIP_FULL),
                       help="race_lsr.json labels left out at full size")
    a = ap.parse_args(argv)
    return pack(a) if a.cmd == "pack" else run(a, argv)


if __name__ == "__main__":
    raise SystemExit(main())
