"""The FLOPs regularisation weight: sparsity vs accuracy per lambda (paper Fig. 8)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from benchmarks.reproduce_sections.bench import HEADERS, Bench, Section, models_line, retrieval_row
from benchmarks.reproduce_sections.plan import Plan
from benchmarks.reproduce_sections.runs import LAMBDAS
from tokenspace.eval import ResultsDoc, markdown_table
from tokenspace.eval.plots import scatter_plot


def build_flops(bench: Bench, plan: Plan, img_dir: Path, doc: ResultsDoc,
                lambdas: Sequence[tuple[str, float]] = LAMBDAS) -> Section:
    """nnz, FLOPs and R@1 per FLOPs-regularisation weight, and the nnz-vs-R@1 plot (Fig. 8)."""
    lambdas = [(r, lam) for r, lam in lambdas if r in bench.models]
    rows, points = {}, []
    for spec in plan.flops:
        for run, lam in lambdas:
            m = retrieval_row(bench, run, spec)
            m["lambda"] = lam
            rows[f"λ = {lam:.0e} · {spec}"] = m
            if spec == plan.flops[0]:
                points.append((f"λ={lam:.0e}", m["nnz_image"], m["image_retrieval_recall@1"] * 100))
    png = scatter_plot(points, Path(img_dir) / "flops_ablation.png", "mean nnz per image (log)",
                       f"T→I R@1 (%) on {plan.flops[0]}", "FLOPs weight λ: sparsity vs accuracy", logx=True)
    cols = ["nnz_image", "nnz_text", "flops", "image_retrieval_recall@1", "text_retrieval_recall@1", "mean_recall"]
    body = (models_line(bench, [r for r, _ in lambdas])
            + "STAIR 3-stage with λ_image = λ_text = λ (FLOPs regulariser, the only change). FLOPs = expected "
              "multiply-adds per image-text pair through an inverted index, Σ_d p_img(d)·p_txt(d). Recall: "
              "ties count against the query (stricter than clip_benchmark).\n\n"
            + markdown_table(rows, cols, first_column="λ · split", headers={**HEADERS, "flops": "FLOPs"})
            + f"\n![nnz vs R@1 per λ]({doc.relpath(png)})\n")
    return Section("flops-ablation", "FLOPs regularisation weight λ (paper Fig. 8)", body, rows,
                   [r for r, _ in lambdas])
