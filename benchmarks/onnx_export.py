"""export-onnx's files against PyTorch on a test split: encoding speed and retrieval, float32 and int8.

    nice -n 10 python -m benchmarks.onnx_export                        # the release model, emoji:test
    nice -n 10 python -m benchmarks.onnx_export --model runs/x/model --split icons:test --doc docs/benchmarks.md

The model is exported with ``export_onnx(model, folder, int8=True)`` (models/onnx_export.py: checked
against PyTorch to 1e-4 before it is written). Then, on the split's images and captions, three encoders:

* PyTorch: ``encode_image``' path from pixels (``encode.encode_pixels``, contiguous layout: the tower,
  heads, top-n) and ``encode_text``;
* ONNX float32: image_encoder.onnx / text_encoder.onnx in ONNX Runtime (CPU);
* ONNX int8: the dynamically quantised files (int8 weights of the matrix products; convolutions stay float).

All three read the same preprocessed pixels and tokenize the same captions (tokenizing is inside the
text timings, preprocessing outside the image timings). Speed: images and texts per second, the median of
``--repeats`` passes over the split (interleaved across encoders) after a warm-up batch, batches of
``--batch-size``, torch and ONNX Runtime with the same thread count. Retrieval: R@1/5/10 both ways
(tokenspace's evaluator), and the largest |row - PyTorch row| of each encoder.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import tokenspace
from benchmarks.common import run_record
from tokenspace import pipeline
from tokenspace.atomic import write_text
from tokenspace.encode import encode_pixels
from tokenspace.eval import ResultsDoc, RetrievalEvaluator
from tokenspace.models.onnx_export import (
    DEFAULT_TOL,
    IMAGE_FILE,
    INT8_SUFFIX,
    TEXT_FILE,
    export_onnx,
    session,
)
from tokenspace.sparse import SparseBatch

ROOT = Path(__file__).resolve().parent.parent


def batched(fn, n: int, batch_size: int) -> np.ndarray:
    return np.concatenate([fn(s, min(n, s + batch_size)) for s in range(0, n, batch_size)])


def torch_encoders(model, pixels, texts):
    """(rows of images a..b, rows of texts a..b) as encode_image / encode_text compute them, from pixels."""
    def images(a, b):
        return encode_pixels(model, pixels[a:b], channels_last=False).to_dense()

    def text(a, b):
        return model.encode_text(texts[a:b], batch_size=b - a).to_dense()
    return images, text


def onnx_encoders(model, folder: Path, suffix: str, pixels, texts, threads):
    image = session(folder / IMAGE_FILE.replace(".onnx", suffix), threads)
    text = session(folder / TEXT_FILE.replace(".onnx", suffix), threads)
    x = pixels.numpy()

    def images(a, b):
        return image.run(None, {"pixels": x[a:b]})[0]

    def texts_(a, b):
        ids, mask = model.tokenize(texts[a:b])
        return text.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    return images, texts_


def measure(model, split: str, home, batch_size: int, repeats: int, threads: int) -> dict:
    records = pipeline.load_split(split, home)
    texts, target = pipeline.texts_and_targets(records)
    pixels = model.preprocess([r.image for r in records])  # [N, 3, S, S]
    with tempfile.TemporaryDirectory(prefix="tokenspace-onnx-bench-") as tmp:
        t = time.perf_counter()
        done = export_onnx(model, Path(tmp) / "onnx", int8=True)
        export_s = time.perf_counter() - t
        sizes = {p.name: p.stat().st_size for p in done.files if p.suffix == ".onnx"}
        variants = {"pytorch": torch_encoders(model, pixels, texts),
                    "onnx-fp32": onnx_encoders(model, done.out, ".onnx", pixels, texts, threads),
                    "onnx-int8": onnx_encoders(model, done.out, INT8_SUFFIX, pixels, texts, threads)}
        for images, text in variants.values():  # a warm-up batch each (allocations, first-run kernel choices)
            images(0, batch_size), text(0, batch_size)
        seconds = {name: {"image": [], "text": []} for name in variants}
        out = {}
        # passes interleaved (pass 1 of every encoder, then pass 2, ...): other load on the machine falls
        # on all of them alike
        for _ in range(repeats):
            for name, (images, text) in variants.items():
                for side, fn, n in (("image", images, len(pixels)), ("text", text, len(texts))):
                    t = time.perf_counter()
                    out[name, side] = batched(fn, n, batch_size)
                    seconds[name][side].append(time.perf_counter() - t)
    rows = {}
    for name in variants:
        img, txt = out[name, "image"], out[name, "text"]
        metrics = RetrievalEvaluator(target)(SparseBatch.from_dense(img), SparseBatch.from_dense(txt))
        rows[name] = {"images_per_s": len(pixels) / statistics.median(seconds[name]["image"]),
                      "texts_per_s": len(texts) / statistics.median(seconds[name]["text"]),
                      "seconds": seconds[name],
                      "max_diff_image": float(np.abs(img - out["pytorch", "image"]).max()),
                      "max_diff_text": float(np.abs(txt - out["pytorch", "text"]).max()),
                      # rows farther than export's tolerance from PyTorch's: a discrete choice (a top-n cut,
                      # the tagger's top classes) that float rounding tipped the other way
                      "rows_over_tol_image": int((np.abs(img - out["pytorch", "image"]).max(1) > DEFAULT_TOL).sum()),
                      "rows_over_tol_text": int((np.abs(txt - out["pytorch", "text"]).max(1) > DEFAULT_TOL).sum()),
                      "nnz_image": float((img > 0).sum(1).mean()), "nnz_text": float((txt > 0).sum(1).mean()),
                      **{k: float(v) for k, v in metrics.items()}}
        r = rows[name]
        print(f"{name}: {r['images_per_s']:.1f} images/s, {r['texts_per_s']:.1f} texts/s, "
              f"mean recall {100 * r['mean_recall']:.2f}", flush=True)
    return {"split": split, "n_images": len(pixels), "n_texts": len(texts), "batch_size": batch_size,
            "repeats": repeats, "threads": threads, "export_s": export_s, "export_max_diff": done.max_diff,
            "file_bytes": sizes, "rows": rows}


def table(result: dict) -> str:
    head = ("| encoder | images/s | texts/s | T→I R@1 | T→I R@5 | T→I R@10 | I→T R@1 | mean R | "
            "max abs diff to PyTorch (image / text) | rows > 1e-4 off (image / text) | tokens/image | tokens/text |")
    lines = [head, "|---|" + "---:|" * (head.count("|") - 2)]
    for name, r in result["rows"].items():
        cells = [name, f"{r['images_per_s']:.1f}", f"{r['texts_per_s']:.0f}"]
        cells += [f"{100 * r[f'image_retrieval_recall@{k}']:.1f}" for k in (1, 5, 10)]
        cells += [f"{100 * r['text_retrieval_recall@1']:.1f}", f"{100 * r['mean_recall']:.2f}",
                  f"{r['max_diff_image']:.1e} / {r['max_diff_text']:.1e}",
                  f"{r['rows_over_tol_image']} / {r['rows_over_tol_text']}", f"{r['nnz_image']:.1f}",
                  f"{r['nnz_text']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(result: dict) -> str:
    """What the table says, in numbers: ONNX float32 against PyTorch, int8 against float32."""
    r = result["rows"]
    t, f, q = r["pytorch"], r["onnx-fp32"], r["onnx-int8"]
    n = result["n_images"], result["n_texts"]
    return (f"ONNX float32 / PyTorch: images x{f['images_per_s'] / t['images_per_s']:.1f}, texts "
            f"x{f['texts_per_s'] / t['texts_per_s']:.1f}, mean recall {100 * (f['mean_recall'] - t['mean_recall']):+.2f} "
            f"points; rows more than 1e-4 from PyTorch's: {f['rows_over_tol_image']} of {n[0]} images, "
            f"{f['rows_over_tol_text']} of {n[1]} texts (a top-n cut or a top-class choice that float rounding "
            f"tipped). int8 / float32: images x{q['images_per_s'] / f['images_per_s']:.2f}, texts "
            f"x{q['texts_per_s'] / f['texts_per_s']:.2f}, mean recall {100 * (q['mean_recall'] - f['mean_recall']):+.2f} "
            f"points, T→I R@1 {100 * (q['image_retrieval_recall@1'] - f['image_retrieval_recall@1']):+.1f}.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tokenspace-stair-drawings", help="a model name or folder")
    ap.add_argument("--split", default="emoji:test")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="timed passes per encoder (the median is reported)")
    ap.add_argument("--threads", type=int, default=0, help="torch and ONNX Runtime threads (0: torch's default)")
    ap.add_argument("--home", default=None)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "onnx_export.json"))
    ap.add_argument("--doc", default="", help="docs/benchmarks.md to write its section there ('' skips)")
    args = ap.parse_args(argv)
    if args.batch_size < 1 or args.repeats < 1 or args.threads < 0:
        ap.error("--batch-size and --repeats must be >= 1, --threads >= 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    model = tokenspace.load(args.model)
    result = {**run_record(__file__, argv), "model": args.model, "torch": torch.__version__, **measure(model, args.split, args.home,
                                                                          args.batch_size, args.repeats, threads)}
    write_text(Path(args.json), json.dumps(result, indent=1) + "\n")
    sizes = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in result["file_bytes"].items())
    body = (f"Model `{args.model}` on {args.split} ({result['n_images']} images, {result['n_texts']} captions), "
            f"CPU, {threads} threads for torch and ONNX Runtime, batches of {args.batch_size}, median of "
            f"{args.repeats} passes; preprocessing (letterbox, normalise) outside the image timings, "
            f"tokenizing inside the text timings. Export (float32 + int8, with its check to 1e-4): "
            f"{result['export_s']:.0f} s; files: {sizes}.\n\n" + table(result) + "\n\n" + summary(result))
    print(body)
    if args.doc:
        ResultsDoc(args.doc).update("onnx-export", body, result["command"],
                                    heading="ONNX export: speed and retrieval of float32 and int8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
