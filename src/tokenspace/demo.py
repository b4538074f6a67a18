"""The main job (`make demo`): the release model (models/tokenspace-stair-drawings) indexes the held-out
drawings and scikit-image's sample photos and answers the example searches, each hit explained token by
token and each search marked found / MISSED (is an image whose caption has the query's key word among the
top hits), then searches each sample photo by its own caption; STAIR and its dense twin are still trained
here on emoji + OpenClipart (a few minutes) to show training end to end, and all three go into a results
table in docs/results.md.

Trained models are reused when their run folder already holds one, so a second `make demo` only
re-indexes, searches and reports. ``quick`` shrinks everything to check the plumbing in a minute.
Without the release folder (an installed wheel without models/), the STAIR trained here searches.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

from tokenspace import pipeline
from tokenspace.data.build import build_manifests, default_dir
from tokenspace.data.specs import note as _log
from tokenspace.encode import FileCollection, build_index
from tokenspace.eval import ResultsDoc, markdown_table
from tokenspace.explain.hits import format_hit
from tokenspace.explain.ranking import Ranking, add_hub_prior, read_model_ranking
from tokenspace.models.registry import DEFAULT_RELEASE as RELEASE
from tokenspace.models.registry import load, release_path
from tokenspace.searcher import Searcher
from tokenspace.serve.smoke import check
from tokenspace.train.recipe import Recipe

EVAL_SPECS = ["emoji:test", "emoji:val", "openclipart:test:300"]
INDEX_SPECS = ["emoji:test", "openclipart:test:300", "photos:test"]
# (query, key word): an indexed image is relevant to the query when its caption has the key word (a whole
# word, plural allowed), so the demo can say whether each search found what it asked for. Every key has
# at least one image in INDEX_SPECS (a dog or a pizza has none: such queries can only miss)
QUERIES = [("red heart", "heart"), ("musical instrument", "instrument"), ("a racing car", "car"),
           ("sad face with tears", "sad"), ("a cat", "cat"), ("a rocket", "rocket"), ("a cup of coffee", "coffee"),
           ("a horse", "horse"), ("the moon", "moon"), ("a bird", "bird"), ("an astronaut", "astronaut"),
           ("a clock", "clock")]
WHERE_EXAMPLE = ("a smiling face", "face AND NOT heart")  # tokens the trained images do activate
SYSTEMS = {"STAIR (3-stage, trained here)": "stair-emoji", "dense baseline (trained here)": "dense-emoji"}
COLUMNS = ["image_retrieval_recall@1", "image_retrieval_recall@5", "image_retrieval_recall@10",
           "text_retrieval_recall@1", "text_retrieval_recall@5", "text_retrieval_recall@10",
           "nnz_image", "nnz_text"]
# clip_benchmark's names: image_retrieval = text -> image (the images are retrieved)
HEADERS = {f"{kind}_retrieval_recall@{k}": f"{arrow} R@{k} (%)"
           for kind, arrow in (("image", "T→I"), ("text", "I→T")) for k in (1, 5, 10)}


def _trained(recipe: str, out: Path, home, quick: bool):
    if (out / "model" / "model.safetensors").exists():
        _log(f"{recipe}: reusing the trained model in {out / 'model'}")
        return load(out / "model")
    overrides = {}
    if quick:
        r = Recipe.load(recipe)
        overrides = {
            "stages": [{**s.__dict__, "steps": 3, "warmup_steps": 0} for s in r.stages],
            "data": {"train": ["emoji:train:128"], "eval": []},
            "batch_size": 16,
        }
    return pipeline.train(recipe, out, home=home, resume=True, **overrides)


SPLITS_FILE = "splits.json"  # in the release folder: the data build its training split came from


def split_build(home) -> dict:
    """What decides the concept splits of this machine's manifests: builder version, split parameters and
    the installed sources (the groups are drawn over all of them, docs/data.md)."""
    meta = json.loads((default_dir(Path(home)) / "emoji.jsonl.meta.json").read_text())
    return {k: meta[k] for k in ("builder_version", "params", "sources")}


def _release(home):
    folder = release_path(RELEASE)
    if folder is None:
        _log(f"no release model {RELEASE!r} here (models/ of a source checkout): the STAIR trained here searches")
        return None
    trained_on = json.loads((folder / SPLITS_FILE).read_text()) if (folder / SPLITS_FILE).exists() else None
    if trained_on is not None and trained_on != split_build(home):
        _log(f"warning: this machine's data build differs from the one {RELEASE} was trained on (other installed "
             f"sources or split parameters), so some 'held-out' images below may be training images of that "
             f"model; `make assets` installs the sources it was trained with")
    return load(folder)


def relevant(caption: str | None, key: str) -> bool:
    return bool(caption) and re.search(rf"\b{re.escape(key)}(s|es)?\b", caption.lower()) is not None


def _session(model, index, meta: dict | None, ranking: Ranking) -> Searcher:
    """The search session the demo's searches run in (searcher.py); ``meta``: id -> {text, ...} when the
    index's rows do not carry their captions."""
    return Searcher.open(index, model, ranking=ranking, items=meta)


def print_searches(model, index, meta: dict | None, ranking: Ranking, k: int = 3, quiet: bool = False) -> dict:
    """Each example search: its query tokens, the top hits explained, and where the first relevant image
    ranks (QUERIES), then how many searches found one at rank 1 and in the top k, and how many of the
    hits' top-3 contributions come from generic tokens (held by more than half of the images). Returns
    those counts ({"at1", "top_k", "generic", "contributions"}); ``quiet``: only the count line."""
    searcher = _session(model, index, meta, ranking)
    captions = {i: (searcher.item(i) or {}).get("text") for i in index.ids()}
    firsts, generic, shown = [], 0, 0
    common = index.doc_freq() > len(index) / 2
    for text, key in QUERIES:
        ranked = searcher.search(text, len(index), explain=False).hits
        res = searcher.search(text, k)
        for h in res.hits:
            generic += sum(bool(common[model.vocab.id(c.token)]) for c in h.parts[:3])
            shown += min(3, len(h.parts))
        n_rel = sum(relevant(c, key) for c in captions.values())
        first = next((r for r, h in enumerate(ranked, 1) if relevant(captions.get(h.id), key)), None)
        firsts.append(first)
        if quiet:
            continue
        print(f"\nquery: {text!r} -> tokens " + ", ".join(f"{t} {w:.2f}" for t, w in res.query[:6]))
        for rank, h in enumerate(res.hits, 1):
            print(format_hit(rank, h.id, h.score, h.parts, h.item.get("text"), penalty=h.penalty))
        where = f"first at rank {first}" if first else "none scored above 0"
        print(f"  {'found' if first and first <= k else 'MISSED'}: {n_rel} indexed images have {key!r} in their "
              f"caption; {where}")
    at1, atk = sum(f == 1 for f in firsts), sum(bool(f) and f <= k for f in firsts)
    print(f"{'' if quiet else chr(10)}example searches ({describe(ranking)}): a relevant image at rank 1 for {at1} of "
          f"{len(QUERIES)}, in the top {k} for {atk}; generic tokens (in > half of the images) in {generic} of the "
          f"hits' {shown} top-3 contributions")
    return {"at1": at1, "top_k": atk, "generic": generic, "contributions": shown}


def print_photo_self_retrieval(model, index, records, ranking: Ranking) -> int:
    """scikit-image's sample photos searched by their own captions among everything indexed; returns
    how many are found at rank 1."""
    photos = [r for r in records if r.source == "skimage"]
    if not photos:
        return 0
    searcher = _session(model, index, {}, ranking)
    hits = [searcher.search(r.text, 1, explain=False).hits for r in photos]
    top = [bool(h) and h[0].id == r.id for h, r in zip(hits, photos)]
    print(f"sample photos ({describe(ranking)}): the photo's own caption finds it at rank 1 for {sum(top)} of "
          f"{len(photos)} (among all {len(index)} indexed images); missed: " + ", ".join(
              r.id.split(":", 1)[1] for r, ok in zip(photos, top) if not ok))
    return sum(top)


def describe(ranking: Ranking) -> str:
    """A ranking in a few words, for the demo's count lines."""
    if ranking == Ranking(prior_weight=0.0):
        return "the model's own dot product"
    parts = [f"idf^{ranking.idf:g}" if ranking.idf else "",
             f"expansion x{ranking.expansion:g}" if ranking.expansion != 1 else "",
             f"floor {ranking.expansion_floor:g}" if ranking.expansion_floor else "",
             "hub prior" + (f" x{ranking.prior_weight:g}" if ranking.prior_weight is not None else "")
             if ranking.prior_weight != 0 else ""]
    return ", ".join(p for p in parts if p) or "the model's own dot product"


def run(out="runs/demo", home=None, quick: bool = False, results=None) -> dict:
    """``results``: the markdown file the table goes into (default OUT/results.md: a clone's tracked files
    stay as they are; docs/results.md updates the docs page's demo section)."""
    t0 = time.time()
    out = Path(out)
    results = Path(results) if results is not None else out / "results.md"
    build_manifests(pipeline.home_dir(home))
    models = {name: _trained(recipe, out / recipe, home, quick) for name, recipe in SYSTEMS.items()}
    t_train = time.time() - t0
    release = _release(pipeline.home_dir(home))
    if release is not None:
        models = {f"{RELEASE} (release model)": release, **models}

    eval_specs = ["emoji:test:64"] if quick else EVAL_SPECS
    rows: dict[str, dict] = {}
    for name, model in models.items():
        for spec, metrics in pipeline.evaluate(model, eval_specs, home=home, progress=False).items():
            rows[f"{name} — {spec}"] = metrics
    table = markdown_table(rows, COLUMNS, headers=HEADERS)
    print("\n" + table)

    # the release model searches; its folder is what `tokenspace serve` loads for this index
    stair = release if release is not None else models["STAIR (3-stage, trained here)"]
    model_ref = RELEASE if release is not None else str((out / "stair-emoji" / "model").resolve())
    collection = FileCollection.from_specs(["emoji:test:64", "photos:test"] if quick else INDEX_SPECS, home)
    index_dir = out / "index"
    # the ranking chosen for the model on validation data (its folder's ranking.json; explain/ranking.py)
    chosen = read_model_ranking(model_ref)
    ranking, hub = chosen.search, chosen.hub
    if hub is None:
        ranking = ranking.with_(prior_weight=0.0)  # no hub prior to weigh
    # the road every index takes (encode.py: resumable parts, then one build); the parts stay for the
    # plain index below, built from the same rows
    parts = out / "index.parts"
    build_index(stair, collection, index_dir, parts, info={"model": model_ref, "ranking": ranking.to_dict()},
                generic_share=chosen.generic_share, keep_parts=True,
                finish=None if hub is None else (lambda index: add_hub_prior(index, stair, ranking, hub, home)))
    searcher = Searcher.open(index_dir, stair)
    index = searcher.index
    print(f"indexed {len(index)} held-out images and photos with {model_ref}: mean "
          f"{index.stats()['nnz'] / max(1, len(index)):.1f} tokens per image; ranking: {describe(ranking)}"
          + (f", generic image tokens down-weighted above a {chosen.generic_share:g} share" if chosen.generic_share else ""))

    print_searches(stair, index, None, ranking)
    print_photo_self_retrieval(stair, index, collection.records, ranking)
    plain = Ranking(prior_weight=0.0)
    plain_index = build_index(stair, collection, None, parts)  # the vectors as encoded (and the parts go)
    if ranking != plain or chosen.generic_share:
        # the same searches with the model's own dot product, to compare
        print_searches(stair, plain_index, None, plain, quiet=True)
        print_photo_self_retrieval(stair, plain_index, collection.records, plain)
    text, where = WHERE_EXAMPLE
    hits = searcher.search(text, 3, where=where, explain=False).hits
    print(f"\nquery: {text!r} WHERE {where}: " + (", ".join(f"{h.id} ({h.score:.3f})" for h in hits)
                                                    or "no indexed image satisfies the filter"))

    if not quick:
        command = f"tokenspace demo --results {results}  (release model + recipes stair-emoji, dense-emoji)"
        ResultsDoc(results).update("demo", "Held-out retrieval (builder v3 splits, docs/data.md). emoji:test: "
                                   "OpenMoji drawings of held-out concepts (held-out artist too); emoji:val: "
                                   "Google drawings of the validation concepts; OpenClipart test: 300 held-out "
                                   "drawings (deterministic subsample). The release model (v2) is STAIR trained "
                                   "on all 30,036 training drawings fused with the training-free tagger, with "
                                   "each query's own words anchored in its vector, keeping each image's 100 "
                                   "heaviest tokens and a text's 40 (benchmarks/release_model.py; fusion, "
                                   "anchor and top-n are not STAIR's); the two others train here in minutes "
                                   "on emoji:train + 2,000 OpenClipart drawings. Recall "
                                   "in %, ties counted against the query, nnz = mean non-zero tokens per "
                                   "vector.\n\n" + table, command, heading="Release model and the demo's own "
                                   "training (demo)")
    served = check(stair, index_dir, QUERIES[0][0])
    print(f"\nweb page checked over HTTP on {served['url']}: page {served['page_bytes']} bytes, "
          f"POST /search {QUERIES[0][0]!r} -> " + ", ".join(f"{i} ({s:.2f})" for i, s, _ in served["hits"]))
    print(f"done in {time.time() - t0:.0f}s (training {t_train:.0f}s). Serve it with:\n"
          f"  tokenspace serve --model {model_ref} --index {index_dir}")
    return rows
