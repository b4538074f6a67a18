"""tokenspace export-st MODEL OUT: a STAIR or fused model's text side as a sentence-transformers SparseEncoder.

The arguments (light: `tokenspace export-st --help` imports no library); run/export_st.py runs it."""
from __future__ import annotations

import argparse


def add_arguments(st: argparse.ArgumentParser) -> None:
    st.add_argument("model", help="STAIR, fused or inference-free model folder, or release name (e.g. tokenspace-stair-drawings)")
    st.add_argument("out", help="folder to write: new, empty or a previous export (which is replaced)")
