"""tokenspace index build|stats|export: an inverted index of a collection.

The arguments (light: `tokenspace index --help` imports no library); run/index.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import (
    DEVICE_HELP,
    add_encoding_arguments,
    add_ingestion_ranking_arguments,
    positive_float,
    positive_int,
)


def add_arguments(i: argparse.ArgumentParser) -> None:
    isub = i.add_subparsers(dest="action", required=True, metavar="ACTION")
    ib = isub.add_parser("build", help="encode a collection's images and index them")
    ib.add_argument("--model", required=True, help="model folder or release name")
    src = ib.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", nargs="+", help="DATASET:SPLIT[:LIMIT] specs (or MANIFEST.jsonl:SPLIT)")
    src.add_argument("--images", metavar="DIR",
                     help="your own folder of images, searched recursively (as `tokenspace shards` reads it): a "
                          "caption from the .txt file beside each image (cat.jpg -> cat.txt), else the file "
                          "name's words; the id is the path under DIR without its extension")
    src.add_argument("--manifest", metavar="FILE.jsonl",
                     help='a JSON object per line: "image" (or "path", relative to the manifest\'s folder), '
                          '"caption" (or "text"; absent: as for --images), optional "key" (the id), any other '
                          "fields kept as the row's metadata (search filters on them with --filter)")
    ib.add_argument("--out", required=True, help="index folder to write (new or empty)")
    ib.add_argument("--overwrite", action="store_true", help="replace the index that --out already holds")
    ib.add_argument("--top-n", type=positive_int, default=None, help="keep each image's n heaviest tokens")
    ib.add_argument("--reorder", action="store_true",
                    help="index similar images next to each other (k-means): faster exact search, same results")
    ib.add_argument("--no-impact-heads", dest="impact_heads", action="store_false",
                    help="leave out the impact heads, which only the library's approximate search with "
                         "impact_floor reads: a smaller index, the same results")
    ib.add_argument("--device", default="cpu", help=DEVICE_HELP)
    add_encoding_arguments(ib)
    ib.add_argument("--metadata", default=None, metavar="FILE.jsonl",
                    help='fields of your own per image, one JSON object a line: {"id": IMAGE_ID, "field": value, ...} '
                         "(each row already carries its source and caption); search filters on them with --filter")
    add_ingestion_ranking_arguments(ib)
    ib.add_argument("--generic-share", type=positive_float, default=None, metavar="S",
                    help="down-weight generic image tokens: one held by more than this share (0..1] of the images "
                         "keeps S / its share of its weight, rows normalised again (default: the model's "
                         "ranking.json's; 1 turns it off)")
    ist = isub.add_parser("stats", help="print an index's statistics as JSON")
    ist.add_argument("index", help="index folder")
    iex = isub.add_parser("export", help="write the index's vectors in another engine's format")
    iex.add_argument("index", help="index folder")
    iex.add_argument("--format", choices=["jsonl", "jsonl-int", "opensearch", "qdrant"], default="jsonl",
                     help="jsonl: float impacts (Seismic); jsonl-int: integer impacts (Anserini/pyserini); "
                          "opensearch: index mapping + bulk files; qdrant: a collection with one named sparse "
                          "vector + point batches for its REST API (default jsonl)")
    iex.add_argument("--out", required=True, help="output file (jsonl formats) or folder (opensearch, qdrant)")
    iex.add_argument("--scale", type=positive_float, default=None,
                     help="jsonl-int: integer impact = max(1, round(weight x scale)) (default 100; refused "
                          "with the float formats)")
    iex.add_argument("--queries", default=None, metavar="FILE",
                     help="also encode these query texts (one a line) into a query file: queries.jsonl "
                          "beside --out (jsonl, Seismic) or queries.tsv beside --out's folder (jsonl-int, "
                          "Anserini, which parses every file of the collection folder); in --out for opensearch "
                          "(queries.msearch.ndjson) and qdrant (queries.json, a batch query body)")
    iex.add_argument("--queries-out", default=None, metavar="PATH", help="--queries: write the query file here")
    iex.add_argument("--overwrite", action="store_true",
                     help="replace --out and the query file when they exist (an OpenSearch or Qdrant --out: a previous "
                          "export only)")
    iex.add_argument("--opensearch-field", choices=["rank_features", "sparse_vector"], default=None,
                     help="opensearch: the vector field's type: rank_features (exact; OpenSearch, Elasticsearch) "
                          "or sparse_vector (OpenSearch 3.3+ neural sparse ANN search; tokens as dimension ids) "
                          "(default rank_features)")
    iex.add_argument("--opensearch-query", choices=["neural_sparse", "rank_feature"], default=None,
                     help="opensearch --queries: neural_sparse bodies (raw query_tokens) or bool.should of "
                          "linear rank_feature clauses (rank_features only), written as an _msearch file "
                          "queries.msearch.ndjson in --out (default neural_sparse)")
    iex.add_argument("--k", type=positive_int, default=None,
                     help="opensearch and qdrant --queries: results per query (default 10)")
    iex.add_argument("--qdrant-vector", default=None, metavar="NAME",
                     help="qdrant: the name of the sparse vector in the collection (default tokens)")
    iex.add_argument("--qdrant-idf", action="store_true",
                     help="qdrant: turn on Qdrant's IDF modifier (query weights times BM25's idf over the "
                          "collection, as `tokenspace search --idf 1`)")
    iex.add_argument("--model", default=None,
                     help="--queries: the model that encodes them (default: the index's own; refused without "
                          "--queries)")
