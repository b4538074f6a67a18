"""tokenspace encode --shards S.. --index I: webdataset shards into an index, in resumable parts."""
from __future__ import annotations

import sys
import tarfile
from pathlib import Path

from tokenspace.cli.common import CLIError
from tokenspace.cli.model_loading import load_model, model_reference
from tokenspace.cli.run.index import build_ranking
from tokenspace.encode import check_index_dir, encode_to_index, open_shards
from tokenspace.models.capabilities import require_vectors


def run(args) -> int:
    try:
        collection = open_shards(args.shards)  # a pattern matching no file: ValueError naming it
    except tarfile.TarError as e:
        raise CLIError(f"--shards {' '.join(args.shards)}: not a readable uncompressed tar ({e})") from None
    if len(collection) == 0:
        raise CLIError(f"--shards {' '.join(args.shards)}: no complete (image + text) samples "
                       f"({collection.skipped} incomplete)")
    work = Path(args.work or f"{args.index}.parts")
    check_index_dir(args.index)  # before the model loads and a part is encoded
    if work.exists() and not work.is_dir():
        raise CLIError(f"--work {work} is a file; give a folder for the encoded parts")
    ranking = build_ranking(args)  # the same ranking `index build` records and applies, hub prior included
    model = load_model(args.model, args.device)
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
