"""Search over SparseBatch: the SparseIndex protocol, the embedded inverted index, the exact oracle.

Never imports torch (tests check it): the index side of the project runs on numpy, scipy and numba, the
last imported only where a job needs its kernels (road.py: a small index's one-query search does not).
"""
from tokenspace.index.base import Hit, Hits, SparseIndex
from tokenspace.index.inverted import APPROX_DEFAULTS, InvertedIndex
from tokenspace.index.oracle import ExactIndex
from tokenspace.index.query import And, Not, Or, Term, parse_query
from tokenspace.index.storage import IndexCorruptError

__all__ = [
    "Hit", "Hits", "SparseIndex", "InvertedIndex", "ExactIndex", "IndexCorruptError", "parse_query",
    "Term", "And", "Or", "Not", "APPROX_DEFAULTS",
]
