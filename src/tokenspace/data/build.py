"""Build the manifests of the offline datasets into the cache (``<home>/manifests/*.jsonl``).

Idempotent: each manifest has a ``.meta.json`` sidecar with the builder's parameters and the counts;
a manifest whose sidecar matches is left alone.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tokenspace import assets
from tokenspace.data.emoji import build_emoji
from tokenspace.data.manifest import write_manifest
from tokenspace.data.openclipart import build_openclipart

BUILDER_VERSION = 2


def _build(name: str, out: Path, params: dict, make, progress: bool, force: bool) -> Path:
    sidecar = out.with_name(out.name + ".meta.json")
    want = {"builder_version": BUILDER_VERSION, "params": params}
    if not force and out.is_file() and sidecar.is_file():
        try:
            meta = json.loads(sidecar.read_text())
        except ValueError:
            meta = {}
        if {k: meta.get(k) for k in want} == want:
            if progress:
                print(f"[tokenspace data] {name}: up to date ({out}) {meta.get('report', {}).get('splits')}",
                      file=sys.stderr)
            return out
    records, report = make()
    write_manifest(records, out)
    tmp = sidecar.with_name(sidecar.name + ".tmp")
    tmp.write_text(json.dumps({**want, "report": report}, indent=1))
    os.replace(tmp, sidecar)
    if progress:
        print(f"[tokenspace data] {name}: wrote {len(records)} records to {out}: splits {report['splits']}, "
              f"skipped {report['skipped']}", file=sys.stderr)
    return out


def build_manifests(home=None, out_dir=None, progress: bool = True, force: bool = False,
                    emoji_holdout: float = 0.2, openclipart_holdout: float = 0.1, seed: int = 0,
                    openclipart_max_items: int | None = None) -> dict[str, Path]:
    """Build ``emoji.jsonl`` and ``openclipart.jsonl`` (default folder ``<home>/manifests``).

    Raises tokenspace.assets.AssetMissingError (naming the install command) if an input is missing.
    """
    home = Path(home).expanduser() if home is not None else assets.default_home()
    out_dir = Path(out_dir) if out_dir is not None else home / "manifests"
    dirs = {n: assets.path(n, home) for n in ("emoji-google", "emoji-twitter", "emojibase", "openmoji")}
    clip = assets.path("openclipart", home)
    emoji_params = {"holdout": emoji_holdout, "seed": seed}
    clip_params = {"holdout": openclipart_holdout, "seed": seed, "max_items": openclipart_max_items}
    return {
        "emoji": _build("emoji", out_dir / "emoji.jsonl", emoji_params,
                        lambda: build_emoji(dirs["emoji-google"], dirs["emoji-twitter"], dirs["emojibase"],
                                            dirs["openmoji"], **emoji_params), progress, force),
        "openclipart": _build("openclipart", out_dir / "openclipart.jsonl", clip_params,
                              lambda: build_openclipart(clip, **clip_params), progress, force),
    }


def read_report(manifest: str | os.PathLike) -> dict:
    """The builder's report (counts per split, skips) saved beside a built manifest."""
    return json.loads(Path(str(manifest) + ".meta.json").read_text())["report"]
