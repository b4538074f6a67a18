"""The `tokenspace` command: a thin layer over the library (each subcommand is a few library calls).

    tokenspace assets install|status         offline weights and data into the cache
    tokenspace data build                    manifests of the offline datasets
    tokenspace train --recipe R --out DIR    train a model (resumable with --resume)
    tokenspace eval --model DIR --data S..   retrieval metrics
    tokenspace encode --shards S.. --index I webdataset shards into an index, in resumable parts
    tokenspace index build|stats|export      an inverted index of a collection
    tokenspace search --index DIR "query"    search, with each hit explained token by token
    tokenspace decode --model DIR ...        top tokens of an image or a text
    tokenspace demo                          the main job: train, index, search, report
    tokenspace serve --model M --index I     the HTTP API and web page
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _assets(args) -> int:
    from tokenspace import assets

    if args.action == "install":
        report = assets.install(args.names or None, home=args.home, progress=not args.quiet, optional=args.optional)
        print(report)
        return 0 if report.ok else 1
    st = assets.status(args.home, hashes=not args.fast)
    print(assets.format_status(st))
    return 0 if all(v["present"] or v["optional"] for v in st.values()) else 1


def _data(args) -> int:
    from tokenspace.data.build import build_manifests, read_report

    paths = build_manifests(args.home, args.out, force=args.force, seed=args.seed,
                            openclipart_max_items=args.openclipart_max_items, names=args.only)
    for name, p in paths.items():
        print(f"{name}: {p}  {read_report(p)['splits']}")
    return 0


def _train(args) -> int:
    import yaml

    from tokenspace import pipeline

    overrides = {}
    for kv in args.set or []:
        k, sep, v = kv.partition("=")
        if not sep:
            raise ValueError(f"--set takes KEY=VALUE, got {kv!r}")
        overrides[k] = yaml.safe_load(v)  # the recipe's own syntax: numbers, lists, mappings
    from tokenspace.train.recipe import Recipe

    recipe = Recipe.load(args.recipe, **overrides)
    specs = recipe.data.get("train") or []
    specs = [specs] if isinstance(specs, str) else specs
    if recipe.train_image_tower or any(str(s).startswith("wds:") for s in specs):
        # pixels end to end (webdataset shards); under torchrun use `python -m tokenspace.train.distributed`
        from tokenspace.train.scale import train
    else:
        train = pipeline.train  # cached backbone grids, per-step eval on data.eval
    model = train(recipe, args.out, home=args.home, resume=args.resume)
    print(f"trained {model.config.name}: {Path(args.out) / 'model'}")
    return 0


def _encode(args) -> int:
    from tokenspace.data.webdataset import TarCollection
    from tokenspace.encode import encode_to_index
    from tokenspace.models.registry import load

    model = load(args.model)
    collection = TarCollection.open(args.shards)
    index = encode_to_index(model, collection, args.index, args.work or f"{args.index}.parts",
                            args.part_size, args.batch_size)
    print(f"indexed {len(index)} of {len(collection)} samples "
          f"({collection.skipped} incomplete samples skipped); rerun the same command to resume")
    return 0


def _eval(args) -> int:
    from tokenspace import pipeline
    from tokenspace.models.registry import load

    model = load(args.model)
    results = pipeline.evaluate(model, args.data, home=args.home)
    for spec, metrics in results.items():
        print(spec)
        for k, v in metrics.items():
            print(f"  {k:32s} {v:.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def _index(args) -> int:
    from tokenspace.index import InvertedIndex

    if args.action == "build":
        from tokenspace import pipeline
        from tokenspace.models.registry import load

        model = load(args.model)
        vectors, ids, records = pipeline.encode_collection(model, args.data, home=args.home)
        if args.top_n:
            vectors = vectors.prune_topk(args.top_n)
        index = InvertedIndex.build(vectors, ids)
        index.save(args.out)
        pipeline.write_collection_meta(args.out, records, Path(args.model).resolve())
        print(json.dumps(index.stats(), indent=2, default=str))
        return 0
    index = InvertedIndex.load(args.index)
    if args.action == "stats":
        print(json.dumps(index.stats(), indent=2, default=str))
        return 0
    from tokenspace.index import export

    ids = list(index.ids()) if hasattr(index, "ids") else None
    vectors = index.get(ids)
    if args.format == "jsonl":
        export.write_impact_jsonl(vectors, ids, args.out)
    elif args.format == "jsonl-int":
        export.write_impact_jsonl(vectors, ids, args.out, quantize=True)
    else:
        export.write_rank_features(vectors, ids, args.out)
    print(f"wrote {args.out}")
    return 0


def _search(args) -> int:
    from tokenspace import pipeline
    from tokenspace.explain.hits import contributions, format_hit
    from tokenspace.index import InvertedIndex
    from tokenspace.models.registry import load

    meta = pipeline.read_collection_meta(args.index)
    model_path = args.model or meta.get("model")
    if not model_path:
        raise SystemExit("no --model given and the index does not name one")
    model = load(model_path)
    index = InvertedIndex.load(args.index)
    if args.image:
        queries = model.encode_images([args.image])
    else:
        queries = model.encode_texts(args.query)
    options = {}
    if args.where:
        from tokenspace.index import parse_query

        options["where"] = parse_query(args.where, model.vocab)
    for q_text, qi in zip(args.query or [args.image], range(len(queries))):
        q = queries[qi]
        hits = index.search(q, k=args.k, **options)[0]
        print(f"\nquery: {q_text}")
        print("  query tokens: " + ", ".join(f"{t} {w:.2f}" for t, w in model.decode(q, top_k=8)[0]))
        if not hits:
            print("  no hits")
            continue
        docs = index.get([h.id for h in hits])
        for rank, (h, parts) in enumerate(zip(hits, contributions(q, docs)), 1):
            text = meta["items"].get(h.id, {}).get("text")
            print(format_hit(rank, h.id, h.score, parts, text))
    return 0


def _decode(args) -> int:
    from tokenspace.models.registry import load

    model = load(args.model)
    batch = model.encode_images(args.image) if args.image else model.encode_texts(args.text)
    for name, row in zip(args.image or args.text, model.decode(batch, top_k=args.k)):
        print(f"{name}:")
        print("  " + ", ".join(f"{t} {w:.3f}" for t, w in row))
    return 0


def _demo(args) -> int:
    from tokenspace.demo import run

    run(out=args.out, home=args.home, quick=args.quick)
    if args.serve:
        from tokenspace.serve.app import run as serve

        out = Path(args.out)
        serve(model=out / "stair-emoji" / "model", index=out / "index", host="127.0.0.1", port=args.port)
    return 0


def _serve(args) -> int:
    from tokenspace.serve.app import run

    run(model=args.model, index=args.index, host=args.host, port=args.port)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tokenspace", description=__doc__.split("\n")[0])
    p.add_argument("--home", default=None, help="asset cache (default $TOKENSPACE_HOME or ~/.cache/tokenspace)")
    sub = p.add_subparsers(dest="cmd", required=True)

    a = sub.add_parser("assets", help="install or check the offline weights and datasets")
    a.add_argument("action", choices=["install", "status"])
    a.add_argument("names", nargs="*", help="asset names (default: all required ones)")
    a.add_argument("--optional", action="store_true", help="also install optional assets")
    a.add_argument("--quiet", action="store_true")
    a.add_argument("--fast", action="store_true", help="status: skip sha256 checks")
    a.set_defaults(fn=_assets)

    d = sub.add_parser("data", help="build the dataset manifests")
    d.add_argument("action", choices=["build"])
    d.add_argument("--out", default=None)
    d.add_argument("--force", action="store_true")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--openclipart-max-items", type=int, default=None)
    d.add_argument("--only", nargs="+", default=None, metavar="DATASET",
                   help="build only these (emoji icons openclipart fashion-mnist mnist photos); default: all")
    d.set_defaults(fn=_data)

    t = sub.add_parser("train", help="train a model from a recipe")
    t.add_argument("--recipe", required=True, help="recipe name (configs/recipes) or YAML path")
    t.add_argument("--out", required=True, help="run folder")
    t.add_argument("--resume", action="store_true")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a recipe field")
    t.set_defaults(fn=_train)

    e = sub.add_parser("eval", help="retrieval metrics of a model on data specs")
    e.add_argument("--model", required=True)
    e.add_argument("--data", nargs="+", required=True, help="DATASET:SPLIT[:LIMIT] specs")
    e.add_argument("--json", default=None, help="also write the metrics here")
    e.set_defaults(fn=_eval)

    en = sub.add_parser("encode", help="encode webdataset shards into an index, in resumable parts")
    en.add_argument("--model", required=True)
    en.add_argument("--shards", nargs="+", required=True, help="tar paths, globs or {000..099} ranges")
    en.add_argument("--index", required=True)
    en.add_argument("--work", default=None, help="folder for the encoded parts (default INDEX.parts)")
    en.add_argument("--part-size", type=int, default=8192)
    en.add_argument("--batch-size", type=int, default=256)
    en.set_defaults(fn=_encode)

    i = sub.add_parser("index", help="build, inspect or export an inverted index")
    isub = i.add_subparsers(dest="action", required=True)
    ib = isub.add_parser("build")
    ib.add_argument("--model", required=True)
    ib.add_argument("--data", nargs="+", required=True)
    ib.add_argument("--out", required=True)
    ib.add_argument("--top-n", type=int, default=None, help="keep each image's n heaviest tokens")
    ist = isub.add_parser("stats")
    ist.add_argument("index")
    iex = isub.add_parser("export")
    iex.add_argument("index")
    iex.add_argument("--format", choices=["jsonl", "jsonl-int", "opensearch"], default="jsonl")
    iex.add_argument("--out", required=True)
    i.set_defaults(fn=_index)

    s = sub.add_parser("search", help="search an index by text (or image), explaining every hit")
    s.add_argument("--index", required=True)
    s.add_argument("--model", default=None, help="default: the model the index was built with")
    s.add_argument("query", nargs="*")
    s.add_argument("--image", default=None, help="search by an image file instead")
    s.add_argument("-k", type=int, default=5)
    s.add_argument("--where", default=None, help="boolean filter, e.g. 'dog AND (beach OR sand) NOT cat'")
    s.set_defaults(fn=_search)

    dc = sub.add_parser("decode", help="top tokens of images or texts")
    dc.add_argument("--model", required=True)
    dc.add_argument("--image", nargs="*", default=None)
    dc.add_argument("--text", nargs="*", default=None)
    dc.add_argument("-k", type=int, default=15)
    dc.set_defaults(fn=_decode)

    dm = sub.add_parser("demo", help="train STAIR and the dense baseline, index, search, report")
    dm.add_argument("--out", default="runs/demo")
    dm.add_argument("--quick", action="store_true", help="a tiny run to check the plumbing")
    dm.add_argument("--serve", action="store_true", help="then serve the page on the demo index (Ctrl-C stops)")
    dm.add_argument("--port", type=int, default=8000)
    dm.set_defaults(fn=_demo)

    sv = sub.add_parser("serve", help="HTTP API and web page")
    sv.add_argument("--model", required=True)
    sv.add_argument("--index", required=True)
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.set_defaults(fn=_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "search" and not args.query and not args.image:
        print("tokenspace search: give a query text or --image", file=sys.stderr)
        return 2
    if args.cmd == "decode" and not args.image and not args.text:
        print("tokenspace decode: give --image or --text", file=sys.stderr)
        return 2
    try:
        return args.fn(args)
    except (ValueError, KeyError, FileNotFoundError) as e:
        # bad input gets one clear line, not a traceback
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"tokenspace {args.cmd}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
