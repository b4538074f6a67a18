"""tokenspace export-onnx MODEL OUT: the image and text encoders as ONNX files, checked against PyTorch."""
from __future__ import annotations

from pathlib import Path

from tokenspace.cli.model_loading import load_model
from tokenspace.models.export_st import check_out
from tokenspace.models.onnx_export import MARKER_FORMAT, export_onnx
from tokenspace.models.registry import release_path
from tokenspace.outputs import EXPORT, check_output


def run(args) -> int:
    # the folder the model loads from (a release name's too): OUT must not be, hold or lie in it
    source = Path(args.model) if Path(args.model).is_dir() else release_path(args.model)
    check_out(Path(args.out), source, fmt=MARKER_FORMAT, command="export-onnx")  # before the model loads
    check_output(args.out, "OUT", own=(EXPORT,), what="previous export-onnx export")  # nor a folder inside an index
    done = export_onnx(load_model(args.model), args.out, source=source, int8=args.int8, tol=args.tol)
    diffs = ", ".join(f"{side} {d:.1e}" for side, d in done.max_diff.items())
    print(f"wrote {', '.join(p.name for p in done.files if p.suffix == '.onnx')} to {done.out} "
          f"(max |ONNX - PyTorch|: {diffs})")
    return 0
