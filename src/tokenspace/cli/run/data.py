"""tokenspace data build: the manifests of the installed datasets."""
from __future__ import annotations

from tokenspace.data.build import build_manifests, read_report


def run(args) -> int:
    paths = build_manifests(args.home, args.out, force=args.force, seed=args.seed,
                            openclipart_max_items=args.openclipart_max_items, names=args.only)
    for name, p in paths.items():
        print(f"{name}: {p}  {read_report(p)['splits']}")
    return 0
