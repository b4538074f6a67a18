"""Export a SparseBatch to the exchange formats other sparse engines read.

* Impact JSONL, one document per line: ``{"id": "d1", "vector": {"dog": 1.25, "##s": 0.5}}``. Read by
  Seismic (``SeismicIndex.build(path)``), pyserini and Anserini (``JsonVectorCollection``).
* The integer-quantised variant of the same file: each weight becomes ``round(w * scale)`` (half up)
  (``scale=100`` by default, the convention of pyserini/Anserini's impact indexes, which want
  integer term frequencies); weights that round to 0 are dropped, so the file never carries a zero.
* OpenSearch / Elasticsearch: a ``rank_features`` index mapping (JSON) and bulk NDJSON files
  (``{"index": {"_index", "_id"}}`` action line + source line per document), to be sent with
  ``curl -H 'Content-Type: application/x-ndjson' --data-binary @bulk-00000.ndjson URL/_bulk``.

Tokens are named by the batch's Vocabulary. A batch without one is written with the decimal
dimension ids as token names (``"2003"``), which is also what Seismic's ``add_documents_by_id``
expects of queries. Every writer drops explicit zero weights (rank_features rejects them, and a zero
contributes nothing to a dot product). Text is UTF-8 with non-ASCII tokens written as they are;
JSON escaping (quotes, backslashes, control characters) is the standard library's.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from tokenspace.sparse import SparseBatch

DEFAULT_SCALE = 100
DEFAULT_DOCS_PER_BULK_FILE = 10_000


def token_names(batch: SparseBatch) -> list[str]:
    """The name of every dimension: vocabulary tokens, or decimal dim ids when the batch has none."""
    if batch.vocab is not None:
        return list(batch.vocab.tokens)
    return [str(i) for i in range(batch.dim)]


def _check_ids(batch: SparseBatch, ids: Sequence[str]) -> list[str]:
    ids = [str(i) for i in ids]
    if len(ids) != len(batch):
        raise ValueError(f"got {len(ids)} ids for a batch of {len(batch)} rows")
    if len(set(ids)) != len(ids):
        raise ValueError("document ids must be unique")
    return ids


def _dump(obj) -> str:
    # ensure_ascii=False keeps WordPiece tokens such as "é" readable; the file is written as UTF-8
    return json.dumps(obj, ensure_ascii=False)


def _row_fragments(batch: SparseBatch, scale: float | None) -> Iterator[str]:
    """The JSON object text ``{"tok": w, ...}`` of each row, zero weights dropped.

    Built from pre-escaped token names and numpy's shortest round-trip text of each float32 weight
    (``0.3``, not ``0.30000001192092896``), so a 1M-row export is not a per-weight json.dumps loop.
    With ``scale``, weights are ``floor(w * scale + 0.5)`` (round half up) as integers.
    """
    if batch.nnz and not np.all(np.isfinite(batch.values)):
        raise ValueError("cannot export non-finite weights")
    names = [_dump(t) for t in token_names(batch)]  # quotes, backslashes, control chars escaped once
    for i in range(len(batch)):
        idx, val = batch.row(i)
        if scale is not None:
            # float64 so that e.g. 0.125 * 100 + 0.5 is not pushed across an integer by float32 rounding
            q = np.floor(val.astype(np.float64) * scale + 0.5).astype(np.int64)
            keep = q > 0
            text = q[keep].astype(str)
        else:
            keep = val > 0
            text = val[keep].astype(str)
        yield "{" + ", ".join(f"{names[j]}: {w}" for j, w in zip(idx[keep].tolist(), text.tolist())) + "}"


def write_jsonl(batch: SparseBatch, ids: Sequence[str], path: str | os.PathLike) -> Path:
    """Float impact JSONL: one ``{"id", "vector": {token: weight}}`` line per row."""
    return _write_jsonl(batch, ids, path, scale=None)


def write_jsonl_quantized(
    batch: SparseBatch, ids: Sequence[str], path: str | os.PathLike, scale: float = DEFAULT_SCALE
) -> Path:
    """Integer impact JSONL: weights ``round(w * scale)`` (half up); weights rounding to 0 are dropped."""
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be a positive finite number, got {scale}")
    return _write_jsonl(batch, ids, path, scale=scale)


def _write_jsonl(batch, ids, path, scale) -> Path:
    ids = _check_ids(batch, ids)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(f'{{"id": {_dump(doc_id)}, "vector": {row}}}\n' for doc_id, row in zip(ids, _row_fragments(batch, scale)))
    os.replace(tmp, path)  # a crash never leaves a half-written export under the final name
    return path


def rank_features_mapping(field: str = "vector") -> dict:
    """Index body for OpenSearch/Elasticsearch: ``PUT /<index>`` with this JSON.

    The id is the document ``_id``; the sparse vector is one ``rank_features`` field. Query it with a
    ``bool.should`` of ``rank_feature`` clauses (``"field": "vector.<token>"``, ``"linear": {}``,
    ``"boost": <query weight>``), which sums to the dot product up to rank_features' storage precision
    (9 significant bits, about 0.4% relative error). Feature names containing a dot cannot be addressed
    in such a query path; WordPiece vocabularies contain a few ("."), rename them if you query them.
    """
    return {"mappings": {"properties": {field: {"type": "rank_features"}}}}


def write_rank_features(
    batch: SparseBatch,
    ids: Sequence[str],
    out_dir: str | os.PathLike,
    index: str = "tokenspace",
    field: str = "vector",
    docs_per_file: int = DEFAULT_DOCS_PER_BULK_FILE,
) -> list[Path]:
    """Write ``mapping.json`` and ``bulk-00000.ndjson``, ``bulk-00001.ndjson``, ... into ``out_dir``.

    Bulk files hold at most ``docs_per_file`` documents each (Elasticsearch advises requests of a few
    MB). Returns the paths written, mapping first. Float weights are written as they are (rank_features
    keeps ~9 significant bits of them).
    """
    ids = _check_ids(batch, ids)
    if docs_per_file <= 0:
        raise ValueError("docs_per_file must be positive")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "mapping.json"]
    written[0].write_text(json.dumps(rank_features_mapping(field), indent=2) + "\n", encoding="utf-8")
    f = None
    try:
        for n, (doc_id, row) in enumerate(zip(ids, _row_fragments(batch, None))):
            if n % docs_per_file == 0:
                if f is not None:
                    f.close()
                written.append(out / f"bulk-{n // docs_per_file:05d}.ndjson")
                f = open(written[-1], "w", encoding="utf-8", newline="\n")  # noqa: SIM115 - closed below
            f.write(_dump({"index": {"_index": index, "_id": doc_id}}) + "\n")
            f.write(f"{{{_dump(field)}: {row}}}\n")
    finally:
        if f is not None:
            f.close()
    return written


def read_jsonl(path: str | os.PathLike, vocab=None, dim: int | None = None) -> tuple[SparseBatch, list[str]]:
    """Read an impact JSONL back (tokens through ``vocab``, or decimal dim ids with ``dim``)."""
    ids, rows = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                doc = json.loads(line)
                ids.append(str(doc["id"]))
                vec = doc["vector"]
                rows.append(vec if vocab is not None else {int(k): v for k, v in vec.items()})
    if vocab is None and dim is None:
        raise ValueError("read_jsonl needs vocab or dim")
    return SparseBatch.from_dicts(rows, dim=dim, vocab=vocab), ids


__all__ = [
    "DEFAULT_SCALE",
    "rank_features_mapping",
    "read_jsonl",
    "token_names",
    "write_jsonl",
    "write_jsonl_quantized",
    "write_rank_features",
]
