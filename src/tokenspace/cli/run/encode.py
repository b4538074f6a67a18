"""tokenspace encode --shards S.. --index I: webdataset shards into an index, in resumable parts."""
from __future__ import annotations

import tarfile

from tokenspace.cli.common import CLIError
from tokenspace.cli.model_loading import load_model
from tokenspace.encode import encode_to_index, open_shards


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
