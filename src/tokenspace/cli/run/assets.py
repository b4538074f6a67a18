"""tokenspace assets install|status: the offline weights and datasets in the cache."""
from __future__ import annotations

from tokenspace import assets


def run(args) -> int:
    if args.action == "install":
        report = assets.install(args.names or None, home=args.home, progress=not args.quiet, optional=args.optional)
        print(report)
        return 0 if report.ok else 1
    st = assets.status(args.home, hashes=not args.fast)
    print(assets.format_status(st))
    return 0 if all(v["present"] or v["optional"] for v in st.values()) else 1
