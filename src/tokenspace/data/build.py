"""Build the manifests of the offline datasets into the cache (``<home>/manifests/v3/*.jsonl``).

Concept datasets (emoji, icons, openclipart) are built together: their candidates' concept keys go
into one union-find, so a concept held out in one dataset is held out in all of them (``splits``).
Photo test sets (fashion-mnist, mnist, photos) are built on their own.

Idempotent: each manifest has a ``.meta.json`` sidecar with the builder's parameters, the installed
sources it was built from, and the report (counts per split, skipped items and why, join rates); a
manifest whose sidecar matches is left alone. Installing another source set rebuilds the concept
datasets (new keys can join groups). SVG icons are rendered once to PNG under ``<home>/rendered``.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from tokenspace import assets
from tokenspace.atomic import write_text
from tokenspace.data import emoji as emoji_mod
from tokenspace.data import photos
from tokenspace.data.icons import ICON_SETS, icon_candidates
from tokenspace.data.manifest import write_manifest
from tokenspace.data.openclipart import openclipart_candidates
from tokenspace.data.render import finish, render_svgs  # noqa: F401 - finish: re-exported
from tokenspace.data.splits import ConceptGroups, assign, leaks

log = logging.getLogger(__name__)

BUILDER_VERSION = 3
CONCEPT_DATASETS = ("emoji", "icons", "openclipart")
PHOTO_DATASETS = ("fashion-mnist", "mnist", "photos")
DATASETS = CONCEPT_DATASETS + PHOTO_DATASETS
TRAIN_SPLITS = ("train", "train-extra")
# splits whose concepts are held out of training (test-artists* hold training concepts on purpose)
HELDOUT_CONCEPT_SPLITS = ("val", "test", "test-hc", "test-concepts")
EMOJI_ASSETS = tuple(dict.fromkeys([*emoji_mod.REQUIRED, *(a.asset for a in emoji_mod.ARTISTS)]))
ICON_ASSETS = tuple(f"iconify-{p}" for p in ICON_SETS)
PHOTO_ASSETS = {"fashion-mnist": "fashion-mnist", "mnist": "mnist"}


def default_dir(home: Path) -> Path:
    """``<home>/manifests/v<BUILDER_VERSION>``: each builder version has its own folder, so a process
    still running an older release (the cache is shared) never rewrites these manifests, nor they its."""
    return home / "manifests" / f"v{BUILDER_VERSION}"


def _level(progress: bool) -> int:
    """Progress lines are INFO (the CLI shows them on stderr); with ``progress=False`` (the pipeline's
    on-demand builds) they drop to DEBUG rather than vanish, so ``--log-level debug`` still traces them."""
    return logging.INFO if progress else logging.DEBUG


_PRESENT: dict[tuple, tuple[float, dict]] = {}
PRESENT_TTL = 60.0  # seconds; verifying ~25 asset folders (file counts, sizes) takes 1-3 s


def _present(names, home: Path) -> dict[str, Path]:
    """The installed (size-verified) assets among ``names``, remembered for a minute per process, so
    a run that loads several data specs verifies the asset folders once."""
    key = (str(home), tuple(names))
    hit = _PRESENT.get(key)
    if hit is not None and time.monotonic() - hit[0] < PRESENT_TTL:
        return dict(hit[1])
    out = {}
    for n in names:
        try:
            out[n] = assets.path(n, home)
        except assets.AssetMissingError:
            pass
    _PRESENT[key] = (time.monotonic(), out)
    return dict(out)


def _sidecar(out: Path) -> Path:
    return out.with_name(out.name + ".meta.json")


def _up_to_date(out: Path, want: dict) -> bool:
    try:
        meta = json.loads(_sidecar(out).read_text())
    except (OSError, ValueError):
        return False
    return out.is_file() and {k: meta.get(k) for k in want} == want


def _write(out: Path, records, want: dict, report: dict) -> None:
    write_manifest(records, out)
    write_text(_sidecar(out), json.dumps({**want, "report": report}, indent=1, ensure_ascii=False))


def _specs(present: dict) -> dict:
    return {n: assets.ASSETS[n].spec for n in sorted(present)}


def _build_concepts(home: Path, out_dir: Path, present: dict, params: dict, progress: bool) -> dict[str, dict]:
    """Candidates of every concept dataset, one union-find, one assignment; returns the reports."""
    render_root = home / "rendered"
    built: dict[str, tuple] = {}
    if all(n in present for n in emoji_mod.REQUIRED):
        built["emoji"] = emoji_mod.emoji_candidates({n: present[n] for n in EMOJI_ASSETS if n in present},
                                                    render_root / "emoji")
    if any(n in present for n in ICON_ASSETS):
        built["icons"] = icon_candidates({n: present[n] for n in ICON_ASSETS if n in present},
                                         render_root / "icons")
    if "openclipart" in present:
        built["openclipart"] = openclipart_candidates(present["openclipart"], params["openclipart_max_items"],
                                                      params["seed"])
    groups = ConceptGroups()
    for cands, _, _ in built.values():
        for c in cands:
            groups.add(c.keys or (f"id:{c.record.id}",))
    fractions = {"test": params["test_fraction"], "val": params["val_fraction"]}
    keys_of, outputs, reports = {}, {}, {}
    for name, (cands, report, jobs) in built.items():
        keys_of.update({c.record.id: c.keys for c in cands})
        records, dropped, _ = assign(cands, fractions, params["seed"], groups)
        log.log(_level(progress), "%s: %d records from %d candidates", name, len(records), len(cands))
        outputs[name] = finish(records, report, dropped, jobs, render=True, progress=progress)
    all_records = [r for recs, _ in outputs.values() for r in recs]
    leaked = leaks(((r.split, keys_of[r.id]) for r in all_records), HELDOUT_CONCEPT_SPLITS, TRAIN_SPLITS)
    if leaked:  # by construction impossible; a failure here is a bug, not bad data
        raise AssertionError(f"concept groups leak between train and held-out splits: {sorted(leaked)[:5]}")
    sizes = groups.sizes()
    group_stats = {"groups": len(sizes), "largest_group_keys": max(sizes.values(), default=0),
                   "leaked_groups": len(leaked)}
    for name, (records, report) in outputs.items():
        report = dict(report, concept_groups=group_stats)
        want = {"builder_version": BUILDER_VERSION, "params": params, "sources": _specs(present)}
        _write(out_dir / f"{name}.jsonl", records, want, report)
        log.log(_level(progress), "%s: wrote %d records: splits %s", name, len(records), report["splits"])
        reports[name] = report
    return reports


def _missing_command(name: str) -> str:
    need = {"emoji": list(emoji_mod.REQUIRED), "icons": list(ICON_ASSETS), "openclipart": ["openclipart"],
            "fashion-mnist": ["fashion-mnist"], "mnist": ["mnist"]}.get(name, [])
    cmds = sorted({assets.ASSETS[n].command() for n in need})
    if name == "photos":
        return "pip install scikit-image"
    return " ; ".join(cmds)


def build_manifests(home=None, out_dir=None, progress: bool = True, force: bool = False, seed: int = 0,
                    test_fraction: float = 0.2, val_fraction: float = 0.1,
                    openclipart_max_items: int | None = None, names=None) -> dict[str, Path]:
    """Build every manifest whose inputs are installed (default folder ``default_dir(home)``).

    ``names``: the datasets the caller needs; one that cannot be built raises AssetMissingError naming
    the command that installs its input. Without ``names`` every buildable dataset is built and the
    missing ones are listed on stderr with their install commands.
    """
    home = Path(home).expanduser() if home is not None else assets.default_home()
    out_dir = Path(out_dir) if out_dir is not None else default_dir(home)
    wanted = list(names) if names is not None else list(DATASETS)
    unknown = [n for n in wanted if n not in DATASETS]
    if unknown:
        raise KeyError(f"unknown dataset(s) {unknown}; built datasets: {', '.join(DATASETS)}")
    if not (test_fraction >= 0 and val_fraction >= 0 and test_fraction + val_fraction <= 1):
        raise ValueError("test_fraction and val_fraction must be >= 0 and sum to at most 1")
    out: dict[str, Path] = {}
    if any(n in CONCEPT_DATASETS for n in wanted):
        present = _present(EMOJI_ASSETS + ICON_ASSETS + ("openclipart",), home)
        params = {"seed": seed, "test_fraction": test_fraction, "val_fraction": val_fraction,
                  "openclipart_max_items": openclipart_max_items}
        want = {"builder_version": BUILDER_VERSION, "params": params, "sources": _specs(present)}
        concept_buildable = {
            "emoji": all(n in present for n in emoji_mod.REQUIRED),
            "icons": any(n in present for n in ICON_ASSETS),
            "openclipart": "openclipart" in present,
        }
        targets = [n for n in CONCEPT_DATASETS if concept_buildable[n]]
        if targets and (force or not all(_up_to_date(out_dir / f"{n}.jsonl", want) for n in targets)):
            for n in EMOJI_ASSETS + ICON_ASSETS:
                if n not in present:  # built without it; say how to add it
                    log.log(_level(progress), "%s is not installed (building without it); get it with: %s", n,
                            assets.ASSETS[n].command())
            _build_concepts(home, out_dir, present, params, progress)
        for n in targets:
            out[n] = out_dir / f"{n}.jsonl"
            if n in wanted and progress:  # reads the report: only when someone is shown it
                log.info("%s: %s %s", n, out[n], read_report(out[n])["splits"])
    for n in PHOTO_DATASETS:
        if n not in wanted:
            continue
        p = _build_photo(n, home, out_dir, force, progress)
        if p is not None:
            out[n] = p
    missing = [n for n in wanted if n not in out]
    if missing and names is not None:
        raise assets.AssetMissingError(
            f"dataset(s) {missing} need inputs that are not installed; get them with: "
            + " ; ".join(_missing_command(n) for n in missing))
    for n in missing:
        log.log(_level(progress), "%s: not built (input missing); get it with: %s", n, _missing_command(n))
    return out


def _build_photo(name: str, home: Path, out_dir: Path, force: bool, progress: bool) -> Path | None:
    out = out_dir / f"{name}.jsonl"
    asset = PHOTO_ASSETS.get(name)
    present = _present([asset], home) if asset else {}
    if asset and asset not in present:
        return None
    if name == "photos":
        try:
            import skimage  # optional at run time: a missing scikit-image skips the set

            version = skimage.__version__
        except ImportError:
            return None
        sources = {"scikit-image": version}
    else:
        sources = _specs(present)
    params = {"per_class": photos.PER_CLASS, **({"val": "train"} if name == "fashion-mnist" else {})}
    want = {"builder_version": BUILDER_VERSION, "params": params, "sources": sources}
    if not force and _up_to_date(out, want):
        return out
    render_dir = home / "rendered" / name
    if name == "fashion-mnist":
        records, report = photos.build_fashion_mnist(present[asset], render_dir)
    elif name == "mnist":
        records, report = photos.build_mnist(present[asset], render_dir)
    else:
        records, report = photos.build_sample_photos(render_dir)
    _write(out, records, want, report)
    log.log(_level(progress), "%s: wrote %d records to %s", name, len(records), out)
    return out


def read_report(manifest: str | os.PathLike) -> dict:
    """The builder's report (counts per split, skips) saved beside a built manifest."""
    return json.loads(Path(str(manifest) + ".meta.json").read_text())["report"]
