"""Retrieval: STAIR 3-stage vs single-stage vs dense (paper Table 2/7)."""
from __future__ import annotations

from collections.abc import Sequence

from benchmarks.reproduce_sections.bench import HEADERS, R_COLS, Bench, Section, models_line, retrieval_row
from benchmarks.reproduce_sections.plan import Plan
from benchmarks.reproduce_sections.runs import MAIN
from tokenspace.eval import markdown_table


def build_retrieval(bench: Bench, plan: Plan, runs: Sequence[str] = MAIN) -> Section:
    """R@1/5/10 text->image and image->text + mean nnz, 3-stage vs single-stage vs dense (Table 2/7)."""
    runs = bench.present(runs)
    rows = {f"{bench.label(r)} · {s}": retrieval_row(bench, r, s) for s in plan.retrieval for r in runs}
    body = (models_line(bench, runs)
            + "Held-out splits: emoji:test = OpenMoji drawings of concepts never seen in training (cross-artist), "
              "emoji:val = Google drawings of those held-out concepts, openclipart:test:300 = a deterministic "
              "300-image subsample of held-out OpenClipart drawings. Recall from exact scores, ties count "
              "against the query; nnz = mean active dimensions per vector (dense: its width).\n\n"
            + markdown_table(rows, R_COLS, headers=HEADERS))
    # once, the clip_benchmark-compatible rule beside it: equal scores keep their position (a relevant
    # item tied with others counts as found when it comes first), as torch.topk orders them
    spec = plan.retrieval[0]
    compat = {f"{bench.label(r)} · {spec}": retrieval_row(bench, r, spec, ties="position") for r in runs}
    body += ("\nThe same models on " + spec + " with clip_benchmark's tie rule instead (top-K of a sort that keeps "
             "tied items in their original order; more lenient wherever sparse scores tie, e.g. at 0):\n\n"
             + markdown_table(compat, R_COLS[:6], headers=HEADERS))
    return Section("retrieval", "Retrieval: STAIR 3-stage vs single-stage vs dense (paper Table 2/7)", body,
                   rows | {f"clip_benchmark ties · {k}": v for k, v in compat.items()}, runs)
