"""Export a SparseBatch to the files other sparse engines read (each format checked by its engine's rules).

* Float impact JSONL for Seismic, one document per line: ``{"id": "d1", "vector": {"dog": 1.25}}``
  (``seismic.SeismicIndex.build("docs.jsonl")``). Queries are written the same way
  (``write_queries_jsonl``); Seismic's ``search`` takes each line's tokens and weights.
* Integer impact JSONL for Anserini / pyserini (``JsonVectorCollection``, indexed with ``-impact
  -pretokenized``). Anserini reads each weight with Jackson's ``asInt()`` (a float is truncated, so
  unit-norm weights below 1 would all become 0) and repeats the token that many times in a
  whitespace-split pseudo-document. The scale, documented and stored by the caller: every weight
  ``w > 0`` becomes ``q = max(1, floor(w * scale + 0.5))`` (round half up, but never below 1), so every
  nonzero weight stays nonzero; ``|q / scale - w| <= 0.5 / scale`` except for ``w < 0.5 / scale``,
  lifted to ``1 / scale``. ``scale=100`` by default (pyserini's convention for SPLADE). Token names
  must not contain whitespace (they would split into two terms): such a token is an error. Queries
  go in a TSV topics file, ``q1<TAB>dog dog dog cat``: each token repeated its integer weight times,
  which Anserini's bag-of-words query over the pretokenized field turns into term boosts
  (``write_queries_tsv``; ``-topicReader TsvString -impact -pretokenized``). Checked with Anserini
  1.7.1 (pyserini 1.6.0's jar): same top-10 ids and scores as InvertedIndex on the same integers.
* OpenSearch / Elasticsearch ``rank_features``: an index mapping (JSON) and bulk NDJSON files
  (``{"index": {"_index", "_id"}}`` action line + source line per document), sent with
  ``curl -H 'Content-Type: application/x-ndjson' --data-binary @bulk-00000.ndjson URL/_bulk``. The
  field's rules: feature names without dots, each once per document, float32 values finite and at
  least ``FLOAT32_MIN_NORMAL``. Dots and percent signs in names are percent-encoded
  (``rank_feature_name``: ``"."`` -> ``"%2E"``), subnormal weights are lifted to the smallest normal
  float32.

Tokens are named by the batch's Vocabulary. A batch without one is written with the decimal
dimension ids as token names (``"2003"``). Every writer drops zero weights (rank_features rejects them
and a zero adds nothing to a dot product). Text is UTF-8 with non-ASCII tokens written as they are;
JSON escaping (quotes, backslashes, control characters) is the standard library's.
"""
from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from tokenspace import atomic
from tokenspace.sparse import SparseBatch

DEFAULT_SCALE = 100
DEFAULT_DOCS_PER_BULK_FILE = 10_000
FLOAT32_MIN_NORMAL = float(np.finfo(np.float32).tiny)  # 1.1754944e-38, Lucene FeatureField's lower bound


def token_names(batch: SparseBatch) -> list[str]:
    """The name of every dimension: vocabulary tokens, or decimal dim ids when the batch has none."""
    if batch.vocab is not None:
        return list(batch.vocab.tokens)
    return [str(i) for i in range(batch.dim)]


MAX_IMPACT = 2.0 ** 31  # integer impacts become Lucene term frequencies (Anserini): 32-bit


def quantize(values: np.ndarray, scale: float) -> np.ndarray:
    """Integer impacts ``max(1, floor(w * scale + 0.5))`` of positive weights (int64); zeros stay 0."""
    _check_scale(scale)
    # float64 so that e.g. 0.125 * 100 + 0.5 is not pushed across an integer by float32 rounding
    v = np.asarray(values, np.float64)
    top = float(v.max()) * scale if len(v) else 0.0
    if not top < MAX_IMPACT:  # int64 would wrap (1e300 once wrote every weight as 1)
        raise ValueError(f"scale {scale:g} makes the largest impact {top:.3g}; impacts must stay below "
                         f"{MAX_IMPACT:.3g} (Lucene stores 32-bit term frequencies): use a smaller scale")
    q = np.floor(v * scale + 0.5).astype(np.int64)
    return np.where(v > 0, np.maximum(q, 1), 0)


def rank_feature_name(token: str) -> str:
    """The rank_features name of a token: ``%`` and ``.`` percent-encoded (dots are not allowed)."""
    if not token:
        raise ValueError("rank_features cannot name a feature with the empty string")
    return token.replace("%", "%25").replace(".", "%2E")


def _check_scale(scale) -> None:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")


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


def _check_whitespace_free(batch: SparseBatch, names: list[str]) -> None:
    used = np.unique(batch.indices[batch.values > 0])
    for j in used.tolist():
        t = names[j]
        if not t or t.split() != [t]:
            raise ValueError(f"token {t!r} (dim {j}) is empty or contains whitespace: Anserini's "
                             "pretokenized pseudo-documents split on whitespace, rename it first")


def _row_fragments(batch: SparseBatch, scale: float | None, names: list[str] | None = None,
                   min_value: float = 0.0) -> Iterator[str]:
    """The JSON object text ``{"tok": w, ...}`` of each row, zero weights dropped.

    Built from pre-escaped token names and numpy's shortest round-trip text of each float32 weight
    (``0.3``, not ``0.30000001192092896``), so a 1M-row export is not a per-weight json.dumps loop.
    With ``scale``, weights are integers (``quantize``). Float weights below ``min_value`` are raised
    to it.
    """
    if batch.nnz and not np.all(np.isfinite(batch.values)):
        raise ValueError("cannot export non-finite weights")
    if batch.nnz and batch.values.min() < 0:
        raise ValueError("cannot export negative weights")
    names = [_dump(t) for t in (names or token_names(batch))]  # quotes, backslashes, control chars escaped once
    for i in range(len(batch)):
        idx, val = batch.row(i)
        keep = val > 0
        if scale is not None:
            text = quantize(val[keep], scale).astype(str)
        else:
            text = np.maximum(val[keep], np.float32(min_value)).astype(str)
        yield "{" + ", ".join(f"{names[j]}: {w}" for j, w in zip(idx[keep].tolist(), text.tolist())) + "}"


def write_jsonl(batch: SparseBatch, ids: Sequence[str], path: str | os.PathLike) -> Path:
    """Float impact JSONL (Seismic): one ``{"id", "vector": {token: weight}}`` line per row."""
    return _write_jsonl(batch, ids, path, scale=None, id_key="id")


def write_jsonl_quantized(
    batch: SparseBatch, ids: Sequence[str], path: str | os.PathLike, scale: float = DEFAULT_SCALE
) -> Path:
    """Integer impact JSONL (Anserini/pyserini ``JsonVectorCollection``): weights ``quantize(w, scale)``.

    Every nonzero weight stays nonzero (at least 1). Anserini indexes a folder and parses every file
    in it as JSON: put this file alone in one (``write_queries_tsv`` goes beside that folder)::

        java -cp anserini-fatjar.jar io.anserini.index.IndexCollection -collection JsonVectorCollection \\
            -input collection/ -index idx/ -generator DefaultLuceneDocumentGenerator -impact -pretokenized
        java -cp anserini-fatjar.jar io.anserini.search.SearchCollection -index idx/ -topics queries.tsv \\
            -topicReader TsvString -output run.txt -impact -pretokenized -hits 10
    """
    _check_scale(scale)
    _check_whitespace_free(batch, token_names(batch))
    return _write_jsonl(batch, ids, path, scale=scale, id_key="id")


def write_queries_jsonl(batch: SparseBatch, ids: Sequence[str], path: str | os.PathLike) -> Path:
    """Seismic's query file: float ``{"id", "vector"}`` lines, the documents' format."""
    return _write_jsonl(batch, ids, path, scale=None, id_key="id")


def write_queries_tsv(
    batch: SparseBatch, ids: Sequence[str], path: str | os.PathLike, scale: float = DEFAULT_SCALE
) -> Path:
    """Anserini's query file for an integer impact index: ``qid<TAB>tok tok ...``, each token repeated
    ``quantize(w, scale)`` times (use the documents' scale). Read with ``-topicReader TsvString
    -impact -pretokenized``: the score is then the dot product of the two integer vectors."""
    _check_scale(scale)
    ids = _check_ids(batch, ids)
    bad = [i for i in ids if not i or any(c in i for c in "\t\r\n")]
    if bad:
        raise ValueError(f"query id {bad[0]!r} is empty or holds a tab or newline (the TSV separators)")
    names = token_names(batch)
    _check_whitespace_free(batch, names)
    if batch.nnz and not np.all(np.isfinite(batch.values)):
        raise ValueError("cannot export non-finite weights")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
        for qid, i in zip(ids, range(len(batch))):
            idx, val = batch.row(i)
            keep = val > 0
            reps = quantize(val[keep], scale).tolist()
            f.write(qid + "\t" + " ".join(" ".join([names[j]] * r) for j, r in zip(idx[keep].tolist(), reps)) + "\n")
    return path


def _write_jsonl(batch, ids, path, scale, id_key) -> Path:
    ids = _check_ids(batch, ids)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = _dump(id_key)
    # a crash never leaves a half-written export under the final name
    with atomic.atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(f'{{{key}: {_dump(doc_id)}, "vector": {row}}}\n'
                     for doc_id, row in zip(ids, _row_fragments(batch, scale)))
    return path


def rank_features_mapping(field: str = "vector") -> dict:
    """Index body for OpenSearch/Elasticsearch: ``PUT /<index>`` with this JSON.

    The id is the document ``_id``; the sparse vector is one ``rank_features`` field. Query it with a
    ``bool.should`` of ``rank_feature`` clauses (``"field": "vector.<rank_feature_name(token)>"``,
    ``"linear": {}``, ``"boost": <query weight>``), which sums to the dot product up to rank_features'
    storage precision (9 significant bits, about 0.4% relative error).
    """
    if not field or "." in field:
        raise ValueError(f"field must be a non-empty name without dots, got {field!r}")
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
    MB). Returns the paths written, mapping first. Feature names are ``rank_feature_name(token)``;
    float weights are written as they are (rank_features keeps ~9 significant bits of them), subnormal
    ones lifted to FLOAT32_MIN_NORMAL.
    """
    ids = _check_ids(batch, ids)
    mapping = rank_features_mapping(field)
    if docs_per_file <= 0:
        raise ValueError("docs_per_file must be positive")
    names = [rank_feature_name(t) for t in token_names(batch)]
    if len(set(names)) != len(names):  # only if two tokens differ by an encoded '.' vs a literal "%2E"
        raise ValueError("two tokens map to the same rank_features name")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "mapping.json"]
    atomic.write_text(written[0], json.dumps(mapping, indent=2) + "\n")
    rows = zip(ids, _row_fragments(batch, None, names=names, min_value=FLOAT32_MIN_NORMAL))
    for start in range(0, len(ids), docs_per_file):
        written.append(out / f"bulk-{start // docs_per_file:05d}.ndjson")
        with atomic.atomic_open(written[-1], "w", encoding="utf-8", newline="\n") as f:
            for doc_id, row in itertools.islice(rows, docs_per_file):
                f.write(_dump({"index": {"_index": index, "_id": doc_id}}) + "\n")
                f.write(f"{{{_dump(field)}: {row}}}\n")
    return written


def read_jsonl(path: str | os.PathLike, vocab=None, dim: int | None = None) -> tuple[SparseBatch, list[str]]:
    """Read an impact JSONL (documents ``id`` or topics ``qid``) back, tokens through ``vocab`` or dim ids."""
    if vocab is None and dim is None:
        raise ValueError("read_jsonl needs vocab or dim")
    ids, rows = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                ids.append(str(doc["id"] if "id" in doc else doc["qid"]))
                vec = doc["vector"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: not an impact JSONL line ({e})") from None
            rows.append(vec if vocab is not None else {int(k): v for k, v in vec.items()})
    return SparseBatch.from_dicts(rows, dim=dim, vocab=vocab), ids


__all__ = [
    "DEFAULT_SCALE",
    "FLOAT32_MIN_NORMAL",
    "quantize",
    "rank_feature_name",
    "rank_features_mapping",
    "read_jsonl",
    "token_names",
    "write_jsonl",
    "write_jsonl_quantized",
    "write_queries_jsonl",
    "write_queries_tsv",
    "write_rank_features",
]
