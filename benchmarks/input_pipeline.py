"""Input pipeline and end-to-end encode throughput on this machine (docs/scale.md, sections 2 and 3).

    python -m benchmarks.input_pipeline --out benchmarks/results/input_pipeline.json

1. Shards: the drawings of ``--data`` (default emoji:train, PNGs) written as webdataset shards to
   ``--tmp``, then streamed by ``data.loader.stream_shards`` (decode + letterbox + normalise to the
   model's input size, batches of ``--batch``) with 0, 1 and 2 DataLoader workers: samples/s.
2. Encode end to end, files -> SparseBatch -> index (InvertedIndex.add): ``--jpegs`` ImageNet-size JPEGs
   (500 x 375, crops of scikit-image's bundled photos) encoded by the model (default: the release
   model's config stair-emoji, EfficientNet-Lite0 at 128 px; or ``--model FOLDER``):
   - eager: ``model.encode_image(paths)``, decoding in the main thread between batches;
   - loader: ``encode.encode_files`` with 0, 1, 2 workers decoding ahead while the model runs;
   - with ``--onnx``: the loader arms with the image tower in ONNX Runtime (``tower="onnx"``), and the
     encoded rows of both towers compared on one batch of files.
Arms are interleaved and repeated (``--repeat``): each number is the median of its repeats, measured in
one run side by side, and the load average is recorded before and after every table. Beside wall-clock
rates, the CPU time per sample of all processes (main + joined workers) is reported: it does not
depend on other jobs, while wall-clock rates on a loaded machine also measure the scheduler (each
worker process gets its own share of a contended CPU).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks.common import run_record, write_json

ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def write_drawing_shards(data: str, n: int, folder: Path, per_shard: int = 500) -> tuple[str, int]:
    from tokenspace import pipeline
    from tokenspace.data.webdataset import write_shards

    records = pipeline.load_split(data)[:n]
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("shard-*.tar"):
        old.unlink()
    ext = records[0].image.rsplit(".", 1)[-1].lower()
    samples = ((f"r{i:06d}", Path(r.image).read_bytes(), r.text) for i, r in enumerate(records)
               if r.image.lower().endswith(ext))
    paths = write_shards(samples, str(folder / "shard-%04d.tar"), per_shard=per_shard, image_ext=ext)
    return f"{folder}/shard-{{0000..{len(paths) - 1:04d}}}.tar", len(records)


def write_jpegs(n: int, folder: Path, seed: int = 0) -> list[Path]:
    """ImageNet-size JPEGs (500 x 375, quality 90): random crops of the bundled photos, resized."""
    import numpy as np
    from PIL import Image
    from skimage import data as skdata

    photos = [skdata.astronaut(), skdata.chelsea(), skdata.coffee(), skdata.rocket(), skdata.immunohistochemistry()]
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = folder / f"img{i:05d}.jpg"
        paths.append(p)
        if p.exists():
            continue
        a = photos[i % len(photos)]
        h, w = a.shape[:2]
        ch, cw = int(h * rng.uniform(0.6, 1.0)), int(w * rng.uniform(0.6, 1.0))
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        Image.fromarray(a[y:y + ch, x:x + cw]).resize((500, 375), Image.BICUBIC).save(p, quality=90)
    return paths


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the DataLoader workers, once joined):
    unlike wall time, it does not depend on what else runs on the machine."""
    import resource

    return sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime
               for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def time_stream(spec: str, prep, batch: int, workers: int) -> tuple[float, int, float]:
    from tokenspace.data.loader import stream_shards

    t0, c0, n = time.perf_counter(), cpu_seconds(), 0
    loader = stream_shards(spec, prep, batch, workers=workers)
    for b in loader:
        n += len(b["pixels"])
    del loader  # joins the workers, so their CPU time is counted
    return time.perf_counter() - t0, n, cpu_seconds() - c0


def time_encode(model, paths, batch: int, arm: str) -> tuple[float, int, float]:
    import gc

    from tokenspace.encode import encode_files
    from tokenspace.index import InvertedIndex

    t0, c0 = time.perf_counter(), cpu_seconds()
    if arm == "eager":
        rows, kept = model.encode_image([str(p) for p in paths], batch_size=batch), list(range(len(paths)))
    else:  # loader-W or loader-W-onnx
        parts = arm.split("-")
        rows, kept = encode_files(model, paths, batch, workers=int(parts[1]),
                                  tower="onnx" if parts[-1] == "onnx" else "torch")
    index = InvertedIndex(len(model.vocab), model.vocab)
    index.add(rows, [str(paths[i]) for i in kept])
    gc.collect()  # the loader's workers are joined when it is collected
    return time.perf_counter() - t0, len(index), cpu_seconds() - c0


def onnx_check(model, paths, batch) -> dict:
    """End to end: the ONNX tower's encoded rows against PyTorch's on the same files."""
    import numpy as np

    from tokenspace.encode import encode_files

    ref, _ = encode_files(model, paths, batch, workers=0)
    got, _ = encode_files(model, paths, batch, workers=0, tower="onnx")
    same = bool(np.array_equal(ref.indptr, got.indptr) and np.array_equal(ref.indices, got.indices))
    return {"images": len(paths), "same_nonzeros": same,
            "max_abs_diff": float(np.abs(ref.values - got.values).max()) if same else None}


def build(model_ref: str):
    import torch

    import tokenspace
    from tokenspace.models.registry import build_model

    torch.manual_seed(0)
    return tokenspace.load(model_ref) if Path(model_ref).is_dir() else build_model(model_ref)


def run(a) -> dict:
    import torch

    from tokenspace.data.loader import Preprocess

    out: dict = {"threads": torch.get_num_threads(), "cores": len(os.sched_getaffinity(0)), "batch": a.batch}
    model = build(a.model)
    model.eval()
    prep = Preprocess.for_model(model)
    out["model"], out["image_size"] = a.model, prep.image_size

    if "shards" in a.tables:
        out["shards"] = time_shards(a, prep)
    if "encode" in a.tables:
        out["encode"], check = time_encode_arms(a, model)
        if check:
            out["onnx_check"] = check
    return out


def time_shards(a, prep) -> dict:
    """Table 1: drawings written to shards, streamed with 0, 1, 2 workers."""
    spec, n = write_drawing_shards(a.data, a.n, a.tmp / "shards")
    res = {"data": a.data, "samples": n, "spec": spec, "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load_before": load(), "arms": {}}
    times: dict[int, list[float]] = {w: [] for w in a.workers}
    cpu: dict[int, list[float]] = {w: [] for w in a.workers}
    time_stream(spec, prep, a.batch, 0)  # warm-up: imports, page cache
    for _ in range(a.repeat):
        for w in a.workers:
            dt, got, c = time_stream(spec, prep, a.batch, w)
            times[w].append(got / dt)
            cpu[w].append(1000 * c / got)
    res["load_after"] = load()
    for w in a.workers:
        res["arms"][str(w)] = {"samples_per_s": statistics.median(times[w]), "runs": times[w],
                                         "cpu_ms_per_sample": statistics.median(cpu[w])}

    return res


def time_encode_arms(a, model) -> tuple[dict, dict | None]:
    """Table 2: JPEG files -> SparseBatch -> index, eager vs the loader (vs the ONNX tower)."""
    paths = write_jpegs(a.jpegs, a.tmp / "jpegs")
    arms = ["eager"] + [f"loader-{w}" for w in a.workers]
    check = None
    if a.onnx:
        arms += [f"loader-{w}-onnx" for w in a.workers]
        check = onnx_check(model, paths[: a.batch], a.batch)
    enc: dict[str, list[float]] = {k: [] for k in arms}
    enc_cpu: dict[str, list[float]] = {k: [] for k in arms}
    time_encode(model, paths[: a.batch], a.batch, "eager")  # warm-up: allocator, kernels
    res = {"images": len(paths), "size": "500x375 JPEG", "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load_before": load(), "arms": {}}
    for _ in range(a.repeat):
        for arm in arms:
            dt, got, c = time_encode(model, paths, a.batch, arm)
            assert got == len(paths), f"{arm}: indexed {got} of {len(paths)}"
            enc[arm].append(got / dt)
            enc_cpu[arm].append(1000 * c / got)
    res["load_after"] = load()
    for arm in arms:
        res["arms"][arm] = {"images_per_s": statistics.median(enc[arm]), "runs": enc[arm],
                            "cpu_ms_per_image": statistics.median(enc_cpu[arm])}
    return res, check


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="emoji:train")
    ap.add_argument("--n", type=int, default=2000, help="drawings written to shards")
    ap.add_argument("--jpegs", type=int, default=1000)
    ap.add_argument("--model", default="stair-emoji", help="a model config name or a trained model folder")
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--onnx", action="store_true", help="also the ONNX Runtime image tower (pip install onnxruntime onnx)")
    ap.add_argument("--tables", nargs="+", choices=["shards", "encode"], default=["shards", "encode"],
                    help="which tables to measure; a table not measured keeps its previous entry in --out")
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/tokenspace-input-bench"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "input_pipeline.json")
    a = ap.parse_args(argv)
    res = run(a)
    if a.out.exists():  # keep the tables not measured in this run (each carries its own date and load)
        old = json.loads(a.out.read_text())
        res = {**{k: v for k, v in old.items() if k in ("shards", "encode", "onnx_check") and k not in res}, **res}
        if "encode" in a.tables and "onnx_check" not in res:
            res.pop("onnx_check", None)
    if "shards" in res:
        print_shards(res, a)
    if "encode" in res:
        print_encode(res, a)
    write_json(a.out, res, run_record(__file__, argv))
    print(f"wrote {a.out}")
    return 0


def print_shards(res: dict, a) -> None:
    s = res["shards"]
    base = s["arms"][str(a.workers[0])]["samples_per_s"]
    print(f"Input pipeline: {s['samples']} drawings ({a.data}) in shards -> {res['image_size']} px pixels, batch "
          f"{a.batch}, {res['cores']} cores (load {s['load_before']} -> {s['load_after']})")
    print("| DataLoader workers | samples/s | vs 0 workers | CPU ms per sample (all processes) |\n| --- | --- | --- | --- |")
    for w, r in s["arms"].items():
        print(f"| {w} | {r['samples_per_s']:.0f} | {r['samples_per_s'] / base:.2f}x | {r['cpu_ms_per_sample']:.2f} |")


def print_encode(res: dict, a) -> None:
    e = res["encode"]
    eager = e["arms"]["eager"]["images_per_s"]
    print(f"\nEncode end to end: {e['images']} {e['size']} files -> SparseBatch -> index, model {res['model']} "
          f"({res['image_size']} px), batch {a.batch} (load {e['load_before']} -> {e['load_after']})")
    print("| path | images/s | vs eager | CPU ms per image (all processes) |\n| --- | --- | --- | --- |")
    for arm, r in e["arms"].items():
        print(f"| {arm} | {r['images_per_s']:.1f} | {r['images_per_s'] / eager:.2f}x | {r['cpu_ms_per_image']:.1f} |")
    if "onnx_check" in res:
        c = res["onnx_check"]
        print(f"ONNX tower vs PyTorch on {c['images']} files: same nonzeros {c['same_nonzeros']}, "
              f"max |difference| of values {c['max_abs_diff']}")


if __name__ == "__main__":
    raise SystemExit(main())
