"""The benchmark corpora: real model vectors, corpora fitted to them, and the real text and image corpora.

    python -m benchmarks.corpus encode --model M --data SPECS --out bench-data/stair-real   # real vectors
    python -m benchmarks.corpus fitted IMAGES.npz bench-data/stair-1M --n 1000000 --queries TEXTS.npz
    nice -n 10 python -m benchmarks.corpus real-text --out bench-data/real-text --n 1000000
    nice -n 10 python -m benchmarks.corpus real-images --out bench-data/real-images [--whole-photo-sets]

Each writes search_speed's --corpus-dir layout (d_* and q_* arrays), read by ``python -m benchmarks.engines``.
"""
from __future__ import annotations

from benchmarks.subcommands import dispatch

SUBCOMMANDS = {"encode": "encode_real", "fitted": "fitted_corpus", "real-text": "real_corpus",
               "real-images": "real_images"}


def main(argv=None) -> int:
    return dispatch("corpus", __doc__.split("\n\n")[0], SUBCOMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
