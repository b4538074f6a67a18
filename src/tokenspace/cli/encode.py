"""tokenspace encode --shards S.. --index I: webdataset shards into an index, in resumable parts.

The arguments (light: `tokenspace encode --help` imports no library); run/encode.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import DEVICE_HELP, add_encoding_arguments, add_ingestion_ranking_arguments

INDEX_HELP = ("index folder: created; a rerun with the same --shards, --part-size and model resumes; one "
              "whose --shards add shards after the first run's extends it; other reruns are refused")


def add_arguments(en: argparse.ArgumentParser) -> None:
    en.add_argument("--model", required=True, help="model folder or release name")
    en.add_argument("--shards", nargs="+", required=True, help="tar paths, globs or {000..099} ranges")
    en.add_argument("--index", required=True, help=INDEX_HELP)
    en.add_argument("--work", default=None,
                    help="folder for the encoded parts and encode.json, the record of the shards, part size "
                         "and model they come from (default INDEX.parts)")
    en.add_argument("--device", default="cpu", help=DEVICE_HELP)
    add_encoding_arguments(en)
    add_ingestion_ranking_arguments(en)

