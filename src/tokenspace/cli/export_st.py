"""tokenspace export-st MODEL OUT: STAIR's text side as a sentence-transformers SparseEncoder.

The arguments (light: `tokenspace export-st --help` imports no library); run/export_st.py runs it."""
from __future__ import annotations

import argparse


def add_arguments(st: argparse.ArgumentParser) -> None:
    st.add_argument("model", help="STAIR model folder or release name")
    st.add_argument("out", help="folder to write: new, empty or a previous export (which is replaced)")
