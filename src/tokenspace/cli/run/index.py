"""tokenspace index build|stats|export: an inverted index of a collection."""
from __future__ import annotations

import json
from pathlib import Path

from tokenspace import pipeline
from tokenspace.cli.common import CLIError, UsageError
from tokenspace.cli.hybrid import DENSE_IDS, build_dense_index
from tokenspace.cli.index_loading import load_index
from tokenspace.cli.model_loading import load_model, model_reference
from tokenspace.index import InvertedIndex, export
from tokenspace.index.metadata import read_jsonl as read_metadata_jsonl
from tokenspace.index.storage import MANIFEST


def run(args) -> int:
    if args.action == "build":
        return _build(args)
    index = load_index(args.index, nonempty=args.action != "stats")
    if args.action == "stats":
        print(json.dumps(index.stats(), indent=2, default=str))
        return 0
    for out in (args.out, args.queries_out):
        _outside_index(out)
    if args.queries_out and not args.queries:
        raise UsageError("--queries-out names the query file of --queries: give --queries FILE too")
    _check_export_out(args)  # before any query is encoded or file written
    if args.format != "opensearch" and Path(args.out).is_dir():
        raise CLIError(f"--out {args.out} is a folder; the {args.format} format writes one file: give its path")
    _check_opensearch_options(args)
    ids = list(index.ids())
    vectors = index.get(ids)
    queries = _export_queries(args) if args.queries else None
    try:
        if args.format == "jsonl":
            out = export.write_jsonl(vectors, ids, args.out)
        elif args.format == "jsonl-int":
            out = export.write_jsonl_quantized(vectors, ids, args.out, scale=args.scale)
        elif args.opensearch_field == "sparse_vector":  # its search-side ceiling: the queries' weights
            ceiling = None if queries is None else export.quantization_ceiling(queries.values)
            out = export.write_sparse_vector(vectors, ids, args.out, query_ceiling=ceiling)
        else:
            out = export.write_rank_features(vectors, ids, args.out)
    except OSError as e:  # the atomic write's message names its temporary file, not --out
        raise CLIError(f"--out {args.out}: cannot write it ({e.strerror or e})") from None
    if isinstance(out, list):  # a smaller export over a bigger one: its last bulk files would stay behind
        for stale in set(Path(args.out).glob("bulk-*.ndjson")) - set(out):
            stale.unlink()
    print(f"wrote {len(ids)} documents to {args.out}" + (f" ({len(out)} files)" if isinstance(out, list) else ""))
    return 0


def _build(args) -> int:
    _check_build_out(Path(args.out), args.overwrite)  # before the encoding, which can take hours
    user = {}
    if args.metadata:  # also before the encoding: a bad line is found at once
        try:
            user = read_metadata_jsonl(args.metadata)
        except ValueError as e:
            raise CLIError(f"--metadata {e}") from None
    model = load_model(args.model, args.device)
    if not getattr(model, "sparse", True):  # float rows: the dense half of a hybrid search
        return build_dense_index(args, model)
    vectors, ids, records = pipeline.encode_collection(model, args.data, home=args.home)
    if not ids:
        raise CLIError(f"no readable images in {' '.join(args.data)}: nothing to index")
    unknown = sorted(set(user) - set(ids))
    if unknown:
        raise CLIError(f"--metadata {args.metadata}: {len(unknown)} id(s) are not images of this collection, "
                       f"e.g. {unknown[0]!r} (ids are what `tokenspace search` prints)")
    if args.top_n:
        vectors = vectors.prune_topk(args.top_n)
    # each row carries its source and caption (search --filter source=... / caption~word) and the user's fields
    rows = [{**{k: v for k, v in (("source", r.source), ("caption", r.text)) if v}, **user.get(r.id, {})}
            for r in records]
    index = InvertedIndex.build(vectors, ids, metadata=rows, reorder=args.reorder, impact_heads=args.impact_heads)
    index.save(args.out)
    pipeline.write_collection_meta(args.out, records, model_reference(args.model))
    print(f"indexed {len(ids)} images into {args.out} (`tokenspace index stats {args.out}` for its statistics)")
    return 0


def _check_build_out(out: Path, overwrite: bool) -> None:
    """--out must be new, empty, or (with --overwrite) an index folder: a build never mixes its files
    into another folder, nor replaces an index by accident."""
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} is a file; give a folder for the index")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not ((out / MANIFEST).exists() or (out / DENSE_IDS).exists()):
        raise CLIError(f"--out {out} is a folder that is not empty and holds no index: choose a new or empty folder")
    if not overwrite:
        raise CLIError(f"--out {out} already holds an index: pass --overwrite to replace it, or choose another folder")


def _check_export_out(args) -> None:
    """An export replaces nothing that is there unless --overwrite says so (it overwrote a user's file):
    a jsonl --out must be new, an OpenSearch --out folder new, empty or (with --overwrite) an export; a
    --queries-out file new, whatever the format."""
    if args.queries_out:
        _new_or_overwrite(Path(args.queries_out), args.overwrite, "the query file")
    out = Path(args.out)
    if args.format != "opensearch":
        if not out.is_dir():  # a folder is refused below: these formats write one file
            _new_or_overwrite(out, args.overwrite, "--out")
        return
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} is a file; the opensearch format writes a folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / "mapping.json").is_file():
            raise CLIError(f"--out {out} is a folder that is not empty and holds no OpenSearch export: choose a "
                           "new or empty folder")
        if not args.overwrite:
            raise CLIError(f"--out {out} already holds an OpenSearch export: pass --overwrite to replace it, or "
                           "choose another folder")


def _new_or_overwrite(path: Path, overwrite: bool, what: str) -> Path:
    if path.exists() and not overwrite:
        raise CLIError(f"{what} {path} exists: pass --overwrite to replace it, or choose another path")
    return path


def _outside_index(path: str | None) -> None:
    """An export never writes into an index folder (writing MANIFEST.json there destroyed the index)."""
    if path is None:
        return
    p = Path(path).resolve()
    for folder in (p, p.parent):
        if (folder / MANIFEST).exists():
            raise CLIError(f"{path} is in the index folder {folder}: write the export somewhere else")


def _check_opensearch_options(args) -> None:
    """The OpenSearch options apply to --format opensearch only (a documented option is never ignored)."""
    given = [f"--{o.replace('_', '-')}" for o in ("opensearch_field", "opensearch_query", "k")
             if getattr(args, o) is not None]
    if args.format != "opensearch" and given:
        raise CLIError(f"{', '.join(given)}: only with --format opensearch")
    if args.format == "opensearch" and not args.queries and (args.opensearch_query or args.k):
        raise CLIError("--opensearch-query and --k shape the query file: give --queries FILE")
    args.opensearch_field = args.opensearch_field or "rank_features"
    args.opensearch_query = args.opensearch_query or "neural_sparse"
    if args.opensearch_field == "sparse_vector" and args.opensearch_query == "rank_feature":
        raise CLIError("--opensearch-query rank_feature reads rank_features fields; query a sparse_vector "
                       "field with neural_sparse")


def _export_queries(args):
    """--queries FILE: one text a line, encoded with the index's model, written beside --out (OpenSearch:
    into it, as an _msearch file). Returns the encoded queries."""
    try:
        texts = [t.strip() for t in Path(args.queries).read_text(encoding="utf-8").splitlines() if t.strip()]
    except UnicodeDecodeError as e:  # its own message names the codec, not the file
        raise CLIError(f"--queries {args.queries}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    if not texts:
        raise CLIError(f"--queries {args.queries}: no query text in the file")
    model_ref = args.model or pipeline.read_collection_meta(args.index).get("model")
    if not model_ref:
        raise CLIError(f"--queries needs --model: the index at {args.index} does not name its model")
    queries = load_model(model_ref).encode_texts(texts)
    qids = [f"q{n}" for n in range(1, len(texts) + 1)]
    if args.format == "jsonl":
        path = _new_or_overwrite(Path(args.queries_out or Path(args.out).with_name("queries.jsonl")),
                                 args.overwrite, "the query file")
        export.write_queries_jsonl(queries, qids, path)
    elif args.format == "opensearch":  # _msearch answers in file order: q1, q2, ...
        path = Path(args.queries_out or Path(args.out) / "queries.msearch.ndjson")
        export.write_opensearch_queries(queries, path, field_type=args.opensearch_field,
                                        query_type=args.opensearch_query, k=args.k or 10)
    else:  # Anserini parses every file of the collection folder: the topics go beside that folder
        path = _new_or_overwrite(Path(args.queries_out or Path(args.out).resolve().parent.parent / "queries.tsv"),
                                 args.overwrite, "the query file")
        export.write_queries_tsv(queries, qids, path, scale=args.scale)
    print(f"wrote {len(texts)} queries (q1..q{len(texts)}, in file order) to {path}")
    return queries
