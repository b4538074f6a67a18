"""tokenspace export-st MODEL OUT: a STAIR or fused model's text side as a sentence-transformers SparseEncoder."""
from __future__ import annotations

from pathlib import Path

from tokenspace.cli.model_loading import load_model
from tokenspace.models.config import CONFIG_FILE, ModelConfig
from tokenspace.models.export_st import check_family, check_out, export_sentence_transformers
from tokenspace.models.registry import release_path
from tokenspace.outputs import EXPORT, check_output


def run(args) -> int:
    # the folder the model loads from (a release name's too): OUT must not be, hold or lie in it
    source = Path(args.model) if Path(args.model).is_dir() else release_path(args.model)
    check_out(Path(args.out), source)  # before loading the model: a refusal costs nothing
    check_output(args.out, "OUT", own=(EXPORT,), what="previous export")  # nor a new folder inside an index
    if source is not None and (source / CONFIG_FILE).is_file():  # the family too (loading took 24 s to refuse)
        check_family(ModelConfig.load(source / CONFIG_FILE).family)
    out = export_sentence_transformers(load_model(args.model), args.out, source=source)
    print(f"wrote a sentence-transformers SparseEncoder folder: {out}")
    return 0
