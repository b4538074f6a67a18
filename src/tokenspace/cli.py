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
    tokenspace export-st MODEL OUT           STAIR's text side as a sentence-transformers SparseEncoder
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

# the light library modules (numpy and the standard library; --help stays ~0.3 s): torch, numba and
# fastapi load inside the commands that need them
from tokenspace import __version__, assets, pipeline
from tokenspace.data.build import build_manifests, read_report
from tokenspace.data.webdataset import TarCollection
from tokenspace.explain.hits import contributions, format_hit

log = logging.getLogger("tokenspace")


class CLIError(Exception):
    """A runtime problem the user can fix, reported as one line (exit 1)."""


def _positive_int(text: str) -> int:
    n = int(text)  # argparse turns the ValueError into "invalid _positive_int value" (exit 2)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {n}")
    return n


_positive_int.__name__ = "positive integer"  # argparse names the type in its message


def _nonnegative_int(text: str) -> int:
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n


_nonnegative_int.__name__ = "non-negative integer"


def _port(text: str) -> int:
    n = int(text)
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is 1..65535, got {n}")
    return n


_port.__name__ = "port"


def _positive_float(text: str) -> float:
    x = float(text)
    if not 0 < x < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return x


_positive_float.__name__ = "positive number"


def _load_model(ref: str, device: str = "cpu"):
    """A model folder or a release name (`tokenspace.models.registry.list_releases()`), on ``device``;
    a missing folder is named. A config name is an untrained architecture: refused (library message)."""
    from tokenspace.models.registry import load  # start-up: --help must stay fast

    looks_like_path = os.sep in ref or ref.startswith(".") or Path(ref).suffix in (".json", ".safetensors")
    if looks_like_path and not Path(ref).exists():
        raise CLIError(f"no model at {ref}")
    dev = _device(device)
    model = load(ref)
    return model.to(dev) if dev.type != "cpu" else model


def _device(name: str):
    """--device as a torch.device that exists here (cpu, cuda, cuda:1, mps)."""
    import torch  # start-up: --help must stay fast

    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise CLIError(f"--device {name}: not a torch device ({_one_line(e)})") from None
    available = {"cpu": lambda: True, "cuda": torch.cuda.is_available,
                 "mps": lambda: getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()}
    if not available.get(dev.type, lambda: False)():
        raise CLIError(f"--device {name}: not available on this machine")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise CLIError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return dev


def _load_index(path: str, *, verify: bool = True, nonempty: bool = True):
    """The InvertedIndex saved at ``path``; a missing or (when ``nonempty``) empty index is an error."""
    from tokenspace.index import InvertedIndex  # start-up: --help must stay fast
    from tokenspace.index.storage import MANIFEST  # start-up: --help must stay fast

    if not (Path(path) / MANIFEST).exists():
        what = "the folder holds no index" if Path(path).is_dir() else "no such folder"
        raise CLIError(f"no index at {path} ({what}; build one with `tokenspace index build`)")
    index = InvertedIndex.load(path, verify=verify)
    if nonempty and len(index) == 0:
        raise CLIError(f"the index at {path} is empty")
    return index


def _assets(args) -> int:
    if args.action == "install":
        report = assets.install(args.names or None, home=args.home, progress=not args.quiet, optional=args.optional)
        print(report)
        return 0 if report.ok else 1
    st = assets.status(args.home, hashes=not args.fast)
    print(assets.format_status(st))
    return 0 if all(v["present"] or v["optional"] for v in st.values()) else 1


def _data(args) -> int:
    paths = build_manifests(args.home, args.out, force=args.force, seed=args.seed,
                            openclipart_max_items=args.openclipart_max_items, names=args.only)
    for name, p in paths.items():
        print(f"{name}: {p}  {read_report(p)['splits']}")
    return 0


def _train(args) -> int:
    import yaml  # start-up: --help must stay fast

    from tokenspace.train.recipe import Recipe, parse_overrides, yaml_problem  # start-up: --help must stay fast

    overrides = parse_overrides(args.set)  # a bad --set is a ValueError naming it: one line, exit 1
    try:
        recipe = Recipe.load(args.recipe, **overrides)
    except yaml.YAMLError as e:
        raise CLIError(f"{args.recipe}: not valid YAML ({yaml_problem(e)})") from None
    specs = recipe.data.get("train") or []
    specs = [specs] if isinstance(specs, str) else specs
    if recipe.train_image_tower or any(str(s).startswith("wds:") for s in specs):
        # pixels end to end (webdataset shards); under torchrun use `python -m tokenspace.train.distributed`
        from tokenspace.train.scale import train  # start-up: torch
    else:
        train = pipeline.train  # cached backbone grids, per-step eval on data.eval
    model = train(recipe, args.out, home=args.home, resume=args.resume)
    print(f"trained {model.config.name}: {Path(args.out) / 'model'}")
    return 0


def _encode(args) -> int:
    import tarfile  # start-up: --help must stay fast

    from tokenspace.encode import encode_to_index  # start-up: --help must stay fast

    try:
        collection = TarCollection.open(args.shards)
    except tarfile.TarError as e:
        raise CLIError(f"--shards {' '.join(args.shards)}: not a readable uncompressed tar ({e})") from None
    if len(collection) == 0:
        raise CLIError(f"--shards {' '.join(args.shards)}: no complete (image + text) samples "
                       f"({collection.skipped} incomplete)")
    model = _load_model(args.model, args.device)
    index = encode_to_index(model, collection, args.index, args.work or f"{args.index}.parts",
                            args.part_size, args.batch_size, workers=args.workers, tower=args.tower)
    if len(index) == 0:
        raise CLIError(f"none of the {len(collection)} samples has a readable image: {args.index} is empty")
    print(f"indexed {len(index)} of {len(collection)} samples "
          f"({collection.skipped} incomplete samples skipped); rerun the same command to resume")
    return 0


def _eval(args) -> int:
    model = _load_model(args.model, args.device)
    results = pipeline.evaluate(model, args.data, home=args.home)
    for spec, metrics in results.items():
        print(spec)
        for k, v in metrics.items():
            print(f"  {k:32s} {v:.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def _index(args) -> int:
    from tokenspace.index import InvertedIndex  # start-up: --help must stay fast

    if args.action == "build":

        model = _load_model(args.model, args.device)
        vectors, ids, records = pipeline.encode_collection(model, args.data, home=args.home)
        if not ids:
            raise CLIError(f"no readable images in {' '.join(args.data)}: nothing to index")
        if args.top_n:
            vectors = vectors.prune_topk(args.top_n)
        index = InvertedIndex.build(vectors, ids)
        index.save(args.out)
        pipeline.write_collection_meta(args.out, records, Path(args.model).resolve())
        print(json.dumps(index.stats(), indent=2, default=str))
        return 0
    index = _load_index(args.index, nonempty=args.action != "stats")
    if args.action == "stats":
        print(json.dumps(index.stats(), indent=2, default=str))
        return 0
    from tokenspace.index import export  # start-up: --help must stay fast

    ids = list(index.ids())
    vectors = index.get(ids)
    if args.queries:
        _export_queries(args)
    if args.format == "jsonl":
        out = export.write_jsonl(vectors, ids, args.out)
    elif args.format == "jsonl-int":
        out = export.write_jsonl_quantized(vectors, ids, args.out, scale=args.scale)
    else:
        out = export.write_rank_features(vectors, ids, args.out)
    print(f"wrote {len(ids)} documents to {args.out}" + (f" ({len(out)} files)" if isinstance(out, list) else ""))
    return 0


def _export_queries(args) -> None:
    """--queries FILE: one text a line, encoded with the index's model, written beside --out."""
    from tokenspace.index import export  # start-up: --help must stay fast

    if args.format == "opensearch":
        raise CLIError("--queries: OpenSearch takes queries as rank_feature clauses, not a file")
    texts = [t.strip() for t in Path(args.queries).read_text(encoding="utf-8").splitlines() if t.strip()]
    if not texts:
        raise CLIError(f"--queries {args.queries}: no query text in the file")
    model_ref = args.model or pipeline.read_collection_meta(args.index).get("model")
    if not model_ref:
        raise CLIError(f"--queries needs --model: the index at {args.index} does not name its model")
    queries = _load_model(model_ref).encode_texts(texts)
    qids = [f"q{n}" for n in range(1, len(texts) + 1)]
    if args.format == "jsonl":
        path = Path(args.queries_out or Path(args.out).with_name("queries.jsonl"))
        export.write_queries_jsonl(queries, qids, path)
    else:  # Anserini parses every file of the collection folder: the topics go beside that folder
        path = Path(args.queries_out or Path(args.out).resolve().parent.parent / "queries.tsv")
        export.write_queries_tsv(queries, qids, path, scale=args.scale)
    print(f"wrote {len(texts)} queries (q1..q{len(texts)}, in file order) to {path}")


def _search(args) -> int:
    index = _load_index(args.index)
    meta = pipeline.read_collection_meta(args.index)
    model_path = args.model or meta.get("model")
    if not model_path:
        raise CLIError(f"no --model given and the index at {args.index} does not name one")
    model = _load_model(model_path)
    if args.image:
        queries = model.encode_images([args.image])
    else:
        queries = model.encode_texts(args.query)
    options = {}
    if args.where:
        from tokenspace.index import parse_query  # start-up: --help must stay fast

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
    model = _load_model(args.model)
    batch = model.encode_images(args.image) if args.image else model.encode_texts(args.text)
    for name, row in zip(args.image or args.text, model.decode(batch, top_k=args.k)):
        print(f"{name}:")
        print("  " + ", ".join(f"{t} {w:.3f}" for t, w in row))
    return 0


def _demo(args) -> int:
    from tokenspace.demo import run  # start-up: --help must stay fast

    run(out=args.out, home=args.home, quick=args.quick)
    if args.serve:
        from tokenspace.serve.app import run as serve  # optional: fastapi (the serve extra)

        out = Path(args.out)
        serve(model=out / "stair-emoji" / "model", index=out / "index", host="127.0.0.1", port=args.port)
    return 0


def _serve(args) -> int:
    from tokenspace.models.registry import DEFAULT_RELEASE, release_path  # start-up: --help must stay fast
    from tokenspace.serve.app import run  # optional: fastapi (the serve extra)

    _device(args.device)  # a bad --device is reported first, as on the other commands
    if not Path(args.index).is_dir():
        raise CLIError(f"--index {args.index}: no index folder there (make one with `make demo` or "
                       "`tokenspace index build`)")
    model_ref = args.model or pipeline.read_collection_meta(args.index).get("model") or (
        DEFAULT_RELEASE if release_path(DEFAULT_RELEASE) else None)
    if not model_ref:
        raise CLIError(f"serve needs --model: the index at {args.index} does not name its model and no release "
                       "model is installed")
    run(model=_load_model(model_ref, args.device), index=args.index, host=args.host, port=args.port)
    return 0


def _export_st(args) -> int:
    from tokenspace.models.export_st import export_sentence_transformers  # start-up: --help must stay fast

    out = export_sentence_transformers(_load_model(args.model), args.out)
    print(f"wrote a sentence-transformers SparseEncoder folder: {out}")
    return 0


DEVICE_HELP = "torch device for the model: cpu (default), cuda, cuda:N or mps"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tokenspace", description=__doc__.split("\n")[0],
                                epilog="exit codes: 0 ok, 1 runtime error (one line on stderr), 2 usage error")
    p.add_argument("--version", action="version", version=f"tokenspace {__version__}")
    p.add_argument("--home", default=None, help="asset cache (default $TOKENSPACE_HOME or ~/.cache/tokenspace)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="messages on stderr (default info; debug also prints the traceback of an error)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    a = sub.add_parser("assets", help="install or check the offline weights and datasets")
    a.add_argument("action", choices=["install", "status"], help="install: fetch into the cache; status: check it")
    a.add_argument("names", nargs="*", help="asset names (default: all required ones)")
    a.add_argument("--optional", action="store_true", help="also install optional assets")
    a.add_argument("--quiet", action="store_true", help="no progress messages")
    a.add_argument("--fast", action="store_true", help="status: skip sha256 checks")
    a.set_defaults(fn=_assets)

    d = sub.add_parser("data", help="build the dataset manifests")
    d.add_argument("action", choices=["build"], help="build: write the manifests of the installed datasets")
    d.add_argument("--out", default=None, help="manifest folder (default: the one under --home)")
    d.add_argument("--force", action="store_true", help="rebuild manifests that already exist")
    d.add_argument("--seed", type=int, default=0, help="seed of the split assignment (default 0)")
    d.add_argument("--openclipart-max-items", type=_positive_int, default=None,
                   help="cap the OpenClipart manifest at this many items")
    d.add_argument("--only", nargs="+", default=None, metavar="DATASET",
                   help="build only these (emoji icons openclipart fashion-mnist mnist photos); default: all")
    d.set_defaults(fn=_data)

    t = sub.add_parser("train", help="train a model from a recipe")
    t.add_argument("--recipe", required=True, help="recipe name (configs/recipes) or YAML path")
    t.add_argument("--out", required=True, help="run folder (checkpoints, log.jsonl, model/)")
    t.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    t.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a recipe field with a YAML value (repeatable), e.g. --set batch_size=64")
    t.set_defaults(fn=_train)

    e = sub.add_parser("eval", help="retrieval metrics of a model on data specs")
    e.add_argument("--model", required=True, help="model folder or release name")
    e.add_argument("--data", nargs="+", required=True, help="DATASET:SPLIT[:LIMIT] specs (or MANIFEST.jsonl:SPLIT)")
    e.add_argument("--json", default=None, help="also write the metrics here")
    e.add_argument("--device", default="cpu", help=DEVICE_HELP)
    e.set_defaults(fn=_eval)

    en = sub.add_parser("encode", help="encode webdataset shards into an index, in resumable parts")
    en.add_argument("--model", required=True, help="model folder or release name")
    en.add_argument("--shards", nargs="+", required=True, help="tar paths, globs or {000..099} ranges")
    en.add_argument("--index", required=True, help="index folder (created, or extended on a rerun)")
    en.add_argument("--work", default=None, help="folder for the encoded parts (default INDEX.parts)")
    en.add_argument("--part-size", type=_positive_int, default=8192,
                    help="images per part, the unit of resumption (default 8192)")
    en.add_argument("--batch-size", type=_positive_int, default=256, help="images per model call (default 256)")
    en.add_argument("--device", default="cpu", help=DEVICE_HELP)
    en.add_argument("--workers", type=_nonnegative_int, default=None,
                    help="image-decoding processes beside the model (default: cores - 1, at most 8)")
    en.add_argument("--tower", choices=("auto", "torch", "onnx"), default="auto",
                    help="image tower runtime: onnx = ONNX Runtime (CPU, checked against PyTorch to 1e-4 "
                         "before use; pip install 'tokenspace[onnx]'), torch = PyTorch, auto = onnx when "
                         "installed on a CPU model (default: auto)")
    en.set_defaults(fn=_encode)

    i = sub.add_parser("index", help="build, inspect or export an inverted index")
    isub = i.add_subparsers(dest="action", required=True, metavar="ACTION")
    ib = isub.add_parser("build", help="encode a collection's images and index them")
    ib.add_argument("--model", required=True, help="model folder or release name")
    ib.add_argument("--data", nargs="+", required=True, help="DATASET:SPLIT[:LIMIT] specs (or MANIFEST.jsonl:SPLIT)")
    ib.add_argument("--out", required=True, help="index folder to write")
    ib.add_argument("--top-n", type=_positive_int, default=None, help="keep each image's n heaviest tokens")
    ib.add_argument("--device", default="cpu", help=DEVICE_HELP)
    ist = isub.add_parser("stats", help="print an index's statistics as JSON")
    ist.add_argument("index", help="index folder")
    iex = isub.add_parser("export", help="write the index's vectors in another engine's format")
    iex.add_argument("index", help="index folder")
    iex.add_argument("--format", choices=["jsonl", "jsonl-int", "opensearch"], default="jsonl",
                     help="jsonl: float impacts (Seismic); jsonl-int: integer impacts (Anserini/pyserini); "
                          "opensearch: rank_features mapping + bulk files (default jsonl)")
    iex.add_argument("--out", required=True, help="output file (jsonl formats) or folder (opensearch)")
    iex.add_argument("--scale", type=_positive_float, default=100.0,
                     help="jsonl-int: integer impact = max(1, round(weight x scale)) (default 100)")
    iex.add_argument("--queries", default=None, metavar="FILE",
                     help="also encode these query texts (one a line) into a query file: queries.jsonl "
                          "beside --out (jsonl, Seismic) or queries.tsv beside --out's folder (jsonl-int, "
                          "Anserini, which parses every file of the collection folder)")
    iex.add_argument("--queries-out", default=None, metavar="PATH", help="--queries: write the query file here")
    iex.add_argument("--model", default=None, help="--queries: model folder (default: the index's own)")
    i.set_defaults(fn=_index)

    s = sub.add_parser("search", help="search an index by text (or image), explaining every hit")
    s.add_argument("--index", required=True, help="index folder")
    s.add_argument("--model", default=None, help="default: the model the index was built with")
    s.add_argument("query", nargs="*", help="query texts (one search each)")
    s.add_argument("--image", default=None, help="search by an image file instead")
    s.add_argument("-k", type=_positive_int, default=5, help="hits per query (default 5)")
    s.add_argument("--where", default=None, help="boolean filter, e.g. 'dog AND (beach OR sand) NOT cat'")
    s.set_defaults(fn=_search)

    dc = sub.add_parser("decode", help="top tokens of images or texts")
    dc.add_argument("--model", required=True, help="model folder or release name")
    dc.add_argument("--image", nargs="*", default=None, help="image files")
    dc.add_argument("--text", nargs="*", default=None, help="texts")
    dc.add_argument("-k", type=_positive_int, default=15, help="tokens per input (default 15)")
    dc.set_defaults(fn=_decode)

    dm = sub.add_parser("demo", help="train STAIR and the dense baseline, index, search, report")
    dm.add_argument("--out", default="runs/demo", help="demo folder (default runs/demo)")
    dm.add_argument("--quick", action="store_true", help="a tiny run to check the plumbing")
    dm.add_argument("--serve", action="store_true", help="then serve the page on the demo index (Ctrl-C stops)")
    dm.add_argument("--port", type=_port, default=8000, help="--serve: TCP port (default 8000)")
    dm.set_defaults(fn=_demo)

    sv = sub.add_parser("serve", help="HTTP API and web page")
    sv.add_argument("--model", help="model folder or release name (default: the model the index names, "
                    "else the release model)")
    sv.add_argument("--index", default="runs/demo/index",
                    help="index folder written by `tokenspace index build` (default: make demo's, runs/demo/index)")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000)")
    sv.add_argument("--device", default="cpu", help=DEVICE_HELP)
    sv.set_defaults(fn=_serve)

    st = sub.add_parser("export-st", help="the STAIR text encoder as a sentence-transformers SparseEncoder folder")
    st.add_argument("model", help="STAIR model folder or release name")
    st.add_argument("out", help="folder to write (replaced)")
    st.set_defaults(fn=_export_st)
    return p


def _one_line(e: BaseException) -> str:
    """An exception as one line: multi-line messages (YAML's) collapsed."""
    msg = e.args[0] if isinstance(e, KeyError) and e.args else e
    text = " ".join(str(msg).split())
    return text if isinstance(e, (CLIError, OSError, ValueError, KeyError)) else f"{type(e).__name__}: {text}"


def setup_logging(level: str = "info") -> None:
    """The CLI's handler: library modules log through logging.getLogger(__name__) under "tokenspace"."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[tokenspace] %(message)s"))
    root = logging.getLogger("tokenspace")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # usage errors: argparse prints the usage and exits 2
    setup_logging(args.log_level)
    if args.cmd == "search" and not args.query and not args.image:
        parser.exit(2, "tokenspace search: error: give a query text or --image\n")
    if args.cmd == "decode" and not args.image and not args.text:
        parser.exit(2, "tokenspace decode: error: give --image or --text\n")
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        print(f"tokenspace {args.cmd}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a user never sees a traceback; --log-level debug shows it
        log.debug("traceback of the error below", exc_info=True)
        print(f"tokenspace {args.cmd}: error: {_one_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
