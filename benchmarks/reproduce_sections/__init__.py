"""The sections of docs/results.md that benchmarks/reproduce.py regenerates: one module per STAIR paper
table or figure family, each a ``build_*(bench, plan, ...) -> Section``.

    runs.py              the trained models (recipes, overrides, table labels)
    plan.py              which data spec each section evaluates on (full run, --quick)
    labels.py            concept names and class indices from manifest records
    bench.py             Bench (models + memoised encodings), Section, the shared retrieval row
    retrieval.py         Table 2/7        flops.py          Fig. 8
    interpretability.py  Table 4/5/8, Fig. 4/5
    zeroshot.py          zero-shot + linear probe
    textfree.py          STAIR_IMAGE, App. E.2 / Table 10
    localization.py      heatmaps, App. E.1
"""
