"""tokenspace shards --images DIR | --manifest FILE --out DIR: webdataset shards for `tokenspace encode`."""
from __future__ import annotations

import shlex

from tokenspace.cli.common import CLIError
from tokenspace.data.webdataset import folder_sources, manifest_sources, shard_pattern, write_sample_shards
from tokenspace.outputs import SHARDS, check_output

SHOWN_SKIPS = 3  # unreadable images named in the summary (the count covers them all)


def run(args) -> int:
    # new or empty only: shards beside older ones would mix, shards in an index or the user's folder too
    check_output(args.out, "--out", what="shards",
                 refused={SHARDS: "give an empty or new folder (new shards would mix with the old ones)"})
    try:
        sources = folder_sources(args.images) if args.images else manifest_sources(args.manifest)
        report = write_sample_shards(sources, args.out, per_shard=args.per_shard)
    except (OSError, ValueError) as e:
        raise CLIError(str(e)) from None
    if not report.written:
        raise CLIError(f"none of the {len(sources)} images could be read (e.g. {report.skipped[0][0]}: "
                       f"{report.skipped[0][1]}); no shards written")
    origins = ", ".join(f"{n} from {what}" for what, n in sorted(report.captions.items()))
    print(f"wrote {report.written} samples in {len(report.shards)} shard(s) to {args.out} (captions: {origins}"
          + (f"; {report.converted} stored as PNG" if report.converted else "") + ")")
    if report.skipped:
        print(f"skipped {len(report.skipped)} unreadable image(s):")
        for where, reason in report.skipped[:SHOWN_SKIPS]:
            print(f"  {where}: {reason}")
        if len(report.skipped) > SHOWN_SKIPS:
            print(f"  ... and {len(report.skipped) - SHOWN_SKIPS} more")
    print("next: tokenspace encode --model tokenspace-stair-drawings "
          f"--shards {shlex.quote(shard_pattern(report.shards))} --index INDEX_DIR")
    return 0
