"""Text-encoder-free retrieval and zero-shot: STAIR_IMAGE's token masks (paper App. E.2, Table 10)."""
from __future__ import annotations

from collections.abc import Sequence

from benchmarks.reproduce_sections.bench import HEADERS, R_COLS, Bench, Section, models_line, retrieval_row
from benchmarks.reproduce_sections.plan import Plan
from benchmarks.reproduce_sections.runs import STAIRS
from benchmarks.reproduce_sections.zeroshot import zeroshot_row
from tokenspace import pipeline
from tokenspace.eval import TokenMaskEncoder, markdown_table


def build_textfree(bench: Bench, plan: Plan, runs: Sequence[str] = STAIRS) -> Section:
    """STAIR_IMAGE (Table 10): each caption / class prompt becomes the L2-normalised mask of its tokens
    (no text encoder) vs STAIR's text side, for retrieval and for zero-shot classification."""
    runs = [r for r in bench.present(runs) if getattr(bench.models[r], "sparse", True)]
    rows, zs = {}, {}
    for spec in plan.textfree:
        for r in runs:
            model = bench.models[r]
            texts, _ = pipeline.texts_and_targets(bench.records(spec, r))
            encoder = TokenMaskEncoder(model.tokenizer.token_ids, len(model.vocab), model.vocab)
            rows[f"{bench.label(r)} · text encoder · {spec}"] = retrieval_row(bench, r, spec)
            rows[f"{bench.label(r)} · token mask (STAIR_IMAGE) · {spec}"] = retrieval_row(bench, r, spec, encoder(texts))
            templates = plan.zeroshot.get(spec)
            if templates:
                zs[f"{bench.label(r)} · text encoder · {spec}"] = zeroshot_row(bench, r, spec, templates)
                zs[f"{bench.label(r)} · token mask (STAIR_IMAGE) · {spec}"] = zeroshot_row(
                    bench, r, spec, templates, encoder)
    body = (models_line(bench, runs)
            + "Same image vectors; the query side is either the trained text encoder or the text's token mask "
              "MASK(y): equal weight on each non-special token it tokenizes into, L2-normalised so that the "
              "dot product is STAIR's cosine (eq. 2); only the image encoder runs. Recall ties count against "
              "the query (stricter than clip_benchmark, see the retrieval section).\n\n"
            + markdown_table(rows, R_COLS, headers=HEADERS))
    if zs:
        body += ("\n**Zero-shot classification** (Table 10's ImageNet arm; categories = Record.label, prompt "
                 "ensemble of the zero-shot section's templates, each prompt a token mask on the STAIR_IMAGE "
                 "rows)\n\n" + markdown_table(zs, ["ensemble_acc1", "ensemble_mean_per_class_recall"],
                                                headers={"ensemble_acc1": "ensemble acc1 (%)",
                                                         "ensemble_mean_per_class_recall": "ensemble mean/class (%)"}))
    numbers = dict(rows) | {f"zero-shot · {k}": v for k, v in zs.items()}
    return Section("text-free", "Text-encoder-free retrieval (STAIR_IMAGE, paper App. E.2)", body, numbers, runs)
