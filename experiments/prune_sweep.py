"""Top-n pruning of a trained model's encoded rows on the val splits: recall vs tokens per image / text.

    python -m experiments.run prune_sweep                     # experiments/prune_sweep.toml
    python -m experiments.run prune_sweep --set model.name=runs/exp/x/model --set sweep.image=[0,100,60]

Each (image n, text n) pair sets the model's ``image_top_n`` / ``text_top_n`` (the STAIR options of the
same name: each encoded row keeps its n heaviest tokens, then is normalised; 0 keeps all) and measures
R@1/5/10 both ways on every split. Val splits only: the choice of n for a release is made here, and the
test splits are measured once, by benchmarks/release_model.py. Top-n pruning is VisualSparta's (Table 3),
not STAIR's: a table row that uses it says so.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import tokenspace
from experiments import config
from tokenspace import pipeline
from tokenspace.atomic import write_text
from tokenspace.eval import ResultsDoc


def sweep(model, encoded: dict, image_ns, text_ns) -> list[dict]:
    rows = []
    for ni in image_ns:
        for nt in text_ns:
            model.image_top_n, model.text_top_n = ni or None, nt or None
            per = {s: pipeline.evaluate_retrieval(model, enc) for s, enc in encoded.items()}
            rows.append({"image_top_n": ni, "text_top_n": nt,
                         # the evaluator's mean_recall: R@1/5/10 both ways (a fraction per split; % here)
                         "mean_recall": 100 * float(np.mean([m["mean_recall"] for m in per.values()])),
                         "t2i_r1": 100 * float(np.mean([m["image_retrieval_recall@1"] for m in per.values()])),
                         "nnz_image": max(m["nnz_image"] for m in per.values()),
                         "nnz_text": max(m["nnz_text"] for m in per.values()),
                         "splits": per})
            r = rows[-1]
            print(f"image {ni or 'all':>4} text {nt or 'all':>4}: mean recall {r['mean_recall']:.2f}, "
                  f"T→I R@1 {r['t2i_r1']:.2f}, tokens {r['nnz_image']:.1f} / {r['nnz_text']:.1f}", flush=True)
    return rows


def table(rows: list[dict], splits) -> str:
    head = ("| image top-n | text top-n | " + " | ".join(f"{s} mean R" for s in splits)
            + " | mean R (all) | T→I R@1 | tokens/image (max) | tokens/text (max) |")
    lines = [head, "|" + "---:|" * (head.count("|") - 1)]
    for r in rows:
        cells = [str(r["image_top_n"] or "all"), str(r["text_top_n"] or "all")]
        cells += [f"{100 * r['splits'][s]['mean_recall']:.1f}" for s in splits]
        cells += [f"{r['mean_recall']:.2f}", f"{r['t2i_r1']:.1f}", f"{r['nnz_image']:.1f}", f"{r['nnz_text']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report-only", action="store_true", help="write [output] doc's section from its json")
    run, args = config.start("prune_sweep", argv, ap)
    args.model, args.home = run["model"]["name"], run["model"]["home"] or None
    args.splits = run["sweep"]["splits"]  # val splits only (see the docstring)
    args.image, args.text = run["sweep"]["image"], run["sweep"]["text"]  # 0 keeps all
    args.json, args.doc = run["output"]["json"], run["output"]["doc"]  # doc '' skips the docs section
    if any(part.startswith("test") for s in args.splits for part in s.split(":")[1:]):  # emoji:test, x:test:300
        ap.error("prune_sweep chooses n: it runs on val splits only (the test splits are measured once)")
    if any(n < 0 for n in args.image + args.text):
        ap.error("top-n values must be >= 0 (0 keeps every token)")
    run.ready()
    if args.report_only:
        doc = json.loads(Path(args.json).read_text())
        command, rows, args.model = doc["command"], doc["rows"], doc["model"]
        args.splits = list(rows[0]["splits"])
    else:
        model = tokenspace.load(args.model)
        if not model.sparse:
            ap.error(f"{args.model} is dense: there are no tokens to prune")
        encoded = {s: pipeline.image_grids(model, pipeline.load_split(s, args.home), args.home, progress=False)
                   for s in args.splits}
        rows = sweep(model, encoded, args.image, args.text)
        command = run.command()
        write_text(Path(args.json), json.dumps({"command": command, "model": args.model, "rows": rows},
                                               indent=1, default=float) + "\n")
    body = (f"Model `{args.model}`; R@1/5/10 both ways per val split, mean in %; tokens: the largest split "
            "mean. Top-n pruning of encoded rows is VisualSparta's (Table 3), a deviation from STAIR.\n\n"
            + table(rows, args.splits))
    print(body)
    if args.doc:
        ResultsDoc(args.doc).update("prune-sweep", body, command,
                                    heading="Top-n pruning of the release model's vectors, val splits")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
