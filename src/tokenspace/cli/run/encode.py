"""tokenspace encode --shards S.. --index I: webdataset shards into an index, in resumable parts."""
from __future__ import annotations

import sys
import tarfile
from pathlib import Path

from tokenspace.cli.common import CLIError
from tokenspace.cli.model_loading import load_model, model_reference
from tokenspace.cli.run.index_build import build_ranking, check_tower_flag
from tokenspace.encode import RECORD, check_index_dir, encode_to_index, open_shards
from tokenspace.models.capabilities import require_vectors
from tokenspace.outputs import INDEX, PARTS, check_output


def run(args) -> int:
    work = Path(args.work or f"{args.index}.parts")
    # before the shards are read: the index is this command's own to extend only when the work folder
    # holds the record of the encode that made it (an `index build` index has none)
    check_output(args.index, "--index", own=(INDEX,) if (work / RECORD).is_file() else (), what="index",
                 refused={INDEX: f"no {RECORD} of the encode that made it in --work {work} (an index of `tokenspace "
                                 "index build`, or its parts were removed): encode into a new --index"})
    check_output(work, "--work", own=(PARTS,), what="encoded parts")
    try:
        collection = open_shards(args.shards)  # a pattern matching no file: ValueError naming it
    except tarfile.TarError as e:
        raise CLIError(f"--shards {' '.join(args.shards)}: not a readable uncompressed tar ({e})") from None
    if len(collection) == 0:
        raise CLIError(f"--shards {' '.join(args.shards)}: no complete (image + text) samples "
                       f"({collection.skipped} incomplete)")
    check_index_dir(args.index)  # before the model loads and a part is encoded
    ranking = build_ranking(args)  # the same ranking `index build` records and applies, hub prior included
    model = load_model(args.model, args.device)
    check_tower_flag(model, args.tower)  # before any image is decoded
    require_vectors(model, True, f"--model {args.model}", "build its dense index with `tokenspace index build "
                    "--model MODEL --data ...`")
    try:
        index = encode_to_index(model, collection, args.index, work, args.part_size, args.batch_size,
                                workers=args.workers, tower=args.tower, progress=True,
                                info={"model": model_reference(args.model)}, ranking=ranking, home=args.home)
    except KeyboardInterrupt:  # the parts on disk and the index's whole parts stay: a rerun goes on from there
        print(f"tokenspace encode: interrupted; rerun the same command to resume (parts in {work})", file=sys.stderr)
        return 130
    if len(index) == 0:
        raise CLIError(f"none of the {len(collection)} samples has a readable image: {args.index} is empty")
    present = set(index.ids())
    unreadable = sum(key not in present for key in collection.keys)  # skipped by the loader, logged there
    skipped = [f"{n} {what} skipped" for n, what in ((unreadable, "unreadable images"),
                                                       (collection.skipped, "incomplete samples")) if n]
    print(f"indexed {len(collection) - unreadable} of {len(collection)} samples into {args.index}"
          + (f" ({', '.join(skipped)})" if skipped else "") + ": done")
    return 0
