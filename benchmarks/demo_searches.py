"""The demo's searches under each ranking: a relevant image at rank 1 (and in the top 3) for the 12 example
searches, the 18 sample photos found by their own caption at rank 1, and how many of the hits' top-3
contributions come from tokens held by more than half of the images; on the demo's own index (the held-out
drawings and scikit-image's photos: test data, so this reports rankings chosen elsewhere, never chooses).

    python -m benchmarks.demo_searches --rankings benchmarks/search_quality_rows.json

Writes benchmarks/results/demo_searches.json.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

from benchmarks.common import run_record, write_json
from tokenspace import demo, pipeline
from tokenspace.explain.ranking import HubBank, Ranking, add_hub_prior, read_model_ranking
from tokenspace.index import InvertedIndex
from tokenspace.models.registry import load

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rankings", type=Path, required=True, help="{name: {ranking fields, generic?, hub_k?}}")
    ap.add_argument("--model", default=demo.RELEASE)
    args = ap.parse_args(argv)
    model = load(args.model)
    vectors, ids, records = pipeline.encode_collection(model, demo.INDEX_SPECS, progress=False)
    meta = {r.id: {"text": r.text} for r in records}
    bank = read_model_ranking(args.model).hub or HubBank(("emoji:train", "emoji:train-extra", "icons:train",
                                                          "openclipart:train"))
    rows = {}
    for name, cfg in json.loads(args.rankings.read_text()).items():
        cfg = dict(cfg)
        generic, hub_k = cfg.pop("generic", None), cfg.pop("hub_k", bank.k)
        ranking = Ranking.from_dict(cfg)
        index = InvertedIndex.build(vectors, ids, generic_share=generic)
        if ranking.prior_weight:
            add_hub_prior(index, model, ranking, HubBank(bank.specs, bank.size, hub_k, ranking.prior_weight))
        with contextlib.redirect_stdout(io.StringIO()):
            found = demo.print_searches(model, index, meta, ranking, quiet=True)
            photos = demo.print_photo_self_retrieval(model, index, records, ranking)
        rows[name] = {**found, "photos_at1": photos, "config": {**ranking.to_dict(), "generic": generic}}
        print(f"| {name} | {found['at1']} / {len(demo.QUERIES)} | {found['top_k']} | {photos} / 18 | "
              f"{found['generic']} / {found['contributions']} |", flush=True)
    out = ROOT / "benchmarks" / "results" / "demo_searches.json"
    write_json(out, {"model": args.model, "rows": rows}, run_record(__file__, argv))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
