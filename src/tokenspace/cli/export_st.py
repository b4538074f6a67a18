"""tokenspace export-st MODEL OUT: STAIR's text side as a sentence-transformers SparseEncoder."""
from __future__ import annotations

import argparse

from tokenspace.cli.model_loading import load_model
from tokenspace.models.export_st import export_sentence_transformers


def add_arguments(st: argparse.ArgumentParser) -> None:
    st.add_argument("model", help="STAIR model folder or release name")
    st.add_argument("out", help="folder to write (replaced)")


def run(args) -> int:
    out = export_sentence_transformers(load_model(args.model), args.out)
    print(f"wrote a sentence-transformers SparseEncoder folder: {out}")
    return 0
