"""tokenspace export-onnx MODEL OUT: the image and text encoders as ONNX files (models/onnx_export.py).

The arguments (light: `tokenspace export-onnx --help` imports no library); run/export_onnx.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import positive_float


def add_arguments(ox: argparse.ArgumentParser) -> None:
    ox.add_argument("model", help="model folder or release name")
    ox.add_argument("out", help="folder to write: new, empty or a previous export-onnx export (which is replaced)")
    ox.add_argument("--int8", action="store_true",
                    help="also write image_encoder.int8.onnx and text_encoder.int8.onnx (ONNX Runtime dynamic "
                         "quantisation; speed and recall: docs/benchmarks.md)")
    ox.add_argument("--tol", type=positive_float, default=1e-4,
                    help="largest |ONNX - PyTorch| allowed on the check run before writing (default 1e-4)")
