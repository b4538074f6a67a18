"""tokenspace index build|stats|export: an inverted index of a collection."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

from tokenspace.cli.common import CLIError, UsageError, check_writable_place
from tokenspace.cli.index_loading import load_index
from tokenspace.cli.run.search import as_typed
from tokenspace.index import export, qdrant
from tokenspace.index.folder import DENSE_IDS, index_model
from tokenspace.index.storage import MANIFEST
from tokenspace.outputs import EXPORT, check_output
from tokenspace.searcher import Searcher, SearchError
from tokenspace.sparse import SparseBatch

OPENSEARCH_QUERIES = "queries.msearch.ndjson"  # the _msearch file an OpenSearch export holds with --queries
# the formats that write a folder: the file that marks a folder as a previous export of the format (only
# such a folder is replaced, with --overwrite), the batch files it holds, and its query file with --queries
FOLDER_FORMATS = {"opensearch": ("mapping.json", r"bulk-\d+\.ndjson", OPENSEARCH_QUERIES, "OpenSearch"),
                  "qdrant": (qdrant.COLLECTION_FILE, r"points-\d+\.json", qdrant.QUERIES_FILE, "Qdrant")}


def run(args) -> int:
    if args.action == "build":
        from tokenspace.cli.run.index_build import build  # start-up: torch, which stats and export never need

        return build(args)
    if args.action == "stats":
        print(json.dumps(load_index(args.index, nonempty=False).stats(), indent=2, default=str))
        return 0
    return _export(args)


def _export(args) -> int:
    # before the index is read, any query encoded or any file written: options the format or mode would
    # ignore, then every path the export would write (collisions, index folders, files already there)
    _check_export_options(args)
    targets = _export_targets(args)
    _check_export_targets(args, targets)
    index = load_index(args.index)
    ids = list(index.ids())
    vectors = index.get(ids)
    queries = _export_queries(args, targets.queries) if args.queries else None
    try:
        if args.format == "jsonl":
            out = export.write_jsonl(vectors, ids, args.out)
        elif args.format == "jsonl-int":
            out = export.write_jsonl_quantized(vectors, ids, args.out, scale=args.scale)
        elif args.format == "qdrant":  # each point's payload: its id and the index's metadata row
            meta = index.metadata(ids) if index.has_metadata() else None
            out = qdrant.write_qdrant(vectors, ids, args.out, metadata=meta, vector_name=args.qdrant_vector,
                                      idf=args.qdrant_idf)
        elif args.opensearch_field == "sparse_vector":  # its search-side ceiling: the queries' weights
            ceiling = None if queries is None else export.quantization_ceiling(queries.values)
            out = export.write_sparse_vector(vectors, ids, args.out, query_ceiling=ceiling)
        else:
            out = export.write_rank_features(vectors, ids, args.out)
    except OSError as e:  # the atomic write's message names its temporary file, not --out
        raise CLIError(f"--out {args.out}: cannot write it ({e.strerror or e})") from None
    if isinstance(out, list):  # a smaller export over a bigger one: its last batch files would stay behind
        batches = FOLDER_FORMATS[args.format][1]
        for stale in {p for p in Path(args.out).iterdir() if re.fullmatch(batches, p.name)} - set(out):
            stale.unlink()
    print(f"wrote {len(ids)} documents to {args.out}" + (f" ({len(out)} files)" if isinstance(out, list) else ""))
    return 0


class ExportTargets(NamedTuple):
    """What an export writes: ``out`` (a file, or the OpenSearch folder) and the query file (None without
    --queries), as given (for messages)."""

    out: Path
    queries: Path | None


def _export_targets(args) -> ExportTargets:
    out = Path(args.out)
    if not args.queries:
        return ExportTargets(out, None)
    if args.queries_out:
        return ExportTargets(out, Path(args.queries_out))
    if args.format == "jsonl":  # Seismic: beside the documents
        return ExportTargets(out, out.with_name("queries.jsonl"))
    if args.format in FOLDER_FORMATS:  # an _msearch file / a batch query body in the export
        return ExportTargets(out, out / FOLDER_FORMATS[args.format][2])
    # Anserini parses every file of the collection folder: the topics go beside that folder
    return ExportTargets(out, out.absolute().parent.parent / "queries.tsv")


def _check_export_options(args) -> None:
    """Every option the format or mode would ignore is refused (a documented option is never ignored)."""
    if args.queries_out and not args.queries:
        raise UsageError("--queries-out names the query file of --queries: give --queries FILE too")
    if args.model and not args.queries:
        raise UsageError("--model encodes the --queries texts (the documents are the index's own vectors): "
                         "give --queries FILE too, or leave --model out")
    if args.scale is not None and args.format != "jsonl-int":
        raise UsageError(f"--scale: only with --format jsonl-int (the {args.format} format writes the float "
                         "weights as they are)")
    args.scale = 100.0 if args.scale is None else args.scale
    _check_opensearch_options(args)
    _check_qdrant_options(args)
    if args.queries and not Path(args.queries).is_file():
        raise CLIError(f"--queries {args.queries}: no such file (one query text a line)")


def _check_export_targets(args, targets: ExportTargets) -> None:
    """No path the export writes lies in an index folder (writing MANIFEST.json or a segment file there
    destroyed the index), equals another path it writes or the --queries file it reads (the second write
    replaced the first), or replaces anything that is there unless --overwrite says so: a jsonl --out
    must be new, an OpenSearch --out folder new, empty or (with --overwrite) an export; a query file new,
    whatever the format. And each can be written (its folder is a folder we may write in)."""
    out, qpath = targets
    written = [("--out", out)] + ([("the query file", qpath)] if qpath is not None else [])
    for what, path in written:
        _outside_index(path, args.index)
        if args.queries and _same(path, Path(args.queries)):
            raise CLIError(f"{what} {path} is the --queries file the export reads: write it somewhere else")
    if qpath is not None:
        _query_file_apart(args, out, qpath)
    if args.format not in FOLDER_FORMATS:
        if out.is_dir():
            raise CLIError(f"--out {out} is a folder; the {args.format} format writes one file: give its path")
        _new_or_overwrite(out, args.overwrite, "--out")
    elif out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} is a file; the {args.format} format writes a folder")
    elif out.is_dir() and any(out.iterdir()):
        marker, _, _, engine = FOLDER_FORMATS[args.format]
        check_output(out, "--out", own=(EXPORT,), what=f"{engine} export")  # the rule of every command's output
        if not (out / marker).is_file():
            raise CLIError(f"--out {out} is a folder that is not empty and holds no {engine} export: choose a "
                           "new or empty folder")
        if not args.overwrite:
            raise CLIError(f"--out {out} already holds {'an' if engine[0] in 'AEIOU' else 'a'} {engine} export: "
                           "pass --overwrite to replace it, or "
                           "choose another folder")
    if qpath is not None and (args.queries_out or args.format not in FOLDER_FORMATS):
        # (the query file in an OpenSearch or Qdrant export is part of it: replaced with the export)
        if qpath.is_dir():
            raise CLIError(f"the query file {qpath} is a folder: give a file path with --queries-out")
        _new_or_overwrite(qpath, args.overwrite, "the query file")
    for what, path in written:
        check_writable_place(path, what)


def _query_file_apart(args, out: Path, qpath: Path) -> None:
    """The query file is none of the export's own files (nor, for Anserini, in its collection folder)."""
    named = "--queries-out" if args.queries_out else "the default query file"
    fix = "give the query file its own path with --queries-out" if not args.queries_out else "give it another path"
    if args.format not in FOLDER_FORMATS:
        if _same(qpath, out):
            where = "" if args.queries_out else f" ({qpath.name} beside --out)"
            raise CLIError(f"{named} {qpath}{where} is --out itself: the query file would replace the export; {fix}")
        if args.format == "jsonl-int" and _same(qpath.absolute().parent, out.absolute().parent):
            raise CLIError(f"{named} {qpath} is in --out's folder {out.parent}, which Anserini indexes whole "
                           f"(every file of it is read as documents); {fix}")
        return
    marker, batches, _, engine = FOLDER_FORMATS[args.format]
    if _same(qpath, out) or _inside(out, qpath):
        raise CLIError(f"{named} {qpath} is the {engine} --out folder or holds it: {fix}")
    if _same(qpath.absolute().parent, out) and (qpath.name == marker or re.fullmatch(batches, qpath.name)):
        raise CLIError(f"{named} {qpath} is a file of the {engine} export in {out}: {fix}")


def _same(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def _new_or_overwrite(path: Path, overwrite: bool, what: str) -> Path:
    if path.exists() and not overwrite:
        raise CLIError(f"{what} {path} exists: pass --overwrite to replace it, or choose another path")
    return path


def _outside_index(path: Path, index: str) -> None:
    """An export never writes into an index folder, at any depth (writing MANIFEST.json or a segment's
    .npy there destroyed the index): neither the exported index's folder nor any folder holding an index."""
    p = path.resolve()
    if p.is_relative_to(Path(index).resolve()):
        raise CLIError(f"{path} is in the index folder {index}: write the export somewhere else")
    for folder in (p, *p.parents):
        if (folder / MANIFEST).exists() or (folder / DENSE_IDS).exists():
            raise CLIError(f"{path} is in the index folder {folder}: write the export somewhere else")


def _check_opensearch_options(args) -> None:
    """The OpenSearch options apply to --format opensearch only (a documented option is never ignored)."""
    given = [f"--{o.replace('_', '-')}" for o in ("opensearch_field", "opensearch_query", "k")
             if getattr(args, o) is not None and not (o == "k" and args.format == "qdrant")]
    if args.format != "opensearch" and given:
        raise CLIError(f"{', '.join(given)}: only with --format opensearch")
    if args.format == "opensearch" and not args.queries and (args.opensearch_query or args.k):
        raise CLIError("--opensearch-query and --k shape the query file: give --queries FILE")
    args.opensearch_field = args.opensearch_field or "rank_features"
    args.opensearch_query = args.opensearch_query or "neural_sparse"
    if args.opensearch_field == "sparse_vector" and args.opensearch_query == "rank_feature":
        raise CLIError("--opensearch-query rank_feature reads rank_features fields; query a sparse_vector "
                       "field with neural_sparse")


def _check_qdrant_options(args) -> None:
    """The Qdrant options apply to --format qdrant only (a documented option is never ignored)."""
    # an empty --qdrant-vector '' is given too (refused below as a name, never taken for the default)
    given = [o for o, v in (("--qdrant-vector", args.qdrant_vector), ("--qdrant-idf", args.qdrant_idf))
             if v not in (None, False)]
    if args.format != "qdrant" and given:
        raise CLIError(f"{', '.join(given)}: only with --format qdrant")
    if args.format == "qdrant" and not args.queries and args.k:
        raise CLIError("--k shapes the query file: give --queries FILE")
    try:
        qdrant.collection_config(qdrant.VECTOR_NAME if args.qdrant_vector is None else args.qdrant_vector)
    except ValueError as e:
        raise CLIError(f"--qdrant-vector: {e}") from None
    args.qdrant_vector = qdrant.VECTOR_NAME if args.qdrant_vector is None else args.qdrant_vector


def _export_queries(args, path: Path):
    """--queries FILE: one text a line, encoded with the index's model, written to ``path`` (checked by
    _check_export_targets). Returns the encoded queries."""
    try:
        texts = [t.strip() for t in Path(args.queries).read_text(encoding="utf-8").splitlines() if t.strip()]
    except UnicodeDecodeError as e:  # its own message names the codec, not the file
        raise CLIError(f"--queries {args.queries}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise CLIError(f"--queries {args.queries}: cannot read it ({e.strerror or e})") from None
    if not texts:
        raise CLIError(f"--queries {args.queries}: no query text in the file")
    model_ref = args.model or index_model(args.index)
    if not model_ref:
        raise CLIError(f"--queries needs --model: the index at {args.index} does not name its model")
    # the vectors `tokenspace search` scores (shaped, and weighed by the index's idf unless Qdrant's IDF
    # modifier applies it), so the engine ranks as the command does; the hub prior is a per-image
    # penalty no engine's sparse query can carry: left out
    changes = {"prior_weight": 0.0, **({"idf": 0.0} if getattr(args, "qdrant_idf", False) else {})}
    try:
        searcher = Searcher.open(args.index, model_ref, ranking=changes, text_only=True)  # texts alone: no torch
        queries = SparseBatch.concat([searcher.query_vector(t) for t in texts])
    except SearchError as e:
        raise CLIError(as_typed(e)) from None
    qids = [f"q{n}" for n in range(1, len(texts) + 1)]
    if args.format == "jsonl":
        export.write_queries_jsonl(queries, qids, path)
    elif args.format == "opensearch":  # _msearch answers in file order: q1, q2, ...
        export.write_opensearch_queries(queries, path, field_type=args.opensearch_field,
                                        query_type=args.opensearch_query, k=args.k or 10)
    elif args.format == "qdrant":  # one batch query body: answers in file order, q1, q2, ...
        qdrant.write_queries(queries, path, k=args.k or 10, vector_name=args.qdrant_vector)
    else:
        export.write_queries_tsv(queries, qids, path, scale=args.scale)
    shaped = ", ".join(f"{f} {v:g}" for f, v in searcher.ranking.to_dict().items() if f != "prior_weight")
    print(f"wrote {len(texts)} queries (q1..q{len(texts)}, in file order) to {path}, as `tokenspace search` "
          f"scores them ({shaped}; no hub prior)")
    return queries
