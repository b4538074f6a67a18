"""The segment layout's sizes and the one-query search's refusal codes, without numba.

kernels.py reads them (it imports them from here); the loader's checks (segment.py, inverted.py) and the
manifest read them too, and import this module instead of kernels.py so that opening an index does not
load numba (index/road.py says when numba is worth loading).
"""
from __future__ import annotations

import numpy as np

# Posting lists are cut into chunks of this many docs and store each doc as a uint16 offset from its
# chunk's first doc (2 bytes a posting instead of 4); a (term, chunk) cell pointer says where each
# piece starts. Search walks the docs one posting chunk at a time (kernels.CHUNK).
POSTING_CHUNK = 1 << 16
BLOCK = 64  # docs per block-max block (one cache line of codes per dense column)
# the impact heads' levels: a term's postings of code >= each (1/2, 1/4, 1/8 of its largest weight);
# kernels.py's comment above impact_bands says why these
HEAD_CODES = np.array([128, 64, 32], np.int64)
BAD_QUERY, QUERY_OUT_OF_RANGE = -1, -2  # a one-query search's answers for a query it refuses
