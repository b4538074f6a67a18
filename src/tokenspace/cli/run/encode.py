"""tokenspace encode --shards S.. --index I: webdataset shards into an index, in resumable parts."""
from __future__ import annotations

import argparse
import tarfile

from tokenspace.cli.common import DEVICE_HELP, CLIError, nonnegative_int, positive_int
from tokenspace.cli.model_loading import load_model
from tokenspace.encode import INDEX_HELP, encode_to_index, open_shards


def add_arguments(en: argparse.ArgumentParser) -> None:
    en.add_argument("--model", required=True, help="model folder or release name")
    en.add_argument("--shards", nargs="+", required=True, help="tar paths, globs or {000..099} ranges")
    en.add_argument("--index", required=True, help=INDEX_HELP)
    en.add_argument("--work", default=None,
                    help="folder for the encoded parts and encode.json, the record of the shards, part size "
                         "and model they come from (default INDEX.parts)")
    en.add_argument("--part-size", type=positive_int, default=8192,
                    help="images per part, the unit of resumption (default 8192)")
    en.add_argument("--batch-size", type=positive_int, default=256, help="images per model call (default 256)")
    en.add_argument("--device", default="cpu", help=DEVICE_HELP)
    en.add_argument("--workers", type=nonnegative_int, default=None,
                    help="image-decoding processes beside the model (default: cores - 1, at most 8)")
    en.add_argument("--tower", choices=("auto", "torch", "onnx"), default="auto",
                    help="image tower runtime: onnx = ONNX Runtime (CPU, checked against PyTorch to 1e-4 "
                         "before use; pip install 'tokenspace[onnx]'), torch = PyTorch, auto = onnx when "
                         "installed on a CPU model (default: auto)")


def run(args) -> int:
    try:
        collection = open_shards(args.shards)  # a pattern matching no file: ValueError naming it
    except tarfile.TarError as e:
        raise CLIError(f"--shards {' '.join(args.shards)}: not a readable uncompressed tar ({e})") from None
    if len(collection) == 0:
        raise CLIError(f"--shards {' '.join(args.shards)}: no complete (image + text) samples "
                       f"({collection.skipped} incomplete)")
    model = load_model(args.model, args.device)
    index = encode_to_index(model, collection, args.index, args.work or f"{args.index}.parts",
                            args.part_size, args.batch_size, workers=args.workers, tower=args.tower)
    if len(index) == 0:
        raise CLIError(f"none of the {len(collection)} samples has a readable image: {args.index} is empty")
    print(f"indexed {len(index)} of {len(collection)} samples "
          f"({collection.skipped} incomplete samples skipped); rerun the same command to resume")
    return 0
