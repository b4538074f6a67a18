"""`tokenspace index build`: the one command of `index` that encodes, so the only one that loads torch and
the encoders (`index stats` and `index export` stay torch-free: cli/run/index.py imports this module when
the action is `build`)."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from tokenspace.cli.common import CLIError, UsageError, check_writable_place, ranking_changes
from tokenspace.cli.model_loading import device_named, load_model, model_reference
from tokenspace.data.webdataset import folder_sources, manifest_sources, source_records
from tokenspace.encode import FileCollection, build_index, check_tower
from tokenspace.explain.ranking import ModelRanking, read_model_ranking
from tokenspace.index.folder import MANIFEST
from tokenspace.index.metadata import read_jsonl as read_metadata_jsonl
from tokenspace.outputs import INDEX, PARTS, check_output


def build(args) -> int:
    """`tokenspace index build`: a sparse index (or, with a dense model, a dense one) of data specs, a
    folder of images or a JSONL manifest, through encode.py's resumable parts."""
    _check_build_out(Path(args.out), args.overwrite)  # before the encoding, which can take hours
    user = {}
    if args.metadata:  # also before the encoding: a bad line is found at once
        try:
            user = read_metadata_jsonl(args.metadata)
        except ValueError as e:
            raise CLIError(f"--metadata {e}") from None
    device_named(args.device)  # a bad --device next, as on the other commands (before the bank's data is read)
    ranking = build_ranking(args)  # also before the encoding: a bad flag or bank spec is found at once
    collection, own = _collection(args)  # before the model loads: a folder without images is found at once
    user = {k: {**own.get(k, {}), **user.get(k, {})} for k in set(own) | set(user)}  # --metadata wins
    model = load_model(args.model, args.device)
    check_tower_flag(model, args.tower)  # before any image is decoded
    if not getattr(model, "sparse", True):  # float rows: the dense half of a hybrid search
        return build_dense_index(args, model, collection)
    unknown = sorted(set(user) - set(collection.keys))
    if unknown:
        raise CLIError(f"--metadata {args.metadata}: {len(unknown)} id(s) are not images of this collection, "
                       f"e.g. {unknown[0]!r} (ids are what `tokenspace search` prints)")
    work = Path(f"{args.out}.parts")  # the encoded parts of a build that was stopped: a rerun goes on from them
    try:  # the index records its model and ranking: what a search needs besides the rows
        index = build_index(model, collection, args.out, work, args.part_size, args.batch_size,
                            workers=args.workers, tower=args.tower, progress=True,
                            info={"model": model_reference(args.model)}, metadata=user, top_n=args.top_n,
                            reorder=args.reorder, impact_heads=args.impact_heads, ranking=ranking, home=args.home)
    except KeyboardInterrupt:  # the parts on disk stay: a rerun encodes only what is missing
        print(f"tokenspace index build: interrupted; rerun the same command to go on (parts in {work})",
              file=sys.stderr)
        return 130
    if index is None:
        raise CLIError(f"no readable images in {_named(args)}: nothing to index")
    skipped = len(collection) - len(index)
    print(f"indexed {len(index)} images into {args.out}" + (f" ({skipped} unreadable skipped)" if skipped else "")
          + f"; search it: tokenspace search --index {shlex.quote(str(args.out))} \"a query\"")
    return 0


def _named(args) -> str:
    return args.images or args.manifest or " ".join(args.data)


def _collection(args) -> tuple[FileCollection, dict[str, dict]]:
    """The images to encode (data specs, a folder, or a JSONL manifest of files) and the metadata a
    manifest's rows carry beyond image, caption and key. A folder or manifest is named by its absolute
    path in the parts' record, so a rerun from another folder still resumes."""
    if args.data:
        return FileCollection.from_specs(args.data, args.home), {}
    try:
        if args.images:
            sources, spec = folder_sources(args.images), f"images:{Path(args.images).resolve()}"
        else:
            sources, spec = manifest_sources(args.manifest), f"manifest:{Path(args.manifest).resolve()}"
    except (OSError, ValueError) as e:
        raise CLIError(f"{'--images' if args.images else '--manifest'} {e}") from None
    own = {s.key: s.metadata for s in sources if s.metadata}
    return FileCollection(source_records(sources), [(spec, len(sources))]), own


def check_tower_flag(model, tower: str) -> None:
    """--tower onnx with a model it cannot run, refused in the words of the command line."""
    try:
        check_tower(model, tower)
    except (ValueError, RuntimeError) as e:
        raise CLIError(f"--tower {tower}: {e}; leave --tower out, or give --tower torch") from None


def build_ranking(args) -> ModelRanking:
    """The ranking an ingestion command (`index build`, `encode`) records and applies: the model's
    ranking.json changed by the flags given; the bank's data is loaded once here, so a typo in a spec
    fails before any encoding."""
    if getattr(args, "no_hub_prior", False) and args.prior_weight:  # recorded as 0 otherwise: said, not dropped
        raise CLIError(f"--prior-weight {args.prior_weight:g}: not with --no-hub-prior (no hub prior to weigh)")
    try:
        chosen = read_model_ranking(args.model).changed(
            ranking=ranking_changes(args), hub_bank=getattr(args, "hub_bank", None), hub_k=getattr(args, "hub_k", None),
            no_hub_prior=getattr(args, "no_hub_prior", False), generic_share=getattr(args, "generic_share", None))
        if chosen.hub is not None:
            chosen.hub.texts(args.home)
        return chosen
    except (ValueError, KeyError, FileNotFoundError) as e:
        raise CLIError(str(e).strip("'\"")) from None


def _check_build_out(out: Path, overwrite: bool) -> None:
    """--out must be new, empty, or (with --overwrite) an index folder, and its parts folder (OUT.parts) new,
    empty or a stopped build's parts: a build never mixes its files into another folder, nor replaces an
    index by accident."""
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} is a file; give a folder for the index")
    check_writable_place(out, "--out")  # under a file, or a folder we cannot write in: before the model loads
    check_output(out, "--out", own=(INDEX,) if overwrite else (), what="index",
                 refused={INDEX: "pass --overwrite to replace it, or choose another folder"})
    check_output(f"{out}.parts", "--out's parts folder", own=(PARTS,), what="encoded parts")


def build_dense_index(args, model, collection: FileCollection | None = None) -> int:
    """`index build --model DENSE_MODEL`: a DenseIndex of the collection, through the road every index
    takes (encode.build_index: resumable parts), with the collection.json that names its model, for
    `search --dense-index`."""
    out = Path(args.out)
    given = [f for f, v in (("--top-n", args.top_n), ("--metadata", getattr(args, "metadata", None)),
                            ("--reorder", getattr(args, "reorder", False)),
                            ("--no-impact-heads", not getattr(args, "impact_heads", True))) if v]
    if given:
        raise UsageError(f"{', '.join(given)}: a dense model's rows have no tokens to cut, filter or cluster; "
                         "not with a dense model")
    if (out / MANIFEST).exists():
        raise CLIError(f"--out {out} holds a sparse index: write the dense index to its own folder")
    work = Path(f"{args.out}.parts")
    try:
        collection = collection if collection is not None else FileCollection.from_specs(args.data, args.home)
        index = build_index(model, collection, out, work, args.part_size,
                            args.batch_size, workers=args.workers, tower=args.tower, progress=True,
                            info={"model": model_reference(args.model)})
    except KeyboardInterrupt:  # the parts on disk stay: a rerun encodes only what is missing
        print(f"tokenspace index build: interrupted; rerun the same command to go on (parts in {work})",
              file=sys.stderr)
        return 130
    if index is None:
        named = getattr(args, "images", None) or getattr(args, "manifest", None) or " ".join(args.data)
        raise CLIError(f"no readable images in {named}: nothing to index")
    print(f"indexed {len(index)} images into {out} (dense: search it with --dense-index beside a sparse --index)")
    return 0
