"""The search-engine benchmarks: tokenspace's index against its peers, its knobs and its costs.

    python -m benchmarks.engines speed [--corpus 100k] [--quick]       # make bench: every peer on bench-1M
    python -m benchmarks.engines real --corpus-dir bench-data/real-text # the engines swept over their knobs
    python -m benchmarks.engines quick bench-data/bench-1M --n 100000   # the embedded engine against scipy
    python -m benchmarks.engines ranking                                # what the ranking levers cost
    python -m benchmarks.engines call --corpus-dir bench-data/real-text-100K --name real-text-100K
    python -m benchmarks.engines kernel-ab --old OLD_kernels.py --corpus-dir bench-data/real-text  # kernels A/B
    python -m benchmarks.engines rescore-rows --corpus-dir bench-data/real-text-fit-10M  # rescoring's row reads
    python -m benchmarks.engines seismic-knn --corpus-dir bench-data/real-text --nknn 10 --via tokenspace
    python -m benchmarks.engines cost-curve bench-data/stair-10M --sizes 100000,1000000
    python -m benchmarks.engines report A.json B.json --out merged.json   # merge / render speed reports

The head-to-head race (one process, every engine at once) is benchmarks/head_to_head.py; the corpora
these read are made by ``python -m benchmarks.corpus``.
"""
from __future__ import annotations

from benchmarks.subcommands import dispatch

SUBCOMMANDS = {"speed": "search_speed", "real": "real_engines", "quick": "engine_quick",
               "ranking": "ranking_overhead", "call": "search_call", "kernel-ab": "kernel_ab",
               "rescore-rows": "rescore_rows", "seismic-knn": "seismic_knn",
               "cost-curve": "cost_curve", "report": "report"}


def main(argv=None) -> int:
    return dispatch("engines", __doc__.split("\n\n")[0], SUBCOMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
